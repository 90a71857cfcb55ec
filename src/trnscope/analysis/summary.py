"""One object with every analysis of a profile, computed once (what the explorer's views read)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .device import DeviceSummary, device_summary
from .device_kind import NEURON as NEURON_DEVICE, DeviceKind, device_kind
from .device_work import device_work
from .gaps import IdleAnalysis, idle_gaps
from .lanes import Role, activity_extent, lane_infos
from .limiter import KernelLimit, kernel_limits
from .memory import MemoryTimeline, memory_timeline
from .roofline import Roofline, roofline
from .source_lines import ExecutionLines, SourceLineTable, execution_lines, source_line_table
from .steps import Step, step_overview
from .ops import OpTable, op_table
from .profile import NEURON, Profile
from .recommend import Inputs, Recommendation, recommend
from .utilization import Utilization, utilization


@dataclass
class ProfileAnalysis:
    profile: Profile

    @cached_property
    def ops(self) -> OpTable:
        # kernels' MFU against their own dtype's peak where the NTFFs say which (device summary)
        scales = self.device.mfu_scales() if self.profile.files is not None and self.profile.files.ntffs else None
        return op_table(self.profile.trace, scales)

    @cached_property
    def device(self) -> DeviceSummary:
        return device_summary(self.profile)

    @cached_property
    def utilization(self) -> Utilization:
        return utilization(self.profile.trace)

    @cached_property
    def idle(self) -> IdleAnalysis:
        return idle_gaps(self.profile.trace)

    @cached_property
    def device_kind(self) -> DeviceKind:
        return device_kind(self.profile.trace, neuron_profile=self.profile.kind == NEURON, target=self.device.target)

    @cached_property
    def kernel_limits(self) -> list[KernelLimit]:
        """The costliest NEFFs' roofline positions and limiters (Neuron profiles with NTFFs)."""
        if self.device_kind.kind != NEURON_DEVICE:
            return []
        return kernel_limits(self.device, self.profile)

    @cached_property
    def steps(self) -> list[Step]:
        """Per profiler step: device busy, waiting for host dispatch, launch latency, idle."""
        return step_overview(self.profile.trace)

    @cached_property
    def roofline(self) -> Roofline:
        """Per NEFF and per op: arithmetic intensity against attained FLOP/s under the target's
        roofs (Neuron profiles with NTFFs; reads the costliest NEFFs' instruction tables)."""
        return roofline(self.profile, self.device)

    @cached_property
    def execution_lines(self) -> ExecutionLines:
        """Per device execution, the line of the user's code that caused it (no NTFF is read)."""
        return execution_lines(self.profile.trace, self.ops)

    @cached_property
    def source_lines(self) -> SourceLineTable:
        """Device time per line of the user's code (reads the costliest NEFFs' instruction tables
        for the lines inside compiled graphs and NKI kernels)."""
        neffs = sorted(self.device.neffs, key=lambda n: -n.device_time_ns) if self.device.source == "ntff" else []
        return source_line_table(self.profile, self.ops, neffs, self.execution_lines)

    @cached_property
    def _execution_index(self) -> dict[int, int]:
        return {int(r): i for i, r in enumerate(device_work(self.profile.trace).rows.tolist())}

    def launching_op(self, execution_row: int) -> str:
        """The framework op that launched the device execution at slice ``execution_row`` (its
        args' op, else its nearest op: never a Python frame or a runtime call); "" if unknown."""
        index = self._execution_index.get(int(execution_row))
        return self.ops.launch_ops[index] if index is not None and index < len(self.ops.launch_ops) else ""

    @cached_property
    def memory(self) -> MemoryTimeline:
        return memory_timeline(self.profile.trace)

    @cached_property
    def recommendations(self) -> list[Recommendation]:
        return recommend(Inputs(trace=self.profile.trace, ops=self.ops, device=self.device, idle=self.idle,
                                use=self.utilization, kind=self.device_kind, work=device_work(self.profile.trace),
                                limits=self.kernel_limits))

    def headline(self) -> dict:
        """The figures a profile card shows."""
        trace = self.profile.trace
        device = self.device
        idle = self.idle
        top = next((o for o in self.ops.ops if not o.category.endswith(("_runtime", "_driver"))), None)
        infos = lane_infos(trace)
        roles = {info.role for info in infos}
        start, end = activity_extent(trace)
        return {
            # what the program did, not the profiler's session (its warm-up steps and stop marker)
            "wall_ns": end - start,
            "events": len(trace.slices) + len(trace.instants) + len(trace.counters),
            "host_threads": sum(1 for i in infos if i.role is Role.HOST_THREAD),
            "device_lanes": sum(1 for i in infos if i.role is Role.DEVICE_STREAM),
            "has_neuron_lanes": Role.NEURON_HW in roles,
            "device_kind": self.device_kind.kind,
            "device_label": self.device_kind.label,
            "devices": idle.devices,
            "device_time_ns": device.device_time_ns,
            "busy_ns": idle.busy_ns,
            "executions": device.executions,
            "dispatches": device.kernels,
            "programs": device.programs,
            "cpu_self_ns": self.ops.cpu_self_total_ns,
            "mfu_percent": device.mfu_percent,
            # what the MFU is a share of: each kernel's dtype peak (tensor_peak); one dtype: its peak
            "mfu_peak": device.mfu_peak,
            "mfu_peak_flops_per_s": device.mfu_peak_flops_per_s,
            "mfu_bf16_percent": device.mfu_bf16_percent,
            "mfu_text": device.mfu_text() if device.mfu_percent is not None else None,
            "mbu_percent": device.mbu_percent,
            # HTA's temporal breakdown: busy (union over streams) over the device's span
            "busy_share": idle.share(idle.busy_ns) if idle.span_ns else None,
            # the same busy time over the profile's activity window (what the regime is decided on)
            "window_busy_share": idle.window_share(idle.busy_ns) if idle.window_ns else None,
            "regime": idle.regime,
            "host_time": self.profile.host_time,
            "target": self.profile.target,
            # a `trnscope retime` copy: the target it was recorded on
            "retimed_from": ((self.profile.retimed or {}).get("recorded") or {}).get("target") if self.profile.retimed else None,
            "top_op": {"name": top.name, "device_self_ns": top.device_self_ns, "cpu_total_ns": top.cpu_total_ns}
            if top else None,
            "peak_memory_bytes": self.memory.peak_bytes if self.memory.devices else None,
        }

    def to_dict(self) -> dict:
        return {
            "headline": self.headline(),
            "device_kind": self.device_kind.to_dict(),
            "device": self.device.to_dict(),
            "utilization": self.utilization.to_dict(),
            "idle": self.idle.to_dict(),
            "kernel_limits": [k.to_dict() for k in self.kernel_limits],
            "memory": self.memory.to_dict(),
            "steps": [st.to_dict() for st in self.steps],
            "recommendations": [r.to_dict() for r in self.recommendations],
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        out = list(self.profile.warnings) + list(self.device.problems)
        trace = self.profile.trace
        ranges = trace.strings.id_of("cuda_profiler_range")
        if ranges is not None:
            count = int((trace.slices.cat == ranges).sum())
            if count:
                out.append(f"{count:,} CUPTI range-profiler events (cuda_profiler_range): kernels were replayed for "
                           f"counters, so their times are not execution times and are left out of device time")
        return out
