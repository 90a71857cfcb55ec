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


# One profile with TensorE work at both peaks: an FP32 mm with neuronx-cc's FP32 auto-cast off
# (NEURON_CC_FLAGS="--auto-cast=none", as a TorchNeuron user sets it: FP32 at TensorE's quarter rate),
# a BF16 mm, and an FP32 mm of another shape compiled with the default auto-cast (--auto-cast
# matmult: it streams BF16). The test session's own default is --auto-cast=none (tests/conftest.py),
# so TRAIN_SCRIPT's Linear runs FP32 too; this script sets the flag itself either way.
PEAKS_SCRIPT = r'''
import os, sys
os.environ["NEURON_CC_FLAGS"] = "--auto-cast=none"
import torch
import trnscope
from trnscope.compiler import precision
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

torch.manual_seed(0)
a = torch.randn(1024, 1024).to("neuron")
b = torch.randn(1024, 1024).to("neuron")
a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
c = torch.randn(512, 1024).to("neuron")

def step():
    torch.mm(a, b)  # FP32, not cast
    torch.mm(a16, b16)  # BF16
    with precision.auto_cast("matmult"):  # the compiler's default: cast to BF16
        torch.mm(c, b)

for _ in range(2):
    step()
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace):
    for _ in range(2):
        step()
    torch.neuron.synchronize()
print("PROFILE " + str(exporter.last_export))
'''


# eager ops, a compiled graph and an NKI kernel, forward and backward, recorded with with_stack=True
# from a script file (so FX stack traces and frames have real lines). "# line:<name>" marks the
# lines the source-line tests look for.
LINES_SCRIPT = r'''
import sys, torch
import trnscope
import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl
from trnscope.nki.torch_ops import nki_op
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler


@nki.jit
def double(x):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)  # line:nki_load
    nisa.tensor_tensor(dst=t, data1=t, data2=t, op=nl.add)  # line:nki_add
    nisa.dma_copy(dst=out, src=t)  # line:nki_store
    return out


@nki_op("lines::double", mutates_args=())
def double_op(x: torch.Tensor) -> torch.Tensor:
    return double(x)  # line:nki_call


double_op.register_autograd(lambda ctx, g: double_op(g), setup_context=lambda ctx, inputs, output: None)


def norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # line:graph


torch.manual_seed(0)
up = torch.nn.Linear(128, 256).to("neuron")
x = torch.randn(128, 128).to("neuron")
w = torch.randn(256).to("neuron")
cnorm = torch.compile(norm, backend="neuron")


def step():
    h = torch.nn.functional.gelu(up(x))  # line:eager
    h = cnorm(h, w)  # line:compiled_call
    z = double_op(h)
    z.mean().backward()  # line:loss


for _ in range(2):
    step()
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace, with_stack=True, profile_memory=True):
    step()
    torch.neuron.synchronize()
print("PROFILE " + str(exporter.last_export))
'''


def source_lines_profile(base: Path) -> tuple[Path, dict[str, int]]:
    """The LINES_SCRIPT profile and the line number of each ``# line:<name>`` marker."""
    marks = {line.split("# line:")[1].strip(): n for n, line in enumerate(LINES_SCRIPT.splitlines(), 1)
             if "# line:" in line}
    return _recorded(base / "source-lines-profile", LINES_SCRIPT, script_name="lines_model.py"), marks


def with_stack_compiled_profile(base: Path) -> Path:
    return _recorded(base / "with-stack-profile", SCRIPT)


def training_step_profile(base: Path) -> Path:
    return _recorded(base / "training-step-profile", TRAIN_SCRIPT)


def matmul_peaks_profile(base: Path) -> Path:
    """An FP32 mm (auto-cast off), a BF16 mm and an FP32 mm auto-cast to BF16."""
    return _recorded(base / "matmul-peaks-profile", PEAKS_SCRIPT)


def _recorded(root: Path, script: str, script_name: str | None = None) -> Path:
    """``script_name``: run the script from a file of that name (its lines then appear in stack
    traces and frames), else with ``python -c``."""
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.json"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not index.exists():
            env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            env.pop("TRNSCOPE_NO_DEVICE", None)
            if script_name is not None:
                (root / script_name).write_text(script)
                command = [sys.executable, str(root / script_name)]
            else:
                command = [sys.executable, "-c", script]
            result = subprocess.run([*command, str(root / "out")], capture_output=True, text=True,
                                    env=env, timeout=600, cwd=root if script_name else None)
            (root / "generate.log").write_text(result.stdout + "\n" + result.stderr)
            found = [line[len("PROFILE "):] for line in result.stdout.splitlines() if line.startswith("PROFILE ")]
            index.write_text(json.dumps(found[0] if found else None))
    where = json.loads(index.read_text())
    if not where:
        raise RuntimeError(f"profile not recorded; see {root / 'generate.log'}")
    return Path(where)
