"""`trnscope summary` end to end against loading the same trace into HTA (traceinsight).

For every fixture trace of 15 MB (uncompressed JSON) or more, in one run and interleaved (HTA,
trnscope, HTA, trnscope, ...), each in a fresh process: the process's wall time and peak RSS
(``os.wait4``'s ``ru_maxrss``: what the user waits for and what the machine must hold, imports
included). trnscope prints its whole text summary to /dev/null with the trace cache off (a cold,
first look at the trace); HTA builds ``TraceAnalysis`` (the load every HTA analysis starts with,
its default ``include_last_profiler_step=False``). The best of ``--repeat`` runs is kept for each,
because the machine is shared. Targets (issue 17): >= 5x faster, <= 1/3 of the memory.

    python benchmarks/bench_summary.py [--repeat 3] [--traces DIR]

``TRNSCOPE_HTA_PYTHON`` may name another interpreter with traceinsight installed.
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "data" / "kineto-traces"
MIN_BYTES = 15_000_000

HTA_LOAD = ("import logging, sys, warnings; logging.disable(logging.WARNING); warnings.filterwarnings('ignore'); "
            "from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_files={0: sys.argv[1]})")


def json_size(path: Path) -> int:
    """Uncompressed size: a gzip file's last four bytes hold it (mod 2**32)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        return struct.unpack("<I", handle.read(4))[0]


def measure(cmd: list[str], env: dict) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB, CPU seconds) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({proc.returncode}): {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    args = parser.parse_args()
    traces = sorted(p for p in args.traces.iterdir() if p.name.endswith((".json", ".json.gz"))
                    and json_size(p) >= MIN_BYTES) if args.traces.is_dir() else []
    if not traces:
        print(f"no traces of {MIN_BYTES / 1e6:.0f} MB or more under {args.traces}")
        return 1
    hta_python = os.environ.get("TRNSCOPE_HTA_PYTHON", sys.executable)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("TRNSCOPE_NO_DEVICE", None)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; best of {args.repeat} interleaved runs each")
    print(f"{'trace':44s} {'MB':>6s} | {'trnscope s':>10s} {'CPU s':>6s} {'MB':>6s} | {'HTA load s':>10s} "
          f"{'CPU s':>6s} {'MB':>6s} | {'speed-up':>8s} {'CPU':>6s} {'memory':>7s}")
    failed = False
    for path in traces:
        ours, hta = [], []
        for _ in range(args.repeat):
            hta.append(measure([hta_python, "-c", HTA_LOAD, str(path)], env))
            ours.append(measure([sys.executable, "-m", "trnscope", "summary", str(path)], env))
        t_ours, t_hta = min(r[0] for r in ours), min(r[0] for r in hta)
        m_ours, m_hta = min(r[1] for r in ours), min(r[1] for r in hta)
        c_ours, c_hta = min(r[2] for r in ours), min(r[2] for r in hta)
        speed, memory = t_hta / t_ours, m_ours / m_hta
        failed |= speed < 5 or memory > 1 / 3
        print(f"{path.name[:44]:44s} {json_size(path) / 1e6:6.1f} | {t_ours:10.2f} {c_ours:6.2f} {m_ours:6.0f} | "
              f"{t_hta:10.2f} {c_hta:6.2f} {m_hta:6.0f} | {speed:7.1f}x {c_hta / c_ours:5.1f}x {memory:7.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print("targets: >= 5x faster and <= 0.33 of the memory:", "missed" if failed else "met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
