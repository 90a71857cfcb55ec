"""``trnscope retime PROFILE --instance trn1|trn2 [--lnc N] [--set field=value,...] -o OUT``: the same
recorded run re-lowered and re-simulated for another target (``trnscope.profiling.retime``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .main import UsageError

if TYPE_CHECKING:
    from rich.console import Console


class RetimeCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", type=Path, help="a trnscope profile directory")
        parser.add_argument("--instance", dest="target", required=True, help="the target to re-time for: trn1 or trn2")
        parser.add_argument("--lnc", type=int, help="logical NeuronCore size (NEURON_LOGICAL_NC_CONFIG)")
        parser.add_argument("--set", dest="overrides", action="append", default=[],
                            help="change the target's spec: field=value or field=2x (comma-separated or repeated), "
                                 "e.g. hbm_bandwidth=2x")
        parser.add_argument("-o", "--output", type=Path, required=True, help="the new profile directory")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from rich.text import Text

        from ..profiling.retime import RetimeError, retime, target_spec

        overrides = [part for item in args.overrides for part in item.split(",") if part.strip()]
        try:
            spec = target_spec(args.target, args.lnc, overrides)
            result = retime(args.profile, args.output, spec, overrides)
        except RetimeError as exc:
            raise UsageError(str(exc)) from None
        before, after = result.device_time_before_ns, result.device_time_after_ns
        ratio = f" ({after / before:.2f}x)" if before else ""
        console.print(Text(f"{result.out}: {result.executions} execution(s) re-timed for {result.target}: device time "
                           f"{before / 1e3:.1f} us -> {after / 1e3:.1f} us{ratio}; {len(result.relowered)} NEFF(s) "
                           f"lowered again, {len(result.resimulated)} re-simulated as recorded"), highlight=False)
        if result.resimulated:
            console.print(Text("  (no recipe: compiled graphs, or profiles recorded before recipes)", style="dim"))
        console.print(Text(f"compare: trnscope diff {args.profile} {result.out}   or   trnscope view "
                           f"{args.profile.parent} {result.out.parent}"), highlight=False)
        return 0
