"""NKI kernels from PyTorch: eager on CPU and neuron tensors, profiles, autograd, torch.compile linking."""

import numpy as np
import pytest
import torch

import trnscope  # noqa: F401
import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl
from trnscope import runtime
from trnscope.device.dynamo_backend import COUNTERS
from trnscope.nki.torch_ops import nki_op, wrap_nki


@nki.jit
def scale_kernel(x, factor=2.0):
    """out = x * factor, one tile per 128 rows."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for r in range(0, x.shape[0], 128):
        p = min(128, x.shape[0] - r)
        t = nl.ndarray((p, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x[r:r + p, :])
        y = nl.ndarray((p, x.shape[1]), x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(y, t, nl.multiply, factor)
        nisa.dma_copy(out[r:r + p, :], y)
    return out


@nki_op("nki_tests::scale2", mutates_args=())
def scale2(x: torch.Tensor) -> torch.Tensor:
    return scale_kernel(x, 2.0)


def _setup_ctx(ctx, inputs, output):
    pass


scale2.register_autograd(lambda ctx, g: scale2(g), setup_context=_setup_ctx)


def _records(fn):
    rt = runtime.core(0)
    torch.neuron.synchronize()
    rt.recording, saved = True, rt.recording
    rt.records.clear()
    try:
        out = fn()
        torch.neuron.synchronize()
        return out, [r for r in rt.records if r.kind == "kernel"]
    finally:
        rt.recording = saved
        rt.records.clear()


def test_eager_cpu_and_neuron():
    x = torch.randn(200, 96)
    torch.testing.assert_close(scale2(x), 2 * x)
    xd = x.to("neuron")
    out, recs = _records(lambda: scale2(xd))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), 2 * x)
    assert [r.neff_name for r in recs] == ["scale_kernel"]  # its own NEFF, named after the kernel
    assert recs[0].device_end_ns > recs[0].device_start_ns


def test_direct_call_with_neuron_tensors_and_numpy():
    x = torch.randn(64, 32)
    out, recs = _records(lambda: scale_kernel(x.to("neuron"), 3.0))
    torch.testing.assert_close(out.cpu(), 3 * x)
    assert len(recs) == 1
    np.testing.assert_allclose(scale_kernel(x.numpy(), 3.0), 3 * x.numpy())


def test_autograd_through_register_autograd():
    x = torch.randn(130, 8, requires_grad=True)
    scale2(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_profile_has_a_kernel_row_and_an_ntff_with_source_lines(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    from trnscope.profiling import NeuronConfig, NeuronProfiler, ProfileMode
    from trnscope.profiling.ntff import read_ntff

    xd = torch.randn(256, 128).to("neuron")
    scale2(xd)
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=str(tmp_path))
    exporter = NeuronProfiler(cfg)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                 on_trace_ready=exporter.export_trace) as prof:
        scale2(xd)
        torch.neuron.synchronize()
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["scale_kernel"].self_device_time_total > 0          # the device row, named after the kernel
    assert rows["nki::scale_kernel"].device_time_total > 0           # the host op that launched it
    assert rows["nki_tests::scale2"].device_time_total > 0           # and the custom op around it
    ntffs = list(exporter.last_export.glob("*.ntff"))
    assert len(ntffs) == 1 and list(exporter.last_export.glob("neff_*.neff"))
    _, tables = read_ntff(ntffs[0])
    src = tables["instruction"].column("nki_source_location").to_pylist()
    assert src and all("test_torch.py:" in s and "(scale_kernel)" in s for s in src)


def test_torch_compile_links_the_kernel_into_the_graph_neff():
    def f(x):
        return scale2(x + 1.0) * 3.0

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(256, 64)
    COUNTERS.reset()
    out, recs = _records(lambda: compiled(x.to("neuron")))
    torch.testing.assert_close(out.cpu(), f(x))
    assert COUNTERS.neffs_compiled == 1 and COUNTERS.eager_graphs == 0, COUNTERS
    assert len(recs) == 1  # one device execution: add, the NKI kernel and mul in one NEFF
    linked = recs[0].program.meta["nki_linked"]
    assert [part["kernel"] for part in linked] == ["scale_kernel"]
    names = {type(i).__name__ for i in recs[0].program.instructions}
    assert "TensorScalar" in names


def test_wrap_nki_is_opaque_to_dynamo():
    wrapped = wrap_nki(scale_kernel)
    compiled = torch.compile(lambda x: wrapped(x, 5.0) - 1.0, backend="neuron")
    x = torch.randn(128, 32)
    COUNTERS.reset()
    out, recs = _records(lambda: compiled(x.to("neuron")))
    torch.testing.assert_close(out.cpu(), 5 * x - 1)
    assert COUNTERS.eager_graphs == 0 and len(recs) == 1


def test_nki_simulator_env_runs_without_a_device_execution(monkeypatch):
    monkeypatch.setenv("NKI_SIMULATOR", "1")
    x = torch.randn(64, 16)
    out, recs = _records(lambda: scale_kernel(x.to("neuron"), 4.0))
    torch.testing.assert_close(out.cpu(), 4 * x)
    assert recs == [] and scale_kernel.last_run.total_ns > 0  # timing still reported


def test_simulate_wrapper_and_target_override(monkeypatch):
    x = np.random.rand(256, 512).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(scale_kernel)(x, 2.0), 2 * x)
    trn2 = scale_kernel.last_run.total_ns
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    nki.simulate(scale_kernel)(x, 2.0)
    assert scale_kernel.last_run.target == "trn1" and scale_kernel.last_run.total_ns != trn2
    with pytest.raises(nki.NkiValidationError, match="compiled for trn1"):
        scale_kernel(torch.from_numpy(x).to("neuron"), 2.0)
