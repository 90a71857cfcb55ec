"""Issue 19: with TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION set, nothing falls back to the CPU; the
error names the op, the reason and the dtypes. Planned (repeat) calls are as strict as first ones."""

from __future__ import annotations

import warnings

import pytest
import torch

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.device import runtime_bridge
from trnscope.device.runtime_bridge import FALLBACK_ENV, CpuFallbackWarning, NeuronFallbackError


def _host(dtype, n=6):
    return (torch.arange(n) + 1).to(dtype)


CASES = {
    # name: (build inputs on the host, the device op, op in the message, dtype in the message)
    "float64 add": (lambda: (_host(torch.float64), _host(torch.float64)), torch.add, "aten::add", "float64"),
    "complex mul": (lambda: (_host(torch.complex64), _host(torch.complex64)), torch.mul, "aten::mul", "complex64"),
    "int64 floor_divide": (lambda: (_host(torch.int64), _host(torch.int64)), torch.floor_divide,
                           "aten::floor_divide", "int64"),
    "no kernel (sort)": (lambda: (torch.randn(8),), lambda x: torch.sort(x).values, "aten::sort", "float32"),
    "int64 sort": (lambda: (_host(torch.int64),), lambda x: torch.sort(x).values, "aten::sort", "int64"),
}


def _on_device(build):
    return [t.to("neuron") for t in build()]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("value", ["1", "true", "2"])
def test_strict_mode_refuses_every_fallback(monkeypatch, case, value):
    build, op, op_name, dtype = CASES[case]
    inputs = _on_device(build)  # copies are not fallbacks
    monkeypatch.setenv(FALLBACK_ENV, value)
    before = dict(runtime_bridge_executor().fallbacks)
    for attempt in range(2):  # the second call is served from the dispatch plan
        with pytest.raises(NeuronFallbackError) as caught:
            op(*inputs)
        message = str(caught.value)
        assert op_name in message and dtype in message and "would run on the CPU (" in message, message
        assert FALLBACK_ENV in message
    assert runtime_bridge_executor().fallbacks == before  # nothing was served on the CPU


def test_a_kernel_that_fails_is_refused_too(monkeypatch):
    a, b = torch.randn(5, 7).to("neuron"), torch.randn(5, 7).to("neuron")
    core = runtime.core(0)
    core.plans.clear()

    def broken(opcall):
        raise RuntimeError("simulated kernel bug")

    monkeypatch.setattr(core, "execute_call", broken)
    monkeypatch.setenv(FALLBACK_ENV, "1")
    with pytest.raises(NeuronFallbackError, match=r"aten::sub.*kernel failed.*simulated kernel bug.*float32"):
        a - b


@pytest.mark.parametrize("value", ["0", "", "false", "off"])
def test_fallback_runs_and_warns_when_allowed(monkeypatch, value):
    monkeypatch.setenv(FALLBACK_ENV, value)
    x = torch.randn(9).to("neuron")
    executor = runtime_bridge_executor()
    executor._warned.discard("aten::sort.stable")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = torch.sort(x).values
    assert torch.equal(out.cpu(), torch.sort(x.cpu()).values)
    assert any(issubclass(w.category, CpuFallbackWarning) and FALLBACK_ENV in str(w.message) for w in seen)


def runtime_bridge_executor():
    from trnscope.device import dispatch

    executor = dispatch.get_executor()
    while not isinstance(executor, runtime_bridge.RuntimeExecutor):  # the profiler may wrap it
        executor = executor.inner
    return executor
