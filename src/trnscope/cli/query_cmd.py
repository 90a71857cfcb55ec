"""``trnscope query PROFILE "SELECT ..."``: SQL over a profile's tables (DuckDB, read-only;
``trnscope.analysis.sql``). Prints a table, or CSV / JSON; ``--tables`` lists the tables and their
columns."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .main import UsageError

if TYPE_CHECKING:
    from rich.console import Console


class QueryCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path, help="a profile directory or a trace file")
        parser.add_argument("sql", nargs="?", help='one SELECT statement, e.g. "SELECT name, count(*) FROM slices GROUP BY 1"')
        parser.add_argument("--tables", action="store_true", help="list the tables and their columns")
        parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output (default: table)")
        parser.add_argument("--max-rows", type=int, default=1000, help="rows printed at most (default 1000)")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from ..analysis.sql import TABLES, ProfileDatabase, QueryError
        from .analysis_cmds import _load

        if args.tables:
            _print_tables(console, TABLES)
            return 0
        if not args.sql:
            raise UsageError('give a query: trnscope query PROFILE "SELECT ..." (--tables lists the tables)')
        if args.max_rows < 1:
            raise UsageError("--max-rows must be at least 1")
        path = args.profile
        if not path.exists():
            raise UsageError(f"{path}: no such profile or trace")
        from ..analysis.profile import detect_kind

        if path.is_dir() and detect_kind(path) is None:
            raise UsageError(f"{path}: not a profile directory; pass one profile (a folder with manifest.json) "
                             f"or a trace file")
        try:
            result = ProfileDatabase(_load(path)).query(args.sql, max_rows=args.max_rows)
        except QueryError as exc:
            raise UsageError(str(exc)) from None
        if args.format == "json":
            from .analysis_cmds import _write_json

            _write_json(result.to_dict())
        elif args.format == "csv":
            writer = csv.writer(sys.stdout)
            writer.writerow(result.columns)
            writer.writerows(result.rows)
        else:
            _print_result(console, result)
        if result.truncated:
            print(f"(first {args.max_rows} rows; --max-rows shows more)", file=sys.stderr)
        return 0


def _print_result(console: Console, result) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
    numeric = ("INTEGER", "BIGINT", "DOUBLE", "FLOAT", "HUGEINT", "DECIMAL", "SMALLINT", "UBIGINT")
    for name, kind in zip(result.columns, result.types):
        table.add_column(name, justify="right" if kind.upper().startswith(numeric) else "left", overflow="fold")
    for row in result.rows:
        table.add_row(*(Text("NULL" if v is None else _cell(v)) for v in row))
    console.print(table)
    console.print(Text(f"{len(result.rows)} row(s)", style="dim"))


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _print_tables(console: Console, tables: dict) -> None:
    from rich.text import Text

    for name, (what, columns) in tables.items():
        console.print(Text(f"{name}", style="bold"), Text(f"  {what}", style="dim"))
        for column, meaning in columns.items():
            console.print(Text(f"  {column:<20} {meaning}"))
