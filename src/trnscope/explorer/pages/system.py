"""System trace (``#/p/<id>/system``): every lane of the profile on one time axis."""

from __future__ import annotations

from ..sessions import NotFound
from . import Api, Page


def execution(session, request) -> dict:
    """The device slice of execution ``seq`` (to jump from a device trace back to the system trace)."""
    view = session.system
    row = view.execution_row(request.path_params["seq"])
    if row is None:
        raise NotFound(f"no execution {request.path_params['seq']} in this profile")
    return view.slice_summary(row)


PAGE = Page(name="system", title="System trace", script="views/system.js", order=0, home=True,
            timeline="", view=lambda session, params: session.system,
            api=(Api("/execution/{seq:int}", execution),))
