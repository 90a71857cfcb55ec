"""Profiles recorded on the emulated device for the attribution and recommendation tests: a
``torch.compile(backend="neuron")`` profile recorded with ``with_stack=True``, and a Linear
training step. Each is recorded in one subprocess, once per test session, and shared by
pytest-xdist workers (as rmsnorm_profiles.py does)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import sys, torch
import trnscope
from torch.profiler import profile, ProfilerActivity, schedule
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

def naive(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

fn = torch.compile(naive, backend="neuron")
x = torch.randn(256, 2048).to("neuron")
w = torch.randn(2048).to("neuron")
for _ in range(3):
    fn(x, w)
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace, with_stack=True,
             schedule=schedule(wait=0, warmup=1, active=3)) as prof:
    for _ in range(4):
        fn(x, w)
        torch.neuron.synchronize()
        prof.step()
print("PROFILE " + str(exporter.last_export))
'''


TRAIN_SCRIPT = r'''
import sys, torch
import trnscope
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

torch.manual_seed(0)
lin = torch.nn.Linear(1024, 1024).to("neuron")
x = torch.randn(1024, 1024).to("neuron")
opt = torch.optim.SGD(lin.parameters(), lr=0.1)

def step():
    opt.zero_grad()
    lin(x).sum().backward()
    opt.step()

for _ in range(2):
    step()
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace, profile_memory=True):
    for _ in range(2):
        step()
    torch.neuron.synchronize()
print("PROFILE " + str(exporter.last_export))
'''


def with_stack_compiled_profile(base: Path) -> Path:
    return _recorded(base / "with-stack-profile", SCRIPT)


def training_step_profile(base: Path) -> Path:
    return _recorded(base / "training-step-profile", TRAIN_SCRIPT)


def _recorded(root: Path, script: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not index.exists():
            env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            env.pop("TRNSCOPE_NO_DEVICE", None)
            result = subprocess.run([sys.executable, "-c", script, str(root / "out")], capture_output=True, text=True,
                                    env=env, timeout=600)
            (root / "generate.log").write_text(result.stdout + "\n" + result.stderr)
            found = [line[len("PROFILE "):] for line in result.stdout.splitlines() if line.startswith("PROFILE ")]
            index.write_text(json.dumps(found[0] if found else None))
    where = json.loads(index.read_text())
    if not where:
        raise RuntimeError(f"profile not recorded; see {root / 'generate.log'}")
    return Path(where)
