"""The performance model: Program + hardware spec -> device timeline and summary.

Each instruction's cost form is its class's (``isa.instructions``: ``cycles``, ``transfer``, ``flops``);
the simulator adds the dependency overheads and runs the event-driven model (``core``).
"""

from .simulate import clear_cache, simulate
from .timeline import DeviceTimeline, union_length

__all__ = ["DeviceTimeline", "clear_cache", "simulate", "union_length"]
