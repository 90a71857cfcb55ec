"""Host overhead per collective: the ``neuron`` process group against gloo on CPU tensors, in one run.

Two ranks (torchrun, one process each) time ``--iters`` synchronous all_reduces of each size, first
on a gloo group with CPU tensors, then on the neuron group with neuron tensors (the same gloo moves
the bytes; the neuron group adds the arrival exchange, the timing model and the record). Wall
microseconds per call, best of ``--repeat`` rounds (the two backends alternate within a round), and
the ratio neuron / gloo: the median over the rounds of each round's ratio (a round's two figures
are measured back to back, so a machine whose load changes between rounds moves both).

    python benchmarks/bench_collectives.py [--iters 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = [256, 64 * 1024, 4 * 1024 * 1024]  # bytes: 64 floats, 16 K floats, 1 M floats


def worker(iters: int, repeat: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    import trnscope  # noqa: F401

    dist.init_process_group("neuron")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    best: dict[str, float] = {}
    ratios: dict[str, list[float]] = {}
    for _ in range(repeat):
        for nbytes in SIZES:
            n = nbytes // 4
            for name, group, dev in (("gloo", gloo, "cpu"), ("neuron", None, "neuron")):
                t = torch.ones(n, device=dev)
                dist.all_reduce(t, group=group)  # warm: buffers, connections
                dist.barrier(group=group)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(iters):
                    dist.all_reduce(t, group=group)
                us = (time.perf_counter() - t0) / iters * 1e6
                cpu = (time.process_time() - c0) / iters * 1e6  # every thread's (gloo's too); waiting is free
                for key, value in ((f"{name}/{nbytes}", us), (f"{name}/{nbytes}/cpu", cpu)):
                    best[key] = min(best.get(key, float("inf")), value)
                if name == "gloo":
                    base = (us, cpu)
                else:
                    ratios.setdefault(str(nbytes), []).append(us / base[0])
                    ratios.setdefault(f"{nbytes}/cpu", []).append(cpu / base[1])
    if rank == 0:
        Path(out).write_text(json.dumps({"best": best, "ratios": ratios}))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.iters, args.repeat, args.out)
        return
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", TRNSCOPE_HOST_TIME="modelled")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        __file__, "--worker", "--iters", str(args.iters), "--repeat", str(args.repeat),
                        "--out", str(out)], env=env, check=True, timeout=1800)
        result = json.loads(out.read_text())
    best, ratios = result["best"], result["ratios"]
    print(f"ratios: the median of {args.repeat} paired rounds; CPU: the process's CPU time (all threads) per call")
    print(f"{'bytes':>10} {'gloo (CPU tensors) us':>22} {'neuron us':>10} {'ratio':>6} {'gloo CPU us':>12} "
          f"{'neuron CPU us':>14} {'CPU ratio':>10}")
    for nbytes in SIZES:
        g, n = best[f"gloo/{nbytes}"], best[f"neuron/{nbytes}"]
        gc, nc = best[f"gloo/{nbytes}/cpu"], best[f"neuron/{nbytes}/cpu"]
        print(f"{nbytes:>10,} {g:>22.1f} {n:>10.1f} {statistics.median(ratios[str(nbytes)]):>6.2f} {gc:>12.1f} "
              f"{nc:>14.1f} {statistics.median(ratios[f'{nbytes}/cpu']):>10.2f}")


if __name__ == "__main__":
    main()
