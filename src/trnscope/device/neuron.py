"""``torch.neuron``: the device module of the emulated NeuronCore (the role of ``torch.cuda``).

Importing :mod:`trnscope.device` installs this module as ``torch.neuron``. Its functions follow
TorchNeuron's groups: device, RNG, streams/events, memory.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _devices, dispatch, memory, rng
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device",
    "device", "device_of", "get_device_name", "get_device_capability", "synchronize",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
    "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_accumulated_memory_stats", "empty_cache", "mem_get_info",
    "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "wait_stream", "wait_event", "record_event", "query",
    "get_amp_supported_dtype", "is_bf16_supported",
]

# --- device -----------------------------------------------------------------------------------


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    return None


def _lazy_init() -> None:
    return None


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _devices.device_count()


def current_device() -> int:
    return _devices.current()


def set_device(device) -> None:
    """Make ``device`` (an index, ``"neuron:i"`` or a torch.device) the current NeuronCore of this
    thread: where ``device="neuron"`` tensors are made and where ``torch.neuron`` calls without a
    device apply. A negative index is ignored, as CUDA's is."""
    if isinstance(device, int) and device < 0:
        return
    _devices.set_current(_devices.index_of(device))


class device:
    """Context manager that makes ``device`` current inside the block (``None`` or -1: no change)."""

    def __init__(self, device) -> None:
        if device is None or (isinstance(device, int) and device < 0):
            self.idx = -1
        else:
            self.idx = _devices.index_of(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _devices.set_current(self.idx)
        return self

    def __exit__(self, *exc) -> None:
        if self.idx >= 0:
            _devices.set_current(self.prev_idx)


class device_of(device):
    def __init__(self, obj) -> None:
        super().__init__(obj.get_device() if obj.device.type == _devices.BACKEND else None)


def get_device_name(device=None) -> str:
    from trnscope.hw import get_spec

    _devices.index_of(device)
    spec = get_spec()
    return f"{spec.neuroncore} ({spec.instance}, emulated by trnscope)"


def get_device_capability(device=None) -> tuple[int, int]:
    from trnscope.hw import get_spec

    _devices.index_of(device)
    digits = "".join(ch for ch in get_spec().neuroncore if ch.isdigit())
    return (int(digits) if digits else 0, 0)


def synchronize(device=None) -> None:
    """Wait until the NeuronCore has finished all queued work."""
    dispatch.synchronize(_devices.index_of(device))


# --- streams (TorchNeuron's module-level forms of the Stream methods) ----------------------------


def wait_stream(stream: Stream) -> None:
    """The current stream waits for the work submitted to ``stream`` so far."""
    current_stream(stream.device_index).wait_stream(stream)


def wait_event(event: Event) -> None:
    """The current stream waits for ``event``."""
    current_stream().wait_event(event)


def record_event(stream: Stream | None = None) -> Event:
    """A new event recorded on ``stream`` (default: the current stream)."""
    return (stream if stream is not None else current_stream()).record_event()


def query(device=None) -> bool:
    """True once all work queued on the NeuronCore has completed."""
    from .. import runtime

    return not runtime.core(_devices.index_of(device)).in_flight()


# --- RNG --------------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the current NeuronCore's generator."""
    rng.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    rng.manual_seed_all(seed)


def seed() -> None:
    rng.seed()


def seed_all() -> None:
    rng.seed_all()


def initial_seed() -> int:
    return rng.initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    return rng.get_state(_devices.index_of(device))


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    rng.set_state(new_state, _devices.index_of(device))


def get_rng_state_all() -> list[torch.Tensor]:
    return [rng.get_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        rng.set_state(state, i)


# --- memory -----------------------------------------------------------------------------------


def memory_allocated(device=None) -> int:
    """Bytes held by live ``neuron`` tensors on the device."""
    return memory.stats(_devices.index_of(device)).allocated


def max_memory_allocated(device=None) -> int:
    return memory.stats(_devices.index_of(device)).peak


def memory_reserved(device=None) -> int:
    """Bytes reserved: allocated to live tensors plus freed buffers cached for reuse."""
    index = _devices.index_of(device)
    return memory.stats(index).allocated + memory.cached_bytes(index)


def max_memory_reserved(device=None) -> int:
    """Peak of allocated plus cached bytes."""
    return memory.nested_stats(_devices.index_of(device))["reserved_bytes"]["all"]["peak"]


def reset_peak_memory_stats(device=None) -> None:
    memory.reset_peak(_devices.index_of(device))


def reset_max_memory_allocated(device=None) -> None:
    memory.reset_peak(_devices.index_of(device))


def reset_accumulated_memory_stats(device=None) -> None:
    memory.reset_accumulated(_devices.index_of(device))


def empty_cache() -> None:
    """Return the freed buffers trnscope caches for reuse, on every NeuronCore (like CUDA's
    caching allocator, whose ``empty_cache`` is not per device either)."""
    memory.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free bytes, total bytes) of the device's HBM."""
    index = _devices.index_of(device)
    total = memory.capacity(index)
    return total - memory.stats(index).allocated, total


def memory_stats(device=None) -> dict[str, Any]:
    """CUDA-style flat statistics (``allocated_bytes.all.current`` and so on)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat[prefix] = value

    walk("", memory.nested_stats(_devices.index_of(device)))
    return dict(sorted(flat.items()))


# --- autocast ---------------------------------------------------------------------------------


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
