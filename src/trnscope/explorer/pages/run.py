"""One multi-rank run (``#/run/<id>?c=<collective>``): every rank on the shared clock, collectives
linked across ranks, stragglers and overlap; reached from the Runs page or ``trnscope view RUN``.
Its data is the Runs page's API (``/api/runs/<id>``)."""

from __future__ import annotations

from . import GLOBAL, Page

PAGE = Page(name="run", title="Run", script="views/ranks.js", scope=GLOBAL, order=21, params=("rid",), nav=False)
