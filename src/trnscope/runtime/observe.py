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
event checks its truth once (an op, an execution): that check is all an unobserved loop pays.

The device's C++ eager path (device/csrc/eager.cpp) serves a planned op without entering Python,
so it cannot emit these events as they happen. What it may do is declared per observer
(:attr:`Observer.deferred`):

* while any observer is not ``deferred``, every op takes the Python path (which emits every event
  as above): :data:`immediate` is True;
* while every observer is ``deferred`` (:data:`deferred`), the C++ path goes on serving ops. In
  place of ``dispatch_begin``/``dispatch_end`` it brackets each op it serves with a span of its own,
  a PyTorch ``RecordFunction`` named ``trnscope::dispatch#<n>`` (the profiler's span name,
  ``trnscope.profiling.correlate.SPAN_PREFIX``; ``n`` from :func:`next_span`, which the Python
  path's observers number their spans from too), RecordFunction switched off inside where the op's
  host numerics call ATen ops of their own (the eager path learns which do: switching it off and
  on costs about as much as the span, and what it keeps out is dropped from the profile anyway).
  Its executions are kept and delivered later through :meth:`Observer.deferred_execution`, each
  with the number of the span it was made in: at the latest before the observers change (so an
  observer gets exactly what was made while it watched), or when a core's ``records`` are read.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .executor import Execution


class Observer:
    """Base class: override the events you need (the others cost one empty call)."""

    #: Whether this observer takes the C++ eager path's executions late, through
    #: :meth:`deferred_execution` (see the module's docstring); False: every event as it happens.
    deferred: bool = False
    #: With ``deferred``: each deferred execution carries its core's allocated device bytes at its submit.
    sample_memory: bool = False

    def dispatch_begin(self) -> None:
        pass

    def dispatch_end(self) -> None:
        pass

    def execution(self, ex: "Execution") -> None:
        pass

    def deferred_execution(self, ex: "Execution", span: int, allocated: int, native_tid: int) -> None:
        """An execution the C++ eager path made earlier: ``span``, the number of the dispatch span it
        was made in (0: none); ``allocated``, its core's allocated bytes then (with
        :attr:`sample_memory`, else 0); ``native_tid``, the OS id of the thread that made it."""


# Replaced, never mutated: readers on any thread see a consistent tuple without taking the lock.
observers: tuple[Observer, ...] = ()
#: Some observer needs every event as it happens (the C++ eager path leaves every op to Python).
immediate = False
#: Observers watch, all of them ``deferred`` (the C++ eager path serves ops, opens spans, keeps executions).
deferred = False
#: Some deferred observer wants its executions' allocated bytes.
sample_memory = False
_lock = threading.Lock()
_backlogs: list[Callable[[], None]] = []
_listeners: list[Callable[[], None]] = []
_spans = itertools.count(1)
#: The number of a new dispatch span (one sequence for the Python path and the C++ eager path:
#: the runtime replaces it with the C++ core's when that core is in use).
next_span: Callable[[], int] = _spans.__next__


def subscribe(observer: Observer) -> None:
    """Start delivering the runtime's events to ``observer`` (after those already subscribed)."""
    with _lock:
        if observer not in observers:
            _change((*observers, observer))


def unsubscribe(observer: Observer) -> None:
    """Stop delivering events to ``observer`` (nothing happens if it was not subscribed); what the C++
    eager path kept for it is delivered first."""
    with _lock:
        if observer in observers:
            _change(tuple(o for o in observers if o is not observer))


def _change(new: tuple[Observer, ...]) -> None:
    global observers, immediate, deferred, sample_memory
    flush()
    observers = new
    immediate = any(not o.deferred for o in new)
    deferred = bool(new) and not immediate
    sample_memory = deferred and any(o.sample_memory for o in new)
    for listener in _listeners:
        listener()


def flush() -> None:
    """Deliver what is kept for the observers (the C++ eager path's executions) now."""
    for backlog in _backlogs:
        backlog()


def add_backlog(deliver: Callable[[], None]) -> None:
    """``deliver()`` hands the observers the executions kept for them (the runtime's C++ queues);
    :func:`flush` calls it, and so does every change of the observers, before the change."""
    if deliver not in _backlogs:
        _backlogs.append(deliver)


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after every change of the observers (what the C++ eager path may do follows
    :data:`immediate`, :data:`deferred` and :data:`sample_memory`)."""
    if listener not in _listeners:
        _listeners.append(listener)


def execution(ex: "Execution") -> None:
    """Deliver ``ex`` to every observer (the caller holds the clock's emulation cut)."""
    for o in observers:
        o.execution(ex)


def deferred_execution(ex: "Execution", span: int, allocated: int, native_tid: int) -> None:
    """Deliver an execution the C++ eager path made earlier to every observer (the caller holds the
    clock's emulation cut)."""
    for o in observers:
        o.deferred_execution(ex, span, allocated, native_tid)
