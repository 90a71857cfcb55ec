"""Multi-rank runs (``#/runs``): the run folders under the served roots, each a link to its page
(``#/run/<id>``, pages/run.py). Both pages read :mod:`trnscope.explorer.ranks_view`."""

from __future__ import annotations

from . import GLOBAL, Api, Page


def run_list(explorer, request) -> dict:
    return {"runs": explorer.runs.list()}


def run_page(explorer, request) -> dict:
    return explorer.runs.get(request.path_params["rid"])  # RunNotFound: 404; a damaged run: 422


PAGE = Page(name="runs", title="Runs", script="views/runs.js", scope=GLOBAL, order=20,
            api=(Api("/runs", run_list), Api("/runs/{rid}", run_page)))
