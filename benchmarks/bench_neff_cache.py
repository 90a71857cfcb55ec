"""First call of a large kernel in a fresh process: cold (empty NEFF cache), warm (a second process
reading the first one's NEFF and timeline from the persistent cache), and the baseline commit's
build (which never read its cache back), in one run.

The op is a bf16 [4096, 8192] @ [8192, 8192] matmul on ``neuron``. A first call's wall time is the
host numerics (ATen's CPU matmul on the device tensors' bytes, measured alone in the same process)
plus what trnscope does to serve it: lowering (building the Program and hashing its NEFF),
simulating it, and writing the cache entry - or, warm, reading the entry. Each run is a fresh
process; figures are wall seconds of that process (``time.perf_counter``), with the compile metrics
it reports (``trnscope.metrics``).

    python benchmarks/bench_neff_cache.py [--shape 4096,8192,8192] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import BASELINE, REPO, baseline_tree

SCRIPT = r"""
import json, sys, time
import torch
torch.set_num_threads(2)
import trnscope
from trnscope import runtime
M, K, N = map(int, sys.argv[1].split(","))
g = torch.Generator().manual_seed(0)
a_cpu = torch.randn(M, K, generator=g).to(torch.bfloat16)
b_cpu = torch.randn(K, N, generator=g).to(torch.bfloat16)
t = time.perf_counter(); ref = a_cpu @ b_cpu; numerics = time.perf_counter() - t  # ATen alone, warm caches
a, b = a_cpu.to("neuron"), b_cpu.to("neuron")
torch.neuron.synchronize()
t = time.perf_counter()
c = a @ b
torch.neuron.synchronize()
first = time.perf_counter() - t
t = time.perf_counter()
c = a @ b
torch.neuron.synchronize()
second = time.perf_counter() - t
assert torch.equal(c.cpu(), ref)
rt = runtime.core(0)
out = {"first_s": first, "second_s": second, "numerics_s": numerics, "stats": rt.stats()}
try:
    from trnscope import metrics
    out["metrics"] = {n: metrics.get_metric_data(n)["accumulator"] / 1e9 for n in metrics.get_metric_names()}
    out["counters"] = {n: metrics.get_counter_value(n) for n in metrics.get_counter_names()}
except ImportError:
    pass
print(json.dumps(out))
"""


def run(src: Path, cache: Path, shape: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), TORCH_NEURONX_NEFF_CACHE_DIR=str(cache), OPENBLAS_NUM_THREADS="2",
               OMP_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, shape], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4096,8192,8192", help="M,K,N of the bf16 matmul")
    ap.add_argument("--baseline", default=BASELINE)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = {"cold (empty NEFF cache)": run(REPO / "src", tmp / "cache", opts.shape)}
        rows["warm (second process, same cache)"] = run(REPO / "src", tmp / "cache", opts.shape)
        old = baseline_tree(opts.baseline, tmp / "old")
        if old is not None:
            rows[f"baseline {opts.baseline} (second process)"] = run(old, tmp / "old-cache", opts.shape)
            rows[f"baseline {opts.baseline} (second process)"] = run(old, tmp / "old-cache", opts.shape)
    m, k, n = opts.shape.split(",")
    print(f"bf16 [{m},{k}] @ [{k},{n}] on neuron, first call in a fresh process (wall s)")
    print(f"{'':40s} {'first call':>10s} {'numerics':>9s} {'trnscope':>9s} {'compile':>8s} {'load':>6s} "
          f"{'store':>6s} {'2nd call':>9s}  NEFFs compiled/loaded")
    for label, r in rows.items():
        mt = r.get("metrics", {})
        s = r["stats"]
        print(f"{label:40s} {r['first_s']:10.2f} {r['numerics_s']:9.2f} {r['first_s'] - r['numerics_s']:9.2f} "
              f"{mt.get('CompilationTime', float('nan')):8.2f} {mt.get('NeffCache.LoadTime', 0.0):6.2f} "
              f"{mt.get('NeffCache.StoreTime', 0.0):6.2f} {r['second_s']:9.2f}  "
              f"{s.get('neffs_compiled', '?')}/{s.get('neffs_loaded', 0)}")
    print("trnscope = first call - numerics: lowering, simulation, cache reads and writes (emulator work, cut from "
          "the emulated host clock)")


if __name__ == "__main__":
    main()
