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
rows, hidden = (int(v) for v in sys.argv[2].split("x"))
x = torch.randn(rows, hidden).to("neuron")
w = torch.randn(hidden).to("neuron")
done = {}
for name in sys.argv[3:]:
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


# 128x1024 fp32: the six naive kernels take 3-9 us each (36 us a call), less than the modelled host
# cost of dispatching each (13 us): the naive profile is dispatch-bound on any machine. At 1024x4096
# the same kernels move 16 MiB each near HBM bandwidth: device-bound and HBM-bound.
SHAPE = "128x1024"
LARGE_SHAPE = "1024x4096"


def rmsnorm_profiles(base: Path) -> dict[str, Path]:
    """{variant: profile directory} at :data:`SHAPE`. Generated under ``base`` the first time (any
    process)."""
    return _profiles(base / "rmsnorm-profiles", SHAPE, VARIANTS, REQUIRED)


def rmsnorm_large_profiles(base: Path) -> dict[str, Path]:
    """The naive variant at :data:`LARGE_SHAPE`, in a folder of its own."""
    return _profiles(base / "rmsnorm-large-profiles", LARGE_SHAPE, ("naive",), ("naive",))


def _profiles(root: Path, shape: str, variants, required) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not index.exists():
            index.write_text(json.dumps(_generate(root, shape, variants)))
    found = {k: Path(v) for k, v in json.loads(index.read_text()).items()}
    missing = [v for v in required if v not in found]
    if missing:
        raise RuntimeError(f"RMSNorm profiles not generated: {missing}; see {root / 'generate.log'}")
    return found


def _generate(root: Path, shape: str, variants) -> dict[str, str]:
    # recorded on one physical core (LNC=1): the rules' expectations below were written for its
    # timings (at the default LNC=2 the kernels run twice as fast and the copies weigh more)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NEURON_LOGICAL_NC_CONFIG": "1"}
    env.pop("TRNSCOPE_NO_DEVICE", None)
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(root), shape, *variants], capture_output=True,
                            text=True, env=env, timeout=900)
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
