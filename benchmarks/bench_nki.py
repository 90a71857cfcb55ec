"""NKI: how fast trnscope turns a kernel into a Program, and the cold cost of the fully optimised matmul.

* Trace-and-lower throughput (instructions/s): the ladder's fully optimised kernel at the tutorial's size
  (bf16 [4096, 8192] @ [8192, 8192] on trn1, 71,680 instructions), split into tracing (running the
  kernel's Python, checking every call) and lowering (placement, access patterns, semaphores, source map,
  validation, NEFF hash). Baseline in the same run: the compiler's own KernelBuilder matmul
  (``compiler.kernels.matmul.matmul_program``) of the same shape, which emits a similar instruction mix
  through the same Program/semaphore machinery without an NKI trace.
* Cold cost: the first call of the fully optimised kernel in a fresh process state (no trace cache, no
  timeline cache): trace + lower + simulate, what ``kernel.timeline(...)`` pays once.

CPU seconds of this process (``time.process_time``; on a shared machine the wall clock mostly measures the
neighbours), best of ``--repeat`` runs; wall seconds for reference.

    python benchmarks/bench_nki.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "nki"))


def best_of(fn, repeat: int) -> tuple[float, float, object]:
    cpu = wall = float("inf")
    out = None
    for _ in range(repeat):
        gc.collect()
        c, w = time.process_time(), time.perf_counter()
        out = fn()
        cpu = min(cpu, time.process_time() - c)
        wall = min(wall, time.perf_counter() - w)
    return cpu, wall, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = "trn1"

    import trnscope.nki as nki
    from trnscope.compiler.kernels.matmul import matmul_program
    from trnscope.hw import TRN1
    from trnscope.nki import ArgSpec
    from trnscope.sim.simulate import clear_cache, simulate

    nki.install_aliases()
    import matmul as mm

    jit = sys.modules["trnscope.nki.jit"]
    M, K, N = mm.LADDER_SHAPE
    kargs = (ArgSpec((K, M), "bfloat16"), ArgSpec((K, N), "bfloat16"))
    fn = mm.matmul_optimized.fn

    def trace_only():
        return jit.trace(fn, kargs, {}, TRN1)

    def build():
        return jit.build(fn, kargs, {}, TRN1)

    def baseline():
        return matmul_program(K, M, N, "bfloat16", spec=TRN1)

    t_cpu, t_wall, _ = best_of(trace_only, args.repeat)
    b_cpu, b_wall, traced = best_of(build, args.repeat)
    n = len(traced.program.instructions)
    base_cpu, base_wall, base = best_of(baseline, args.repeat)
    nb = len(base.instructions)

    def cold():
        clear_cache()
        mm.matmul_optimized._cache.clear()
        return mm.matmul_optimized.timeline(*kargs)

    c_cpu, c_wall, report = best_of(cold, args.repeat)
    clear_cache()
    s_cpu, s_wall, _ = best_of(lambda: (clear_cache(), simulate(traced.program, TRN1)), args.repeat)

    rate = n / b_cpu
    base_rate = nb / base_cpu
    print(f"fully optimised matmul, bf16 [{M},{K}] @ [{K},{N}] on trn1: {n:,} instructions, simulated "
          f"{report.total_ms:.2f} ms (published 6.97 ms), MFU {report.mfu:.1f}%")
    print(f"  trace (kernel Python + checks)     {t_cpu:6.2f} s CPU ({t_wall:6.2f} s wall)")
    print(f"  trace + lower (Program, validated) {b_cpu:6.2f} s CPU ({b_wall:6.2f} s wall) = "
          f"{rate / 1e3:,.1f} k instructions/s")
    print(f"  baseline KernelBuilder matmul      {base_cpu:6.2f} s CPU ({base_wall:6.2f} s wall) for {nb:,} "
          f"instructions = {base_rate / 1e3:,.1f} k instructions/s; NKI / baseline rate = {rate / base_rate:.2f}x")
    print(f"  cold first call (trace + lower + simulate, caches empty) {c_cpu:6.2f} s CPU ({c_wall:6.2f} s wall); "
          f"of which simulate() {s_cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
