"""How many NeuronCores the process sees, and which one is current.

One: PyTorch's Python backend path registers a device guard that always reports device 0 and
one device (torch/csrc/acc/Module.cpp), and autograd sizes its device threads from it, so a
second ``neuron`` index could not work through backward. The emulated instance's other cores are a
runtime concern (multi-core programs), not separate torch devices, for now.
"""

from __future__ import annotations

import torch

BACKEND = "neuron"
DEVICE_COUNT = 1


def device_count() -> int:
    return DEVICE_COUNT


def current() -> int:
    return 0


def index_of(device) -> int:
    """The NeuronCore index of ``device`` (None, int, str or torch.device); validated."""
    if device is None:
        return current()
    if isinstance(device, int):
        index = device
    else:
        if not isinstance(device, torch.device):
            device = torch.device(device)
        if device.type != BACKEND:
            raise ValueError(f"expected a {BACKEND} device, got {device}")
        index = current() if device.index is None else device.index
    if not 0 <= index < DEVICE_COUNT:
        raise RuntimeError(
            f"Invalid device {BACKEND}:{index}: this process has {DEVICE_COUNT} NeuronCore(s) "
            f"({BACKEND}:0)"
        )
    return index
