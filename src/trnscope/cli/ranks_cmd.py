"""``trnscope summary RUN`` / ``trnscope view RUN`` for a multi-rank run folder (see
:mod:`trnscope.analysis.ranks`): the straggler table, collectives, overlap per rank."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .format import count, duration, human_bytes
from .tables import grid

if TYPE_CHECKING:
    from rich.console import Console


def summarise_run(path: Path, console: "Console", as_json: bool, top: int, wide: bool) -> int:
    from ..analysis.ranks import hta_dir, load_run, perfetto_archive
    from rich.text import Text

    a = load_run(path)
    hta = hta_dir(a)
    perfetto = perfetto_archive(a)
    if as_json:
        from .analysis_cmds import _write_json

        _write_json(a.to_dict())
        return 0
    console.print(Text(f"multi-rank run {path}: {len(a.traces)} of {a.world_size} rank(s), "
                       f"{count(len(a.collectives))} collectives"), highlight=False)
    for p in a.problems():
        console.print(Text(f"incomplete: {p}", style="yellow"), highlight=False)
    rows = [[f"rank {s['rank']}", count(s["last_count"]), duration(s["caused_wait_ns"]), duration(s["own_wait_ns"])]
            for s in a.stragglers()]
    grid(console, "Stragglers (who reaches collectives last, and the waiting it causes)",
         [("rank", "left"), ("last at", "right"), ("others waited", "right"), ("own wait", "right")], rows, wide)
    who = a.straggler()
    if who is not None:
        console.print(Text(f"straggler: rank {who} (the others waited for it longest)", style="bold"),
                      highlight=False)
    crow = sorted(a.straggler_rows(), key=lambda r: -r["others_wait_ns"])[:top]
    grid(console, "Collectives with the most waiting",
         [("collective", "left"), ("group", "left"), ("bytes", "right"), ("algorithm", "left"),
          ("device time", "right"), ("last rank", "right"), ("late by", "right"), ("others waited", "right")],
         [[f"{r['collective']} #{r['seq']}", r["group"], human_bytes(r["bytes"]), r["algorithm"],
           duration(r["duration_ns"]), str(r["last_rank"]), duration(r["late_by_ns"]), duration(r["others_wait_ns"])]
          for r in crow], wide, names=(0, 1))
    grid(console, "Compute / communication overlap per rank",
         [("rank", "left"), ("collective time", "right"), ("compute time", "right"), ("overlapped", "right"),
          ("share", "right")],
         [[f"rank {o['rank']}", duration(o["comm_ns"]), duration(o["compute_ns"]), duration(o["overlap_ns"]),
           f"{o['overlap_percent']:.1f}%"] for o in a.overlap()], wide)
    console.print(Text(f"for HTA: TraceAnalysis(trace_dir={str(hta)!r})"), highlight=False)
    console.print(Text(f"for Perfetto (v58.2+): open {perfetto} (every rank on one timeline)"), highlight=False)
    return 0


def merged_for_view(path: Path) -> Path:
    """Write RUN/all_ranks.trace.json (every rank on one clock) for the explorer; returns it."""
    from ..analysis.ranks import load_run, write_merged

    return write_merged(load_run(path))
