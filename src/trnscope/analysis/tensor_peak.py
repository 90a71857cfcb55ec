"""TensorE's peak for the work a kernel did: the one definition MFU, the compute roof, the ridge
point and the memory/compute classification use.

TensorE's rate depends on the dtype it streams: FP32 operands cost ``fp32_matmul_factor`` (4) times
the BF16 cycles, BF16/FP16/FP8 cost the same (hardware.md 2.4 and the ``nc_matmul`` cost table;
the simulator's ``MultiplyMoving.cycles`` applies exactly that rule: a 4-byte moving operand runs at
the FP32 rate, any narrower one at the BF16 rate). So the peak of a matmul is the spec's
``peak_bf16_flops`` for BF16/FP16/FP8 and ``peak_fp32_flops`` (= BF16 / 4) for FP32. NC-v3's
double-FP8 mode (2x FP8 throughput at K = 256) is not in the spec or the cost model, so FP8 work
is held to the BF16 peak, the rate it is costed at.

Which dtype ran is read off the instructions themselves, not guessed from the framework's dtype:
each MATMUL's operand text starts with the moving operand's dtype (``fp32@sb[0:128]...``), and its
``model_flops`` are the FLOPs MFU counts. That covers the compiler's precision setting: with
neuronx-cc's default ``--auto-cast matmult`` an FP32 ``torch.mm`` streams BF16 (the NTFF header's
``matmul_auto_cast`` says ``matmult/bf16``) and its peak is BF16's; with ``--auto-cast none`` it
streams FP32 and its peak is FP32's.

A kernel that mixes dtypes (a compiled graph with FP32 and BF16 matmuls) is held to the time its
work needs at full rate: ideal time = sum over dtypes of FLOPs_d / peak_d, its peak = FLOPs /
ideal time (the FLOP-weighted harmonic mean of the dtype peaks). That is the compute term of the
roofline bound, max(HBM bytes / bandwidth, sum FLOPs_d / peak_d), so MFU = ideal time / time is
exactly "how far from its compute roof", and 100% is reachable. A profile's MFU is the same
quantity summed over every execution: TensorE's ideal time at each kernel's own peak over device
time (the time-weighted mean of the kernels' MFUs).

Peaks are expressed relative to BF16's (``slowdown`` = BF16 peak / this work's peak), so the NTFF's
own MFU, which the simulator computes against the BF16 peak, converts exactly: MFU = NTFF MFU x
slowdown. The BF16 peak itself is read off the NTFF (FLOPs / (MFU x time)), as the roofline's roofs
are, so a profile made with an edited spec keeps its own roofs.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .. import caches
from ..formats import ntff as ntff_format
from ..formats.errors import FormatError

FP32, BF16, FP16, FP8 = "fp32", "bf16", "fp16", "fp8"
LABELS = {FP32: "FP32", BF16: "BF16", FP16: "FP16", FP8: "FP8"}
# operand-text dtype names (isa.ap.AP.describe) -> the dtype TensorE streamed
_DTYPES = {"fp32": FP32, "float32": FP32, "bf16": BF16, "bfloat16": BF16, "fp16": FP16, "float16": FP16,
           "float8_e4m3": FP8, "float8_e5m2": FP8, "fp8": FP8}
DEFAULT_FP32_FACTOR = 4  # hw.HardwareSpec.fp32_matmul_factor's value (S1, S9), when the target is unknown


def rate_factor(dtype: str, fp32_factor: float = DEFAULT_FP32_FACTOR) -> float:
    """How many times slower than BF16 TensorE streams ``dtype`` (1 for BF16/FP16/FP8)."""
    return float(fp32_factor) if dtype == FP32 else 1.0


def peak_flops(bf16_peak: float, dtype: str, fp32_factor: float = DEFAULT_FP32_FACTOR) -> float:
    """TensorE's dense peak FLOP/s for ``dtype`` on a core whose BF16 peak is ``bf16_peak``."""
    return bf16_peak / rate_factor(dtype, fp32_factor)


def spec_peak_flops(spec, dtype: str) -> float:
    """The same from a ``trnscope.hw`` spec: ``peak_fp32_flops`` for FP32, ``peak_bf16_flops`` else."""
    return spec.peak_fp32_flops if dtype == FP32 else spec.peak_bf16_flops


@dataclass
class TensorPeak:
    """The TensorE work of a kernel (or a profile) by dtype, and the peak it is held to."""

    flops_by_dtype: dict[str, float] = field(default_factory=dict)  # model FLOPs per streamed dtype
    bf16_peak: float = 0.0  # FLOP/s; 0 when unknown
    fp32_factor: float = DEFAULT_FP32_FACTOR
    known: bool = True  # False: the dtypes could not be read; the BF16 peak is assumed

    @property
    def flops(self) -> float:
        return float(sum(self.flops_by_dtype.values()))

    @property
    def slowdown(self) -> float:
        """BF16 peak / this work's peak: the FLOP-weighted mean of the dtypes' rate factors (>= 1)."""
        total = self.flops
        if not total:
            return 1.0
        return sum(f * rate_factor(d, self.fp32_factor) for d, f in self.flops_by_dtype.items()) / total

    @property
    def peak_flops_per_s(self) -> float:
        return self.bf16_peak / self.slowdown if self.bf16_peak else 0.0

    @property
    def dtype(self) -> str:
        """The single dtype of the work, "mixed", or "" without TensorE FLOPs."""
        used = [d for d, f in self.flops_by_dtype.items() if f > 0]
        return used[0] if len(used) == 1 else "mixed" if used else ""

    def shares(self) -> dict[str, float]:
        """Each dtype's share of the FLOPs, largest first."""
        total = self.flops
        return {d: f / total for d, f in sorted(self.flops_by_dtype.items(), key=lambda kv: -kv[1]) if f > 0} \
            if total else {}

    def label(self) -> str:
        """``FP32``, ``BF16``, or ``mixed (FP32 75%, BF16 25% of FLOPs)``; ``BF16 (assumed)`` when unread."""
        if not self.known:
            return "BF16 (assumed)"
        d = self.dtype
        if d != "mixed":
            return LABELS.get(d, d.upper()) if d else ""
        parts = ", ".join(f"{LABELS.get(k, k.upper())} {100 * s:.0f}%" for k, s in self.shares().items())
        return f"mixed ({parts} of FLOPs)"

    def describe(self) -> str:
        """``FP32 peak 39.3 TFLOP/s`` (what an MFU is a share of)."""
        if not self.flops and self.known:
            return ""
        peak = f" {self.peak_flops_per_s / 1e12:.1f} TFLOP/s" if self.peak_flops_per_s else ""
        return f"{self.label()} peak{peak}"

    def add(self, other: "TensorPeak", weight: float = 1.0) -> None:
        """Add ``weight`` times another kernel's work (executions of it)."""
        for d, f in other.flops_by_dtype.items():
            self.flops_by_dtype[d] = self.flops_by_dtype.get(d, 0.0) + weight * f
        self.bf16_peak = self.bf16_peak or other.bf16_peak
        self.known = self.known and other.known

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "label": self.label(), "peak_flops_per_s": self.peak_flops_per_s,
                "bf16_peak_flops_per_s": self.bf16_peak, "slowdown": self.slowdown,
                "flops_by_dtype": dict(self.flops_by_dtype), "known": self.known}


def dtype_of_operands(operands: str) -> str:
    """The dtype TensorE streamed for an instruction whose operand text is ``operands``: its first
    operand's (a MATMUL's moving operand). Unknown names count at the rate of their width, as the
    simulator costs them: 4-byte types at FP32's."""
    name = str(operands or "").split("@", 1)[0].strip().lower()
    if name in _DTYPES:
        return _DTYPES[name]
    return FP32 if name.endswith("32") else BF16


def flops_by_dtype(table: dict) -> dict[str, float]:
    """Model FLOPs per streamed dtype over an instruction table (columns ``operands``, ``model_flops``)."""
    out: dict[str, float] = {}
    flops, operands = table.get("model_flops"), table.get("operands")
    if flops is None or operands is None:
        return out
    for text, f in zip(operands, flops):
        if f:
            d = dtype_of_operands(text)
            out[d] = out.get(d, 0.0) + float(f)
    return out


def bf16_peak_of(summary: dict) -> float:
    """The BF16 peak the NTFF's MFU was computed against: model FLOPs / (MFU x time); 0 if not there."""
    flops = float(summary.get("model_flops") or 0.0)
    mfu = float(summary.get("mfu_estimated_percent") or 0.0)
    seconds = float(summary.get("total_time_ns") or 0.0) * 1e-9
    return flops / (mfu / 100 * seconds) if flops and mfu and seconds else 0.0


def fp32_factor_of(target: str | None) -> float:
    """The target's FP32 matmul factor (its spec), else the default (4 on every NeuronCore modelled)."""
    from ..hw import UnknownInstanceError, resolve

    try:
        return float(resolve(target).fp32_matmul_factor) if target else DEFAULT_FP32_FACTOR
    except (UnknownInstanceError, ValueError):
        return DEFAULT_FP32_FACTOR


def ntff_peak(path: str | Path, header: dict) -> TensorPeak:
    """The peak of one NTFF's kernel: its MATMULs' FLOPs by dtype (its instruction table, read once
    per file), scaled to the header's total."""
    total = float((header.get("summary") or {}).get("model_flops") or 0.0)
    return header_peak(header, _table_flops(Path(path)) if total else {})


def header_peak(header: dict, by_dtype: dict[str, float]) -> TensorPeak:
    """The peak of the kernel an NTFF ``header`` describes, given its instructions' FLOPs by dtype
    (:func:`flops_by_dtype`). A truncated NTFF keeps the written instructions' proportions; none
    readable: BF16's peak, marked assumed (the NTFF's own MFU is against it)."""
    s = header.get("summary") or {}
    total = float(s.get("model_flops") or 0.0)
    peak = TensorPeak(bf16_peak=bf16_peak_of(s), fp32_factor=fp32_factor_of(header.get("target")))
    if not total:
        return peak
    read = sum(by_dtype.values())
    if not read:
        peak.flops_by_dtype = {BF16: total}
        peak.known = False
        return peak
    peak.flops_by_dtype = {d: total * f / read for d, f in by_dtype.items()}
    return peak


_lock = threading.Lock()
_table_cache: dict[tuple, dict[str, float]] = {}
caches.register("analysis.tensor_peak: FLOPs by dtype per NTFF", lambda: _table_cache.clear())


def _table_flops(path: Path) -> dict[str, float]:
    """FLOPs by dtype of an NTFF's instruction table, kept per (file, size, mtime): the summary,
    the limiter and the roofline all ask, and only the rows with FLOPs are converted."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _table_cache:
            return _table_cache[key]
    try:
        _header, tables = ntff_format.read(path, verify=False)
        table = tables.get("instruction")
        out: dict[str, float] = {}
        if table is not None and {"model_flops", "operands"} <= set(table.column_names):
            import pyarrow.compute as pc

            rows = table.filter(pc.greater(table["model_flops"], 0)).select(["operands", "model_flops"])
            out = flops_by_dtype({"operands": rows["operands"].to_pylist(),
                                  "model_flops": rows["model_flops"].to_pylist()})
    except (FormatError, OSError, ValueError, TypeError):
        out = {}
    with _lock:
        if len(_table_cache) > 4096:
            _table_cache.clear()
        _table_cache[key] = out
    return out
