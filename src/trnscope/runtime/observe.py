"""What the runtime tells whoever watches it: the one seam between the runtime and the profiler.

A tool that wants to see what the emulated runtime does (the profiler, :mod:`trnscope.profiling`)
subscribes an :class:`Observer` and gets these events, each on the thread that caused it:

* ``dispatch_begin()`` / ``dispatch_end()``: a device op enters and leaves the runtime. The
  executor that serves the device's ops (:mod:`trnscope.device.runtime_bridge`) emits the pair
  around all it does for the op, a CPU fallback's host work included; an op the emulator issues
  while serving another emits its own pair inside the outer one.
* ``execution(ex)``: NeuronCore ``ex.device`` took an :class:`~.executor.Execution` (a kernel, a
  host<->device copy, a CPU fallback). The device is modelled, so the record is complete when the
  host submits it: submitted at ``host_end_ns`` (the host call began at ``host_start_ns``), started
  at ``device_start_ns``, finished at ``device_end_ns``, on the emulated clock.

Events are delivered inside the clock's emulation cut: an observer's work is emulator work and
never shows as host time. An observer that raises breaks the user's op, so observers catch what
they do not expect.

What the events are measured against is the clock's own declared API: an observer that will map
real timestamps onto emulated time later (torch's profiler events) holds the clock's history for
as long as it needs it (:meth:`~.clock.EmulatedClock.hold` / ``release``); ``in_cut`` tells it
whether a real timestamp fell inside emulator work.

Cost: :data:`observers` is the empty tuple while nobody watches, and each place that emits an
event checks its truth once (an op, an execution): that check is all an unobserved loop pays. A
fast path that is not Python (the device's C++ core) reads the same attribute once per op and
takes the Python path while it is non-empty.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .executor import Execution


class Observer:
    """Base class: override the events you need (the others cost one empty call)."""

    def dispatch_begin(self) -> None:
        pass

    def dispatch_end(self) -> None:
        pass

    def execution(self, ex: "Execution") -> None:
        pass


# Replaced, never mutated: readers on any thread see a consistent tuple without taking the lock.
observers: tuple[Observer, ...] = ()
_lock = threading.Lock()


def subscribe(observer: Observer) -> None:
    """Start delivering the runtime's events to ``observer`` (after those already subscribed)."""
    global observers
    with _lock:
        if observer not in observers:
            observers = (*observers, observer)


def unsubscribe(observer: Observer) -> None:
    """Stop delivering events to ``observer`` (nothing happens if it was not subscribed)."""
    global observers
    with _lock:
        observers = tuple(o for o in observers if o is not observer)


def execution(ex: "Execution") -> None:
    """Deliver ``ex`` to every observer (the caller holds the clock's emulation cut)."""
    for o in observers:
        o.execution(ex)
