"""Start-up: how long ``import trnscope`` and the torch-free CLI commands take before doing anything.

Targets (issue 16): commands that need no torch (``--help``, ``view``, ``summary``, ``diff``,
``export``) start within 2x of ``python -c "import numpy"``; ``import torch, trnscope`` within 1.3x
of ``import torch``. Every row is a fresh process, best of ``--repeat`` rounds (the rows alternate
within a round, so machine load hits them alike), wall seconds and peak RSS (``wait4``'s
``ru_maxrss``), for this tree and for a baseline commit's tree (``--baseline REV``, unpacked with
``git archive``) in the same run. Both trees run in this interpreter's environment, so a
dependency pin (ml_dtypes) shows up as its own rows (``import ml_dtypes``), not in the baseline.

    python benchmarks/bench_startup.py [--repeat 7] [--baseline REV]
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

CLI = [sys.executable, "-m", "trnscope.cli.main"]
TRACE_DIR = REPO.parent / "shared" / "data" / "kineto-traces"


def rows(trace: Path | None) -> list[tuple[str, list[str], bool]]:
    """(label, argv, runs trnscope: set PYTHONPATH to the tree)."""
    py = sys.executable
    out = [
        ("python -c 'import numpy'", [py, "-c", "import numpy"], False),
        ("python -c 'import ml_dtypes'", [py, "-c", "import ml_dtypes"], False),
        ("python -c 'import torch'", [py, "-c", "import torch"], False),
        ("import torch, trnscope", [py, "-c", "import torch, trnscope"], True),
        ("import trnscope (no torch)", [py, "-c", "import trnscope"], True),
        ("trnscope --help", [*CLI, "--help"], True),
    ]
    for cmd in ("view", "summary", "diff", "export", "inspect"):
        out.append((f"trnscope {cmd} --help", [*CLI, cmd, "--help"], True))
    if trace is not None:
        out.append(("trnscope summary TRACE --json (work)", [*CLI, "summary", str(trace), "--json"], True))
    return out


def run_once(argv: list[str], src: Path | None) -> tuple[float, int]:
    """(wall seconds, peak RSS in KiB) of one fresh process."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}")
    return wall, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", default=BASELINE)
    opts = ap.parse_args()
    traces = sorted(TRACE_DIR.glob("*.json")) if TRACE_DIR.is_dir() else []
    trace = min(traces, key=lambda p: p.stat().st_size) if traces else None
    with tempfile.TemporaryDirectory() as tmp:
        old_src = baseline_tree(opts.baseline, Path(tmp))
        trees = {"this tree": REPO / "src"}
        if old_src is not None:
            trees[f"baseline {opts.baseline}"] = old_src
        table = rows(trace)
        best: dict[tuple[str, str], tuple[float, int]] = {}
        for _ in range(opts.repeat):
            for label, argv, needs_tree in table:
                for tree, src in (trees.items() if needs_tree else [("-", None)]):
                    wall, rss = run_once(argv, src)
                    key = (label, tree)
                    prev = best.get(key)
                    best[key] = (min(wall, prev[0]) if prev else wall, min(rss, prev[1]) if prev else rss)
    numpy_s = best[("python -c 'import numpy'", "-")][0]
    torch_s = best[("python -c 'import torch'", "-")][0]
    print(f"best of {opts.repeat} fresh processes each, wall; python {sys.version.split()[0]}"
          + (f"; TRACE = {trace.name} ({trace.stat().st_size / 1e6:.1f} MB)" if trace else ""))
    print(f"{'':44s} {'tree':18s} {'ms':>8s} {'x numpy':>8s} {'x torch':>8s} {'peak MiB':>9s}")
    for (label, tree), (wall, rss) in best.items():
        x_torch = f"{wall / torch_s:8.2f}" if "import torch" in label else f"{'':8s}"
        print(f"{label:44s} {tree:18s} {wall * 1e3:8.0f} {wall / numpy_s:8.2f} {x_torch} {rss / 1024:9.0f}")
    print("targets: torch-free commands' --help <= 2.00x numpy; import torch, trnscope <= 1.30x torch")


if __name__ == "__main__":
    main()
