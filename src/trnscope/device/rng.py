"""The NeuronCores' random number generator states (``torch.neuron.manual_seed`` and friends).

Random ops on ``neuron`` tensors compute on the host with ATen's CPU kernels, which draw from the
CPU default generator. So that each NeuronCore has its own stream of random numbers (as each CUDA
device does: ``torch.neuron.manual_seed`` does not disturb ``torch.rand`` on CPU, and
``torch.manual_seed`` seeds them all), each core keeps its own state in a CPU
:class:`torch.Generator` and it is swapped into the CPU default generator around each op tagged
``nondeterministic_seeded`` that was not given an explicit generator. The same seed therefore
gives the same numbers on ``neuron`` as on CPU.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

from . import _devices
from ._core import CORE as _cpp

_lock = threading.RLock()
_generators: dict[int, torch.Generator] = {}


def generator(device: int = 0) -> torch.Generator:
    """Core ``device``'s generator: on the C++ path the default generator ATen's hooks give for
    ``neuron:device`` (a CPU generator labelled with the device), else a CPU generator of our own;
    seeded like the CPU's at first use."""
    g = _generators.get(device)
    if g is None:
        g = _cpp.default_generator(device) if _cpp is not None else torch.Generator()
        g.manual_seed(torch.default_generator.initial_seed())
        _generators[device] = g
    return g


def manual_seed(seed: int, device: int | None = None) -> None:
    """Seed one core (default: the current one)."""
    with _lock:
        generator(_devices.current() if device is None else device).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    with _lock:
        for i in range(_devices.device_count()):
            generator(i).manual_seed(int(seed))


def seed(device: int | None = None) -> int:
    with _lock:
        return generator(_devices.current() if device is None else device).seed()


def seed_all() -> None:
    """A fresh random seed, the same for every core (as CUDA's ``seed_all``)."""
    with _lock:
        s = generator(0).seed()
        for i in range(1, _devices.device_count()):
            generator(i).manual_seed(s)


def initial_seed(device: int | None = None) -> int:
    return generator(_devices.current() if device is None else device).initial_seed()


def get_state(device: int = 0) -> torch.Tensor:
    with _lock:
        return generator(device).get_state()


def set_state(state: torch.Tensor, device: int = 0) -> None:
    with _lock:
        generator(device).set_state(state)


@contextmanager
def active(device: int = 0) -> Iterator[None]:
    """Make core ``device``'s state the CPU default generator's for the duration of one op."""
    with _lock:
        cpu = torch.default_generator
        saved = cpu.get_state()
        cpu.set_state(generator(device).get_state())
        try:
            yield
        finally:
            generator(device).set_state(cpu.get_state())
            cpu.set_state(saved)
