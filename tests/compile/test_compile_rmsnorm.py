"""torch.compile(backend="neuron") turns the naive RMSNorm into one NEFF close to the fused kernel."""

import os
import subprocess
import sys

import pytest
import torch

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.device.dynamo_backend import COUNTERS, NeuronCompileError


def naive(x, w, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def fused(x, w, eps: float = 1e-6):
    return torch.rms_norm(x, (x.shape[-1],), w, eps)


def _device_times(fn, x, w, calls=2):
    rt = runtime.core(0)
    fn(x, w)
    torch.neuron.synchronize()
    rt.recording = True
    rt.records.clear()
    try:
        for _ in range(calls):
            out = fn(x, w)
        torch.neuron.synchronize()
        recs = [r for r in rt.records if r.kind == "kernel"]
    finally:
        rt.recording = False
        rt.records.clear()
    per_call = sum(r.device_end_ns - r.device_start_ns for r in recs) / calls
    return out, len(recs) / calls, per_call


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(256, 1024), (2048, 2048), (1024, 4096)])
def test_compiled_naive_rmsnorm_is_one_dispatch_close_to_fused(shape, dtype):
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(*shape).to(dtype)
    w = torch.randn(shape[-1]).to(dtype)
    xn, wn = x.to("neuron"), w.to("neuron")
    compiled = torch.compile(naive, backend="neuron")
    out_c, dispatches_c, t_c = _device_times(compiled, xn, wn)
    out_f, dispatches_f, t_f = _device_times(fused, xn, wn)
    out_e, dispatches_e, t_e = _device_times(naive, xn, wn)
    assert dispatches_c == 1 and dispatches_f == 1 and dispatches_e == 6
    assert abs(t_c - t_f) / t_f < 0.15, (t_c, t_f)
    assert t_e > 1.5 * t_c
    torch.testing.assert_close(out_c.cpu(), naive(x, w), rtol=1e-5 if dtype == torch.float32 else 2e-2,
                               atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_compile_counters_and_cache_hits_across_calls():
    torch._dynamo.reset()
    COUNTERS.reset()
    x = torch.randn(64, 128, device="neuron")
    w = torch.randn(128, device="neuron")
    f = torch.compile(naive, backend="neuron")
    for _ in range(3):
        f(x, w)
    # one NEFF: compiled, or read from the session's NEFF cache when an earlier test compiled it
    assert COUNTERS.neffs_compiled + COUNTERS.neff_cache_hits == 1
    assert COUNTERS.executions == 3
    assert COUNTERS.last_dispatches_per_call == 1


def test_graph_break_gives_one_neff_per_subgraph():
    torch._dynamo.reset()
    COUNTERS.reset()

    def broken(x):
        y = torch.exp(x) * 2
        torch._dynamo.graph_break()
        return torch.tanh(y) + 1

    x = torch.randn(32, 32)
    out = torch.compile(broken, backend="neuron")(x.to("neuron"))
    assert COUNTERS.neffs_compiled + COUNTERS.neff_cache_hits == 2
    torch.testing.assert_close(out.cpu(), torch.tanh(torch.exp(x) * 2) + 1)


def test_dynamic_shapes_are_refused_with_a_clear_message():
    torch._dynamo.reset()
    f = torch.compile(naive, backend="neuron", dynamic=True)
    with pytest.raises(Exception, match="does not support dynamic shapes"):
        f(torch.randn(8, 16, device="neuron"), torch.randn(16, device="neuron"))


def test_other_modes_warn_and_compile_as_default():
    torch._dynamo.reset()
    f = torch.compile(naive, backend="neuron", mode="max-autotune")
    with pytest.warns(UserWarning, match="mode='max-autotune' is not supported"):
        f(torch.randn(8, 16, device="neuron"), torch.randn(16, device="neuron"))


def test_new_shape_recompiles_a_new_neff_instead_of_going_dynamic():
    torch._dynamo.reset()
    COUNTERS.reset()
    f = torch.compile(naive, backend="neuron")
    for rows in (8, 16, 24):
        f(torch.randn(rows, 32, device="neuron"), torch.randn(32, device="neuron"))
    assert COUNTERS.neffs_compiled + COUNTERS.neff_cache_hits == 3


SCRIPT = """
import torch, trnscope
from trnscope.device.dynamo_backend import COUNTERS
f = torch.compile(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, backend="neuron")
f(torch.ones(16, 64, device="neuron"), torch.ones(64, device="neuron"))
print(COUNTERS.neffs_compiled, COUNTERS.neff_cache_hits)
"""


def test_neff_cache_dir_is_reused_across_processes(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split()[-2:] == ["1", "0"]
    assert second.stdout.split()[-2:] == ["0", "1"]
    assert list(tmp_path.rglob("neff_*.neff")) and list(tmp_path.rglob("neff_*.timeline.npz"))
