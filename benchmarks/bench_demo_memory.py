"""Peak memory of ``trnscope demo`` (the RMSNorm case study, default shapes), this tree against a
baseline commit's, in one run: each a fresh process, peak RSS from ``wait4``'s ``ru_maxrss``.

    python benchmarks/bench_demo_memory.py [--baseline REV]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baseline import BASELINE, REPO, baseline_tree


def peak(src: Path, workdir: Path) -> tuple[float, float]:
    """(peak RSS MiB, wall s) of one ``trnscope demo`` run."""
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               TORCH_NEURONX_NEFF_CACHE_DIR=str(workdir / "neff"))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "trnscope.cli.main", "demo", "--out", str(workdir / "profiles")],
                            env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"trnscope demo failed with {src}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = {}
        old = baseline_tree(opts.baseline, tmp / "old")
        for label, src in (("this tree", REPO / "src"), (f"baseline {opts.baseline}", old)):
            if src is None:
                continue
            work = tmp / label.replace(" ", "_")
            work.mkdir()
            rows[label] = peak(src, work)
    print("trnscope demo, default shapes: peak RSS (MiB), wall (s)")
    for label, (rss, wall) in rows.items():
        print(f"  {label:20s} {rss:8.0f} {wall:8.1f}")
    if len(rows) == 2:
        (a, _), (b, _) = rows.values()
        print(f"  this tree / baseline: {a / b:.2f}x peak memory")


if __name__ == "__main__":
    main()
