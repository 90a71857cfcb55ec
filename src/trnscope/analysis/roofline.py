"""The roofline of a Neuron profile: per NEFF and per framework op, arithmetic intensity (model
FLOPs per HBM byte) against attained FLOP/s, under the target's compute and bandwidth roofs.

A point's roof is min(peak FLOP/s, intensity x HBM bandwidth); the ridge (peak / bandwidth) splits
memory-bound from compute-bound intensities. The peak is the point's own: TensorE's peak for the
dtype its matmuls streamed (:mod:`.tensor_peak`: FP32 at a quarter of BF16's rate, a mix held to
its FLOPs' ideal time), so an FP32 matmul compiled with ``--auto-cast none`` has FP32's roof and
ridge, and the same matmul auto-cast to BF16 has BF16's. The roofs are read off the NTFFs themselves
where they can be (MFU = model FLOPs / (BF16 peak x time), MBU = HBM bytes / (bandwidth x time), so
a profile made with a changed spec has its own roofs), else from the target's spec (``trnscope.hw``).

FLOPs are the simulator's *model* FLOPs, the TensorE matmul work MFU counts; element-wise and
reduction kernels have none, so they sit on the intensity-0 edge (shown apart in the chart, said so
in the table), where only their bandwidth use (MBU) tells how far from their roof they are.

Per op: a compiled NEFF holds many ops, so each op's share is read from the NEFF's instruction
table (its instructions' FLOPs and HBM bytes, and the time any of them was running), weighted by
how often the NEFF ran. Only the costliest ``MAX_OP_NEFFS`` NEFFs' tables are read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from .device import DeviceSummary
from .profile import Profile
from .profile_dir import ProfileFormatError, read_ntff, read_ntff_header
from .instructions import group_time, op_names
from .tensor_peak import BF16, LABELS, TensorPeak, fp32_factor_of, ntff_peak, peak_flops

MAX_OP_NEFFS = 64
MEMORY, COMPUTE, NO_FLOPS = "memory", "compute", "no TensorE FLOPs"


@dataclass
class RooflinePoint:
    kind: str  # "neff" or "op"
    name: str
    neff_id: str  # the NEFF (for an op: the costliest NEFF it ran in), whose device trace a click opens
    nc: int | None
    ops: list[str]
    executions: int
    time_ns: float  # total over the profile
    flops: float  # total model FLOPs
    hbm_bytes: float  # total HBM bytes read + written
    intensity: float  # FLOPs per HBM byte
    flops_per_s: float
    bytes_per_s: float
    roof_flops_per_s: float  # min(peak, intensity x bandwidth)
    of_roof: float | None  # attained / roof (None without FLOPs)
    bandwidth_share: float  # attained HBM bytes/s over the bandwidth roof (MBU)
    bound: str  # MEMORY, COMPUTE or NO_FLOPS (by intensity against the ridge)
    peak_flops_per_s: float = 0.0  # TensorE's peak for its dtype(s): its compute roof
    peak_dtype: str = ""  # "FP32", "BF16", "mixed (FP32 60%, BF16 40% of FLOPs)"; "" without FLOPs
    ridge: float = 0.0  # its peak / HBM bandwidth (FLOP/B)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Roofline:
    target: str | None
    peak_flops_per_s: float  # TensorE's BF16 peak (its top rate); each point has its dtype's own
    hbm_bytes_per_s: float
    roofs_from: str  # "ntff" or "spec"
    neffs: list[RooflinePoint] = field(default_factory=list)
    ops: list[RooflinePoint] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fp32_factor: float = 4.0  # the target's FP32 matmul factor: FP32's peak is BF16's / this

    @property
    def ridge(self) -> float:
        """The BF16 roof's ridge (FLOP/B)."""
        return self.peak_flops_per_s / self.hbm_bytes_per_s if self.hbm_bytes_per_s else 0.0

    def peaks(self) -> dict[str, float]:
        """The compute roofs the points are under: each single dtype among them (BF16 always), peak
        FLOP/s, highest first. A mixed-dtype point's roof lies between them."""
        used = {LABELS[BF16]: self.peak_flops_per_s}
        for p in (*self.neffs, *self.ops):
            if p.peak_dtype and not p.peak_dtype.startswith("mixed") and p.peak_flops_per_s:
                used[p.peak_dtype.split(" ")[0]] = p.peak_flops_per_s
        return dict(sorted(used.items(), key=lambda kv: -kv[1]))

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ridge"] = self.ridge
        out["peaks"] = [{"dtype": d, "flops_per_s": f, "ridge": f / self.hbm_bytes_per_s if self.hbm_bytes_per_s else 0.0}
                        for d, f in self.peaks().items()]
        return out


def roofline(profile: Profile, device: DeviceSummary) -> Roofline:
    files = profile.files
    result = Roofline(target=device.target, peak_flops_per_s=0.0, hbm_bytes_per_s=0.0, roofs_from="spec")
    if files is None or not files.ntffs or device.source != "ntff":
        return result
    stats = {n.neff_id: n for n in device.neffs}
    headers = {}
    peaks, bandwidths = [], []
    for (neff_id, core), path in sorted(files.ntffs.items()):
        stat = stats.get(neff_id)
        runs = stat.executions_by_core.get(core, 0) if stat is not None else 0
        if runs == 0:
            continue
        try:
            header = read_ntff_header(path)
        except (ProfileFormatError, OSError) as exc:
            result.problems.append(str(exc))
            continue
        headers[(neff_id, core)] = (header, runs, path)
        s = header.get("summary") or {}
        seconds = float(s.get("total_time_ns") or 0.0) * 1e-9
        flops = float(s.get("model_flops") or 0.0)
        hbm = float(s.get("hbm_read_bytes") or 0) + float(s.get("hbm_write_bytes") or 0)
        mfu, mbu = float(s.get("mfu_estimated_percent") or 0.0), float(s.get("mbu_estimated_percent") or 0.0)
        if seconds and flops and mfu:
            peaks.append(flops / (mfu / 100 * seconds))
        if seconds and hbm and mbu:
            bandwidths.append(hbm / (mbu / 100 * seconds))
    spec = _spec(device.target)
    if peaks and bandwidths:
        result.roofs_from = "ntff"
    result.peak_flops_per_s = float(np.median(peaks)) if peaks else (spec.peak_bf16_flops if spec else 0.0)
    result.hbm_bytes_per_s = float(np.median(bandwidths)) if bandwidths else (spec.hbm_bytes_per_s_per_core if spec else 0.0)
    result.fp32_factor = fp32_factor_of(device.target)
    if not result.peak_flops_per_s or not result.hbm_bytes_per_s:
        result.problems.append(f"no roofs: unknown target {device.target!r}")
        return result

    # per NEFF (over all cores it ran on)
    per_neff: dict[str, list] = {}
    for (neff_id, core), (header, runs, path) in headers.items():
        s = header.get("summary") or {}
        acc = per_neff.setdefault(neff_id, [0.0, 0.0, 0.0, 0, core, TensorPeak(fp32_factor=result.fp32_factor)])
        acc[0] += runs * float(s.get("total_time_ns") or 0.0)
        acc[1] += runs * float(s.get("model_flops") or 0.0)
        acc[2] += runs * (float(s.get("hbm_read_bytes") or 0) + float(s.get("hbm_write_bytes") or 0))
        acc[3] += runs
        acc[5].add(ntff_peak(path, header), runs)
    for neff_id, (time_ns, flops, hbm, runs, core, work) in per_neff.items():
        stat = stats[neff_id]
        result.neffs.append(_point(result, "neff", stat.name, neff_id, core, list(stat.framework_ops), runs, time_ns,
                                   flops, hbm, work))
    result.neffs.sort(key=lambda p: -p.time_ns)

    # per op, from the costliest NEFFs' instruction tables
    costly = {p.neff_id for p in result.neffs[:MAX_OP_NEFFS]}
    per_op: dict[str, list] = {}
    for (neff_id, core), (header, runs, path) in headers.items():
        if neff_id not in costly:
            continue
        try:
            table = read_ntff(path).table("instruction")
        except (ProfileFormatError, OSError) as exc:
            result.problems.append(str(exc))
            continue
        for op, time_ns, flops, hbm, by_dtype in _op_shares(table):
            acc = per_op.setdefault(op, [0.0, 0.0, 0.0, 0, {}, TensorPeak(fp32_factor=result.fp32_factor)])
            acc[0] += runs * time_ns
            acc[1] += runs * flops
            acc[2] += runs * hbm
            acc[3] += runs
            acc[4][(neff_id, core)] = acc[4].get((neff_id, core), 0.0) + runs * time_ns
            acc[5].add(TensorPeak(flops_by_dtype=by_dtype), runs)
    for op, (time_ns, flops, hbm, runs, where, work) in per_op.items():
        (neff_id, core) = max(where, key=where.get)
        result.ops.append(_point(result, "op", op, neff_id, core, [op], runs, time_ns, flops, hbm, work))
    result.ops.sort(key=lambda p: -p.time_ns)
    return result


def _op_shares(table: dict[str, np.ndarray]):
    """(op, busy ns, model FLOPs, HBM bytes, FLOPs by dtype) per framework op of one NEFF's instructions."""
    return [(g.key, g.busy_ns, g.model_flops, g.hbm_bytes, g.flops_by_dtype) for g in group_time(table, op_names(table))]


def _point(r: Roofline, kind: str, name: str, neff_id: str, nc, ops, runs, time_ns, flops, hbm,
           work: TensorPeak | None = None) -> RooflinePoint:
    """``work``: its FLOPs by dtype (their proportions set its peak; none known: BF16's)."""
    seconds = time_ns * 1e-9
    intensity = flops / hbm if hbm else (float("inf") if flops else 0.0)
    attained = flops / seconds if seconds else 0.0
    if work is not None and work.flops:
        work.bf16_peak, work.fp32_factor = r.peak_flops_per_s, r.fp32_factor
        peak, label = work.peak_flops_per_s, work.label()
    else:
        peak, label = peak_flops(r.peak_flops_per_s, BF16), (LABELS[BF16] if flops else "")
    ridge = peak / r.hbm_bytes_per_s if r.hbm_bytes_per_s else 0.0
    roof = min(peak, intensity * r.hbm_bytes_per_s) if flops else 0.0
    bound = NO_FLOPS if not flops else (COMPUTE if intensity >= ridge else MEMORY)
    return RooflinePoint(kind=kind, name=name, neff_id=str(neff_id), nc=nc, ops=ops, executions=int(runs),
                         time_ns=float(time_ns), flops=float(flops), hbm_bytes=float(hbm),
                         intensity=float(intensity) if np.isfinite(intensity) else 1e12, flops_per_s=attained,
                         bytes_per_s=hbm / seconds if seconds else 0.0, roof_flops_per_s=float(roof),
                         of_roof=attained / roof if roof else None,
                         bandwidth_share=(hbm / seconds) / r.hbm_bytes_per_s if seconds else 0.0, bound=bound,
                         peak_flops_per_s=float(peak) if flops else 0.0, peak_dtype=label, ridge=float(ridge) if flops else 0.0)


def _spec(target: str | None):
    from ..hw import UnknownInstanceError, resolve

    try:
        return resolve(target) if target else None
    except (UnknownInstanceError, ValueError):
        return None
