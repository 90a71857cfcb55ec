"""Simulator and interpreter throughput on a tiled 4096x4096x4096 bf16 matmul (instructions per second).

Every figure is the best of several runs of a freshly built-in-process Program with the timeline
cache off (cold) unless the row says otherwise, in CPU seconds of this process
(``time.process_time``: on a shared machine the wall clock mostly measures the neighbours) and, for
reference, wall seconds. Each is printed as a ratio to the 1 M instructions/s target and to a
baseline measured in the same run: a bare Python visit of every instruction (``[ins.op for ins in
instructions]``), the floor of any per-instruction Python pass. The per-instruction reference paths
(the specifications of the fast ones, see tests/sim/test_fast_encoding.py and
tests/isa/test_neff_fast.py) are timed too, as the before picture.

``--against REV`` times the hot paths (simulate() cold and checked, validate(), the NEFF hash cold
and warm) of this tree and of commit REV in the same run: fresh processes, alternating, best of
several, printed as ratios (how a refactor of the instruction set was held to "no slower").

Building the Program (``KernelBuilder``: access patterns, semaphores, ``Program.add``) is timed
against the builder of a baseline commit in the same run (``--baseline REV``, default the commit
before the builder's speed-up): that tree's ``src/`` is unpacked with ``git archive`` and both build
the same matmul in fresh subprocesses, best of several runs, in CPU seconds. The shape grouping is
made once, when the NEFF hash or simulate() first needs it: "index made" is that one pass. The NEFF hash rows time ``content_hash`` (body + SHA-256) with the per-shape text
memo empty (cold: a new Program) and filled (warm: a Program like one hashed before); "simulate() new
Program, cached" is what the runtime pays for a new kernel: the hash for the cache key, then a cold
simulation.

    python benchmarks/bench_sim.py [--quick] [--baseline REV] [--against REV]    # --quick: a 2048^3 matmul
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from baseline import BASELINE, REPO, baseline_tree

from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.isa import execution_order, neff, validate
from trnscope.isa.columns import ShapeIndex, program_columns
from trnscope.isa.validate import _validate_reference
from trnscope.sim.core import run_core
from trnscope.sim.encode import encode, encode_reference
from trnscope.sim.simulate import clear_cache, simulate

TARGET = 1_000_000
_BUILD_TIMER = """
import sys, time
from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
size, repeat = int(sys.argv[1]), int(sys.argv[2])
matmul_program(256, 256, 256, "bfloat16", spec=hw.TRN2)  # imports and first-use memos outside the timing
best = float("inf")
for _ in range(repeat):
    c = time.process_time()
    p = matmul_program(size, size, size, "bfloat16", spec=hw.TRN2)
    best = min(best, time.process_time() - c)
print(len(p), best)
"""


def best_of(fn, repeat=5) -> tuple[float, float]:
    """(best CPU seconds, best wall seconds) over ``repeat`` runs."""
    cpu = wall = float("inf")
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu = min(cpu, time.process_time() - c)
        wall = min(wall, time.perf_counter() - w)
    return cpu, wall


def build_rate(src: Path, size: int, repeat: int = 5) -> tuple[int, float]:
    """(instructions, best CPU seconds) of building the matmul with the trnscope in ``src``, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _BUILD_TIMER, str(size), str(repeat)], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1])


def compare_builders(size: int, rev: str) -> None:
    n_new, new = build_rate(REPO / "src", size)
    with tempfile.TemporaryDirectory() as tmp:
        old_src = baseline_tree(rev, Path(tmp))
        if old_src is None:
            print(f"builder: {n_new} instructions in {new * 1e3:.1f} ms CPU, {n_new / new / 1e3:.1f} k instr/s "
                  f"(baseline {rev} not available: no comparison)")
            return
        n_old, old = build_rate(old_src, size)
    print(f"building the Program, best of 5, fresh processes (CPU ms, k instr/s):\n"
          f"  baseline {rev:10s} {old * 1e3:8.1f} {n_old / old / 1e3:8.1f}   ({n_old} instructions)\n"
          f"  this tree          {new * 1e3:8.1f} {n_new / new / 1e3:8.1f}   ({n_new} instructions)\n"
          f"  speed-up {n_new / new / (n_old / old):.2f}x instructions/s")


_HOT_TIMER = """
import json, sys, time
from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.isa import neff, validate
from trnscope.sim.simulate import simulate
size, repeat = int(sys.argv[1]), int(sys.argv[2])
spec = hw.TRN2
prog = matmul_program(size, size, size, "bfloat16", spec=spec)
simulate(prog, spec, cache=False)  # numba's compile and the first-use memos outside the timing


def best(fn):
    b = float("inf")
    for _ in range(repeat):
        c = time.process_time()
        fn()
        b = min(b, time.process_time() - c)
    return b


def hash_cold():
    neff._SEGMENTS.clear()
    neff._AP_TEXT.clear()
    prog._hash = None
    return prog.content_hash


def hash_warm():
    prog._hash = None
    return prog.content_hash


print(json.dumps({"n": len(prog), "simulate() cold, checked": best(lambda: simulate(prog, spec, cache=False)),
                  "validate() standalone": best(lambda: validate(prog, spec)),
                  "NEFF hash, cold": best(hash_cold), "NEFF hash, warm": best(hash_warm)}))
"""


def hot_paths(src: Path, size: int, repeat: int = 5) -> dict:
    """Best CPU seconds of the hot paths with the trnscope in ``src``, in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(src), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _HOT_TIMER, str(size), str(repeat)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_hot_paths(size: int, rev: str, rounds: int = 3) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        old_src = baseline_tree(rev, Path(tmp))
        if old_src is None:
            print(f"hot paths: baseline {rev} not available, no comparison")
            return
        old: dict = {}
        new: dict = {}
        for _ in range(rounds):  # alternating, so both trees see the machine's load alike
            for best, src in ((old, old_src), (new, REPO / "src")):
                for k, v in hot_paths(src, size).items():
                    best[k] = v if k == "n" else min(best.get(k, float("inf")), v)
    n = new["n"]
    print(f"hot paths, {size}^3 bf16 matmul ({n} instructions), best of {rounds} x 5 in fresh processes, CPU ms:")
    print(f"  {'':28s} {'baseline ' + rev:>16s} {'this tree':>10s} {'this/base':>10s} {'M instr/s':>10s}")
    for k in new:
        if k != "n":
            print(f"  {k:28s} {old[k] * 1e3:16.2f} {new[k] * 1e3:10.2f} {new[k] / old[k]:10.2f} {n / new[k] / 1e6:10.2f}")


def core_args(enc, spec):
    return (enc.n, enc.kind, enc.base_ns, enc.dep_ns, enc.wait_ptr, enc.wait_sem, enc.wait_val, enc.sig_ptr,
            enc.sig_sem, enc.sig_val, enc.sig_set, enc.dma_desc, enc.dma_desc_ns, enc.dma_fixed_ns, enc.stream_ptr,
            enc.stream_instr, enc.n_streams, max(1, enc.n_sems), spec.dma_engines, spec.tensor_throttling,
            spec.throttle_idle_ns, spec.throttle_ramp_ns, spec.throttle_start_fraction)


def interpreter_rate(spec) -> tuple[int, float, float]:
    """The interpreter on a matmul small enough to run with data (it computes every tile)."""
    from trnscope import interp

    prog = matmul_program(512, 512, 512, "bfloat16", spec=spec)
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype.np) for t in prog.tensors if t.kind == "input"}

    def run():
        interp.run(prog, feeds, spec=spec)

    cpu, wall = best_of(run, repeat=3)
    return len(prog), cpu, wall


def main() -> None:
    quick = "--quick" in sys.argv
    size = 2048 if quick else 4096
    rev = sys.argv[sys.argv.index("--baseline") + 1] if "--baseline" in sys.argv else BASELINE
    if "--against" in sys.argv:
        compare_hot_paths(size, sys.argv[sys.argv.index("--against") + 1])
        return
    compare_builders(size, rev)
    spec = hw.TRN2
    c0, w0 = time.process_time(), time.perf_counter()
    prog = matmul_program(size, size, size, "bfloat16", spec=spec)
    build_cpu, build_wall = time.process_time() - c0, time.perf_counter() - w0
    n = len(prog)
    simulate(prog, spec, cache=False)  # compile / load the numba caches outside the timing
    enc = encode(prog, spec)
    args = core_args(enc, spec)
    cols = program_columns(prog)
    tl = simulate(prog, spec, cache=False)
    print(f"program: {size}^3 bf16 matmul, {n} instructions, {cols.n_shapes} shapes, {cols.n_forms} forms; "
          f"simulated device time {tl.total_ns / 1e3:.1f} us, MFU {tl.summary['mfu_estimated_percent']:.1f}%")
    print(f"built by KernelBuilder in {build_cpu:.2f} s CPU ({build_wall:.2f} s wall): "
          f"{n / build_cpu / 1e3:.1f} k instr/s, paid once per Program before any simulate()")

    def content_hash(memo: bool):
        if not memo:
            neff._SEGMENTS.clear()
            neff._AP_TEXT.clear()
        prog._hash = None
        return prog.content_hash

    def simulate_new_program():
        content_hash(memo=False)  # a Program simulate() has not seen: hashed for the cache key
        clear_cache()
        simulate(prog, spec)

    body = neff.encode_body(prog)
    assert body == neff._encode_body_reference(prog)
    print(f"NEFF body {len(body) / 1e6:.2f} MB, identical to the reference body")
    with_gc = gc.isenabled()
    visit = best_of(lambda: [ins.op for ins in prog.instructions], repeat=9)
    rows = [
        ("simulate() cold, checked", best_of(lambda: simulate(prog, spec, cache=False))),
        ("simulate() cold, check=False", best_of(lambda: simulate(prog, spec, cache=False, check=False))),
        ("simulate() new Program, cached", best_of(simulate_new_program)),
        ("  columns (from the index)", best_of(lambda: program_columns(prog))),
        ("  validate(columns)", best_of(lambda: validate(prog, spec, columns=cols))),
        ("  execution_order(columns)", best_of(lambda: execution_order(prog, columns=cols))),
        ("  encode(columns)", best_of(lambda: encode(prog, spec, columns=cols))),
        ("  event core", best_of(lambda: run_core(*args), repeat=9)),
        ("validate() standalone", best_of(lambda: validate(prog, spec))),
        ("index made (one pass)", best_of(lambda: ShapeIndex.build(prog.instructions, prog.label))),
        ("NEFF hash, cold", best_of(lambda: content_hash(memo=False))),
        ("NEFF hash, warm", best_of(lambda: content_hash(memo=True))),
        ("reference validate", best_of(lambda: _validate_reference(prog, spec), repeat=1)),
        ("reference encode", best_of(lambda: encode_reference(prog, spec), repeat=1)),
        ("reference NEFF body", best_of(lambda: neff._encode_body_reference(prog), repeat=1)),
    ]
    assert gc.isenabled() == with_gc
    print(f"{'':30s} {'CPU ms':>9s} {'M instr/s':>10s} {'x target':>9s} {'x visit':>8s} {'wall ms':>9s}")
    for label, (cpu, wall) in rows:
        rate = n / cpu
        print(f"{label:30s} {cpu * 1e3:9.2f} {rate / 1e6:10.2f} {rate / TARGET:9.2f} {cpu / visit[0]:8.0f} "
              f"{wall * 1e3:9.2f}")
    print(f"{'bare Python visit':30s} {visit[0] * 1e3:9.2f} {n / visit[0] / 1e6:10.2f} "
          f"{n / visit[0] / TARGET:9.2f} {1:8.0f} {visit[1] * 1e3:9.2f}")
    n_i, cpu, wall = interpreter_rate(spec)
    print(f"interpreter (512^3 bf16 matmul, {n_i} instructions, with data): {cpu * 1e3:.1f} ms CPU, "
          f"{n_i / cpu / 1e3:.1f} k instr/s ({n_i / cpu / TARGET:.3f}x the simulator target)")


if __name__ == "__main__":
    main()
