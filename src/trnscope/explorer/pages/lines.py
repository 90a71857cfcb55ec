"""Source lines (``#/p/<id>/lines``): device time per line of the user's code, each line with the
ops and NEFFs it ran (``analysis.source_lines``)."""

from __future__ import annotations

from . import Api, Page


def lines(session, request) -> dict:
    table = session.analysis.source_lines.to_dict()
    table["name"] = session.entry.display_name
    table["kind"] = session.profile.kind
    return table


PAGE = Page(name="lines", title="Source lines", script="views/lines.js", order=15, api=(Api("/lines", lines),))
