"""The performance model: Program + hardware spec -> device timeline and summary."""

from .cost import compute_cycles, dma_shape
from .simulate import clear_cache, simulate
from .timeline import DeviceTimeline, union_length

__all__ = ["DeviceTimeline", "clear_cache", "compute_cycles", "dma_shape", "simulate", "union_length"]
