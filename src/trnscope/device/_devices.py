"""How many NeuronCores the process sees, and which one is current.

One ``neuron`` device per NeuronCore of the emulated chip: ``cores_per_chip`` of the hardware
spec in force (trn2: 4 logical cores at LNC=2, 8 at LNC=1; trn1: 2; ``$TRNSCOPE_INSTANCE``,
``$NEURON_LOGICAL_NC_CONFIG`` or :func:`trnscope.hw.set_instance`).
The current device is per thread, as CUDA's is, and starts at 0.

PyTorch's C++ side cannot be told any of this by a Python backend: the device guard that
``torch._C._acc`` registers for PrivateUse1 always reports device 0 of 1 and ignores
``setDevice`` (torch/csrc/acc/Module.cpp). trnscope therefore answers every question about
devices itself: factories, ``.to()``, ``torch.neuron``, and the ``torch.accelerator`` bindings
(:mod:`.accelerator`). The autograd engine sizes its per-device worker queues from that guard (one
queue); :mod:`.accelerator` makes backward passes run on the calling thread once a second
NeuronCore is in use, so that tensors on ``neuron:1`` and above can take part in them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from trnscope.hw import get_spec

from ._core import CORE as _cpp

BACKEND = "neuron"
_state = threading.local()
# called the first time a thread makes a core other than 0 current (see .accelerator)
on_other_core: Callable[[], object] | None = None


def device_count() -> int:
    return int(get_spec().cores_per_chip)


def current() -> int:
    return getattr(_state, "index", 0)


def set_current(index: int) -> int:
    """Make NeuronCore ``index`` current on this thread (validated); returns the previous one."""
    global on_other_core
    if _cpp is not None:  # the C++ guard keeps it, where ATen and autograd see it
        prev = _cpp.current_device()
        _cpp.set_device(int(index))
        return prev
    prev = current()
    _state.index = _check(index)
    if index and on_other_core is not None:
        hook, on_other_core = on_other_core, None
        hook()
    return prev


if _cpp is not None:
    current = _cpp.current_device  # noqa: F811


def invalid_device_message(index: int) -> str:
    count = device_count()
    spec = get_spec()
    return (f"Invalid device {BACKEND}:{index}: this process emulates {spec.instance} with {count} "
            f"NeuronCore(s) ({BACKEND}:0 to {BACKEND}:{count - 1}). Use an index in that range, or "
            f"emulate another instance (TRNSCOPE_INSTANCE=trn1|trn2, or trnscope.hw.set_instance).")


def _check(index: int) -> int:
    if not 0 <= index < device_count():
        raise RuntimeError(invalid_device_message(index))
    return index


def index_of(device) -> int:
    """The NeuronCore index of ``device`` (None, int, str or torch.device); validated."""
    if device is None:
        return current()
    if type(device) is int:
        return _check(device)
    if not isinstance(device, torch.device):
        if isinstance(device, int):
            return _check(int(device))
        device = torch.device(device)
    if device.type != BACKEND:
        raise ValueError(f"expected a {BACKEND} device, got {device}")
    index = device.index
    return current() if index is None else _check(index)
