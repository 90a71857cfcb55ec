"""What limits a NEFF: its roofline position, and when it is far below both roofs, why.

A kernel's roofline bound is max(HBM bytes / bandwidth, FLOPs / peak). MFU and MBU say how close
it gets to each roof, so the limiter is read off them first (thresholds below):

* MBU >= ``NEAR_ROOF_PERCENT`` (or at least ``LEADING_PERCENT`` and 1.5x its MFU): **HBM bandwidth**;
* MFU >= ``NEAR_ROOF_PERCENT`` (or at least ``LEADING_PERCENT`` and above its MBU): **TensorE compute**;
* both under ``FAR_BELOW_PERCENT``: the kernel is far below its roofline and its NTFF says why:

  - its DMA queues are busy (``BUSY_PERCENT`` of the kernel or more) but its transfers move data at
    under ``SLOW_DMA_SHARE`` of HBM bandwidth: **DMA descriptors**. A transfer is a list of
    descriptors, one per contiguous run; each pays a fixed cost, so runs under the 2 KiB knee are
    overhead-bound (docs/cost-model.md "DMA"). The slow transfers' contiguous run is read from their
    operand text and the framework op that issued them named;
  - DMA queues busy with fast transfers: **DMA queues** (too many transfers in flight for the
    queues, or each transfer's 1.3 us setup exposed);
  - a compute engine busy ``BUSY_PERCENT`` or more: that **engine** (its instruction stream);
  - nothing busy: **latency** (the engines wait on each other's semaphores, or fixed costs
    dominate a kernel too small to fill the core).

Between the bands (30-60%) the larger of MFU and MBU names the limiter, marked as partial.

MFU is against TensorE's peak for the dtype the kernel's matmuls streamed (:mod:`.tensor_peak`), so
an FP32 matmul compiled with ``--auto-cast none`` is held to FP32's quarter rate: at 80% of that it
is TensorE-bound near its roof, and the explanation says that BF16 operands would lift the roof.

HBM bandwidth comes from the NTFF itself (MBU = HBM bytes / (bandwidth x time)), so no target
figure is repeated here.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .device import DeviceSummary, NeffStat
from .profile import Profile
from .profile_dir import ProfileFormatError, read_ntff

NEAR_ROOF_PERCENT = 60.0
LEADING_PERCENT = 40.0
FAR_BELOW_PERCENT = 30.0
BUSY_PERCENT = 60.0
SLOW_DMA_SHARE = 0.10  # a transfer moving data at under 10% of HBM bandwidth
DESCRIPTOR_KNEE_BYTES = 2048  # docs/cost-model.md: runs under 2 KiB are overhead-bound

HBM = "HBM bandwidth"
COMPUTE = "TensorE compute"
DESCRIPTORS = "DMA descriptors"
DMA_QUEUES = "DMA queues"
LATENCY = "latency"
ENGINE_NAMES = {"tensor": "TensorE", "vector": "VectorE", "scalar": "ScalarE", "gpsimd": "GpSimdE", "sync": "SyncE"}


@dataclass
class KernelLimit:
    neff_id: str
    name: str
    ops: list[str]
    device_time_ns: int
    executions: int
    mfu_percent: float | None
    mbu_percent: float | None
    limiter: str
    far_below_roofline: bool
    explanation: str
    position: str = ""  # "near" its roofline (>= 60% of a roof), "below" (>= 30%), "far below"
    evidence: dict = field(default_factory=dict)
    auto_cast: str = ""  # how its FP32 matmuls ran (compiler.precision): "matmult/bf16", "none", "" unknown
    peak_dtype: str = ""  # the TensorE peak its MFU is against: "FP32", "BF16", "mixed (...)", "" no FLOPs
    peak_flops_per_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def kernel_limit(neff: NeffStat, profile: Profile | None = None) -> KernelLimit:
    limit = _kernel_limit(neff, profile)
    limit.auto_cast = neff.auto_cast
    limit.peak_dtype, limit.peak_flops_per_s = neff.peak_dtype, neff.peak_flops_per_s
    if neff.auto_cast and neff.auto_cast != "none":
        limit.explanation += f"; its FP32 matmuls ran auto-cast ({neff.auto_cast}, neuronx-cc --auto-cast)"
    elif _fp32_share(neff) >= 0.5 and (neff.mfu_percent or 0) >= FAR_BELOW_PERCENT:
        # TensorE at FP32's quarter rate: the roof itself is what a cast moves
        limit.explanation += ("; its matmuls streamed FP32, at a quarter of TensorE's BF16 rate: BF16 operands "
                              "(neuronx-cc's default --auto-cast matmult, or bf16 tensors) lift that roof 4x")
    if limit.mfu_percent is not None and limit.mbu_percent is not None:
        best = max(limit.mfu_percent, limit.mbu_percent)
        limit.position = "near" if best >= NEAR_ROOF_PERCENT else "below" if best >= FAR_BELOW_PERCENT else "far below"
    return limit


def _fp32_share(neff: NeffStat) -> float:
    total = sum(neff.flops_by_dtype.values())
    return neff.flops_by_dtype.get("fp32", 0.0) / total if total else 0.0


def _peak_words(neff: NeffStat) -> str:
    """``TensorE's FP32 peak (39.3 TFLOP/s)``: what its MFU is a share of."""
    if not neff.peak_dtype:
        return "TensorE peak"
    rate = f" ({neff.peak_flops_per_s / 1e12:.1f} TFLOP/s)" if neff.peak_flops_per_s else ""
    return f"TensorE's {neff.peak_dtype} peak{rate}"


def _kernel_limit(neff: NeffStat, profile: Profile | None) -> KernelLimit:
    mfu, mbu = neff.mfu_percent, neff.mbu_percent
    common: dict[str, Any] = dict(neff_id=neff.neff_id, name=neff.name, ops=list(neff.framework_ops),
                  device_time_ns=neff.device_time_ns, executions=neff.executions, mfu_percent=mfu, mbu_percent=mbu)
    if mfu is None or mbu is None:
        return KernelLimit(limiter="", far_below_roofline=False, explanation="no MFU/MBU recorded", **common)
    evidence = {"mfu_percent": round(mfu, 2), "mbu_percent": round(mbu, 2)}
    if mbu >= NEAR_ROOF_PERCENT or (mbu >= LEADING_PERCENT and mbu >= 1.5 * mfu):
        near = "near its roofline: only moving fewer bytes makes it faster" if mbu >= NEAR_ROOF_PERCENT else \
            f"closer to it than to TensorE's ({mfu:.0f}% of its {neff.peak_dtype or 'BF16'} peak)"
        return KernelLimit(limiter=HBM, far_below_roofline=False, evidence=evidence,
                           explanation=f"at {mbu:.0f}% of HBM bandwidth, {near}", **common)
    if mfu >= NEAR_ROOF_PERCENT or (mfu >= LEADING_PERCENT and mfu > mbu):
        near = "near its roofline" if mfu >= NEAR_ROOF_PERCENT else f"closer to it than to HBM's ({mbu:.0f}%)"
        return KernelLimit(limiter=COMPUTE, far_below_roofline=False, evidence=evidence,
                           explanation=f"at {mfu:.0f}% of {_peak_words(neff)}, {near}", **common)
    if max(mfu, mbu) >= FAR_BELOW_PERCENT:
        which = HBM if mbu >= mfu else COMPUTE
        return KernelLimit(limiter=f"{which} (partly)", far_below_roofline=False, evidence=evidence,
                           explanation=f"MBU {mbu:.0f}%, MFU {mfu:.0f}% of {_peak_words(neff)}: neither roof is "
                                       f"reached", **common)
    limiter, explanation, more = _far_below(neff, profile)
    return KernelLimit(limiter=limiter, far_below_roofline=True, explanation=explanation,
                       evidence={**evidence, **more}, **common)


def _far_below(neff: NeffStat, profile: Profile | None) -> tuple[str, str, dict]:
    engines = neff.engines or {}
    dma_busy = float(engines.get("dma") or 0.0)
    evidence: dict = {"engine_active_percent": {k: round(v, 1) for k, v in engines.items()}}
    if dma_busy >= BUSY_PERCENT:
        slow = _slow_transfers(neff, profile)
        if slow is not None:
            evidence.update(slow)
        if slow is not None and slow["slow_share_of_dma_time"] >= 0.5:
            run = slow.get("contiguous_run_bytes")
            where = f" issued by {', '.join(slow['ops'])}" if slow.get("ops") else ""
            runs = f", walking {run}-byte contiguous runs" if run else ""
            return DESCRIPTORS, (
                f"its DMA queues are busy {dma_busy:.0f}% of the kernel, yet {slow['slow_transfers']} of "
                f"{slow['transfers']} transfers{where} move data at {slow['slow_rate_gb_s']:.2f} GB/s "
                f"({100 * slow['slow_rate_share']:.1f}% of HBM bandwidth){runs}: each DMA descriptor carries a fixed "
                f"cost, and descriptors under {DESCRIPTOR_KNEE_BYTES // 1024} KiB are overhead-bound"), evidence
        return DMA_QUEUES, (f"its DMA queues are busy {dma_busy:.0f}% of the kernel with transfers that each run fast: "
                            f"{neff.dma_transfers} transfers of {_size(neff.dma_average_bytes)} on average"), evidence
    busy = {k: v for k, v in engines.items() if k != "dma" and v >= BUSY_PERCENT}
    if busy:
        engine = max(busy, key=lambda k: busy[k])
        name = ENGINE_NAMES.get(engine, engine)
        return name, f"{name} is busy {busy[engine]:.0f}% of the kernel: its instruction stream sets the pace", evidence
    top = max(engines.items(), key=lambda kv: kv[1]) if engines else ("", 0.0)
    return LATENCY, (f"no engine is busy (the busiest, {ENGINE_NAMES.get(top[0], top[0]) or '-'}, {top[1]:.0f}%): "
                     f"engines wait on each other or on fixed costs"), evidence


def _slow_transfers(neff: NeffStat, profile: Profile | None) -> dict | None:
    """The NEFF's DMA transfers that run far below HBM bandwidth: how many, how slow, whose."""
    if profile is None or profile.files is None:
        return None
    path = next((profile.files.ntffs[(neff.neff_id, core)] for core in sorted(neff.ntff)
                 if (neff.neff_id, core) in profile.files.ntffs), None)
    if path is None:
        return None
    try:
        ntff = read_ntff(path, verify=False)
    except (ProfileFormatError, OSError):
        return None
    dma = ntff.table("dma")
    summary = ntff.header.get("summary") or {}
    if not dma or "transfer_bytes" not in dma:
        return None
    moved = dma["transfer_bytes"].astype(np.float64)
    took = np.maximum(dma["end_ns"] - dma["data_start_ns"], 1e-9)
    bandwidth = _hbm_bytes_per_ns(summary) or float((moved / took).max())
    if not bandwidth:
        return None
    rate = moved / took
    slow = rate < SLOW_DMA_SHARE * bandwidth
    if not slow.any():
        return {"transfers": int(len(moved)), "slow_transfers": 0, "slow_share_of_dma_time": 0.0}
    ops = sorted({str(o) for o in dma.get("framework_op", np.array([], dtype=object))[slow] if o})
    runs = [r for r in (contiguous_run_bytes(str(t)) for t in dma.get("operands", [])[slow][:64]) if r]
    slow_rate = float(moved[slow].sum() / took[slow].sum())
    return {
        "transfers": int(len(moved)), "slow_transfers": int(slow.sum()),
        "slow_share_of_dma_time": float(took[slow].sum() / took.sum()),
        "slow_rate_gb_s": slow_rate, "slow_rate_share": slow_rate / bandwidth, "hbm_gb_s": bandwidth,
        "contiguous_run_bytes": int(min(runs)) if runs else None, "ops": ops or list(neff.framework_ops),
    }


def _hbm_bytes_per_ns(summary: dict) -> float | None:
    moved = float(summary.get("hbm_read_bytes") or 0) + float(summary.get("hbm_write_bytes") or 0)
    mbu = float(summary.get("mbu_estimated_percent") or 0)
    total = float(summary.get("total_time_ns") or 0)
    return moved / (mbu / 100.0 * total) if moved and mbu and total else None


# Operand text as the NTFF writes it (docs/file-formats.md): ``fp32@hbm:t0+0[1024x128;1x1024]`` is
# dtype, space, tensor + element offset, [partition stride x partitions; stride x size, ...].
_OPERAND = re.compile(r"(\w+)@(?:hbm:t\d+|sb|ps)(?:\[\d+:\d+\])?\+[-\w]+\[(?:(-?\d+)x(\d+);)?([^\]]*)\]")
_ITEMSIZE = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "int32": 4, "uint32": 4,
             "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "int64": 8, "float8_e4m3": 1, "float8_e5m2": 1,
             "fp8": 1, "bool": 1}


def contiguous_run_bytes(operands: str) -> int | None:
    """Bytes per contiguous run of a DMA transfer: the shorter of its two sides' runs (a descriptor
    cannot be longer than either). None when the text cannot be read."""
    runs = []
    for dtype, _pstride, _partitions, dims in _OPERAND.findall(operands):
        size = _ITEMSIZE.get(dtype)
        if size is None:
            return None
        run = 1
        for part in reversed([d for d in dims.split(",") if d]):
            try:
                stride, count = (int(v) for v in part.split("x"))
            except ValueError:
                return None
            if count == 1:
                continue
            if stride != run:
                break
            run *= count
        runs.append(run * size)
    return min(runs) if runs else None


def _size(nbytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 1024)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def kernel_limits(device: DeviceSummary, profile: Profile | None, top: int = 5) -> list[KernelLimit]:
    """The costliest NEFFs' limiters (by device time)."""
    return [kernel_limit(n, profile) for n in sorted(device.neffs, key=lambda n: -n.device_time_ns)[:top]]
