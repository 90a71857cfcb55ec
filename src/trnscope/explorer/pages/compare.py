"""Compare (``#/compare/<base>/<test>``): headline and per-op deltas of two profiles, their
findings, and both timelines on one synchronised window."""

from __future__ import annotations

from .. import payloads
from ..views import BadRequest
from . import GLOBAL, Api, Page


def compare(explorer, request) -> dict:
    base_id, test_id = request.query_params.get("base"), request.query_params.get("test")
    if not base_id or not test_id:
        raise BadRequest("compare needs ?base=<id>&test=<id>")
    return payloads.compare(explorer.session(base_id), explorer.session(test_id))


PAGE = Page(name="compare", title="Compare", script="views/compare.js", scope=GLOBAL, order=10,
            params=("base", "test"), api=(Api("/compare", compare),))
