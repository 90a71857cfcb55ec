"""Tables that fit the terminal: figures always in full, names cut to what is left."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod


def grid(console: Console, title: str, columns: list[tuple[str, str]], rows: list[list], wide: bool,
         names: tuple[int, ...] = (0,)):
    """A table whose figure columns always show in full; the name columns (``names``, by index)
    take what is left of the terminal and are cut with an ellipsis (folded with ``wide``).
    ``columns``: (header, "left" or "right")."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title, style="bold"), title_justify="left", expand=False, pad_edge=False, box=None,
                  header_style="bold", show_edge=False)
    widths = [max([len(header)] + [len(str(r[i])) for r in rows]) for i, (header, _) in enumerate(columns)]
    fixed = sum(w for i, w in enumerate(widths) if i not in names)
    # what the name columns share: the terminal less the figures and two spaces between columns
    room = max(12, (console.width - fixed - 2 * (len(columns) - 1)) // max(1, len(names)))
    for index, (header, how) in enumerate(columns):
        justify = cast("JustifyMethod", how)  # "left" / "right" as the callers write them
        if index in names:
            table.add_column(header, justify=justify, no_wrap=not wide, overflow="fold" if wide else "ellipsis",
                             max_width=None if wide else room, min_width=min(widths[index], 12))
        else:
            table.add_column(header, justify=justify, no_wrap=True, min_width=widths[index])
    for row in rows:
        table.add_row(*(cell if not isinstance(cell, str) or i not in names else Text(cell)
                        for i, cell in enumerate(row)))
    console.print(table)
