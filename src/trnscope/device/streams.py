"""``torch.neuron.Stream`` and ``torch.neuron.Event``, with CUDA's semantics on the emulated clock.

Each emulated NeuronCore runs one NEFF at a time in submission order (its runtime's queue,
:class:`trnscope.runtime.NeuronCoreRuntime`); a stream is an ordering constraint on top of that
queue. The default stream has id 0; every ``Stream()`` made on a core gets a new id.

* ``Event.record(stream)`` completes when that core's queue reaches it: at the end of the work
  submitted to the stream so far, or at once on an idle stream. ``elapsed_time`` is the
  difference of those device times, in ms; ``query()`` is False while the event lies in the
  modelled future; ``synchronize()`` makes the host wait for it.
* ``Stream.wait_event(e)`` / ``Event.wait(stream)``: work submitted to the stream afterwards starts
  no earlier than ``e`` completes, whichever stream or NeuronCore recorded it.
  ``Stream.wait_stream(other)`` waits for everything submitted to ``other`` so far.
* ``Stream.query()`` / ``synchronize()``: the stream's submitted work, on the modelled clock.

TorchNeuron's own ``Event`` (its pre-release source, ``torch_neuronx/streams.py`` and the C++
profiler stubs) stamps the host clock when ``record()`` is called and its ``elapsed()`` returns 0;
trnscope follows PyTorch's documented meaning instead (``torch.cuda.Event``: "the time at which
the event is reached on the device"), because that is what timing code written with events
expects, and what a device-side event of the Neuron runtime measures.

The current stream is kept per NeuronCore (not per thread, as CUDA's is).
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Iterator

import torch

from .. import runtime
from . import _devices
from ._core import CORE as _cpp

BACKEND = _devices.BACKEND
_PRIVATEUSE1 = int(torch._C._autograd.DeviceType.PrivateUse1)
_stream_ids: dict[int, "itertools.count[int]"] = {}


def _new_stream_id(index: int) -> int:
    if _cpp is not None:  # one sequence with the C++ guard's getNewStream
        return _cpp.new_stream_id(index)
    ids = _stream_ids.get(index)
    if ids is None:
        ids = _stream_ids[index] = itertools.count(1)
    return next(ids)


class Stream(torch.Stream):
    """A ``neuron`` stream (a :class:`torch.Stream`, so ``torch.accelerator`` APIs accept it)."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # rebuilt from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        index = _devices.index_of(device)
        # torch.Stream(device=...) asks the C++ device guard for a new stream, and the guard of
        # a Python backend puts every stream on device 0: build it from its parts instead
        return super().__new__(cls, stream_id=_new_stream_id(index), device_index=index,
                               device_type=_PRIVATEUSE1)

    @property
    def _core(self) -> runtime.NeuronCoreRuntime:
        return runtime.core(self.device_index)

    def synchronize(self) -> None:
        """The host waits until the work submitted to this stream is done."""
        self._core.synchronize_stream(self.stream_id)

    def query(self) -> bool:
        """True once every piece of work submitted to this stream has completed."""
        return self._core.stream_done_ns(self.stream_id) <= runtime.CLOCK.now()

    def wait_event(self, event: "Event") -> None:
        """Work submitted to this stream from now on waits for ``event`` (any stream or core)."""
        if event._time_ns is not None:
            self._core.stream_wait(self.stream_id, event._time_ns)

    def wait_stream(self, stream: "Stream") -> None:
        """Work submitted to this stream from now on waits for the work submitted to ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, torch.Stream) and (other.stream_id, other.device_index, other.device_type) == \
            (self.stream_id, self.device_index, self.device_type)

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index, self.device_type))

    def __repr__(self) -> str:
        return f"torch.neuron.Stream(device={BACKEND}:{self.device_index} stream_id={self.stream_id})"


# per NeuronCore: its default stream, and the stream made current on it (None: the default)
_current: dict[int, Stream] = {}
_default: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    index = _devices.index_of(device)
    s = _default.get(index)
    if s is None:
        s = _default[index] = Stream(stream_id=0, device_index=index, device_type=_PRIVATEUSE1)
    return s


def current_stream(device=None) -> Stream:
    index = _devices.index_of(device)
    s = _current.get(index)
    return s if s is not None else default_stream(index)


def _make_current(index: int, stream: Stream | None) -> None:
    if stream is None:
        _current.pop(index, None)
    else:
        _current[index] = stream
    sid = stream.stream_id if stream is not None else 0
    runtime.core(index).current_stream = sid
    if _cpp is not None:
        _cpp.set_stream_id(index, sid)


def stream_changed(index: int, stream_id: int) -> None:
    """The C++ guard made ``stream_id`` current on core ``index`` (a stream guard in ATen or
    autograd, torch.accelerator.set_stream): follow it."""
    if stream_id == 0:
        _current.pop(index, None)
    else:
        _current[index] = Stream(stream_id=stream_id, device_index=index, device_type=_PRIVATEUSE1)
    runtime.core(index).current_stream = stream_id


def set_stream(stream: Stream | None) -> None:
    """Make ``stream`` current on its NeuronCore (``None``: no-op, as CUDA's)."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        stream = Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                        device_type=stream.device_type)
    _make_current(stream.device_index, stream)


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
        _make_current(index, prev)
        _devices.set_current(prev_device)


class Event:
    """A ``neuron`` event: completes when its NeuronCore's queue reaches it; ``elapsed_time`` is in
    milliseconds, like CUDA's."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device = torch.device(BACKEND, _devices.current())
        self._time_ns: int | None = None  # device time at which the event completes

    def record(self, stream: Stream | None = None) -> None:
        s = stream if stream is not None else current_stream()
        self.device = torch.device(BACKEND, s.device_index)
        self._time_ns = runtime.core(s.device_index).record_event(s.stream_id)

    def query(self) -> bool:
        """True once the work before the event has completed (an unrecorded event: True, as CUDA's)."""
        return self._time_ns is None or self._time_ns <= runtime.CLOCK.now()

    def wait(self, stream: Stream | None = None) -> None:
        """Work submitted to ``stream`` (default: the current one) from now on waits for this event."""
        (stream if stream is not None else current_stream()).wait_event(self)

    def synchronize(self) -> None:
        """The host waits until the event completes."""
        if self._time_ns is not None:
            runtime.CLOCK.wait_until(self._time_ns)

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time_ns is None or end_event._time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time: call "
                               "end_event.synchronize() first.")
        return (end_event._time_ns - self._time_ns) / 1e6

    def __repr__(self) -> str:
        state = "recorded" if self._time_ns is not None else "unrecorded"
        return f"torch.neuron.Event({state}, enable_timing={self.enable_timing})"


__all__ = ["Event", "Stream", "current_stream", "default_stream", "set_stream", "stream"]
