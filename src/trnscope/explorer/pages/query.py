"""SQL (``#/p/<id>/query?sql=``): one read-only SELECT over the profile's tables (DuckDB)."""

from __future__ import annotations

from ..params import integer
from ..views import BadRequest
from . import Api, Page

MAX_ROWS = 10_000


def query(session, request) -> dict:
    from ...analysis.sql import QueryError

    q = request.query_params
    try:
        return session.database.query(q.get("sql", ""), max_rows=min(integer(q, "max_rows", 2000), MAX_ROWS)).to_dict()
    except QueryError as exc:
        raise BadRequest(str(exc)) from None


def tables(session, request) -> dict:
    from ...analysis.sql import TABLES

    return {"tables": [{"name": name, "about": about, "columns": [{"name": c, "about": m} for c, m in columns.items()]}
                       for name, (about, columns) in TABLES.items()]}


PAGE = Page(name="query", title="SQL", script="views/query.js", order=40,
            api=(Api("/query", query), Api("/query/tables", tables)))
