"""Every ATen op on ``neuron`` tensors goes through ``trnscope.device.dispatch.execute``."""

import copy
import threading

import pytest
import torch
import torch.nn.functional as F

import trnscope.device  # noqa: F401
from trnscope.device import _core, dispatch, kernels
from trnscope.device.dispatch import DispatchedOp, OpKind

pytestmark = pytest.mark.usefixtures("host_executor")

KERNELS_FILE = "trnscope/device/kernels.py"
CPP_KERNEL_FILE = "trnscope/device/csrc/eager.cpp"  # the C++ core's kernel, which calls execute on a cold call
DEVICE_PACKAGE = "trnscope/device/"  # other device modules register ops that call execute too


def _privateuse1_entry(name: str, key: str = "PrivateUse1") -> str:
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith(f"{key}:"):
            return line
    return ""


def test_every_op_reaches_the_entry_point_or_decomposes():
    """The dispatch table of every registered operator: its PrivateUse1 entry is one of our
    kernels, our boxed fallback, or a composite kernel (whose pieces come back through here)."""
    kinds = {"ours": 0, "fallback": 0, "composite": 0}
    for name in torch._C._dispatch_get_all_op_names():
        line = _privateuse1_entry(name)
        if line.endswith("[backend fallback]"):
            if _core.CORE is not None:  # the C++ kernel, which sends a cold call to the Python ones
                assert CPP_KERNEL_FILE in line, line
                line = _privateuse1_entry(name, kernels.COLD_KEY)
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
    # a structured functional op is one call (its output allocated on the host side), its
    # in-place variant the out= call the composite makes
    assert _names(lambda: x + y) == ["aten::add.Tensor"]
    assert _names(lambda: x.add_(1)) == ["aten::add.out"]
    assert _names(lambda: x.view(12)) == ["aten::view"]
    assert _names(lambda: x.t()) == ["aten::as_strided"]
    assert _names(lambda: x.cpu()) == ["aten::_copy_from"]
    assert _names(lambda: c.to("neuron")) == ["aten::empty_strided", "aten::_copy_from"]
    assert _names(lambda: x.sum().item()) == ["aten::sum.dim_IntList", "aten::_local_scalar_dense"]
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
    assert kinds["aten::exp"] is OpKind.COMPUTE


def test_calls_carry_overloads_and_device_tensors():
    x = torch.randn(5, 3, device="neuron")
    w = torch.randn(4, 3, device="neuron")
    with dispatch.recording() as calls:
        F.linear(x, w).relu().sum()
    for call in calls:
        assert isinstance(call, DispatchedOp) and isinstance(call.op, torch._ops.OpOverload)
        assert call.name == call.op.name() + ("" if call.op._overloadname == "default" else "." + call.op._overloadname) \
            or call.name.startswith(call.op.name())
        tensors = [a for a in list(call.args) + list(call.kwargs.values()) if isinstance(a, torch.Tensor)]
        if call.kind is OpKind.COMPUTE:
            assert tensors and all(t.device.type == "neuron" for t in tensors), call
    mm = next(c for c in calls if c.name == "aten::mm")
    assert mm.args[0].shape == (5, 3) and mm.args[1].shape == (3, 4)


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
    assert "aten::tanh_backward" in spy.calls
    # backward runs on autograd's device thread; on the Python path (no C++ device guard), once a
    # core other than 0 has held memory in this process (an earlier test on neuron:1), it runs on
    # the calling thread
    from trnscope.device import _core, memory

    assert len(spy.threads) == (1 if _core.CORE is None and memory.multicore() else 2)
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


def test_synchronize_goes_to_the_executor():
    seen = []

    class Syncing(dispatch.HostExecutor):
        def synchronize(self, device):
            seen.append(("sync", device))

    old = dispatch.set_executor(Syncing())
    try:
        torch.neuron.synchronize()
    finally:
        dispatch.set_executor(old)
    assert seen == [("sync", 0)]


def test_structured_functional_ops_are_one_call_and_match_cpu_on_repeat():
    """A structured functional op reaches the device once; from its second call on, its output
    comes from device memory with the geometry (sizes, strides, dtype) CPU gives, and the out=
    kernel fills it with CPU's numbers."""
    torch.manual_seed(0)
    c = torch.randn(6, 4, 5)
    p = c.permute(2, 0, 1)  # non-contiguous: TensorIterator keeps the input's layout
    i = torch.randint(-3, 3, (6, 4, 5))
    x, xi = c.to("neuron"), i.to("neuron")
    xp = x.permute(2, 0, 1)
    cases = [
        (lambda a, b, k: a + b, (x, x), (c, c)),
        (lambda a, b, k: torch.exp(a), (xp, None), (p, None)),
        (lambda a, b, k: a.sum(-1), (xp, None), (p, None)),
        (lambda a, b, k: a.max(1), (x, None), (c, None)),  # two results: values and indices
        (lambda a, b, k: k + 0.5, (None, None, xi), (None, None, i)),  # int + float: default dtype
        (lambda a, b, k: torch.cat([a, a], 1), (x, None), (c, None)),
        (lambda a, b, k: a @ b.transpose(1, 2), (x, x), (c, c)),
    ]
    for fn, dev_args, cpu_args in cases:
        dev_args += (None,) * (3 - len(dev_args))
        cpu_args += (None,) * (3 - len(cpu_args))
        ref = fn(*cpu_args)
        for _ in range(3):
            with dispatch.recording() as calls:
                out = fn(*dev_args)
            assert len([k for k in calls if k.kind is OpKind.COMPUTE]) == 1, [k.name for k in calls]
            outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
            for o, r in zip(outs, refs):
                assert o.device.type == "neuron"
                assert (o.shape, o.stride(), o.dtype) == (r.shape, r.stride(), r.dtype)
                assert torch.equal(o.cpu(), r)


def test_structured_functional_ops_follow_the_default_dtype_and_data_dependent_shapes():
    xi = torch.arange(6, device="neuron")
    assert (xi + 0.5).dtype == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert (xi + 0.5).dtype == torch.float64  # not the geometry remembered from the first call
    finally:
        torch.set_default_dtype(old)
    x = torch.arange(6.0, device="neuron")
    for mask in ([True, False] * 3, [True] * 6, [False] * 6):
        m = torch.tensor(mask, device="neuron")
        assert torch.equal(x[m].cpu(), torch.arange(6.0)[torch.tensor(mask)])


def test_repeat_structured_op_runs_out_of_memory_before_computing(monkeypatch):
    from trnscope.device import host, memory

    x = torch.ones(1024, device="neuron")
    x * 2  # the first call of this signature: its output geometry is now known
    computed = []
    real = host._compute_plain
    monkeypatch.setattr(host, "_compute_plain", lambda *a: computed.append(a[0]) or real(*a))
    old = memory.set_capacity(torch.neuron.memory_allocated() + 1024)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="NEURON out of memory"):
            x * 2
    finally:
        memory.set_capacity(old)
    assert computed == []  # the output's allocation failed: no kernel ran
    assert torch.equal((x * 2).cpu(), torch.full((1024,), 2.0)) and computed == [torch.ops.aten.mul.out]
