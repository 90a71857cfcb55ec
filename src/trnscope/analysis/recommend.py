"""Rule-based performance insights, ranked by how much time each problem costs.

Like Neuron's "Performance Insights & Recommendations", a summary shows the 2-4 findings that
matter most. Each rule looks at measured figures only (operator table, device summary, idle-gap
analysis, events in the trace) and, when it fires, estimates the share of time at stake; findings
are ranked by that share. The thresholds are stated where they are used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace import Trace
from .device import DeviceSummary
from .gaps import HOST_BOUND, IdleAnalysis
from .ops import OpTable

HIGH, MEDIUM, LOW = "high", "medium", "low"
SMALL_DMA_BYTES = 32 * 1024  # Neuron's glossary: aim for DMA transfers of at least 32 KiB on average
HBM_BOUND_MBU_PERCENT = 40.0  # below this share of HBM bandwidth a kernel is not bandwidth-bound


@dataclass
class Recommendation:
    rule: str
    severity: str
    title: str
    detail: str
    impact: float  # estimated share of the profiled time at stake, 0..1 (used for ranking)
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def recommend(trace: Trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis,
              limit: int = 4) -> list[Recommendation]:
    found = [r for rule in _RULES if (r := rule(trace, ops, device, idle)) is not None]
    found.sort(key=lambda r: -r.impact)
    return found[:limit]


def _share(fraction: float) -> str:
    """A share as a percentage that never rounds 99.8% up to a misleading 100% (or 0.4% down to 0%)."""
    if 0 < fraction < 0.01 or 0.99 < fraction < 1:
        return f"{fraction:.1%}"
    return f"{fraction:.0%}"


def _severity(impact: float) -> str:
    return HIGH if impact >= 0.4 else MEDIUM if impact >= 0.15 else LOW


def _many_small_dispatches(trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    """The device sits idle between many short executions: dispatch, not compute, sets the pace."""
    if device.kernels < 4 or idle.span_ns == 0:
        return None
    lost = idle.host_dispatch_ns + idle.launch_ns
    share = idle.share(lost)
    mean_kernel = device.kernel_time_ns / device.kernels
    mean_gap = lost / max(1, idle.gap_count)
    # fires when dispatch/launch gaps take over a third of the span and an average gap is at least
    # as long as an average kernel (the device spends as long waiting as working)
    if share < 1 / 3 or mean_gap < mean_kernel:
        return None
    # the ops that launch the executions themselves (device self time): annotations around them
    # such as ProfilerStep#N would repeat the same dispatches under a name nobody can fuse
    top = sorted((o for o in ops.ops if o.dispatches and o.device_self_ns > 0
                  and not o.category.endswith("_runtime")), key=lambda o: -o.dispatches)[:4]
    names = ", ".join(f"{o.name} ×{o.dispatches}" for o in top)
    return Recommendation(
        rule="many_small_dispatches", severity=_severity(share), impact=share,
        title=f"Many small dispatches: the device is idle {_share(share)} of its active time",
        detail=(f"{device.kernels} device executions average {mean_kernel / 1e3:.1f} µs, while the gaps between "
                f"them average {mean_gap / 1e3:.1f} µs ({idle.regime}). Fuse the ops into fewer NEFFs: use the "
                f"fused op (e.g. torch.rms_norm instead of pow/mean/rsqrt/mul) or torch.compile(backend=\"neuron\"). "
                f"Most dispatches: {names}."),
        evidence={"dispatches": device.kernels, "mean_kernel_ns": mean_kernel, "mean_gap_ns": mean_gap,
                  "idle_share": share, "regime": idle.regime},
    )


def _hbm_bound(trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    """Kernels limited by HBM bandwidth: time goes to moving data, not computing."""
    if not device.kernel_time_ns:
        return None
    # a "dma/hbm" bottleneck only means bandwidth when the kernel gets near it: a tiny kernel
    # moving a few KiB is labelled dma/hbm too, but its time is DMA fixed cost (MBU ~1%), which
    # fusing producer and consumer does not change the way this finding says
    memory_bound = [n for n in device.neffs
                    if (n.mbu_percent or 0) >= HBM_BOUND_MBU_PERCENT
                    and (n.bottleneck == "dma/hbm" or (n.mbu_percent or 0) >= 50 and (n.mfu_percent or 0) < 10)]
    time = sum(n.device_time_ns for n in memory_bound)
    share = time / device.kernel_time_ns
    if share < 0.5 or not memory_bound:
        return None
    top = sorted(memory_bound, key=lambda n: -n.device_time_ns)[:3]
    listing = ", ".join(f"{n.name} (MBU {n.mbu_percent or 0:.0f}%)" for n in top)
    busy_share = idle.share(idle.busy_ns) if idle.span_ns else 1.0
    moved = device.hbm_read_bytes + device.hbm_write_bytes
    return Recommendation(
        rule="hbm_bound", severity=_severity(share * busy_share), impact=share * busy_share,
        title=f"HBM-bound kernels: {_share(share)} of device time is spent moving data",
        detail=(f"{len(memory_bound)} NEFF(s) are limited by HBM bandwidth ({listing}); {moved / 2**20:,.1f} MiB "
                f"crossed HBM. Reduce intermediate traffic: fuse producer and consumer ops so intermediates stay in "
                f"SBUF instead of round-tripping through HBM, and avoid materialising broadcasts."),
        evidence={"kernel_share": share, "hbm_bytes": moved, "neffs": [n.neff_id for n in top]},
    )


def _cpu_fallbacks(trace: Trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    """Ops without a device kernel ran on the CPU, with copies to and from the device."""
    fallback = [o for o in ops.ops if o.name == "cpu_fallback" or o.name.startswith("cpu_fallback:")]
    if not fallback:
        return None
    calls = sum(o.calls for o in fallback)
    time = sum(o.cpu_total_ns for o in fallback)
    span = max(1, trace.end_ns - trace.start_ns)
    share = max(time / span, 0.2)  # correctness-adjacent: always worth reading, even when cheap
    fell_back = _fallback_ops(trace)
    return Recommendation(
        rule="cpu_fallbacks", severity=_severity(share), impact=share,
        title=f"CPU fallbacks present: {calls} op call(s) ran on the host",
        detail=(f"{', '.join(fell_back) or 'some ops'} had no NeuronCore kernel and ran on the CPU "
                f"({time / 1e3:,.1f} µs of host time, plus copies between host and device). Replace them with "
                f"supported ops, or set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 to find them as errors."),
        evidence={"calls": calls, "host_ns": time, "ops": fell_back},
    )


def _fallback_ops(trace: Trace) -> list[str]:
    name_id = trace.strings.id_of("cpu_fallback")
    if name_id is None:
        return []
    rows = np.flatnonzero(trace.slices.name == name_id)[:200]
    return sorted({str(trace.slice_args(int(r)).get("op") or "") for r in rows} - {""})


def _compilation_in_window(trace: Trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    """NEFFs compiled inside the profiled window: warm-up did not cover them."""
    name_id = trace.strings.id_of("neff_compile")
    if name_id is None:
        return None
    rows = np.flatnonzero(trace.slices.name == name_id)
    if not len(rows):
        return None
    time = int(trace.slices.dur_ns[rows].sum())
    share = time / max(1, trace.end_ns - trace.start_ns)
    return Recommendation(
        rule="compilation_in_window", severity=_severity(share), impact=share,
        title=f"{len(rows)} NEFF compilation(s) inside the profile",
        detail=(f"Compiling took {time / 1e6:,.2f} ms of the profiled window, which real runs pay only once. Run "
                f"the model a few times before profiling (or use a torch.profiler schedule with warmup) so the "
                f"profile shows steady-state dispatch."),
        evidence={"compilations": int(len(rows)), "compile_ns": time},
    )


def _small_dma(trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    if device.source != "ntff" or not device.dma_transfers or device.dma_average_bytes >= SMALL_DMA_BYTES:
        return None
    dma = next((e for e in device.engines if e.engine == "dma"), None)
    share = (dma.active_percent / 100.0) * 0.5 if dma else 0.1
    return Recommendation(
        rule="small_dma_transfers", severity=_severity(share), impact=share,
        title=f"Small DMA transfers: {device.dma_average_bytes / 1024:,.1f} KiB on average",
        detail=(f"{device.dma_transfers} DMA transfers moved {device.dma_bytes / 2**20:,.1f} MiB. Each transfer has a "
                f"fixed cost; transfers under {SMALL_DMA_BYTES // 1024} KiB waste DMA bandwidth. Use larger tiles or "
                f"contiguous layouts so each descriptor moves more bytes."),
        evidence={"dma_transfers": device.dma_transfers, "average_bytes": device.dma_average_bytes},
    )


def _copies_dominate(trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    if not device.device_time_ns or device.copy_time_ns < 0.3 * device.device_time_ns:
        return None
    share = device.copy_time_ns / device.device_time_ns
    return Recommendation(
        rule="copies_dominate", severity=_severity(share * 0.8), impact=share * 0.8,
        title=f"Host↔device copies take {_share(share)} of device time",
        detail=(f"{device.copies} copies moved {device.copy_bytes / 2**20:,.1f} MiB. Keep tensors on the device "
                f"between steps, copy results back once (not per op), and avoid .item()/.cpu() inside loops."),
        evidence={"copies": device.copies, "copy_bytes": device.copy_bytes, "copy_share": share},
    )


def _host_bound_without_fusion_hint(trace, ops: OpTable, device: DeviceSummary, idle: IdleAnalysis):
    """A host-dispatch-bound profile with few, long gaps: the host does other work between launches."""
    if idle.regime != HOST_BOUND or device.kernels >= 4:
        return None
    share = idle.share(idle.host_dispatch_ns)
    return Recommendation(
        rule="host_bound", severity=_severity(share), impact=share,
        title=f"Host-dispatch bound: the device waits on the host {_share(share)} of its active time",
        detail=("Between executions the host is busy elsewhere (Python, data preparation, synchronisation). "
                "Look at the framework thread during the largest gaps listed below."),
        evidence={"host_dispatch_share": share},
    )


_RULES = (_many_small_dispatches, _hbm_bound, _cpu_fallbacks, _compilation_in_window, _small_dma,
          _copies_dominate, _host_bound_without_fusion_hint)
