"""One object with every analysis of a profile, computed once (what the explorer's views read)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .device import DeviceSummary, device_summary
from .gaps import IdleAnalysis, idle_gaps
from .lanes import Role, activity_extent, lane_infos
from .ops import OpTable, op_table
from .profile import Profile
from .recommend import Recommendation, recommend


@dataclass
class ProfileAnalysis:
    profile: Profile

    @cached_property
    def ops(self) -> OpTable:
        return op_table(self.profile.trace)

    @cached_property
    def device(self) -> DeviceSummary:
        return device_summary(self.profile)

    @cached_property
    def idle(self) -> IdleAnalysis:
        return idle_gaps(self.profile.trace)

    @cached_property
    def recommendations(self) -> list[Recommendation]:
        return recommend(self.profile.trace, self.ops, self.device, self.idle)

    def headline(self) -> dict:
        """The figures a profile card shows."""
        trace = self.profile.trace
        device = self.device
        top = next((o for o in self.ops.ops if o.category not in ("privateuse1_runtime", "cuda_runtime")), None)
        roles = {info.role for info in lane_infos(trace)}
        start, end = activity_extent(trace)
        return {
            # what the program did, not the profiler's session (its warm-up steps and stop marker)
            "wall_ns": end - start,
            "events": len(trace.slices) + len(trace.instants) + len(trace.counters),
            "host_threads": sum(1 for i in lane_infos(trace) if i.role is Role.HOST_THREAD),
            "device_lanes": sum(1 for i in lane_infos(trace) if i.role is Role.DEVICE_STREAM),
            "has_neuron_lanes": Role.NEURON_HW in roles,
            "device_time_ns": device.device_time_ns,
            "executions": device.executions,
            "dispatches": device.kernels,
            "programs": device.programs,
            "cpu_self_ns": self.ops.cpu_self_total_ns,
            "mfu_percent": device.mfu_percent,
            "mbu_percent": device.mbu_percent,
            "busy_share": self.idle.share(self.idle.busy_ns) if self.idle.span_ns else None,
            "regime": self.idle.regime,
            "host_time": self.profile.host_time,
            "target": self.profile.target,
            "top_op": {"name": top.name, "device_self_ns": top.device_self_ns, "cpu_total_ns": top.cpu_total_ns}
            if top else None,
        }

    def to_dict(self) -> dict:
        return {
            "headline": self.headline(),
            "device": self.device.to_dict(),
            "idle": self.idle.to_dict(),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "warnings": list(self.profile.warnings) + list(self.device.problems),
        }
