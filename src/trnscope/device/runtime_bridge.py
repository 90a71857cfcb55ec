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

from .. import runtime
from ..compiler import NoLowering, has_lowering
from ..compiler.opcall import UnsupportedDtype, from_aten, functional_name
from .dispatch import OpCall, OpKind

FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"


class NeuronFallbackError(RuntimeError):
    """An op without a device kernel, while CPU fallback is disabled."""


class CpuFallbackWarning(UserWarning):
    pass


def _fallback_disabled() -> bool:
    return os.environ.get(FALLBACK_ENV, "0").strip().lower() in ("1", "true", "yes", "on")


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


_INTERNAL = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _user_frame() -> tuple[str, int, str]:
    """The innermost caller outside torch and trnscope: where a warning should point."""
    import sys

    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_INTERNAL) or f.f_code.co_filename.startswith("<")):
        f = f.f_back
    if f is None:
        return "<unknown>", 0, "trnscope"
    return f.f_code.co_filename, f.f_lineno, f.f_globals.get("__name__", "")


def _device_index(call: OpCall) -> int:
    for t in _tensors(call.args) + _tensors(call.kwargs):
        if t.device.type == "neuron":
            return t.device.index or 0
    return 0


class RuntimeExecutor:
    def __init__(self) -> None:
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self.fallbacks: dict[str, int] = {}

    def execute(self, call: OpCall) -> Any:
        kind = call.kind
        clock = runtime.CLOCK
        # Everything trnscope itself does to serve an op is emulator work, cut from host time: host
        # time is what PyTorch and the user's program spend. Transfers and host waits still advance
        # the clock (wait_until works inside a cut); a NEFF's launch cost is on the device side.
        with clock.emulation():
            if kind in (OpKind.ALLOC, OpKind.VIEW, OpKind.METADATA):
                return call.run_on_host()
            core = runtime.core(_device_index(call))
            if kind is OpKind.COPY:
                return self._copy(call, core)
            if kind is OpKind.READ_SCALAR:
                core.synchronize()
                return core.copy("d2h", 8, call.run_on_host, op=call.name)
            name = functional_name(call.op)
            if has_lowering(name):
                return self._kernel_cut(call, core, name)
        # no kernel: the op really runs on the host CPU, which costs real host time
        return self._fallback(call, core, name)

    def _kernel_cut(self, call: OpCall, core: runtime.NeuronCoreRuntime, name: str) -> Any:
        with core.clock.emulation():
            # numbers first (on host views), then the kernel for the actual outputs: emulator work
            result = call.run_on_host()
            try:
                opcall = from_aten(call.op, call.args, call.kwargs, _outputs(call, result))
            except UnsupportedDtype as exc:
                opcall, reason = None, str(exc)
        if opcall is None:
            core.record_fallback(name, reason=reason)
            self._warn(name, reason)
            return result
        try:
            core.execute(opcall)
        except (NoLowering, NotImplementedError, ValueError) as exc:
            core.record_fallback(name, reason=str(exc))
            self._warn(name, str(exc))
        except Exception as exc:  # a kernel bug must not break the user's program: report it loudly
            core.record_fallback(name, reason=f"kernel error: {exc!r}")
            self._warn(name, f"its kernel failed for this call: {exc!r}; please report it")
        return result

    def _fallback(self, call: OpCall, core: runtime.NeuronCoreRuntime, name: str) -> Any:
        if _fallback_disabled():
            raise NeuronFallbackError(
                f"{name} has no neuron kernel and CPU fallback is disabled ({FALLBACK_ENV}=1): unset it to run "
                f"{name} on the CPU, or avoid the op")
        self._warn(name, "no neuron kernel")
        nbytes = sum(t.nbytes for t in _tensors(call.args) + _tensors(call.kwargs) if t.device.type == "neuron")
        core.synchronize()
        if nbytes:
            core.copy("d2h", nbytes, op=f"{name} (fallback inputs)")
        result = core.fallback(name, call.run_on_host)
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
        filename, lineno, module = _user_frame()
        warnings.warn_explicit(f"trnscope: {name} runs on the CPU ({why}); it is marked as a CPU fallback in "
                               f"profiles. Set {FALLBACK_ENV}=1 to make this an error.", CpuFallbackWarning,
                               filename, lineno, module=module)

    def _copy(self, call: OpCall, core: runtime.NeuronCoreRuntime) -> Any:
        src, dst = call.args[0], call.args[1]
        direction = {("cpu", "neuron"): "h2d", ("neuron", "cpu"): "d2h"}.get((src.device.type, dst.device.type))
        if direction is None:  # device to device: a DMA kernel
            name = functional_name(call.op)
            return self._kernel_cut(call, core, name) if has_lowering(name) else call.run_on_host()
        if direction == "d2h":
            core.synchronize()
        return core.copy(direction, src.nbytes, call.run_on_host, op=call.name)

    def synchronize(self, device: int) -> None:
        runtime.core(device).synchronize()

    def clock_ns(self, device: int) -> int:
        return runtime.CLOCK.now()


def _outputs(call: OpCall, result):
    """The tensors the op writes: its out= arguments in schema order, else what it returned."""
    outs = [call.kwargs[a.name] for a in call.op._schema.arguments
            if a.is_out and isinstance(call.kwargs.get(a.name), torch.Tensor)]
    if outs:
        return tuple(outs)
    return tuple(_tensors(result))


EXECUTOR = RuntimeExecutor()
