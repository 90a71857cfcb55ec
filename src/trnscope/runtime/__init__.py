"""The emulated Neuron runtime: one clock, one execution queue per NeuronCore, the event record.

The host clock is shared; each NeuronCore of the chip (``cores_per_chip`` of the spec) has its own
runtime: its own queue and device clock (``device_free_ns``), NEFF cache statistics, dispatch
plans and records. The NEFF cache itself (in memory and on disk, :mod:`.neff_cache`) is the
process's."""

from __future__ import annotations

from ..hw import get_spec
from .clock import EmulatedClock
from .executor import Execution, NeuronCoreRuntime, NoLowering

CLOCK = EmulatedClock()
_cores: dict[int, NeuronCoreRuntime] = {}


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
    return list(_cores.values())


def synchronize_all() -> int:
    return max((rt.synchronize() for rt in _cores.values()), default=0)


__all__ = ["CLOCK", "EmulatedClock", "Execution", "NeuronCoreRuntime", "NoLowering", "core", "cores",
           "synchronize_all"]
