"""Interpreter speed on a tiled 1024x1024x1024 bf16 matmul Program, against NumPy's own matmul.

The Program (tests/interp/programs.py: tiled_matmul) has lhsT [K, M] and rhs [K, N] inputs and
out [M, N]: DMA queues load K-tiles and signal, TensorE waits and runs LDWEIGHTS + MATMUL into
PSUM banks, VectorE copies each bank to SBUF as bf16, a DMA queue stores row bands. Printed:
instructions per second of ``interp.run`` and its time as a ratio to ``numpy.matmul`` of the same
size (float32, the type the interpreter computes in; bf16 NumPy matmul has no BLAS path), both
measured in this run, in interleaved rounds. Usage: python benchmarks/bench_interp.py [--size 1024]
[--repeat 7]. On a loaded machine multi-threaded OpenBLAS slows the interpreter's 128 small matmuls far
more than NumPy's one large one; compare runs with OPENBLAS_NUM_THREADS=1 to see the difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interp"))
sys.path.insert(0, str(ROOT / "src"))

import programs  # noqa: E402  (tests/interp/programs.py)

from trnscope import interp  # noqa: E402
from trnscope.isa import execution_order  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n = args.size

    prog = programs.tiled_matmul(n, n, n, "bfloat16")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    bf16 = prog.tensors[0].dtype.np
    lhsT, rhs = np.ascontiguousarray(a.T).astype(bf16), b.astype(bf16)
    inputs = {"lhsT": lhsT, "rhs": rhs}

    a32, b32 = lhsT.astype(np.float32).T.copy(), rhs.astype(np.float32)
    interp.run(prog, inputs)  # warm up (allocations, imports, BLAS threads)
    np.matmul(a32, b32)
    # interleaved rounds, so load from other processes on this machine hits both sides alike
    t_run, t_nocheck, t_np = [], [], []
    for _ in range(args.repeat):
        t_np.append(timed(lambda: np.matmul(a32, b32)))
        t_run.append(timed(lambda: interp.run(prog, inputs)))
        t_nocheck.append(timed(lambda: interp.run(prog, inputs, check=False)))
    out = interp.run(prog, inputs)
    ref = np.matmul(a32, b32)
    err = np.max(np.abs(out["out"].astype(np.float32) - ref)) / np.max(np.abs(ref))
    counts = defaultdict(int)
    for ins in prog.instructions:
        counts[ins.OPCODE] += 1

    # where the time goes, per opcode (one extra run, stepped)
    it = interp.Interpreter(prog)
    it.load(inputs)
    per_op: dict[str, float] = defaultdict(float)
    for i in execution_order(prog):
        t0 = time.perf_counter()
        it.step(i)
        per_op[prog.instructions[i].OPCODE] += time.perf_counter() - t0

    n_ins = len(prog)
    print(f"program     {prog.name}: {n_ins} instructions "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})")

    def line(label: str, times: list[float], extra: str = "") -> None:
        best, med = min(times), statistics.median(times)
        rate = f"{n_ins / best:8.0f} instructions/s (best)" if extra != "numpy" else f"float32 {n}x{n}x{n}"
        print(f"{label:<11} best {best * 1e3:8.2f} ms  median {med * 1e3:8.2f} ms  {rate}")

    line("interp.run", t_run)
    line("  no check", t_nocheck)
    line("np.matmul", t_np, "numpy")
    print(f"ratio       interp.run / np.matmul = {min(t_run) / min(t_np):.2f}x best-to-best, "
          f"{statistics.median(t_run) / statistics.median(t_np):.2f}x median-to-median "
          f"({args.repeat} interleaved rounds)")
    print(f"max |out - ref| / max |ref| = {err:.2e} (bf16 output rounding)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine     {os.cpu_count()} CPUs, load average {load:.2f}, OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')} (many small BLAS calls suffer most from a busy machine)")
    total = sum(per_op.values())
    shares = sorted(per_op.items(), key=lambda kv: -kv[1])
    print("time by opcode: " + ", ".join(f"{k} {v / total:.0%}" for k, v in shares))


if __name__ == "__main__":
    main()
