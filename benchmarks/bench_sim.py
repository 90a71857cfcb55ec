"""Simulator throughput on a tiled 4096x4096x4096 bf16 matmul (instructions per second).

Prints the event-driven core alone and the whole simulate() (encode + core + summary), each as a
ratio against the 1 M instructions/s target and against a baseline measured in the same run: a
plain Python loop that only visits each instruction once (the floor of any per-instruction pass).
"""

from __future__ import annotations

import time

from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.sim.core import run_core
from trnscope.sim.encode import encode
from trnscope.sim.simulate import simulate

TARGET = 1_000_000


def best_of(fn, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    spec = hw.TRN2
    t0 = time.perf_counter()
    prog = matmul_program(4096, 4096, 4096, "bfloat16", spec=spec)
    build = time.perf_counter() - t0
    n = len(prog)
    enc = encode(prog, spec)
    args = (enc.n, enc.kind, enc.base_ns, enc.dep_ns, enc.wait_ptr, enc.wait_sem, enc.wait_val, enc.sig_ptr,
            enc.sig_sem, enc.sig_val, enc.sig_set, enc.dma_desc, enc.dma_desc_ns, enc.dma_fixed_ns, enc.stream_ptr,
            enc.stream_instr, enc.n_streams, max(1, enc.n_sems), spec.dma_engines, spec.tensor_throttling,
            spec.throttle_idle_ns, spec.throttle_ramp_ns, spec.throttle_start_fraction)
    run_core(*args)  # compile / load the numba cache outside the timing
    core = best_of(lambda: run_core(*args))
    whole = best_of(lambda: simulate(prog, spec, check=False, cache=False))
    checked = best_of(lambda: simulate(prog, spec, check=True, cache=False), repeat=2)
    visit = best_of(lambda: [ins.op for ins in prog.instructions])
    tl = simulate(prog, spec)
    print(f"program: {n} instructions (built in {build:.2f} s); simulated device time "
          f"{tl.total_ns / 1e3:.1f} us, MFU {tl.summary['mfu_estimated_percent']:.1f}%")
    for label, secs in (("event core", core), ("simulate()", whole), ("simulate(check=True)", checked)):
        rate = n / secs
        print(f"{label:22s} {secs * 1e3:8.2f} ms  {rate / 1e6:6.2f} M instr/s  "
              f"{rate / TARGET:5.2f}x target  {secs / visit:6.1f}x a bare Python visit")


if __name__ == "__main__":
    main()
