"""The one entry point through which every ATen op on ``neuron`` tensors runs.

Every kernel :mod:`trnscope.device.kernels` registers for the PrivateUse1 dispatch key (the
boxed fallback that catches every op without a kernel of its own, and the few ops that must be
special: allocation, views, copies, resize/set, scalar reads) does exactly one thing: call
:func:`execute` with the resolved :class:`torch._ops.OpOverload`, its positional arguments and its
keyword arguments, as the dispatcher delivered them (``neuron`` tensors, CPU tensors, scalars,
``torch.device`` objects, lists of those). Composite ops (CompositeImplicitAutograd,
CompositeExplicitAutograd) are not registered: they decompose as usual, and their pieces arrive
here. Structured functional ops (``aten::add.Tensor``) are registered (see :mod:`.kernels`) and
arrive whole, once; their in-place variants arrive as their ``out=`` variant.

What :func:`execute` does is decided by the installed executor (:func:`set_executor`). The
default, :class:`HostExecutor`, computes on the host with ATen on zero-copy CPU views of the
device memory, so the numerics are exactly PyTorch's. The runtime replaces it with one that
lowers the op to a device Program, simulates its time, and calls :meth:`DispatchedOp.run_on_host` for
the numbers.

Ops may arrive on any thread: autograd runs the backward pass of ``neuron`` tensors on its own
device thread.
"""

from __future__ import annotations

import enum
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol

import torch

from .. import caches
from ..runtime import observe
from . import host
from ._core import CORE as _cpp

__all__ = [
    "OpKind", "DispatchedOp", "Executor", "HostExecutor", "execute", "classify", "set_executor",
    "get_executor", "recording", "synchronize",
]


class OpKind(enum.Enum):
    """What an op does to the device, for the runtime's benefit."""

    ALLOC = "alloc"  # empty.memory_format, empty_strided: reserves device memory, no device work
    VIEW = "view"  # the result aliases an input (view, as_strided, ...): metadata only
    METADATA = "metadata"  # resize_, set_: re-point or re-shape a tensor (resize_ may allocate)
    COPY = "copy"  # _copy_from, _copy_from_and_resize: H2D, D2H or D2D transfer
    READ_SCALAR = "read_scalar"  # _local_scalar_dense (.item()): D2H read that synchronises
    COMPUTE = "compute"  # everything else: a kernel on the NeuronCore


_aten = torch.ops.aten
_KINDS: dict[Any, OpKind] = {
    _aten.empty.memory_format: OpKind.ALLOC,
    _aten.empty_strided.default: OpKind.ALLOC,
    _aten._copy_from.default: OpKind.COPY,
    _aten._copy_from_and_resize.default: OpKind.COPY,
    _aten._local_scalar_dense.default: OpKind.READ_SCALAR,
    _aten.resize_.default: OpKind.METADATA,
    _aten.set_.source_Storage: OpKind.METADATA,
    _aten.set_.source_Storage_storage_offset: OpKind.METADATA,
    _aten.set_.source_Tensor: OpKind.METADATA,
    _aten.set_.default: OpKind.METADATA,
}


# by id: an OpOverload hashes in Python, and every op passes here (the op is kept beside its
# kind so that a recycled id is never taken for it)
_KIND_BY_ID: dict[int, tuple[Any, OpKind]] = {}
caches.register("device.dispatch: op kinds", _KIND_BY_ID.clear)


def classify(op: torch._ops.OpOverload) -> OpKind:
    hit = _KIND_BY_ID.get(id(op))
    if hit is not None and hit[0] is op:
        return hit[1]
    kind = _KINDS.get(op)
    if kind is None:
        kind = _KINDS[op] = OpKind.VIEW if op.is_view else OpKind.COMPUTE
    _KIND_BY_ID[id(op)] = (op, kind)
    return kind


class DispatchedOp:
    """One op on its way to the device.

    ``op``: the :class:`torch._ops.OpOverload` (``op.name()`` is e.g. ``"aten::add.out"``);
    ``args``/``kwargs``: as the dispatcher delivered them, ``neuron`` tensors included;
    ``kind``: :class:`OpKind`. :meth:`run_on_host` computes the result (``neuron`` tensors,
    in-place results being the argument tensors themselves) and performs the op's side effects.
    ``sig``: the call's :func:`trnscope.device.host.signature` once an executor has computed it
    (the host reuses it rather than computing it again), else None.
    """

    __slots__ = ("op", "args", "kwargs", "kind", "sig")

    def __init__(self, op, args: tuple, kwargs: dict, kind: OpKind) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.kind = kind
        self.sig = None

    @property
    def name(self) -> str:
        return self.op.name()

    def run_on_host(self) -> Any:
        return host.run(self.op, self.args, self.kwargs, self.sig)

    def __repr__(self) -> str:
        return f"DispatchedOp({self.name}, {self.kind.value})"


class Executor(Protocol):
    def execute(self, call: DispatchedOp) -> Any: ...

    def synchronize(self, device: int) -> None: ...


class HostExecutor:
    """Runs every op at once on the host; no device time is modelled (the runtime's job)."""

    def execute(self, call: DispatchedOp) -> Any:
        return call.run_on_host()

    def synchronize(self, device: int) -> None:
        return None


_executor: Executor = HostExecutor()
_recorders: list[Callable[[DispatchedOp], None]] = []
_recorders_lock = threading.Lock()


def execute(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Run one ATen op on ``neuron`` tensors: the single entry point of the device (on the C++
    path, of every call the C++ eager path does not serve itself)."""
    call = DispatchedOp(op, args, kwargs, classify(op))
    if _recorders:
        for rec in tuple(_recorders):
            rec(call)
    return _executor.execute(call)


def _native_eager() -> None:
    """The C++ eager path serves calls for the runtime's executor only (an executor that says it
    is served natively), and only while nobody records the calls that reach :func:`execute` and no
    observer of the runtime needs each event as it happens (:data:`trnscope.runtime.observe.immediate`)."""
    if _cpp is not None:
        with _eager_lock:  # the last to decide sees every change made before it
            _cpp.set_eager(bool(getattr(_executor, "native", False)) and not _recorders and not observe.immediate)


_eager_lock = threading.Lock()
observe.on_change(_native_eager)


def set_executor(executor: Executor | None) -> Executor:
    """Install ``executor`` (``None``: the default host executor). Returns the previous one."""
    global _executor
    old = _executor
    _executor = executor if executor is not None else HostExecutor()
    _native_eager()
    return old


def get_executor() -> Executor:
    return _executor


def synchronize(device: int = 0) -> None:
    _executor.synchronize(device)


@contextmanager
def recording() -> Iterator[list[DispatchedOp]]:
    """Collect every :class:`DispatchedOp` that reaches :func:`execute` (any thread) while inside."""
    calls: list[DispatchedOp] = []
    with _recorders_lock:
        _recorders.append(calls.append)
        _native_eager()
    try:
        yield calls
    finally:
        with _recorders_lock:
            _recorders.remove(calls.append)
            _native_eager()
