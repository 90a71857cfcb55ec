"""The emulated Neuron runtime: one clock, one execution queue per NeuronCore, the event record.

The host clock is shared; each NeuronCore of the chip (``cores_per_chip`` of the spec) has its own
runtime: its own queue and device clock (``device_free_ns``), NEFF cache statistics, dispatch
plans and records. The NEFF cache itself (in memory and on disk, :mod:`.neff_cache`) is the
process's. What the runtime does can be watched through :mod:`.observe` (the profiler does)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .. import caches
from ..hw import get_spec
from . import observe
from .clock import HOST_TIME_ENV, MODELLED, MODES, REAL, EmulatedClock, mode_from_env
from .executor import Execution, NeuronCoreRuntime, NoLowering
from .hostcost import HostCosts, host_costs, set_host_costs

CLOCK = EmulatedClock(mode_from_env())
_cores: dict[int, NeuronCoreRuntime] = {}


def _clear_plans() -> None:
    for rt in list(_cores.values()):
        rt.plans.clear()


caches.register("runtime: dispatch plans", _clear_plans)


def core(index: int = 0) -> NeuronCoreRuntime:
    """The runtime of NeuronCore ``index`` (created on first use for the current target)."""
    rt = _cores.get(index)
    spec = get_spec()
    if rt is None or rt.spec is not spec:
        if not 0 <= index < spec.cores_per_chip:
            raise ValueError(f"NeuronCore {index} does not exist: {spec.instance} has {spec.cores_per_chip} "
                             f"NeuronCores per chip (0 to {spec.cores_per_chip - 1})")
        rt = _cores[index] = NeuronCoreRuntime(index, CLOCK, spec)
    return rt


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


__all__ = ["CLOCK", "EmulatedClock", "Execution", "HOST_TIME_ENV", "HostCosts", "MODELLED", "MODES",
           "NeuronCoreRuntime", "NoLowering", "REAL", "core", "cores", "host_costs", "host_time", "observe",
           "host_time_mode", "set_host_costs", "set_host_time", "synchronize_all"]
