"""The NeuronCore's random number generator state (``torch.neuron.manual_seed`` and friends).

Random ops on ``neuron`` tensors compute on the host with ATen's CPU kernels, which draw from the
CPU default generator. So that the device has its own stream of random numbers (as CUDA does:
``torch.neuron.manual_seed`` does not disturb ``torch.rand`` on CPU, and ``torch.manual_seed``
seeds both), the device keeps its own Philox/MT state in a CPU :class:`torch.Generator` and swaps
it into the CPU default generator around each op tagged ``nondeterministic_seeded`` that was not
given an explicit generator. The same seed therefore gives the same numbers on ``neuron`` as on
CPU.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

_lock = threading.RLock()
_generator: torch.Generator | None = None


def generator() -> torch.Generator:
    global _generator
    if _generator is None:
        g = torch.Generator()
        g.manual_seed(torch.default_generator.initial_seed())
        _generator = g
    return _generator


def manual_seed(seed: int) -> None:
    with _lock:
        generator().manual_seed(int(seed))


def seed() -> int:
    with _lock:
        return generator().seed()


def initial_seed() -> int:
    return generator().initial_seed()


def get_state() -> torch.Tensor:
    with _lock:
        return generator().get_state()


def set_state(state: torch.Tensor) -> None:
    with _lock:
        generator().set_state(state)


@contextmanager
def active() -> Iterator[None]:
    """Make the device state the CPU default generator's for the duration of one op."""
    with _lock:
        cpu = torch.default_generator
        saved = cpu.get_state()
        cpu.set_state(generator().get_state())
        try:
            yield
        finally:
            generator().set_state(cpu.get_state())
            cpu.set_state(saved)
