"""NTFF export against simulation, on the 4096x4096x4096 bf16 matmul (issue 20: export within 3x
of simulation; it was 54x when every instruction became a dict and back).

In one run and one fresh process per tree: the Program is built, simulated once to warm up (numba,
the shape index, as in a profiled run where the NEFF was hashed and simulated before the export),
then ``simulate(cache=False)`` and ``profiling.ntff.write_ntff`` (no table cache) are timed
alternately, best of several runs each, in CPU seconds (``time.process_time``: on a shared machine the wall clock
measures the neighbours too). The same is measured on the source tree of a baseline commit
(``--baseline REV``, default the commit before the columnar export), so before and after come from
the same machine at the same time.

    python benchmarks/bench_ntff_export.py [--size N] [--repeat R] [--baseline REV]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import REPO, baseline_tree

BEFORE = "6bde779"  # the per-record export (profiling/ntff.py's tables_of over timeline.records())

_TIMER = """
import sys, tempfile, time
from pathlib import Path
from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.profiling import ntff
from trnscope.sim import simulate

size, repeat = int(sys.argv[1]), int(sys.argv[2])
program = matmul_program(size, size, size, "bfloat16", spec=hw.TRN2)
timeline = simulate(program, hw.TRN2, cache=False)  # warm-up: numba, the shape index


def seconds(work):
    start = time.process_time()
    work()
    return time.process_time() - start


header = {"neff_id": str(program.neff_id), "neff_name": program.name, "vnc": 0, "target": "trn2"}
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "1_instid_0_vnc_0.ntff"
    sims, exports = [], []
    for _ in range(repeat):  # alternated, so a busy spell of the machine hits both alike
        sims.append(seconds(lambda: simulate(program, hw.TRN2, cache=False)))
        exports.append(seconds(lambda: ntff.write_ntff(path, header, timeline)))
    size_bytes = path.stat().st_size
print(len(program.instructions), min(sims), min(exports), size_bytes)
"""


def measure(src: Path, size: int, repeat: int) -> tuple[int, float, float, int]:
    env = {**os.environ, "PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _TIMER, str(size), str(repeat)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]), int(out[3])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--baseline", default=BEFORE)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        before = baseline_tree(args.baseline, Path(tmp))
        if before is not None:
            rows.append((f"before ({args.baseline})", measure(before, args.size, args.repeat)))
        rows.append(("this tree", measure(REPO / "src", args.size, args.repeat)))
    print(f"{args.size}^3 bf16 matmul on trn2, best of {args.repeat}, CPU seconds")
    for label, (count, sim, export, size_bytes) in rows:
        print(f"  {label:<18} {count:,} instructions: simulate {sim * 1e3:7.1f} ms, NTFF export {export * 1e3:7.1f} ms"
              f" ({size_bytes / 1e6:.2f} MB): export / simulate = {export / sim:5.1f}x")
    ratio = rows[-1][1][2] / rows[-1][1][1]
    print(f"export within 3x of simulation: {'yes' if ratio <= 3 else 'no'} ({ratio:.1f}x)")


if __name__ == "__main__":
    main()
