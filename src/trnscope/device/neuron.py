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
    _devices.index_of(device)


class device:
    """Context manager that makes ``device`` current (there is one NeuronCore: it validates)."""

    def __init__(self, device) -> None:
        self.idx = -1 if device is None else _devices.index_of(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


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


# --- RNG --------------------------------------------------------------------------------------


def manual_seed(seed: int) -> None:
    rng.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    rng.manual_seed(seed)


def seed() -> None:
    rng.seed()


def seed_all() -> None:
    rng.seed()


def initial_seed() -> int:
    return rng.initial_seed()


def get_rng_state(device="neuron") -> torch.Tensor:
    _devices.index_of(device)
    return rng.get_state()


def set_rng_state(new_state: torch.Tensor, device="neuron") -> None:
    _devices.index_of(device)
    rng.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [rng.get_state()]


def set_rng_state_all(new_states) -> None:
    for state in new_states:
        rng.set_state(state)


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
    return memory.stats(_devices.index_of(device)).peak


def reset_peak_memory_stats(device=None) -> None:
    memory.reset_peak(_devices.index_of(device))


def reset_max_memory_allocated(device=None) -> None:
    memory.reset_peak(_devices.index_of(device))


def reset_accumulated_memory_stats(device=None) -> None:
    memory.reset_accumulated(_devices.index_of(device))


def empty_cache() -> None:
    """Return the freed buffers trnscope caches for reuse (like a caching allocator)."""
    memory.empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free bytes, total bytes) of the device's HBM."""
    index = _devices.index_of(device)
    total = memory.capacity(index)
    return total - memory.stats(index).allocated, total


def memory_stats(device=None) -> dict[str, Any]:
    """CUDA-style flat statistics (``allocated_bytes.all.current`` and so on)."""
    index = _devices.index_of(device)
    s = memory.stats(index)
    out: dict[str, Any] = {}
    for metric in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        out[f"{metric}.all.current"] = s.allocated
        out[f"{metric}.all.peak"] = s.peak
        out[f"{metric}.all.allocated"] = s.allocated_total
        out[f"{metric}.all.freed"] = s.freed_total
    for metric in ("allocation", "active", "segment"):
        out[f"{metric}.all.current"] = s.blocks
        out[f"{metric}.all.peak"] = s.peak_blocks
        out[f"{metric}.all.allocated"] = s.num_allocs
        out[f"{metric}.all.freed"] = s.num_frees
    out["num_alloc_retries"] = 0
    out["num_ooms"] = s.num_ooms
    out["num_device_alloc"] = s.num_allocs
    out["num_device_free"] = s.num_frees
    out["capacity_bytes"] = memory.capacity(index)
    return dict(sorted(out.items()))


# --- autocast ---------------------------------------------------------------------------------


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
