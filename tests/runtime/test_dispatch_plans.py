"""The device layer's dispatch plans: a repeat call skips lowering and simulation, and serves
the same kernel, the same numbers and the same runtime records as the first call."""

import warnings

import torch

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.device import runtime_bridge


def _records(fn):
    rt = runtime.core(0)
    rt.recording = True
    rt.records.clear()
    try:
        out = fn()
        torch.neuron.synchronize()
        return out, list(rt.records)
    finally:
        rt.recording = False
        rt.records.clear()


def test_repeat_call_reuses_the_plan_and_keeps_records(monkeypatch):
    a = torch.randn(17, 33).to("neuron")
    b = torch.randn(17, 33).to("neuron")
    runtime.core(0).plans.clear()
    calls = []
    real = runtime_bridge.from_aten
    monkeypatch.setattr(runtime_bridge, "from_aten", lambda *x: calls.append(x) or real(*x))
    first, rec1 = _records(lambda: a + b)
    assert len(calls) == 1
    second, rec2 = _records(lambda: a + b)
    assert len(calls) == 1  # planned: no from_aten, no lowering
    assert torch.equal(first.cpu(), second.cpu()) and torch.equal(second.cpu(), a.cpu() + b.cpu())
    k1 = [r for r in rec1 if r.kind == "kernel"]
    k2 = [r for r in rec2 if r.kind == "kernel"]
    assert [r.op for r in k1] == [r.op for r in k2] == ["aten::add.Tensor"]
    assert k1[0].neff_id == k2[0].neff_id and k1[0].program is k2[0].program
    assert k1[0].device_end_ns - k1[0].device_start_ns == k2[0].device_end_ns - k2[0].device_start_ns
    assert k2[0].compile_ns == 0 and k2[0].timeline is k1[0].timeline


def test_signature_tells_apart_what_changes_the_kernel():
    x = torch.randn(8, 8).to("neuron")
    runtime.core(0).plans.clear()
    x + 1
    x + 1.0  # a float scalar is not the int scalar
    x + 2  # a different value
    x.t() + 1  # other strides
    x.to(torch.bfloat16) + 1  # other dtype
    x[1:] + 1  # other shape
    assert len(runtime.core(0).plans) >= 6
    # an offset alone does not change the kernel (Programs bind views from their first element)
    n = len(runtime.core(0).plans)
    x[2:4] + 1
    x[4:6] + 1
    assert len(runtime.core(0).plans) == n + 1


def test_fallback_plans_still_record_and_count_each_call():
    x = torch.randn(4, dtype=torch.float64).to("neuron")
    before = runtime_bridge.EXECUTOR.fallbacks.get("aten::exp", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, rec1 = _records(lambda: torch.exp(x))
        _, rec2 = _records(lambda: torch.exp(x))
    assert [r.kind for r in rec1 if r.op == "aten::exp"] == ["fallback"] == [r.kind for r in rec2 if r.op == "aten::exp"]
    assert runtime_bridge.EXECUTOR.fallbacks["aten::exp"] == before + 2
