"""MFU of bf16 ``torch.mm`` over a grid of shapes on trn1 (LNC=1) and trn2 at LNC=2 and LNC=1.

Issue 12's target: >= 80% MFU for bf16 with M, N, K >= 2048 on trn1 and trn2, at any K. Each shape
is lowered as the eager ``aten::mm`` kernel for the target's logical core and timed by the simulator
(modelled device clock, deterministic, so no repeats are needed). MFU is the timeline summary's
``mfu_estimated_percent`` (model FLOPs / (peak BF16 FLOP/s of the logical core x device time)), the
figure the profiler and bench_compile.py report. For LNC=2 the end time of each physical core's last
instruction is printed too: a pair whose cores end far apart leaves one TensorE idle.

    python benchmarks/bench_matmul_mfu.py                      # the default grid, every target
    python benchmarks/bench_matmul_mfu.py --shapes 4096x8192x8192 --targets trn2:2
    python benchmarks/bench_matmul_mfu.py --against REV        # also commit REV's kernels, before -> after

Shapes are M x K x N (A[M, K] @ B[K, N], both row-major). ``--against REV`` unpacks ``src/`` of
commit REV (benchmarks/baseline.py) and runs the same grid there in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the grid: squares, rectangles both ways, and K = 11008 (Llama-7B's intermediate size), all sides
# from {2048, 4096, 8192, 11008, 16384}; the largest (16384^3, 8192^3) take minutes to lower
SHAPES = ("2048x2048x2048", "2048x16384x2048", "4096x2048x4096", "4096x4096x4096", "4096x8192x8192",
          "2048x11008x4096", "4096x11008x4096", "8192x2048x8192", "2048x4096x16384", "16384x2048x2048",
          "2048x8192x11008", "11008x4096x2048")
TARGETS = ("trn1:1", "trn2:2", "trn2:1")
TARGET_MFU = 80.0


def measure(shape: str, target: str) -> dict:
    """One shape on one target ``name:lnc``: device time, MFU, and each physical core's end time."""
    import numpy as np
    import torch

    from trnscope import hw
    from trnscope.compiler import lower
    from trnscope.compiler.opcall import from_aten
    from trnscope.sim import simulate

    M, K, N = map(int, shape.split("x"))
    name, lnc = target.split(":")
    spec = hw.logical_spec(name, int(lnc))
    aten = torch.ops.aten
    a = torch.empty(M, K, dtype=torch.bfloat16, device="meta")
    b = torch.empty(K, N, dtype=torch.bfloat16, device="meta")
    t0 = time.perf_counter()
    prog = lower(from_aten(aten.mm.default, (a, b), {}, (aten.mm.default(a, b),)), spec)
    tl = simulate(prog, spec)
    wall = time.perf_counter() - t0
    pcore = tl.encoded.pcore
    ends = [float(tl.end_ns[pcore == c].max()) for c in np.unique(pcore)]
    return {"shape": shape, "target": target, "ms": tl.total_ns / 1e6,
            "mfu": tl.summary["mfu_estimated_percent"], "core_end_ms": [e / 1e6 for e in ends],
            "instructions": len(prog.instructions), "wall_s": wall}


def sweep(shapes: list[str], targets: list[str], quiet: bool = False) -> list[dict]:
    rows = []
    for target in targets:
        for shape in shapes:
            row = measure(shape, target)
            rows.append(row)
            if not quiet:
                print(_line(row), flush=True)
    return rows


def _line(row: dict, before: dict | None = None) -> str:
    ends = "/".join(f"{e:.3f}" for e in row["core_end_ms"])
    flag = "" if row["mfu"] >= TARGET_MFU else "  < 80%"
    was = f"{before['ms']:8.3f} ms {before['mfu']:5.1f}% -> " if before else ""
    return (f"{row['target']:7s} {row['shape']:17s} {was}{row['ms']:8.3f} ms  MFU {row['mfu']:5.1f}%  "
            f"core ends {ends} ms{flag}")


def _baseline_rows(rev: str, shapes: list[str], targets: list[str]) -> list[dict] | None:
    from baseline import baseline_tree

    with tempfile.TemporaryDirectory() as tmp:
        src = baseline_tree(rev, Path(tmp))
        if src is None:
            print(f"commit {rev} not found: no baseline", file=sys.stderr)
            return None
        env = dict(os.environ, PYTHONPATH=str(src))
        cmd = [sys.executable, __file__, "--json", "--shapes", ",".join(shapes), "--targets", ",".join(targets)]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated MxKxN")
    ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated name:lnc")
    ap.add_argument("--against", metavar="REV", help="also time commit REV's kernels (before -> after)")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line (for --against)")
    args = ap.parse_args()
    shapes, targets = args.shapes.split(","), args.targets.split(",")
    if args.json:
        print(json.dumps(sweep(shapes, targets, quiet=True)))
        return
    if args.against:
        before = _baseline_rows(args.against, shapes, targets)
        after = sweep(shapes, targets, quiet=True)
        keyed = {(r["shape"], r["target"]): r for r in before or []}
        print(f"before = {args.against}, after = this tree (device time, MFU; core ends after)")
        for row in after:
            print(_line(row, keyed.get((row["shape"], row["target"]))))
        return
    sweep(shapes, targets)


if __name__ == "__main__":
    main()
