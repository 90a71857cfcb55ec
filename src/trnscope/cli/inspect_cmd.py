"""``trnscope inspect FILE``: what a .neff holds, and its simulated timeline summary."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text


class InspectCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", type=Path)

    def run(self, args: argparse.Namespace, console: Console) -> int:
        # the ISA and the simulator (numba, ml_dtypes) load only when this command runs
        from ..isa import NeffFormatError, neff
        from ..sim import simulate

        path: Path = args.file
        if path.suffix != ".neff":
            raise ValueError(f"{path}: inspect reads .neff files")
        try:
            prog = neff.load(path)
            header = neff.read_header(path.read_bytes())
            mix = Counter((str(ins.engine.value), str(ins.OPCODE)) for ins in prog.instructions)
        except NeffFormatError as exc:
            raise ValueError(str(exc)) from None
        # Names come from the file: printed as text (never rich markup), whatever their JSON type.
        console.print(Text.assemble((str(header["name"]), "bold"), f"  neff_{header['neff_id']}  target "
                                    f"{header['target']}  sha256 {header['hash'][:16]}..."), highlight=False)
        t = Table(title="HBM tensors")
        for c in ("name", "kind", "shape", "dtype"):
            t.add_column(c)
        for d in prog.tensors:
            t.add_row(Text(str(d.name)), Text(str(d.kind)), str(list(d.shape)), str(d.dtype.value))
        console.print(t)
        t = Table(title=f"{len(prog)} instructions")
        for c in ("engine", "opcode", "count"):
            t.add_column(c)
        for (eng, op), n in sorted(mix.items()):
            t.add_row(Text(eng), Text(op), str(n))
        console.print(t)
        try:
            tl = simulate(prog)
        except Exception as exc:  # noqa: BLE001 - a decoded but inconsistent program (a damaged NEFF)
            raise ValueError(f"{path}: the NEFF's program cannot be simulated ({type(exc).__name__}: "
                             f"{str(exc)[:200]}); it is damaged or was not written by trnscope") from None
        s = tl.summary
        console.print(f"simulated: {s['total_time_ns'] / 1e3:,.2f} us, bottleneck {s['bottleneck']}, "
                      f"{_mfu(prog, s)}, MBU {s['mbu_estimated_percent']:.1f}%")
        return 0


def _mfu(prog, summary: dict) -> str:
    """MFU against TensorE's peak for the dtype its matmuls streamed (analysis.tensor_peak), where
    the simulator's summary has it against the BF16 peak."""
    from ..analysis.tensor_peak import TensorPeak, bf16_peak_of, dtype_of_operands, fp32_factor_of

    by_dtype: dict[str, float] = {}
    for ins in prog.instructions:
        flops = ins.flops()[0]
        if flops:
            d = dtype_of_operands(ins.describe_operands())
            by_dtype[d] = by_dtype.get(d, 0.0) + flops
    mfu = float(summary.get("mfu_estimated_percent") or 0.0)
    if not by_dtype:
        return f"MFU {mfu:.1f}%"
    peak = TensorPeak(flops_by_dtype=by_dtype, bf16_peak=bf16_peak_of(summary),
                      fp32_factor=fp32_factor_of(summary.get("target")))
    return f"MFU {mfu * peak.slowdown:.1f}% of {peak.describe()}"
