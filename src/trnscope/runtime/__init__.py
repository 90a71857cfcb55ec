"""The emulated Neuron runtime: one clock, one execution queue per NeuronCore, the event record.

The host clock is shared; each NeuronCore of the chip (``cores_per_chip`` of the spec) has its own
runtime: its own queue and device clock (``device_free_ns``), NEFF cache statistics, dispatch
plans and records. The NEFF cache itself (in memory and on disk, :mod:`.neff_cache`) is the
process's. What the runtime does can be watched through :mod:`.observe` (the profiler does).

With the device's C++ core (:func:`use_native`), the clock and each core's queue are the core's
C++ objects (:class:`.clock.NativeClock`, ``Queue``): the C++ eager path serves a planned call by
advancing them itself, and this package reads and advances the same state. What that path may do
while the runtime is observed follows the observers (:mod:`.observe`): nothing while one needs
every event as it happens, spans and deferred executions while all take them late."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from .. import caches
from ..hw import get_spec
from . import hostcost, observe, queue
from .clock import HOST_TIME_ENV, MODELLED, MODES, REAL, EmulatedClock, NativeClock, mode_from_env
from .executor import Execution, NeuronCoreRuntime, NoLowering
from .hostcost import HostCosts, host_costs, set_host_costs

CLOCK: EmulatedClock | NativeClock = EmulatedClock(mode_from_env())
_cores: dict[int, NeuronCoreRuntime] = {}
_native: Any = None  # the device's C++ core (its module), once use_native() was called
_installed: set[int] = set()  # cores whose queue the C++ eager path serves


def _clear_plans() -> None:
    for rt in list(_cores.values()):
        rt.clear_plans()


caches.register("runtime: dispatch plans", _clear_plans)


def core(index: int = 0) -> NeuronCoreRuntime:
    """The runtime of NeuronCore ``index`` (created on first use for the current target)."""
    rt = _cores.get(index)
    spec = get_spec()
    if rt is None or rt.spec is not spec:
        if not 0 <= index < spec.cores_per_chip:
            raise ValueError(f"NeuronCore {index} does not exist: {spec.instance} has {spec.cores_per_chip} "
                             f"NeuronCores per chip (0 to {spec.cores_per_chip - 1})")
        native = None
        if _native is not None:
            native = _native.Queue(index, int(spec.neff_launch_latency_ns), int(spec.hbm_bytes_per_core))
        rt = _cores[index] = NeuronCoreRuntime(index, CLOCK, spec, native)
        _installed.discard(index)
    if index not in _installed and _native is not None:
        _native.install_queue(index, rt.queue)
        _installed.add(index)
    return rt


def use_native(native) -> None:
    """Keep the clock and the cores' queues in the device's C++ core ``native`` from now on (the
    device layer calls this once the core is loaded): the clock goes on from the emulated time and
    mode it has, cores made from now on get C++ queues, and the host-cost model in force is
    handed over (and again whenever it changes)."""
    global CLOCK, _native
    if _native is native:
        return
    CLOCK = NativeClock(native, CLOCK.mode, CLOCK.now())
    native.install_clock(CLOCK.native)
    _native = native
    queue.next_seq = native.next_seq
    _cores.clear()
    _installed.clear()
    native.clear_queues()
    hostcost.on_change(_costs_changed)
    _costs_changed(host_costs())
    from ..hw import instance

    instance.on_change(_spec_changed)
    observe.next_span = native.next_span  # spans are numbered on both paths from one sequence
    observe.add_backlog(_deliver)
    observe.on_change(_observers_changed)
    _observers_changed()


def _costs_changed(costs: HostCosts) -> None:
    _native.set_costs(costs.framework_op_ns, costs.backend_op_ns, costs.submit_ns, costs.alloc_ns, costs.view_ns)


def _deliver() -> None:
    """Hand the C++ eager path's kept executions to the cores' records and the observers."""
    for rt in list(_cores.values()):
        rt.deliver()


def _observers_changed() -> None:
    """The C++ eager path keeps records and opens dispatch spans while deferred observers watch."""
    _native.set_spans(observe.deferred)
    for rt in list(_cores.values()):
        rt.sync_queue()


def _spec_changed() -> None:
    """Another target: the C++ eager path stops serving the old target's queues (and their plans)
    until :func:`core` makes the new ones (what they kept is delivered first)."""
    _deliver()
    _installed.clear()
    _native.clear_queues()


def cores() -> list[NeuronCoreRuntime]:
    """The runtimes made so far of the NeuronCores the current target has (a switch to fewer cores,
    e.g. LNC=1 to LNC=2, leaves the others behind)."""
    n = get_spec().cores_per_chip
    return [rt for i, rt in _cores.items() if i < n]


def synchronize_all() -> int:
    return max((rt.synchronize() for rt in _cores.values()), default=0)


def host_time() -> str:
    """The host-time mode in force: ``"real"`` or ``"modelled"`` (see :mod:`.clock`)."""
    return CLOCK.mode


def set_host_time(mode: str) -> str:
    """Time the host ``"real"`` (the user's Python and PyTorch's dispatcher as measured, the backend
    from the host-cost model) or ``"modelled"`` (every host interval from the model: the same script
    gives the same timings on any machine). Returns the previous mode. ``$TRNSCOPE_HOST_TIME`` sets
    the mode a process starts in."""
    return CLOCK.set_mode(mode)


@contextmanager
def host_time_mode(mode: str) -> Iterator[None]:
    """``set_host_time(mode)`` inside the block, the previous mode after it."""
    old = set_host_time(mode)
    try:
        yield
    finally:
        set_host_time(old)


__all__ = ["CLOCK", "EmulatedClock", "Execution", "HOST_TIME_ENV", "HostCosts", "MODELLED", "MODES", "NativeClock",
           "NeuronCoreRuntime", "NoLowering", "REAL", "core", "cores", "host_costs", "host_time", "observe",
           "host_time_mode", "set_host_costs", "set_host_time", "synchronize_all", "use_native"]
