"""``torch.neuron.Stream`` and ``torch.neuron.Event``.

The emulated NeuronCore executes one queue in order (as the Neuron runtime does for one
NeuronCore), so every stream is the default stream of device 0 as far as ordering goes; streams
exist so that code written for TorchNeuron/CUDA runs. Events take their timestamps from the device
clock of the installed executor (:func:`trnscope.device.dispatch.clock_ns`): host wall time for
the default host executor, the simulated device clock once the runtime installs it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from . import _devices, dispatch

BACKEND = _devices.BACKEND


class Stream(torch.Stream):
    """A ``neuron`` stream (a :class:`torch.Stream`, so ``torch.accelerator`` APIs accept it)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        index = _devices.index_of(device)
        if "stream_id" in kwargs:  # rebuilt from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device(BACKEND, index), priority=priority)

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


_current: Stream | None = None
_default: Stream | None = None


def default_stream(device=None) -> Stream:
    global _default
    _devices.index_of(device)
    if _default is None:
        _default = Stream()
    return _default


def current_stream(device=None) -> Stream:
    _devices.index_of(device)
    return _current if _current is not None else default_stream()


def set_stream(stream: Stream | None) -> None:
    global _current
    if stream is not None and not isinstance(stream, Stream):
        stream = Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                        device_type=stream.device_type)
    _current = stream


@contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream inside the block (``None``: no-op)."""
    if s is None:
        yield
        return
    prev = _current
    set_stream(s)
    try:
        yield
    finally:
        set_stream(prev)


class Event:
    """A ``neuron`` event; ``elapsed_time`` is in milliseconds, like CUDA's."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device = torch.device(BACKEND, 0)
        self._time_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = stream if stream is not None else current_stream()
        self._time_ns = dispatch.clock_ns(s.device_index)

    def query(self) -> bool:
        return True

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def synchronize(self) -> None:
        dispatch.synchronize(0)

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._time_ns is not None else "unrecorded"
        return f"torch.neuron.Event({state}, enable_timing={self.enable_timing})"
