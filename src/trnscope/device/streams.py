"""``torch.neuron.Stream`` and ``torch.neuron.Event``.

Each emulated NeuronCore executes one queue in order (as the Neuron runtime does for one
NeuronCore), so every stream of a core is that core's queue as far as ordering goes; streams exist
so that code written for TorchNeuron/CUDA runs. Events take their timestamps from the device
clock of the installed executor (:func:`trnscope.device.dispatch.clock_ns`): host wall time for
the default host executor, the simulated device clock once the runtime installs it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from . import _devices, dispatch

BACKEND = _devices.BACKEND
_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)


class Stream(torch.Stream):
    """A ``neuron`` stream (a :class:`torch.Stream`, so ``torch.accelerator`` APIs accept it)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # rebuilt from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        index = _devices.index_of(device)
        # torch.Stream(device=...) asks the C++ device guard for a new stream, and the guard of
        # a Python backend puts every stream on device 0: build it from its parts instead
        return super().__new__(cls, stream_id=0, device_index=index, device_type=_PRIVATEUSE1)

    def synchronize(self) -> None:
        dispatch.synchronize(self.device_index)

    def query(self) -> bool:
        return True

    def wait_event(self, event: "Event") -> None:
        return None

    def wait_stream(self, stream: "Stream") -> None:
        return None

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"torch.neuron.Stream(device={BACKEND}:{self.device_index} stream_id={self.stream_id})"


# per NeuronCore: its default stream, and the stream made current on it (None: the default)
_current: dict[int, Stream] = {}
_default: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    index = _devices.index_of(device)
    s = _default.get(index)
    if s is None:
        s = _default[index] = Stream(index)
    return s


def current_stream(device=None) -> Stream:
    index = _devices.index_of(device)
    s = _current.get(index)
    return s if s is not None else default_stream(index)


def set_stream(stream: Stream | None) -> None:
    """Make ``stream`` current on its NeuronCore (``None``: no-op, as CUDA's)."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        stream = Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                        device_type=stream.device_type)
    _current[stream.device_index] = stream


@contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its NeuronCore, and that core the current device, inside
    the block (``None``: no-op)."""
    if s is None:
        yield
        return
    index = s.device_index
    prev = _current.get(index)
    prev_device = _devices.set_current(index)
    set_stream(s)
    try:
        yield
    finally:
        if prev is None:
            _current.pop(index, None)
        else:
            _current[index] = prev
        _devices.set_current(prev_device)


class Event:
    """A ``neuron`` event; ``elapsed_time`` is in milliseconds, like CUDA's."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device = torch.device(BACKEND, _devices.current())
        self._time_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = stream if stream is not None else current_stream()
        self.device = torch.device(BACKEND, s.device_index)
        self._time_ns = dispatch.clock_ns(s.device_index)

    def query(self) -> bool:
        return True

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def synchronize(self) -> None:
        dispatch.synchronize(self.device.index)

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._time_ns is not None else "unrecorded"
        return f"torch.neuron.Event({state}, enable_timing={self.enable_timing})"
