"""``torch.accelerator`` on ``neuron``, and the other places where PyTorch asks C++ about devices.

``torch.accelerator`` resolves to ``neuron`` by itself (PrivateUse1 is registered), but most of its
functions end in C++ calls that a Python backend cannot serve:

* current index / set index / exchange (``at::accelerator::getDeviceIndex``,
  ``setDeviceIndex``, ``exchangeDevice``; ``device_count`` asks ``torch.neuron``) ask the PrivateUse1
  ``DeviceGuardImplInterface``. The one ``torch._C._acc`` registers for a Python backend
  (``PythonDeviceGuard``, torch/csrc/acc/Module.cpp) lets Python override only ``type_()``: it
  always answers device 0 of 1 and ignores ``setDevice``.
* ``synchronize`` calls ``DeviceGuardImplInterface::synchronizeDevice``, which that guard does not
  override: the base class raises "Backend doesn't support synchronizing all streams on device".
* the memory functions (``memory_allocated``, ``memory_stats``, ``reset_peak_memory_stats``,
  ``empty_cache``, ``get_memory_info``...) look up ``c10::GetAllocator(PrivateUse1)`` and require
  a ``c10::CachingDeviceAllocator::DeviceAllocator``; Python cannot register an allocator for
  PrivateUse1 at all, so they fail an internal assert.

These need C++ (a ``DeviceGuardImplInterface`` and a ``DeviceAllocator`` registered for
PrivateUse1). What trnscope does instead, from Python: ``torch.accelerator``'s functions call their
bindings by attribute lookup on ``torch._C`` at every call (``torch._C._accelerator_synchronizeDevice``
and so on), so :mod:`.torch_adaptations` replaces those bindings with functions that serve ``neuron`` from
trnscope's own device state (:mod:`._devices`, :mod:`.memory`, :mod:`.streams`) and call the
original binding for any other accelerator. C++ callers of ``at::accelerator`` (none in a CPU
build of PyTorch besides the ones below) still see the guard's answers.

Two C++ users of that guard matter for a multi-core device, and get a Python answer here too:

* ``Tensor.to(device)`` fills in a missing device index from the guard (``ensure_has_index`` in
  ATen's TensorConversions.cpp): ``x.to("neuron")`` would always go to ``neuron:0``. Once a
  thread makes another NeuronCore current, :mod:`.torch_adaptations` wraps ``torch.Tensor.to`` to give
  ``"neuron"`` the current index first. ``torch.tensor(data, device="neuron")`` and
  ``torch.as_tensor`` take the same C++ path and are not wrapped: they use ``neuron:0`` unless
  given an index.
* the autograd engine gives each device index of a non-CPU device type a worker queue, sized by
  the guard's device count (1), and asserts on a ``neuron:1`` gradient. While a NeuronCore other
  than 0 has been used, backward passes therefore run with autograd multithreading off (every
  backward node on the calling thread, as ``torch.autograd.set_multithreading_enabled(False)``
  does), through a subclass of the engine object Python's autograd calls.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import _devices, dispatch, memory, streams

BACKEND = _devices.BACKEND
_C = torch._C
ORIGINALS: dict[str, Any] = {}


def _is_neuron() -> bool:
    acc = _C._accelerator_getAccelerator()
    return acc is not None and acc.type == BACKEND


def _route(name: str):
    """Replace ``torch._C.<name>`` by the decorated function while neuron is the accelerator."""
    def decorate(fn):
        original = getattr(_C, name)

        @functools.wraps(original)
        def binding(*args):
            if _is_neuron():
                return fn(*args)
            return ORIGINALS.get(name, original)(*args)

        binding.__trnscope__ = True
        return binding
    return decorate


def _index(device_index: int) -> int:
    return _devices.index_of(None if device_index is None or device_index < 0 else int(device_index))


# --- device --------------------------------------------------------------------------------------

@_route("_accelerator_getDeviceIndex")
def _get_device_index() -> int:
    return _devices.current()


@_route("_accelerator_setDeviceIndex")
def _set_device_index(device_index: int) -> None:
    if device_index >= 0:  # negative: no-op, as at::accelerator::setDeviceIndex
        _set_current(device_index)


@_route("_accelerator_exchangeDevice")
def _exchange_device(device_index: int) -> int:
    if device_index < 0:
        return _devices.current()
    return _set_current(device_index)


@_route("_accelerator_maybeExchangeDevice")
def _maybe_exchange_device(device_index: int) -> int:
    return _exchange_device(device_index)


@_route("_accelerator_synchronizeDevice")
def _synchronize_device(device_index: int) -> None:
    dispatch.synchronize(_index(device_index))


@_route("_accelerator_getStream")
def _get_stream(device_index: int) -> torch.Stream:
    return streams.current_stream(_index(device_index))


@_route("_accelerator_setStream")
def _set_stream(stream: torch.Stream) -> None:
    streams.set_stream(stream)
    _set_current(stream.device_index)


# --- memory --------------------------------------------------------------------------------------

@_route("_accelerator_isAllocatorInitialized")
def _allocator_initialized() -> bool:
    return True


@_route("_accelerator_emptyCache")
def _empty_cache() -> None:
    memory.empty_cache()


@_route("_accelerator_emptyHostCache")
def _empty_host_cache() -> None:
    memory.empty_host_cache()


@_route("_accelerator_getDeviceStats")
def _device_stats(device_index: int) -> dict:
    """Nested like CUDA's ``_cuda_memoryStats`` (torch.accelerator flattens it to
    ``allocated_bytes.all.current`` and so on)."""
    return memory.nested_stats(_index(device_index))


@_route("_accelerator_resetAccumulatedStats")
def _reset_accumulated(device_index: int) -> None:
    memory.reset_accumulated(_index(device_index))


@_route("_accelerator_resetPeakStats")
def _reset_peak(device_index: int) -> None:
    memory.reset_peak(_index(device_index))


@_route("_accelerator_getMemoryInfo")
def _memory_info(device_index: int) -> tuple[int, int]:
    index = _index(device_index)
    total = memory.capacity(index)
    return total - memory.stats(index).allocated, total


# --- the current device beyond torch.accelerator ----------------------------------------------


def _set_current(index: int) -> int:
    """Make ``index`` current on this thread (validated); returns the previous index."""
    return _devices.set_current(_devices.index_of(int(index)))


def tensor_to(original):
    """``Tensor.to`` that gives ``"neuron"`` the current index first, once a thread has made a
    core other than 0 current (applied by :mod:`.torch_adaptations`, "tensor_to")."""

    @functools.wraps(original)
    def to(self, *args, **kwargs):
        if _devices.current():
            args, kwargs = _with_index(args, kwargs)
        return original(self, *args, **kwargs)

    return to


def _indexed(d):
    if isinstance(d, str) and (d == BACKEND or d.startswith(BACKEND + ":")):
        d = torch.device(d)
    if isinstance(d, torch.device) and d.type == BACKEND and d.index is None:
        return torch.device(BACKEND, _devices.current())
    return d


def _with_index(args: tuple, kwargs: dict):
    if args and (isinstance(args[0], (str, torch.device))):
        args = (_indexed(args[0]),) + tuple(args[1:])
    if "device" in kwargs:
        kwargs = dict(kwargs, device=_indexed(kwargs["device"]))
    return args, kwargs


# --- autograd on more than one NeuronCore --------------------------------------------------------


class Engine(torch._C._ImperativeEngine):
    """PyTorch's engine object, running backward on the calling thread while cores other than 0
    are in use (see the module docstring; applied by :mod:`.torch_adaptations`, "autograd_engine")."""

    def run_backward(self, *args, **kwargs):
        if memory.multicore() and _C._is_multithreading_enabled():
            _C._set_multithreading_enabled(False)
            try:
                return super().run_backward(*args, **kwargs)
            finally:
                _C._set_multithreading_enabled(True)
        return super().run_backward(*args, **kwargs)


# the replacements of torch._C's bindings, by binding name (applied by .torch_adaptations,
# "accelerator_bindings"), and the bindings they replaced
BINDINGS = {fn.__wrapped__.__name__: fn for fn in dict(globals()).values()
            if callable(fn) and getattr(fn, "__trnscope__", False)}
