"""Rule-based performance insights, ranked by how much of the profile each problem costs.

Like Neuron's "Performance Insights & Recommendations", a summary shows the 2-4 findings that
matter most. Each rule reads measured figures only (operator table, device summary, device
utilisation and idle causes, the costliest kernels' limiters, events in the trace) and, when it
fires, estimates the share of the profile's activity window at stake; findings are ranked by it.
Every finding carries the figures it was decided on (``evidence``).

Advice is given in the terms of the device the profile was recorded on (``device_kind``): fusing
into fewer NEFFs, CPU fallbacks and NEFF compilation are Neuron's; a CUDA or ROCm trace hears about
CUDA/HIP graphs and ``torch.compile``, an MTIA or unknown accelerator only what holds everywhere.
Thresholds are module constants, documented in docs/analysis.md and tested on synthetic traces.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace import Trace
from .device import DeviceSummary
from .device_kind import CUDA, NEURON, ROCM, DeviceKind
from .device_work import DeviceWork
from .kernel_names import short_kernel_name
from .gaps import DEPENDENCY_BOUND, HOST_BOUND, LAUNCH_BOUND, IdleAnalysis
from .limiter import DESCRIPTORS, DMA_QUEUES, HBM, LATENCY, NEAR_ROOF_PERCENT, KernelLimit
from .tensor_peak import FP32, fp32_factor_of
from .ops import OpTable
from .utilization import Utilization

HIGH, MEDIUM, LOW = "high", "medium", "low"
SMALL_DMA_BYTES = 32 * 1024  # Neuron's glossary: aim for DMA transfers of at least 32 KiB on average
# many_small_dispatches / host_bound: the device waits on dispatch at least this share of the window
DISPATCH_IDLE_SHARE = 1 / 3
# below_roofline: kernels far below their roofline taking at least this share of kernel time
COSTLY_KERNEL_SHARE = 0.10
# hbm_bound: kernels limited by HBM bandwidth taking at least this share of kernel time
HBM_BOUND_KERNEL_SHARE = 0.5
# dependency_wait: queued executions waiting at least this share of the window
DEPENDENCY_SHARE = 0.15
# exposed_communication: communication at least this share of busy time, less than this overlapped
COMMUNICATION_SHARE = 0.15
OVERLAP_WANTED = 0.5
# copies_dominate: copies at least this share of device time
COPY_SHARE = 0.3


@dataclass
class Recommendation:
    rule: str
    severity: str
    title: str
    detail: str
    impact: float  # estimated share of the profile's activity window at stake, 0..1 (used for ranking)
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Inputs:
    """Everything the rules read, computed once by ProfileAnalysis."""

    trace: Trace
    ops: OpTable
    device: DeviceSummary
    idle: IdleAnalysis
    use: Utilization
    kind: DeviceKind
    work: DeviceWork
    limits: list[KernelLimit] = field(default_factory=list)


def recommend(x: Inputs, limit: int = 4) -> list[Recommendation]:
    found = [r for rule in _RULES if (r := rule(x)) is not None]
    found.sort(key=lambda r: -r.impact)
    return found[:limit]


def _share(fraction: float) -> str:
    """A share as a percentage that never rounds 99.996% up to a misleading 100% (or 0.004% down to 0%)."""
    if 0.9999 < fraction < 1:
        return "over 99.99%"
    if 0 < fraction < 0.0001:
        return "under 0.01%"
    if 0 < fraction < 0.01 or 0.99 < fraction < 1:
        return f"{fraction:.2%}" if fraction < 0.001 or fraction > 0.999 else f"{fraction:.1%}"
    return f"{fraction:.0%}"


def _us(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:,.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e3:,.1f} µs"


def _severity(impact: float) -> str:
    return HIGH if impact >= 0.4 else MEDIUM if impact >= 0.15 else LOW


def _launching_ops(x: Inputs, top: int = 4) -> list:
    """The ops that launch the most executions themselves (device self time): framework ops, not
    runtime calls, annotations around them (ProfilerStep#N) or wrappers. ``aten::`` ops first
    when there are any: they are what a user can fuse or replace."""
    candidates = [o for o in x.ops.ops if o.dispatches and o.device_self_ns > 0
                  and not o.category.endswith(("_runtime", "_driver"))]
    aten = [o for o in candidates if o.name.startswith("aten::")]
    return sorted(aten or candidates, key=lambda o: -o.dispatches)[:top]


def _dispatch_pattern(x: Inputs) -> tuple[float, float, float] | None:
    """(share of the window lost between executions, mean kernel, mean gap) when the device spends
    as long waiting between executions as running them; None otherwise."""
    idle, device = x.idle, x.device
    if device.kernels < 4 or not idle.gap_count or idle.regime not in (HOST_BOUND, LAUNCH_BOUND):
        return None
    lost = idle.host_dispatch_ns + idle.launch_ns
    share = idle.window_share(lost)
    mean_kernel = device.kernel_time_ns / device.kernels
    mean_gap = lost / idle.gap_count
    if share < DISPATCH_IDLE_SHARE or mean_gap < mean_kernel:
        return None
    return share, mean_kernel, mean_gap


def _many_small_dispatches(x: Inputs):
    """The device sits idle between many short executions: dispatch, not compute, sets the pace."""
    found = _dispatch_pattern(x)
    if found is None:
        return None
    share, mean_kernel, mean_gap = found
    top = _launching_ops(x)
    names = ", ".join(f"{o.name} ×{o.dispatches:,}" for o in top)
    advice = {
        NEURON: "Fuse the ops into fewer NEFFs: use the fused op (e.g. torch.rms_norm instead of "
                "pow/mean/rsqrt/mul) or torch.compile(backend=\"neuron\").",
        CUDA: "Launch fewer, larger kernels: torch.compile fuses element-wise chains, and "
              "torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs replays a step as one CUDA graph.",
        ROCM: "Launch fewer, larger kernels: torch.compile fuses element-wise chains, and "
              "torch.compile(mode=\"reduce-overhead\") replays a step as one HIP graph.",
    }.get(x.kind.kind, "Launch fewer, larger pieces of work: fuse ops (torch.compile) or batch more work per call.")
    return Recommendation(
        rule="many_small_dispatches", severity=_severity(share), impact=share,
        title=f"Many small dispatches: the device is idle {_share(share)} of the profile between executions",
        detail=(f"{x.device.kernels:,} device executions average {_us(mean_kernel)}, while the gaps between them "
                f"average {_us(mean_gap)} ({x.idle.regime}). {advice}"
                + (f" Most dispatches: {names}." if names else "")),
        evidence={"dispatches": x.device.kernels, "mean_kernel_ns": mean_kernel, "mean_gap_ns": mean_gap,
                  "idle_share_of_window": share, "regime": x.idle.regime,
                  "top_ops": {o.name: o.dispatches for o in top}},
    )


def _host_bound(x: Inputs):
    """The device waits on the host, but not between many short executions: the host does other
    work (Python, data preparation, synchronisation) while the device has nothing to run."""
    idle = x.idle
    if idle.regime != HOST_BOUND or _dispatch_pattern(x) is not None:
        return None
    share = idle.window_share(idle.host_wait_ns)
    busy = idle.busy_ns
    title = (f"Host-bound: the device is idle {_share(share)} of the profile, waiting on the host "
             f"({_us(busy)} of device work in {_us(idle.window_ns)})")
    largest = max(idle.largest, key=lambda g: g.host_wait_ns, default=None)
    where = ""
    if largest is not None and largest.host_wait_ns:
        where = f" The longest wait inside the device's span is {_us(largest.host_wait_ns)}; see the largest idle gaps."
    outside = idle.window_share(idle.outside_ns)
    return Recommendation(
        rule="host_bound", severity=_severity(share), impact=share,
        title=title,
        detail=(f"{_share(outside)} of the profile passes before the device's first or after its last execution, "
                f"{_share(idle.window_share(idle.host_dispatch_ns))} in gaps where nothing had been submitted yet. "
                f"Look at the host threads in those windows: data loading, Python work, .item()/.cpu() or "
                f"synchronisation keep the device waiting." + where),
        evidence={"host_wait_share_of_window": share, "outside_share_of_window": outside,
                  "device_busy_ns": busy, "window_ns": idle.window_ns, "executions": idle.executions},
    )


def _dependency_wait(x: Inputs):
    """Executions were submitted in time but waited to start: on events, other streams, syncs."""
    idle = x.idle
    share = idle.window_share(idle.dependency_ns)
    if share < DEPENDENCY_SHARE and idle.regime != DEPENDENCY_BOUND:
        return None
    if share <= 0:
        return None
    gaps = sorted((g for g in idle.largest if g.dependency_ns), key=lambda g: -g.dependency_ns)[:3]
    waiting = sorted({short_kernel_name(x.trace.strings[int(x.trace.slices.name[g.after_row])]) for g in gaps})
    advice = {
        CUDA: "Kernels waited on events from other streams (cudaStreamWaitEvent), on collectives waiting for "
              "peers, or on synchronisation. Overlap communication with computation and look for a straggling "
              "rank or a stream that serialises the others.",
        ROCM: "Kernels waited on events from other streams, on collectives waiting for peers, or on "
              "synchronisation. Overlap communication with computation and look for a straggling rank.",
        NEURON: "Executions waited on copies or on work queued on another NeuronCore. Overlap transfers with "
                "compute (non-blocking copies from pinned memory) and keep each core's queue fed.",
    }.get(x.kind.kind, "Submitted work waited on events, other queues or synchronisation.")
    return Recommendation(
        rule="dependency_wait", severity=_severity(share), impact=share,
        title=f"Waiting on dependencies: submitted work sat idle {_share(share)} of the profile",
        detail=(f"{_us(idle.dependency_ns)} of idle time came after work had been submitted (more than the "
                f"launch latency). {advice}" + (f" Executions that waited longest: {', '.join(waiting)}."
                                               if waiting else "")),
        evidence={"dependency_ns": idle.dependency_ns, "share_of_window": share, "waiting": waiting},
    )


def _exposed_communication(x: Inputs):
    """Collective communication that computation does not hide."""
    best = None
    for d in x.use.devices:
        if not d.busy_ns or d.communication_ns < COMMUNICATION_SHARE * d.busy_ns:
            continue
        overlap = d.comm_comp_overlap or 0.0
        if overlap >= OVERLAP_WANTED:
            continue
        exposed = d.communication_ns - d.comm_comp_overlap_ns
        if best is None or exposed > best[1]:
            best = (d, exposed, overlap)
    if best is None:
        return None
    d, exposed, overlap = best
    share = x.idle.window_share(exposed) if x.idle.window_ns else 0.0
    return Recommendation(
        rule="exposed_communication", severity=_severity(share), impact=share,
        title=f"Exposed communication on {d.device}: only {_share(overlap)} of collective time overlaps computation",
        detail=(f"Collectives ran {_us(d.communication_ns)} ({_share(d.communication_ns / d.busy_ns)} of busy time); "
                f"{_us(exposed)} of it with no computation beside it. Overlap them: DDP's gradient buckets "
                f"(bucket_cap_mb), FSDP's forward/backward prefetch, or async collectives issued before the "
                f"computation that does not depend on them."),
        evidence={"device": d.device, "communication_ns": d.communication_ns, "overlap_ns": d.comm_comp_overlap_ns,
                  "comm_comp_overlap": overlap, "exposed_ns": exposed},
    )


def _hbm_bound(x: Inputs):
    """Kernels at (or limited by) HBM bandwidth: their time goes to moving data."""
    if not x.device.kernel_time_ns or not x.limits:
        return None
    bound = [k for k in x.limits if k.limiter == HBM]
    time = sum(k.device_time_ns for k in bound)
    share = time / x.device.kernel_time_ns
    if share < HBM_BOUND_KERNEL_SHARE:
        return None
    busy = x.idle.window_share(x.idle.busy_ns) if x.idle.window_ns else 1.0
    listing = ", ".join(f"{k.name} (MBU {k.mbu_percent or 0:.0f}%)" for k in bound[:3])
    moved = x.device.hbm_read_bytes + x.device.hbm_write_bytes
    programs = {k.neff_id for k in bound}
    if len(programs) >= 2:
        advice = ("Fuse producer and consumer so intermediates stay in SBUF instead of round-tripping through HBM "
                  "(a fused op, or torch.compile(backend=\"neuron\")), and avoid materialising broadcasts.")
        impact = share * busy * 0.5
    else:
        mbu = bound[0].mbu_percent or 0.0
        if mbu >= NEAR_ROOF_PERCENT:
            speed = "it runs as fast as its bytes allow"
        else:
            speed = (f"it moves each byte once at {mbu:.0f}% of HBM bandwidth; the rest is its fixed costs (DMA "
                     f"setup, pipeline fill), which larger tensors or batches amortise")
        advice = (f"It is a single kernel already (nothing left to fuse within this profile): {speed}. Only fewer "
                  f"bytes help beyond that: a narrower dtype (bfloat16), or fusing it with its neighbours in the model.")
        impact = share * busy * 0.25
    return Recommendation(
        rule="hbm_bound", severity=_severity(impact), impact=impact,
        title=f"HBM-bandwidth-limited kernels: {_share(share)} of device time",
        detail=f"{len(bound)} NEFF(s) are limited by HBM bandwidth ({listing}); {moved / 2**20:,.1f} MiB crossed HBM. {advice}",
        evidence={"kernel_share": share, "hbm_bytes": moved, "neffs": [k.neff_id for k in bound[:3]],
                  "mbu_percent": {k.name: k.mbu_percent for k in bound[:3]}},
    )


_LIMITER_ADVICE = {
    DESCRIPTORS: ("The kernel reads (or writes) its operands in pieces this small, so the DMA engines spend their time "
                  "on per-descriptor overhead. Hand it operands in the layout it reads contiguously (.contiguous() "
                  "on a transposed or strided view; for a reduction, reduce over the last dimension), or use a "
                  "kernel that transposes on TensorE or with DMA transposes of long rows."),
    DMA_QUEUES: "Move the same bytes in fewer, larger transfers (larger tiles), spread over more DMA queues.",
    LATENCY: ("Too little work, or too serialised, to fill the core: batch more work per kernel or fuse it with "
              "its neighbours so the engines overlap."),
}


def _below_roofline(x: Inputs):
    """The costliest kernels, far below both roofs: name the op and what limits it."""
    if not x.device.kernel_time_ns or not x.limits:
        return None
    costly = [k for k in x.limits if k.far_below_roofline
              and k.device_time_ns >= COSTLY_KERNEL_SHARE * x.device.kernel_time_ns]
    if not costly:
        return None
    busy = x.idle.window_share(x.idle.busy_ns) if x.idle.window_ns else 1.0
    share = sum(k.device_time_ns for k in costly) / x.device.kernel_time_ns
    impact = share * busy
    first = costly[0]
    op = ", ".join(first.ops) or first.name
    advice = _LIMITER_ADVICE.get(first.limiter) or (
        f"{first.limiter}'s instruction stream is the limit: fewer, longer instructions (a larger free size per "
        f"instruction), or work moved to an idle engine.")
    others = "; ".join(f"{', '.join(k.ops) or k.name}: {k.limiter} ({_share(k.device_time_ns / x.device.kernel_time_ns)})"
                       for k in costly[1:3])
    return Recommendation(
        rule="below_roofline", severity=_severity(impact), impact=impact,
        title=(f"{op} takes {_share(first.device_time_ns / x.device.kernel_time_ns)} of device time far below its "
               f"roofline (MBU {first.mbu_percent or 0:.1f}%, MFU {first.mfu_percent or 0:.1f}%): limited by "
               f"{first.limiter}"),
        detail=(f"{first.name}: {first.explanation}. {advice}" + (f" Also far below the roofline: {others}." if others else "")),
        evidence={"kernel_share": share,
                  "kernels": [{"name": k.name, "ops": k.ops, "device_time_ns": k.device_time_ns,
                               "limiter": k.limiter, **{key: v for key, v in k.evidence.items()
                                                        if key != "engine_active_percent"},
                               "dma_active_percent": (k.evidence.get("engine_active_percent") or {}).get("dma")}
                              for k in costly[:3]]},
    )


def _fp32_matmuls(x: Inputs):
    """TensorE work streamed as FP32, at a quarter of BF16's rate: what casting to BF16 would save.

    Each NEFF's ideal TensorE time is MFU x its time (MFU is against its own dtype peak); the FP32
    part of it is its FLOPs x the FP32 rate factor over the weighted sum, and BF16 would run that
    part ``factor`` times faster. That is TensorE time: a kernel that then meets its HBM roof (BF16
    moves half the bytes, but its ridge is 4x higher) saves less, so it is "up to" and the impact is
    halved. (trn2, 1024^3 FP32 mm: 82 us estimated, 79 us measured against the BF16 mm; the Linear
    training step's mm and addmm: 164 us estimated, 97 us measured with auto-cast on.)
    """
    if not x.device.kernel_time_ns or x.device.source != "ntff":
        return None
    factor = fp32_factor_of(x.device.target)
    saved, kernels = 0.0, []
    for n in x.device.neffs:
        fp32 = n.flops_by_dtype.get(FP32, 0.0)
        total = sum(n.flops_by_dtype.values())
        if not fp32 or not n.mfu_percent:
            continue
        ideal = n.mfu_percent / 100 * n.device_time_ns
        weighted = fp32 * factor + (total - fp32)
        fp32_ideal = ideal * fp32 * factor / weighted
        saved += fp32_ideal * (1 - 1 / factor)
        kernels.append((n, fp32_ideal))
    share = saved / x.device.kernel_time_ns
    if share < COSTLY_KERNEL_SHARE:
        return None
    busy = x.idle.window_share(x.idle.busy_ns) if x.idle.window_ns else 1.0
    impact = share * busy * 0.5
    kernels.sort(key=lambda kv: -kv[1])
    ops = sorted({o for n, _ in kernels for o in n.framework_ops}) or [n.name for n, _ in kernels]
    cast = {n.auto_cast for n, _ in kernels}
    how = ("drop --auto-cast=none from NEURON_CC_FLAGS (neuronx-cc's default, --auto-cast matmult, casts FP32 "
           "matmuls to BF16)" if cast <= {"none", ""} else "compile with --auto-cast matmult")
    return Recommendation(
        rule="fp32_matmuls", severity=_severity(impact), impact=impact,
        title=(f"FP32 matmuls run at a quarter of TensorE's BF16 rate: BF16 could save up to {_us(saved)} "
               f"({_share(share)} of device time) in {', '.join(ops[:4])}"),
        detail=(f"{len(kernels)} NEFF(s) streamed FP32 operands through TensorE ({', '.join(n.name for n, _ in kernels[:3])}), "
                f"which runs FP32 at 1/{factor:.0f} of its BF16 rate; their FP32 matmul work needs {_us(sum(t for _, t in kernels))} "
                f"even at the FP32 peak (a kernel that then meets its HBM roof saves less). Where BF16's 8-bit mantissa (FP32 accumulation in PSUM) is accurate enough: "
                f"{how}, or run the model in BF16 (torch.autocast(device_type=\"neuron\") or bf16 weights)."),
        evidence={"kernel_share": share, "saved_ns": saved, "fp32_tensore_ns": sum(t for _, t in kernels),
                  "neffs": [n.neff_id for n, _ in kernels[:3]], "auto_cast": sorted(c or "unknown" for c in cast)},
    )


def _cpu_fallbacks(x: Inputs):
    """Ops without a device kernel ran on the CPU, with copies to and from the device."""
    fallback = [o for o in x.ops.ops if o.name == "cpu_fallback" or o.name.startswith("cpu_fallback:")]
    if not fallback:
        return None
    calls = sum(o.calls for o in fallback)
    time = sum(o.cpu_total_ns for o in fallback)
    span = max(1, x.idle.window_ns or (x.trace.end_ns - x.trace.start_ns))
    share = max(time / span, 0.2)  # correctness-adjacent: always worth reading, even when cheap
    fell_back = _fallback_ops(x.trace)
    return Recommendation(
        rule="cpu_fallbacks", severity=_severity(share), impact=share,
        title=f"CPU fallbacks present: {calls:,} op call(s) ran on the host",
        detail=(f"{', '.join(fell_back) or 'some ops'} had no NeuronCore kernel and ran on the CPU "
                f"({_us(time)} of host time, plus copies between host and device). Replace them with "
                f"supported ops, or set TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 to find them as errors."),
        evidence={"calls": calls, "host_ns": time, "ops": fell_back},
    )


def _fallback_ops(trace: Trace) -> list[str]:
    name_id = trace.strings.id_of("cpu_fallback")
    if name_id is None:
        return []
    rows = np.flatnonzero(trace.slices.name == name_id)[:200]
    return sorted({str(trace.slice_args(int(r)).get("op") or "") for r in rows} - {""})


def _compilation_in_window(x: Inputs):
    """NEFFs compiled inside the profiled window: warm-up did not cover them."""
    trace = x.trace
    name_id = trace.strings.id_of("neff_compile")
    if name_id is None:
        return None
    rows = np.flatnonzero(trace.slices.name == name_id)
    if not len(rows):
        return None
    time = int(trace.slices.dur_ns[rows].sum())
    share = time / max(1, x.idle.window_ns or (trace.end_ns - trace.start_ns))
    return Recommendation(
        rule="compilation_in_window", severity=_severity(share), impact=share,
        title=f"{len(rows):,} NEFF compilation(s) inside the profile",
        detail=(f"Compiling took {_us(time)} of the profiled window, which real runs pay only once. Run "
                f"the model a few times before profiling (or use a torch.profiler schedule with warmup) so the "
                f"profile shows steady-state dispatch."),
        evidence={"compilations": int(len(rows)), "compile_ns": time},
    )


def _small_dma(x: Inputs):
    device = x.device
    if device.source != "ntff" or not device.dma_transfers or device.dma_average_bytes >= SMALL_DMA_BYTES:
        return None
    dma = next((e for e in device.engines if e.engine == "dma"), None)
    busy = x.idle.window_share(x.idle.busy_ns) if x.idle.window_ns else 1.0
    share = (dma.active_percent / 100.0) * 0.5 * busy if dma else 0.1 * busy
    return Recommendation(
        rule="small_dma_transfers", severity=_severity(share), impact=share,
        title=f"Small DMA transfers: {device.dma_average_bytes / 1024:,.1f} KiB on average",
        detail=(f"{device.dma_transfers:,} DMA transfers moved {device.dma_bytes / 2**20:,.1f} MiB. Each transfer has a "
                f"fixed cost; transfers under {SMALL_DMA_BYTES // 1024} KiB waste DMA bandwidth. Use larger tiles or "
                f"contiguous layouts so each descriptor moves more bytes."),
        evidence={"dma_transfers": device.dma_transfers, "average_bytes": device.dma_average_bytes,
                  "dma_active_percent": dma.active_percent if dma else None},
    )


def _copies_dominate(x: Inputs):
    device = x.device
    if not device.device_time_ns or device.copy_time_ns < COPY_SHARE * device.device_time_ns:
        return None
    share = device.copy_time_ns / device.device_time_ns
    busy = x.idle.window_share(x.idle.busy_ns) if x.idle.window_ns else 1.0
    impact = share * max(busy, 0.05)
    if x.kind.kind in (CUDA, ROCM):
        advice = ("Keep tensors on the GPU between steps, copy from pinned memory with non_blocking=True so copies "
                  "overlap compute, and avoid .item()/.cpu() inside loops.")
        what = "Memcpy/Memset"
    else:
        advice = ("Keep tensors on the device between steps, copy results back once (not per op), and avoid "
                  ".item()/.cpu() inside loops.")
        what = "Host↔device copies"
    return Recommendation(
        rule="copies_dominate", severity=_severity(impact), impact=impact,
        title=f"{what} take {_share(share)} of device time",
        detail=f"{device.copies:,} copies moved {device.copy_bytes / 2**20:,.1f} MiB in {_us(device.copy_time_ns)}. {advice}",
        evidence={"copies": device.copies, "copy_bytes": device.copy_bytes, "copy_share": share,
                  "copy_ns": device.copy_time_ns},
    )


_RULES = (_many_small_dispatches, _host_bound, _dependency_wait, _exposed_communication, _below_roofline, _hbm_bound,
          _fp32_matmuls,
          _cpu_fallbacks, _compilation_in_window, _small_dma, _copies_dominate)
