"""``trnscope summary``, ``trnscope diff`` and ``trnscope export``: the analysis library in the
terminal (rich tables, or ``--json``) and one Chrome JSON with every lane for Perfetto. None of
them imports torch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def _analysis(path: Path):
    from ..analysis import ProfileAnalysis, ProfileError, load_profile

    if not path.exists():
        raise ValueError(f"{path}: no such profile or trace")
    try:
        return ProfileAnalysis(load_profile(path))
    except ProfileError as exc:
        raise ValueError(str(exc)) from None


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f} us"


class SummaryCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path, help="a profile directory or a trace file")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
        parser.add_argument("--top", type=int, default=12, help="operators to list")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from rich.table import Table

        a = _analysis(args.profile)
        if args.json:
            data = a.to_dict()
            data["ops"] = [vars(o) for o in a.ops.ops[: args.top]]
            console.print_json(json.dumps(data, default=str))
            return 0
        h = a.headline()
        console.rule(f"{a.profile.name} ({a.profile.kind})")
        console.print(f"wall {_us(h['wall_ns'])}, device time {_us(h['device_time_ns'])} in {h['executions']} "
                      f"executions ({h['dispatches']} kernel dispatches, {h['programs']} distinct NEFFs/kernels); "
                      f"regime: {h['regime']}")
        if h.get("mfu_percent") is not None:
            console.print(f"MFU {h['mfu_percent']:.1f}%  MBU {h['mbu_percent'] or 0:.1f}%")
        t = Table(title="operators")
        for col in ("operator", "calls", "CPU self", "CPU total", "device self", "device total", "dispatches"):
            t.add_column(col, justify="left" if col == "operator" else "right", no_wrap=True)
        for o in a.ops.ops[: args.top]:
            t.add_row(o.name, str(o.calls), _us(o.cpu_self_ns), _us(o.cpu_total_ns), _us(o.device_self_ns),
                      _us(o.device_total_ns), str(o.dispatches))
        console.print(t)
        for r in a.recommendations:
            console.print(f"[bold]{r.severity}[/]: {r.title}. {r.detail}")
        return 0


class DiffCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("base", type=Path)
        parser.add_argument("test", type=Path)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--top", type=int, default=15)

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from rich.table import Table

        from ..analysis import diff_profiles

        d = diff_profiles(_analysis(args.base), _analysis(args.test))
        if args.json:
            console.print_json(json.dumps(d, default=str))
            return 0
        t = Table(title=f"{d['base']['name']} -> {d['test']['name']}")
        for col in ("metric", "base", "test", "delta", "ratio"):
            t.add_column(col, justify="left" if col == "metric" else "right", no_wrap=True)
        for row in d["summary"]:
            fmt = _us if row["key"].endswith("_ns") else (lambda v: "-" if v is None else f"{v:,.3g}")
            t.add_row(row["label"], fmt(row["base"]), fmt(row["test"]), fmt(row["delta"]),
                      "-" if row["ratio"] is None else f"{row['ratio']:.2f}x")
        console.print(t)
        t = Table(title="operators (largest device-time change first)")
        for col in ("operator", "in", "base device", "test device", "delta device", "delta dispatches"):
            t.add_column(col, justify="left" if col in ("operator", "in") else "right", no_wrap=True)
        for op in d["ops"][: args.top]:
            t.add_row(op["name"], op["status"], _us(op["base"]["device_total_ns"]), _us(op["test"]["device_total_ns"]),
                      _us(op["delta"]["device_total_ns"]), f"{op['delta']['dispatches']:+d}")
        console.print(t)
        return 0


class ExportCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path)
        parser.add_argument("-o", "--output", type=Path, help="output file (default: <profile>/combined.json.gz)")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from ..trace import write_kineto

        a = _analysis(args.profile)
        out = args.output or (args.profile / "combined.json.gz" if args.profile.is_dir()
                              else args.profile.with_suffix(".combined.json.gz"))
        write_kineto(a.profile.trace, out)
        console.print(f"wrote {out} ({len(a.profile.trace.slices):,} slices, {len(a.profile.trace.flows):,} flows)")
        return 0
