"""The emulated Neuron runtime: one clock, one execution queue per NeuronCore, the event record."""

from __future__ import annotations

import os
from pathlib import Path

from ..hw import get_spec
from .clock import EmulatedClock
from .executor import Execution, NeuronCoreRuntime, NoLowering

CLOCK = EmulatedClock()
_cores: dict[int, NeuronCoreRuntime] = {}


def core(index: int = 0) -> NeuronCoreRuntime:
    """The runtime of NeuronCore ``index`` (created on first use for the current target)."""
    rt = _cores.get(index)
    if rt is None or rt.spec is not get_spec():
        rt = _cores[index] = NeuronCoreRuntime(index, CLOCK, get_spec())
        cache = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or os.environ.get("TRNSCOPE_NEFF_CACHE_DIR")
        if cache:
            rt.neff_cache_dir = Path(cache)
    return rt


def cores() -> list[NeuronCoreRuntime]:
    return list(_cores.values())


def synchronize_all() -> int:
    return max((rt.synchronize() for rt in _cores.values()), default=0)


__all__ = ["CLOCK", "EmulatedClock", "Execution", "NeuronCoreRuntime", "NoLowering", "core", "cores",
           "synchronize_all"]
