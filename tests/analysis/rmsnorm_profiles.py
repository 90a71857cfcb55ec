"""RMSNorm profiles recorded on the emulated NeuronCore, for the analysis and explorer tests.

One subprocess (torch and the device load once) records three variants of the same RMSNorm with
NeuronProfiler, each into its own output folder: ``naive`` (pow/mean/add/rsqrt/mul/mul: six NEFFs
per call), ``fused`` (``torch.rms_norm``: one NEFF) and ``compiled`` (``torch.compile(backend=
"neuron")`` of the naive function: one NEFF). The profiles are generated once per test session and
shared by pytest-xdist workers through a lock file, so the format under test is always the one
the current ``trnscope.profiling`` writes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

VARIANTS = ("naive", "fused", "compiled")
REQUIRED = ("naive", "fused")

SCRIPT = r'''
import json, sys, traceback
import torch
import trnscope  # registers the neuron device
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

def naive(x, w, eps=1e-6):
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * w

def fused(x, w, eps=1e-6):
    return torch.rms_norm(x, (x.shape[-1],), w, eps)

out = sys.argv[1]
variants = {"naive": naive, "fused": fused, "compiled": None}
x = torch.randn(256, 2048).to("neuron")
w = torch.randn(2048).to("neuron")
done = {}
for name in sys.argv[2:]:
    try:
        fn = variants[name] or torch.compile(naive, backend="neuron")
        for _ in range(3):
            fn(x, w)  # warm up: NEFFs compiled and cached before the profiled window
        torch.neuron.synchronize()
        cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME, ProfileMode.CPU_UTIL,
                                  ProfileMode.HOST_MEMORY], profile_output_dir=f"{out}/{name}")
        exporter = NeuronProfiler(cfg)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                     on_trace_ready=exporter.export_trace, record_shapes=True):
            for _ in range(3):
                y = fn(x, w)
            y.cpu()
            torch.neuron.synchronize()
        done[name] = str(exporter.last_export)
    except Exception:
        traceback.print_exc()
print("PROFILES " + json.dumps(done))
'''


def _root(base: Path) -> Path:
    return base / "rmsnorm-profiles"


def rmsnorm_profiles(base: Path) -> dict[str, Path]:
    """{variant: profile directory}. Generates them under ``base`` the first time (any process)."""
    root = _root(base)
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not index.exists():
            index.write_text(json.dumps(_generate(root)))
    found = {k: Path(v) for k, v in json.loads(index.read_text()).items()}
    missing = [v for v in REQUIRED if v not in found]
    if missing:
        raise RuntimeError(f"RMSNorm profiles not generated: {missing}; see {root / 'generate.log'}")
    return found


def _generate(root: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("TRNSCOPE_NO_DEVICE", None)
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(root), *VARIANTS], capture_output=True, text=True,
                            env=env, timeout=900)
    (root / "generate.log").write_text(result.stdout + "\n" + result.stderr)
    for line in result.stdout.splitlines():
        if line.startswith("PROFILES "):
            return json.loads(line[len("PROFILES "):])
    return {}


def torch_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
