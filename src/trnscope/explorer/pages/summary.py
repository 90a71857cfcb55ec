"""Summary (``#/p/<id>/summary``): recommendations, key metrics, where the time went, the
per-step overview, device use, the roofline, memory, engines, idle gaps and the NEFF table."""

from __future__ import annotations

from .. import payloads
from . import Api, Page

PAGE = Page(name="summary", title="Summary", script="views/summary.js", order=20, api=(
    Api("/summary", lambda session, request: payloads.summary(session)),
    # read after the page is up: it reads the NEFFs' instruction tables
    Api("/roofline", lambda session, request: session.analysis.roofline.to_dict()),
))
