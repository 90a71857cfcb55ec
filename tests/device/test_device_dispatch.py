"""Every ATen op on ``neuron`` tensors goes through ``trnscope.device.dispatch.execute``."""

import copy
import threading

import pytest
import torch
import torch.nn.functional as F

import trnscope.device  # noqa: F401
from trnscope.device import dispatch, kernels
from trnscope.device.dispatch import OpCall, OpKind

pytestmark = pytest.mark.usefixtures("host_executor")

KERNELS_FILE = "trnscope/device/kernels.py"
DEVICE_PACKAGE = "trnscope/device/"  # other device modules register ops that call execute too


def _privateuse1_entry(name: str) -> str:
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("PrivateUse1:"):
            return line
    return ""


def test_every_op_reaches_the_entry_point_or_decomposes():
    """The dispatch table of every registered operator: its PrivateUse1 entry is one of our
    kernels, our boxed fallback, or a composite kernel (whose pieces come back through here)."""
    kinds = {"ours": 0, "fallback": 0, "composite": 0}
    for name in torch._C._dispatch_get_all_op_names():
        line = _privateuse1_entry(name)
        if line.endswith("[backend fallback]"):
            assert KERNELS_FILE in line, line
            kinds["fallback"] += 1
        elif line.endswith("[math kernel]") or line.endswith("[default backend kernel]"):
            kinds["composite"] += 1
        elif line.endswith("[kernel]"):
            if not name.startswith("aten::"):
                # torch's own non-ATen ops with per-device kernels (c10d collectives, fsdp helpers)
                # are implemented with ATen ops, which come back here
                continue
            assert DEVICE_PACKAGE in line, f"{name} has a PrivateUse1 kernel that bypasses execute: {line}"
            kinds["ours"] += 1
        else:
            raise AssertionError(f"{name}: unexpected PrivateUse1 entry {line!r}")
    assert kinds["ours"] >= len(kernels.registered_ops())
    assert kinds["fallback"] > 500 and kinds["composite"] > 500


def test_cpu_backed_composites_are_taken_whole():
    ops = set(kernels.registered_ops())
    for name in ("aten::native_layer_norm", "aten::native_group_norm", "aten::silu_backward"):
        assert name in ops
    x = torch.randn(4, 8, device="neuron")
    with dispatch.recording() as calls:
        F.layer_norm(x, (8,))
    assert [c.name for c in calls if c.kind is OpKind.COMPUTE] == ["aten::native_layer_norm"]


def _names(fn):
    with dispatch.recording() as calls:
        fn()
    return [c.name for c in calls]


def test_exact_calls_for_basic_ops():
    x = torch.ones(3, 4, device="neuron")
    y = torch.ones(3, 4, device="neuron")
    c = torch.ones(3, 4)
    assert _names(lambda: x + y) == ["aten::empty.memory_format", "aten::add.out"]
    assert _names(lambda: x.add_(1)) == ["aten::add.out"]
    assert _names(lambda: x.view(12)) == ["aten::view"]
    assert _names(lambda: x.t()) == ["aten::as_strided"]
    assert _names(lambda: x.cpu()) == ["aten::_copy_from"]
    assert _names(lambda: c.to("neuron")) == ["aten::empty_strided", "aten::_copy_from"]
    assert _names(lambda: x.sum().item()) == [
        "aten::empty.memory_format", "aten::sum.IntList_out", "aten::_local_scalar_dense"]
    assert _names(lambda: torch.relu(x)) == ["aten::relu"]
    assert _names(lambda: x.detach()) == []  # an alias made by autograd, no device op
    assert _names(lambda: c + c) == []  # CPU work never reaches the device


def test_kinds():
    x = torch.ones(2, 2, device="neuron")
    with dispatch.recording() as calls:
        y = torch.empty(4, device="neuron")
        x.view(4)
        y.resize_(8)
        x.cpu()
        x[0, 0].item()
        x.exp()
    kinds = {c.name: c.kind for c in calls}
    assert kinds["aten::empty.memory_format"] is OpKind.ALLOC
    assert kinds["aten::view"] is OpKind.VIEW and kinds["aten::as_strided"] is OpKind.VIEW
    assert kinds["aten::resize_"] is OpKind.METADATA
    assert kinds["aten::_copy_from"] is OpKind.COPY
    assert kinds["aten::_local_scalar_dense"] is OpKind.READ_SCALAR
    assert kinds["aten::exp.out"] is OpKind.COMPUTE


def test_calls_carry_overloads_and_device_tensors():
    x = torch.randn(5, 3, device="neuron")
    w = torch.randn(4, 3, device="neuron")
    with dispatch.recording() as calls:
        F.linear(x, w).relu().sum()
    for call in calls:
        assert isinstance(call, OpCall) and isinstance(call.op, torch._ops.OpOverload)
        assert call.name == call.op.name() + ("" if call.op._overloadname == "default" else "." + call.op._overloadname) \
            or call.name.startswith(call.op.name())
        tensors = [a for a in list(call.args) + list(call.kwargs.values()) if isinstance(a, torch.Tensor)]
        if call.kind is OpKind.COMPUTE:
            assert tensors and all(t.device.type == "neuron" for t in tensors), call
    mm = next(c for c in calls if c.name == "aten::mm.out")
    assert mm.kwargs["out"].shape == (5, 4)


class _Spy(dispatch.HostExecutor):
    def __init__(self):
        self.calls = []
        self.threads = set()

    def execute(self, call):
        self.calls.append(call.name)
        self.threads.add(threading.current_thread().name)
        result = call.run_on_host()
        if call.kind is OpKind.COMPUTE and call.name.endswith("_.Tensor"):
            assert result is call.args[0]  # in-place: the argument itself comes back
        return result


def test_executor_sees_every_op_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    model.to("neuron")
    x = torch.randn(4, 6)
    spy = _Spy()
    old = dispatch.set_executor(spy)
    try:
        with dispatch.recording() as recorded:
            model(x.to("neuron")).square().mean().backward()
            torch.optim.SGD(model.parameters(), lr=0.1).step()
    finally:
        dispatch.set_executor(old)
    assert spy.calls == [c.name for c in recorded]
    assert "aten::tanh_backward.grad_input" in spy.calls  # ran on autograd's device thread
    assert len(spy.threads) >= 2
    ref(x).square().mean().backward()
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert torch.equal(p.detach(), q.detach().cpu())


def test_executor_result_is_the_op_result():
    class Replace(dispatch.HostExecutor):
        def execute(self, call):
            out = call.run_on_host()
            if call.name == "aten::_local_scalar_dense":
                return 42.0
            return out

    x = torch.ones(2, device="neuron")
    old = dispatch.set_executor(Replace())
    try:
        assert x[0].item() == 42.0
    finally:
        dispatch.set_executor(old)
    assert x[0].item() == 1.0


def test_synchronize_and_clock_go_to_the_executor():
    seen = []

    class Clocked(dispatch.HostExecutor):
        def synchronize(self, device):
            seen.append(("sync", device))

        def clock_ns(self, device):
            return 1_000_000 * (len(seen) + 1)

    old = dispatch.set_executor(Clocked())
    try:
        torch.neuron.synchronize()
        a, b = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
        a.record()
        seen.append("tick")
        b.record()
        assert a.elapsed_time(b) == 1.0
    finally:
        dispatch.set_executor(old)
    assert seen[0] == ("sync", 0)
