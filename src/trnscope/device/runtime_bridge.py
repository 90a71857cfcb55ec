"""The executor that connects the device's single entry point to the emulated Neuron runtime.

Allocation, views and metadata ops are host bookkeeping. Copies between host and device are
stream-ordered transfers the host waits for. ``.item()`` synchronises. Every other op is a kernel:
lowered to a Program (its NEFF), timed by the simulator, its numbers computed on the host inside
the emulation cut. An op with no kernel falls back to the CPU as TorchNeuron does (inputs to the
host, compute, results back), with a one-time warning naming it; with
``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1`` it is an error instead.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

import torch

from .. import caches, runtime
from ..compiler import NoLowering, has_lowering
from ..compiler.opcall import UnsupportedDtype, from_aten, functional_name
from ..frames import user_frame
from ..runtime import observe
from . import host, memory
from ._core import CORE as _cpp
from .dispatch import DispatchedOp, OpKind

FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


class NeuronFallbackError(RuntimeError):
    """An op without a device kernel, while CPU fallback is disabled."""


class CpuFallbackWarning(UserWarning):
    pass


def _fallback_disabled() -> bool:
    # Any value but an explicit "off" is strict: a user who set the variable (to 2, to "strict")
    # meant it, and must not be told by the warning to set what is already set.
    return os.environ.get(FALLBACK_ENV, "0").strip().lower() not in ("", "0", "false", "no", "off")


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        out = []
        for x in obj:
            out.extend(_tensors(x))
        return out
    if isinstance(obj, dict):
        return _tensors(list(obj.values()))
    return []


def _dtypes(call: DispatchedOp) -> str:
    """The dtypes an op was called with, for the strict-fallback error ("inputs float64, int64")."""
    names = dict.fromkeys(str(t.dtype).removeprefix("torch.") for t in _tensors(call.args) + _tensors(call.kwargs))
    return f"inputs {', '.join(names)}" if names else "no tensor inputs"


def _device_index(call: DispatchedOp) -> int:
    """The NeuronCore an op runs on: that of its first ``neuron`` tensor argument."""
    for a in call.args:
        if isinstance(a, torch.Tensor):
            if not a.is_cpu and a.device.type == "neuron":
                return a.device.index or 0
        elif type(a) is list or type(a) is tuple:
            for x in a:
                if isinstance(x, torch.Tensor) and not x.is_cpu and x.device.type == "neuron":
                    return x.device.index or 0
    for t in _tensors(call.kwargs):
        if t.device.type == "neuron":
            return t.device.index or 0
    return 0


# --- dispatch plans ---------------------------------------------------------------------------
#
# A device op's kernel is a function of the call's signature (trnscope.device.host.signature: the
# op, the sizes, strides and dtypes of its tensors, the values of its other arguments and of 0-dim
# CPU tensors, which from_aten turns into attributes) and of its outputs' geometry, which the
# signature decides too unless the op returns fresh tensors of its own making. The first call with
# a signature builds its plan (Program, simulated timeline, or the reason the op must fall back);
# a repeat call skips from_aten, the lowering cache's key building and hashing, and the simulator
# cache lookup. Storage offsets are left out: Programs bind each view from its first element (see
# trnscope.compiler.lowering.build), so the offset never changes the kernel.

PLAN_CACHE_SIZE = 8192


def _plan_key(call: DispatchedOp, outs: tuple):
    key = call.sig
    if key is None or host.outputs_follow(call.op):
        return key
    try:
        key = (key, tuple(host.arg_signature(o) for o in outs))
        hash(key)
    except (TypeError, RuntimeError):  # an unhashable output: no plan, take the full path
        return None
    return key


class _Plan:
    """How to serve one call signature: a kernel (``program`` + ``timeline``) or a fallback."""

    __slots__ = ("label", "program", "timeline", "reason", "neff_id", "duration")

    def __init__(self, label: str, program=None, timeline=None, reason: str = "") -> None:
        self.label = label
        self.program = program
        self.timeline = timeline
        self.reason = reason
        # what a repeat call submits: the NEFF's id and its simulated duration in whole ns
        self.neff_id = program.neff_id if program is not None else 0
        self.duration = int(round(timeline.total_ns)) if timeline is not None else 0


def _remember(core: runtime.NeuronCoreRuntime, key, plan: _Plan) -> None:
    plans = core.plans
    if len(plans) >= PLAN_CACHE_SIZE:
        del plans[next(iter(plans))]
    plans[key] = plan


_CUT = runtime.CLOCK.emulation()
_FUNCTIONAL: dict[int, tuple] = {}
caches.register("device.runtime_bridge: functional names", _FUNCTIONAL.clear)


def _functional_name(op) -> str:
    """:func:`functional_name`, looked up by id (an OpOverload hashes in Python)."""
    hit = _FUNCTIONAL.get(id(op))
    if hit is None or hit[0] is not op:
        hit = _FUNCTIONAL[id(op)] = (op, functional_name(op))
    return hit[1]


_NOT_COMPUTED = object()


class HostFallback:
    """An op :meth:`RuntimeExecutor.serve` has no kernel for: it really runs on the host CPU,
    which costs real host time, so :meth:`run` must be called outside the emulation cut."""

    __slots__ = ("executor", "call", "core", "name")

    def __init__(self, executor: "RuntimeExecutor", call: DispatchedOp, core: runtime.NeuronCoreRuntime, name: str) -> None:
        self.executor, self.call, self.core, self.name = executor, call, core, name

    def run(self) -> Any:
        return self.executor._fallback(self.call, self.core, self.name)


class RuntimeExecutor:
    # on the C++ path, a planned call, an allocation or a view never reaches this executor: the C++
    # eager path serves it with the same arithmetic (device/csrc/eager.cpp); see dispatch.set_executor
    native = _cpp is not None

    def __init__(self) -> None:
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self.fallbacks: dict[str, int] = {}
        self._depth = threading.local()

    def execute(self, call: DispatchedOp) -> Any:
        # Everything trnscope itself does to serve an op is emulator work, cut from host time; the
        # host spends what the host-cost model says the backend costs instead. Transfers and host
        # waits still advance the clock (wait_until works inside a cut).
        if observe.observers:
            return self._execute_observed(call)
        with _CUT:
            result = self.serve(call)
        if type(result) is HostFallback:
            return result.run()
        return result

    def _execute_observed(self, call: DispatchedOp) -> Any:
        """:meth:`execute` while the runtime is observed: the op between the observers'
        ``dispatch_begin`` and ``dispatch_end``, both inside the cut the op is served in (a CPU
        fallback leaves it: real host time)."""
        observers = observe.observers
        with _CUT:
            for o in observers:
                o.dispatch_begin()
            try:
                result = self.serve(call)
                if type(result) is HostFallback:
                    _CUT.__exit__()
                    try:
                        result = result.run()
                    finally:
                        _CUT.__enter__()
            finally:
                for o in reversed(observers):
                    o.dispatch_end()
        return result

    def serve(self, call: DispatchedOp) -> Any:
        """The emulator-work part of :meth:`execute`; the caller holds ``runtime.CLOCK``'s
        emulation cut. Returns the op's result, or a :class:`HostFallback` for an op with no
        kernel, which the caller runs outside the cut."""
        if _cpp is not None:  # the depth is the C++ eager path's, which serves outer calls only
            try:
                return self._serve(call, _cpp.enter_serve())
            finally:
                _cpp.exit_serve()
        depth = self._depth
        outer = not getattr(depth, "n", 0)
        if not outer:  # an op the emulator's own implementation of another op issued: no host cost
            return self._serve(call, False)
        depth.n = 1
        try:
            return self._serve(call, True)
        finally:
            depth.n = 0

    def _serve(self, call: DispatchedOp, charged: bool) -> Any:
        kind = call.kind
        clock = runtime.CLOCK
        if charged and clock.modelled:  # PyTorch's side of the op (measured in real mode)
            clock.advance(runtime.host_costs().framework_op_ns)
        if kind is OpKind.COMPUTE:
            # dispatch -> cached plan -> host numerics -> runtime submit, each entered once (an op
            # whose outputs follow its signature has its plan under the signature itself)
            core = runtime.core(_device_index(call))
            key = call.sig = host.signature(call.op, call.args, call.kwargs)
            plan = core.plans.get(key) if key is not None else None
            if plan is not None and plan.program is not None:
                result = host.run(call.op, call.args, call.kwargs, key)
                core.submit_kernel(plan.program, plan.label, plan.timeline, plan.neff_id, plan.duration)
                if _cpp is not None:
                    _teach(call, plan, _outputs(call, result))
                return result
            name = _functional_name(call.op)
            if has_lowering(name):
                return self._kernel_cut(call, core, name)
        elif kind is OpKind.COPY:
            return self._copy(call, runtime.core(_device_index(call)))
        elif kind is OpKind.READ_SCALAR:
            core = runtime.core(_device_index(call))
            core.synchronize()
            return core.copy("d2h", 8, call.run_on_host, op=call.name)
        else:  # ALLOC, VIEW, METADATA: host bookkeeping
            if charged:
                costs = runtime.host_costs()
                clock.advance(costs.alloc_ns if kind is OpKind.ALLOC else costs.view_ns)
            return call.run_on_host()
        return HostFallback(self, call, core, name)

    def _kernel_cut(self, call: DispatchedOp, core: runtime.NeuronCoreRuntime, name: str) -> Any:
        # numbers first (on host views), then the kernel for the actual outputs: emulator work
        # (the caller holds the emulation cut)
        if call.sig is None:
            call.sig = host.signature(call.op, call.args, call.kwargs)
        result = call.run_on_host()
        outs = _outputs(call, result)
        key = _plan_key(call, outs)
        plan = core.plans.get(key) if key is not None else None
        if plan is None:  # the first call of a signature: served (and recorded) by _plan
            plan = self._plan(call, core, name, outs, result)
            if plan is not None and key is not None:  # a kernel error is reported, not remembered
                _remember(core, key, plan)
                if _cpp is not None and plan.program is not None:
                    _teach(call, plan, outs)
            return result
        if plan.program is None:
            return self._fallback(call, core, name, plan.reason, result)
        core.submit_kernel(plan.program, plan.label, plan.timeline, plan.neff_id, plan.duration)
        if _cpp is not None:
            _teach(call, plan, outs)
        return result

    def _plan(self, call: DispatchedOp, core: runtime.NeuronCoreRuntime, name: str, outs: tuple,
              result) -> _Plan | None:
        """Serve a signature seen for the first time, the long way, and say how to serve it again."""
        try:
            opcall = from_aten(call.op, call.args, call.kwargs, outs)
        except UnsupportedDtype as exc:
            plan = _Plan(name, reason=str(exc))
        else:
            try:
                _, program, timeline = core.execute_call(opcall)
            except (NoLowering, NotImplementedError, ValueError) as exc:
                plan = _Plan(name, reason=str(exc))
            except Exception as exc:  # a kernel bug must not break the user's program: report it loudly
                self._fallback(call, core, name, f"its kernel failed for this call: {exc!r}; please report it",
                               result)
                return None
            else:
                return _Plan(opcall.name, program, timeline)
        self._fallback(call, core, name, plan.reason, result)
        return plan

    def _fallback(self, call: DispatchedOp, core: runtime.NeuronCoreRuntime, name: str, reason: str = "no neuron kernel",
                  result: Any = _NOT_COMPUTED) -> Any:
        """Serve ``call`` on the host CPU as TorchNeuron's fallback does: wait for the device, copy the
        inputs to the host, compute, copy the results back. ``result``: the numbers, when the emulator
        already computed them inside its cut (the CPU work is then the host-cost model's)."""
        if _fallback_disabled():
            raise NeuronFallbackError(
                f"{name} would run on the CPU ({reason}; {_dtypes(call)}) and CPU fallback is disabled "
                f"({FALLBACK_ENV}=1): unset it to run {name} on the CPU, or avoid the op")
        self._warn(name, reason)
        nbytes = sum(t.nbytes for t in _tensors(call.args) + _tensors(call.kwargs) if t.device.type == "neuron")
        core.synchronize()
        if nbytes:
            core.copy("d2h", nbytes, op=f"{name} (fallback inputs)")
        if result is _NOT_COMPUTED:
            result = core.fallback(name, call.run_on_host, nbytes, reason)
        else:
            core.fallback(name, None, nbytes, reason)
        out_bytes = sum(t.nbytes for t in _tensors(result) if t.device.type == "neuron")
        if out_bytes:
            core.copy("h2d", out_bytes, op=f"{name} (fallback outputs)")
        return result

    def _warn(self, name: str, why: str) -> None:
        with self._lock:
            self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
            if name in self._warned:
                return
            self._warned.add(name)
        filename, lineno, module = user_frame()
        warnings.warn_explicit(f"trnscope: {name} runs on the CPU ({why}); it is marked as a CPU fallback in "
                               f"profiles. Set {FALLBACK_ENV}=1 to make this an error.", CpuFallbackWarning,
                               filename, lineno, module=module)

    def _copy(self, call: DispatchedOp, core: runtime.NeuronCoreRuntime) -> Any:
        src, dst = call.args[0], call.args[1]
        src_dev, dst_dev = src.device, dst.device
        if src_dev.type == "neuron" and dst_dev.type == "neuron":  # device to device: a DMA kernel
            name = functional_name(call.op)
            if not has_lowering(name):  # the one fallback path: warned, recorded, refused when strict
                return self._fallback(call, core, name)
            if src_dev.index == dst_dev.index:
                return self._kernel_cut(call, core, name)
            # between two NeuronCores: the copy runs on the source core's DMA queues once both
            # cores are done with earlier work, and later work on either core comes after it
            other = runtime.core(dst_dev.index or 0)
            core.order_after(other)
            result = self._kernel_cut(call, core, name)
            other.order_after(core)
            return result
        if len(call.args) > 2:
            non_blocking = bool(call.args[2])
        else:
            non_blocking = bool(call.kwargs.get("non_blocking", False))
        direction = "h2d" if dst_dev.type == "neuron" else "d2h"
        # a non-blocking copy to or from pinned host memory is queued; the host does not wait
        blocking = not (non_blocking and memory.is_pinned(src if direction == "h2d" else dst))
        if direction == "d2h" and blocking:
            core.synchronize()
        return core.copy(direction, src.nbytes, call.run_on_host, op=call.name, blocking=blocking)

    def synchronize(self, device: int) -> None:
        runtime.core(device).synchronize()


def _teach(call: DispatchedOp, plan: _Plan, outs: tuple) -> None:
    """Hand ``plan`` to the C++ eager path for the call it is waiting on (if any), with how the host
    computes the op: a functional op's outputs (geometry) by its out= overload, else the results
    are the call's arguments."""
    how = host.eager_plan(call.op, call.args, call.kwargs, call.sig, outs)
    if how is None:  # fresh results of the op's own making: the Python host serves every call
        return
    slots = host.runtime_scalar_slots(call.op)
    if slots:  # their values stay out of the C++ key too (from the op's next call on)
        _cpp.set_runtime_scalars(slots)
    _cpp.learn(plan, plan.neff_id, plan.duration, *how)


def _outputs(call: DispatchedOp, result) -> tuple:
    """The tensors the op writes: its out= arguments in schema order, else what it returned."""
    names = host.out_names(call.op)
    if names:
        kwargs = call.kwargs
        outs = tuple(kwargs[n] for n in names if isinstance(kwargs.get(n), torch.Tensor))
        if outs:
            return outs
    if isinstance(result, torch.Tensor):
        return (result,)
    return tuple(_tensors(result))


EXECUTOR = RuntimeExecutor()
