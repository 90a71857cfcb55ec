"""The device summary: what the device did over a profile, as Neuron's Summary page reports it.

Two sources, best first:

* NTFF headers (Neuron profiles with DEVICE mode): per NEFF the simulator's summary (per-engine
  active time, FLOPs, HBM and DMA traffic, MFU/MBU); each NEFF's figures are weighted by how many
  times it ran in the profile, so a NEFF executed 100 times counts 100 times.
* The trace alone (CUDA traces, Neuron profiles without NTFFs): executions, device time, copies,
  and the per-execution MFU/MBU a Neuron framework trace carries in its args.

MFU and MBU over many executions are time-weighted averages, which equals total FLOPs (bytes)
over peak rate x total time: the figure Neuron reports for a region. With NTFFs each kernel's MFU
is against TensorE's peak for the dtype its matmuls streamed (:mod:`.tensor_peak`: FP32 at a quarter
of BF16's rate), so the profile's MFU is TensorE's ideal time at each kernel's own peak over device
time; ``mfu_bf16_percent`` keeps the figure against the BF16 peak (what the NTFF header records).
From the trace alone the executions' MFU is the one their args carry, against the BF16 peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace import Trace
from .device_work import DeviceWork, device_work
from .profile import Profile
from .profile_dir import ProfileFormatError, read_ntff_header
from .tensor_peak import BF16, LABELS, TensorPeak, ntff_peak

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma")


@dataclass
class EngineStat:
    engine: str
    active_ns: float
    active_percent: float
    instruction_count: int
    semaphore_wait_ns: float


@dataclass
class NeffStat:
    neff_id: str
    name: str
    executions: int
    device_time_ns: int
    framework_ops: list[str]
    cores: list[int]
    ntff: dict[int, str]  # NeuronCore -> NTFF file name (only those present on disk)
    executions_by_core: dict[int, int] = field(default_factory=dict)
    instruction_count: int = 0
    mfu_percent: float | None = None
    mbu_percent: float | None = None
    hbm_bytes: int = 0
    dma_transfers: int = 0
    dma_average_bytes: float = 0.0
    bottleneck: str = ""
    engines: dict[str, float] = field(default_factory=dict)  # engine -> active %
    auto_cast: str = ""  # the NTFF header's matmul_auto_cast: how its FP32 matmuls ran ("none": as FP32)
    # the TensorE peak its MFU is against (tensor_peak): FLOP/s (0: unknown), and which dtype's
    # ("FP32", "BF16", "mixed (FP32 60%, BF16 40% of FLOPs)"; "" without TensorE FLOPs)
    peak_flops_per_s: float = 0.0
    peak_dtype: str = ""
    flops_by_dtype: dict[str, float] = field(default_factory=dict)  # model FLOPs per streamed dtype
    mfu_bf16_percent: float | None = None  # against the BF16 peak, as the NTFF header records it

    def peak_text(self) -> str:
        """``FP32 peak 39.3 TFLOP/s``: what its MFU is a share of ("" without TensorE FLOPs)."""
        if not self.peak_dtype:
            return ""
        return f"{self.peak_dtype} peak" + (f" {self.peak_flops_per_s / 1e12:.1f} TFLOP/s" if self.peak_flops_per_s else "")


@dataclass
class DeviceSummary:
    source: str  # "ntff", "trace" or "none"
    executions: int = 0
    kernels: int = 0
    copies: int = 0
    device_time_ns: int = 0  # sum of execution durations (kernels and copies)
    kernel_time_ns: int = 0
    copy_time_ns: int = 0
    copy_bytes: int = 0
    programs: int = 0  # distinct NEFFs / kernels
    mfu_percent: float | None = None
    mbu_percent: float | None = None
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    dma_transfers: int = 0
    dma_bytes: int = 0
    dma_average_bytes: float = 0.0
    dma_active_ns: float = 0.0
    engines: list[EngineStat] = field(default_factory=list)
    bottleneck_time_ns: dict[str, int] = field(default_factory=dict)  # bottleneck -> kernel time
    neffs: list[NeffStat] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # NTFFs that could not be read
    target: str | None = None  # the Neuron target the NTFFs were simulated for (trn1, trn2)
    # what mfu_percent is a share of: with NTFFs, each kernel's own dtype peak; mfu_peak_flops_per_s
    # is then the profile's TensorE FLOPs over their ideal time (one dtype: that dtype's peak)
    mfu_peak: str = ""  # "FP32", "BF16", "mixed (FP32 60%, BF16 40% of FLOPs)"; "" without FLOPs
    mfu_peak_flops_per_s: float = 0.0
    mfu_bf16_percent: float | None = None  # the same FLOPs against the BF16 peak
    flops_by_dtype: dict[str, float] = field(default_factory=dict)  # model FLOPs per dtype, all executions

    def mfu_text(self) -> str:
        """What the MFU is a share of: ``MFU 82.1% of FP32 peak 39.3 TFLOP/s (20.5% of BF16 peak)``;
        mixed dtypes: ``MFU 53.0% of each kernel's dtype peak (FP32 60%, BF16 40% of FLOPs: 65.5
        TFLOP/s over all; 21.6% of BF16 peak)``; no FLOPs or no peak known: ``MFU 0.0%``."""
        if self.mfu_percent is None:
            return "MFU -"
        if not self.mfu_peak:
            return f"MFU {self.mfu_percent:.1f}%"
        rate = f"{self.mfu_peak_flops_per_s / 1e12:.1f} TFLOP/s" if self.mfu_peak_flops_per_s else ""
        bf16 = (f"{self.mfu_bf16_percent:.1f}% of BF16 peak" if self.mfu_bf16_percent is not None
                and not self.mfu_peak.startswith(LABELS[BF16]) else "")
        if self.mfu_peak.startswith("mixed"):
            inner = self.mfu_peak[len("mixed ("):-1]
            more = "; ".join(x for x in (f"{inner}: {rate} over all" if rate else inner, bf16) if x)
            return f"MFU {self.mfu_percent:.1f}% of each kernel's dtype peak ({more})"
        return f"MFU {self.mfu_percent:.1f}% of {self.mfu_peak} peak" + (f" {rate}" if rate else "") + \
            (f" ({bf16})" if bf16 else "")

    def mfu_scales(self) -> dict[str, float]:
        """NEFF id -> the factor from its MFU against the BF16 peak to its MFU against its own peak."""
        return {n.neff_id: n.mfu_percent / n.mfu_bf16_percent for n in self.neffs
                if n.mfu_percent is not None and n.mfu_bf16_percent}

    def to_dict(self) -> dict:
        return asdict(self)


def device_summary(profile: Profile) -> DeviceSummary:
    trace = profile.trace
    work = device_work(trace)
    summary = _from_trace(trace, work)
    if profile.files is not None and profile.files.ntffs:
        _add_ntff(summary, profile, work)
    return summary


def _from_trace(trace: Trace, work: DeviceWork) -> DeviceSummary:
    if not len(work):
        return DeviceSummary(source="none")
    duration = work.end - work.start
    kernels = ~work.is_copy
    summary = DeviceSummary(
        source="trace", executions=len(work), kernels=int(kernels.sum()), copies=int(work.is_copy.sum()),
        device_time_ns=int(duration.sum()), kernel_time_ns=int(duration[kernels].sum()),
        copy_time_ns=int(duration[work.is_copy].sum()), copy_bytes=int(work.bytes[work.is_copy].sum()),
        programs=len(set(work.program[kernels].tolist())),
    )
    summary.mfu_percent = _time_weighted(work, kernels, "mfu_estimated_percent")
    if summary.mfu_percent is not None:  # a Neuron framework trace's per-execution figure
        summary.mfu_peak, summary.mfu_bf16_percent = LABELS[BF16], summary.mfu_percent
    summary.mbu_percent = _time_weighted(work, kernels, "mbu_estimated_percent")
    summary.hbm_read_bytes = sum(int(a.hbm_read_bytes or 0) for a in work.args)
    summary.hbm_write_bytes = sum(int(a.hbm_write_bytes or 0) for a in work.args)
    for i in np.flatnonzero(kernels).tolist():
        key = str(work.args[i].bottleneck or "")
        if key:
            summary.bottleneck_time_ns[key] = summary.bottleneck_time_ns.get(key, 0) + int(duration[i])
    summary.neffs = _neff_stats_from_trace(trace, work)
    return summary


def _time_weighted(work: DeviceWork, mask: np.ndarray, key: str) -> float | None:
    chosen = np.flatnonzero(mask)
    values = [getattr(work.args[i], key) for i in chosen.tolist()]
    if not values or any(v is None for v in values):
        return None
    weights = (work.end - work.start)[chosen].astype(np.float64)
    total = weights.sum()
    return float(np.dot(np.asarray(values, dtype=np.float64), weights) / total) if total else None


def _neff_stats_from_trace(trace: Trace, work: DeviceWork) -> list[NeffStat]:
    stats: dict[str, NeffStat] = {}
    names = trace.slice_names(work.rows)
    for i in np.flatnonzero(~work.is_copy).tolist():
        args = work.args[i]
        neff_id = args.neff_id
        if neff_id is None:
            continue
        stat = stats.get(str(neff_id))
        if stat is None:
            stat = stats[str(neff_id)] = NeffStat(
                neff_id=str(neff_id), name=str(args.neff_name or names[i]), executions=0, device_time_ns=0,
                framework_ops=[], cores=[], ntff={}, bottleneck=str(args.bottleneck or ""),
                mfu_percent=args.mfu_estimated_percent, mbu_percent=args.mbu_estimated_percent,
                instruction_count=int(args.instructions or 0),
            )
        stat.executions += 1
        stat.device_time_ns += int(work.end[i] - work.start[i])
        stat.hbm_bytes += int(work.bytes[i])
        op = args.op
        if op and op not in stat.framework_ops:
            stat.framework_ops.append(str(op))
        core = args.device
        if isinstance(core, int):
            if core not in stat.cores:
                stat.cores.append(core)
            stat.executions_by_core[core] = stat.executions_by_core.get(core, 0) + 1
        if args.ntff and isinstance(core, int):
            stat.ntff[core] = str(args.ntff)
    return sorted(stats.values(), key=lambda s: -s.device_time_ns)


def _add_ntff(summary: DeviceSummary, profile: Profile, work: DeviceWork) -> None:
    """Engine, FLOP and DMA figures from the NTFF headers, weighted by executions in the trace."""
    by_id = {s.neff_id: s for s in summary.neffs}
    engine_active = dict.fromkeys(ENGINES, 0.0)
    engine_count = dict.fromkeys(ENGINES, 0)
    engine_wait = dict.fromkeys(ENGINES, 0.0)
    weighted_time = mfu_time = mfu_bf16_time = mbu_time = 0.0
    work_peak = TensorPeak()
    hbm_read = hbm_write = dma_count = dma_bytes = 0
    dma_active = 0.0
    seen = False
    files = profile.files
    if files is None:
        return
    for (neff_id, core), path in sorted(files.ntffs.items()):
        try:
            header = read_ntff_header(path)
        except (ProfileFormatError, OSError) as exc:
            summary.problems.append(str(exc))
            continue
        stat = by_id.get(neff_id)
        # how often it ran on this core in the profile: the trace knows; else the NTFF's own list
        runs = stat.executions_by_core.get(core, 0) if stat is not None else len(header.get("executions") or [])
        if runs == 0:
            continue
        seen = True
        summary.target = summary.target or header.get("target")
        s = header.get("summary") or {}
        total = float(s.get("total_time_ns") or 0.0)
        weighted_time += runs * total
        mfu_bf16 = float(s.get("mfu_estimated_percent") or 0.0)
        peak = ntff_peak(path, header)
        mfu = mfu_bf16 * peak.slowdown  # against its own dtype's peak (tensor_peak)
        mfu_time += runs * total * mfu
        mfu_bf16_time += runs * total * mfu_bf16
        work_peak.add(peak, runs)
        mbu_time += runs * total * float(s.get("mbu_estimated_percent") or 0.0)
        hbm_read += runs * int(s.get("hbm_read_bytes") or 0)
        hbm_write += runs * int(s.get("hbm_write_bytes") or 0)
        dma_count += runs * int(s.get("dma_transfer_count") or 0)
        dma_bytes += runs * int(s.get("dma_transfer_total_bytes") or 0)
        for engine, values in (s.get("engines") or {}).items():
            if engine in engine_active:
                engine_active[engine] += runs * float(values.get("active_time_ns") or 0.0)
                engine_count[engine] += runs * int(values.get("instruction_count") or 0)
                engine_wait[engine] += runs * float(values.get("semaphore_wait_ns") or 0.0)
        dma_active += runs * float(((s.get("engines") or {}).get("dma") or {}).get("active_time_ns") or 0.0)
        if stat is not None:
            stat.ntff[core] = path.name
            stat.instruction_count = int(header.get("instruction_count") or s.get("instruction_count") or 0)
            stat.dma_transfers = int(s.get("dma_transfer_count") or 0)
            stat.dma_average_bytes = float(s.get("dma_transfer_average_bytes") or 0.0)
            stat.bottleneck = str(s.get("bottleneck") or stat.bottleneck)
            stat.mfu_percent = mfu
            stat.mfu_bf16_percent = mfu_bf16
            stat.peak_dtype, stat.peak_flops_per_s = peak.label(), peak.peak_flops_per_s
            stat.flops_by_dtype = dict(peak.flops_by_dtype)
            stat.mbu_percent = float(s.get("mbu_estimated_percent") or 0.0)
            stat.engines = {e: float(v.get("active_time_percent") or 0.0) for e, v in (s.get("engines") or {}).items()}
            stat.auto_cast = str(header.get("matmul_auto_cast") or "")
            if not stat.framework_ops:
                stat.framework_ops = [str(o) for o in header.get("framework_ops") or []]
    if not seen or weighted_time <= 0:
        return
    summary.source = "ntff"
    summary.mfu_percent = mfu_time / weighted_time
    summary.mfu_bf16_percent = mfu_bf16_time / weighted_time
    summary.flops_by_dtype = dict(work_peak.flops_by_dtype)
    # the FLOP-weighted peak: all TensorE FLOPs over their ideal time (one dtype: its peak)
    summary.mfu_peak = work_peak.label() if work_peak.flops else ""
    summary.mfu_peak_flops_per_s = work_peak.peak_flops_per_s if work_peak.flops else 0.0
    summary.mbu_percent = mbu_time / weighted_time
    summary.hbm_read_bytes, summary.hbm_write_bytes = hbm_read, hbm_write
    summary.dma_transfers, summary.dma_bytes = dma_count, dma_bytes
    summary.dma_average_bytes = dma_bytes / dma_count if dma_count else 0.0
    summary.dma_active_ns = dma_active
    summary.engines = [
        EngineStat(engine=e, active_ns=engine_active[e], active_percent=100.0 * engine_active[e] / weighted_time,
                   instruction_count=engine_count[e], semaphore_wait_ns=engine_wait[e])
        for e in ENGINES
    ]

