"""MFU, roofs, ridge points and the bound per kernel against TensorE's peak for the dtype its
matmuls streamed (trnscope.analysis.tensor_peak): FP32 at a quarter of BF16's rate, BF16 (and an
FP32 matmul the compiler auto-cast to BF16) at BF16's. Figures are recomputed here from the NTFF
headers and the target's spec, not copied from the analysis."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.limiter import COMPUTE as COMPUTE_LIMIT
from trnscope.analysis.profile_dir import read_ntff_header
from trnscope.analysis.roofline import COMPUTE, MEMORY
from trnscope.analysis.tensor_peak import (BF16, FP8, FP16, FP32, TensorPeak, dtype_of_operands, peak_flops,
                                           spec_peak_flops)
from trnscope.cli.main import main
from trnscope.hw import logical_spec, resolve

TRN2 = logical_spec("trn2")  # the profiles are recorded at trn2's default LNC (2)
BW = TRN2.hbm_bytes_per_s_per_core


# --- the definition ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_dtype_peaks_are_the_specs(target):
    spec = resolve(target)
    assert peak_flops(spec.peak_bf16_flops, FP32, spec.fp32_matmul_factor) == pytest.approx(spec.peak_fp32_flops)
    for d in (BF16, FP16, FP8):  # the cost model streams every narrower type at BF16's rate
        assert peak_flops(spec.peak_bf16_flops, d, spec.fp32_matmul_factor) == spec.peak_bf16_flops
        assert spec_peak_flops(spec, d) == spec.peak_bf16_flops
    assert spec_peak_flops(spec, FP32) == spec.peak_fp32_flops


def test_operand_text_names_the_streamed_dtype():
    assert dtype_of_operands("fp32@sb[0:128]+0x0[1x512] fp32@ps[0:128]+0x0[1x512]") == FP32
    assert dtype_of_operands("bf16@sb[0:128]+0x0[1x512] fp32@ps[0:128]+0x0[1x512]") == BF16
    assert dtype_of_operands("fp16@sb[0:64]+0x0[1x128]") == FP16
    assert dtype_of_operands("float8_e4m3@sb[0:128]+0x0[1x512]") == FP8
    assert dtype_of_operands("int32@sb[0:1]+0x0[1x1]") == FP32  # a 4-byte type: FP32's rate, as costed


def test_mixed_work_is_held_to_its_ideal_time():
    bf16_peak = TRN2.peak_bf16_flops
    work = TensorPeak(flops_by_dtype={FP32: 3e9, BF16: 1e9}, bf16_peak=bf16_peak, fp32_factor=4)
    ideal = 3e9 / (bf16_peak / 4) + 1e9 / bf16_peak
    assert work.peak_flops_per_s == pytest.approx(4e9 / ideal)
    assert work.slowdown == pytest.approx(3.25)
    assert work.label() == "mixed (FP32 75%, BF16 25% of FLOPs)"
    assert TensorPeak(flops_by_dtype={FP32: 1.0}, bf16_peak=bf16_peak).describe() == \
        f"FP32 peak {TRN2.peak_fp32_flops / 1e12:.1f} TFLOP/s"
    assert TensorPeak(flops_by_dtype={BF16: 1.0}, bf16_peak=bf16_peak).slowdown == 1.0


# --- the profile: FP32 mm (auto-cast off), BF16 mm, FP32 mm auto-cast to BF16 -----------------


@pytest.fixture(scope="module")
def peaks(peaks_profile):
    a = ProfileAnalysis(load_profile(peaks_profile))
    files = a.profile.files
    kernels = {}
    for n in a.device.neffs:
        header = read_ntff_header(files.ntffs[(n.neff_id, 0)])
        s = header["summary"]
        kind = ("fp32" if header["matmul_auto_cast"] == "none" and n.name.startswith("mm_1024") and
                n.flops_by_dtype.get(FP32) else "autocast" if n.name.startswith("mm_512") else "bf16")
        kernels[kind] = (n, header, s)
    assert set(kernels) == {"fp32", "bf16", "autocast"}
    return a, kernels


def _expected_mfu(summary: dict, peak: float) -> float:
    return 100 * summary["model_flops"] / (peak * summary["total_time_ns"] * 1e-9)


def test_each_kernel_mfu_is_against_its_own_dtype_peak(peaks):
    a, k = peaks
    fp32, _, s32 = k["fp32"]
    bf16, _, s16 = k["bf16"]
    cast, header, sc = k["autocast"]
    # FP32 not cast: FP32's peak, a quarter of BF16's
    assert fp32.peak_dtype == "FP32" and fp32.peak_flops_per_s == pytest.approx(TRN2.peak_fp32_flops, rel=1e-9)
    assert fp32.mfu_percent == pytest.approx(_expected_mfu(s32, TRN2.peak_fp32_flops), rel=1e-9)
    assert fp32.mfu_bf16_percent == pytest.approx(s32["mfu_estimated_percent"])  # the NTFF's own figure
    assert fp32.mfu_percent > 60  # near its FP32 roof, where the BF16 figure alone says 21%
    # BF16: BF16's peak
    assert bf16.peak_dtype == "BF16" and bf16.peak_flops_per_s == pytest.approx(TRN2.peak_bf16_flops, rel=1e-9)
    assert bf16.mfu_percent == pytest.approx(_expected_mfu(s16, TRN2.peak_bf16_flops), rel=1e-9)
    # FP32 in the framework, auto-cast by the compiler: it streamed BF16, so BF16's peak
    assert header["matmul_auto_cast"] == "matmult/bf16" and cast.auto_cast == "matmult/bf16"
    assert cast.peak_dtype == "BF16"
    assert cast.mfu_percent == pytest.approx(_expected_mfu(sc, TRN2.peak_bf16_flops), rel=1e-9)


def test_profile_mfu_is_ideal_tensore_time_over_device_time(peaks):
    a, k = peaks
    d = a.device
    ideal = time = 0.0
    for n, _, s in k.values():
        peak = TRN2.peak_fp32_flops if n is k["fp32"][0] else TRN2.peak_bf16_flops
        ideal += n.executions * s["model_flops"] / peak
        time += n.executions * s["total_time_ns"] * 1e-9
    assert d.mfu_percent == pytest.approx(100 * ideal / time, rel=1e-6)
    flops = sum(n.executions * s["model_flops"] for n, _, s in k.values())
    assert d.mfu_peak.startswith("mixed (") and d.mfu_peak_flops_per_s == pytest.approx(flops / ideal, rel=1e-6)
    assert d.mfu_bf16_percent == pytest.approx(100 * flops / TRN2.peak_bf16_flops / time, rel=1e-6)
    assert d.mfu_text().startswith(f"MFU {d.mfu_percent:.1f}% of each kernel's dtype peak (BF16 ")
    # the kernel table merges the two mm_1024x1024_1024x1024 NEFFs (one name): each execution's
    # MFU against its own NEFF's peak
    row = next(r for r in a.ops.kernels if r.name.startswith("mm_1024x1024_1024x1024"))
    both = [k["fp32"][0], k["bf16"][0]]
    expected = sum(n.mfu_percent * n.device_time_ns for n in both) / sum(n.device_time_ns for n in both)
    assert row.calls == 4 and row.mfu_percent == pytest.approx(expected, rel=1e-3)


def test_roofline_points_use_their_dtype_roof_and_ridge(peaks):
    a, k = peaks
    r = a.roofline
    assert r.peak_flops_per_s == pytest.approx(TRN2.peak_bf16_flops, rel=1e-9)
    assert r.peaks() == pytest.approx({"BF16": TRN2.peak_bf16_flops, "FP32": TRN2.peak_fp32_flops}, rel=1e-9)
    points = {p.neff_id: p for p in r.neffs}
    for kind, peak in (("fp32", TRN2.peak_fp32_flops), ("bf16", TRN2.peak_bf16_flops),
                       ("autocast", TRN2.peak_bf16_flops)):
        p = points[k[kind][0].neff_id]
        ridge = peak / BW
        assert p.peak_flops_per_s == pytest.approx(peak, rel=1e-9) and p.ridge == pytest.approx(ridge, rel=1e-9)
        assert p.of_roof == pytest.approx(p.flops_per_s / min(peak, p.intensity * BW), rel=1e-6)
        assert p.bound == (COMPUTE if p.intensity >= ridge else MEMORY)
        assert 100 * p.flops_per_s / peak == pytest.approx(k[kind][0].mfu_percent, rel=1e-6)
    # the FP32 mm is past FP32's ridge (compute-bound), short of BF16's: against the BF16 roof it
    # read as memory-bound
    fp32 = points[k["fp32"][0].neff_id]
    assert TRN2.peak_fp32_flops / BW <= fp32.intensity < TRN2.peak_bf16_flops / BW and fp32.bound == COMPUTE
    # the auto-cast mm is FP32 in the framework but streamed BF16: held to BF16's ridge, which its
    # intensity does not reach, so memory-bound (FP32's ridge would have called it compute-bound)
    cast = points[k["autocast"][0].neff_id]
    assert TRN2.peak_fp32_flops / BW <= cast.intensity < TRN2.peak_bf16_flops / BW and cast.bound == MEMORY
    # the per-op point of aten::mm mixes both: its peak is its FLOPs over their ideal time
    op = next(p for p in r.ops if p.name == "aten::mm")
    ideal = sum(n.executions * s["model_flops"] / (TRN2.peak_fp32_flops if n is k["fp32"][0] else TRN2.peak_bf16_flops)
                for n, _, s in k.values())
    assert op.peak_dtype.startswith("mixed") and op.peak_flops_per_s == pytest.approx(op.flops / ideal, rel=1e-6)


def test_limiter_names_tensore_at_fp32_rate(peaks):
    a, k = peaks
    limits = {lim.neff_id: lim for lim in a.kernel_limits}
    fp32 = limits[k["fp32"][0].neff_id]
    assert fp32.limiter == COMPUTE_LIMIT and not fp32.far_below_roofline and fp32.position == "near"
    assert f"of TensorE's FP32 peak ({TRN2.peak_fp32_flops / 1e12:.1f} TFLOP/s), near its roofline" in fp32.explanation
    assert "lift that roof 4x" in fp32.explanation
    cast = limits[k["autocast"][0].neff_id]
    assert cast.peak_dtype == "BF16" and "4x" not in cast.explanation
    assert not any(r.rule == "below_roofline" and "mm_1024" in r.detail for r in a.recommendations)


def test_fp32_matmuls_are_told_what_bf16_would_save(peaks):
    a, k = peaks
    rule = next(r for r in a.recommendations if r.rule == "fp32_matmuls")
    fp32, _, s = k["fp32"]
    # only the FP32 mm: the BF16 one and the one auto-cast to BF16 already run at BF16's rate
    assert rule.evidence["neffs"] == [fp32.neff_id] and rule.evidence["auto_cast"] == ["none"]
    # (the rule reads the NEFF's device time off the trace, in whole ns: agreement to 1e-4)
    ideal = fp32.executions * s["model_flops"] / TRN2.peak_fp32_flops * 1e9
    assert rule.evidence["fp32_tensore_ns"] == pytest.approx(ideal, rel=1e-4)
    assert rule.evidence["saved_ns"] == pytest.approx(0.75 * ideal, rel=1e-4)
    assert "--auto-cast=none" in rule.detail and "aten::mm" in rule.title


def test_summary_says_which_peak(peaks_profile, train_profile):
    buffer = io.StringIO()
    assert main(["summary", str(peaks_profile)], console=Console(file=buffer, width=220, color_system=None)) == 0
    out = buffer.getvalue()
    assert "MFU of TensorE's peak for the dtype the kernel streamed" in out
    assert f"FP32 {TRN2.peak_fp32_flops / 1e12:.1f}T" in out and f"BF16 {TRN2.peak_bf16_flops / 1e12:.1f}T" in out
    assert "TensorE compute at FP32 rate" in out and "[auto-cast matmult/bf16]" in out
    assert (f"FP32 {TRN2.peak_fp32_flops / 1e12:.1f} TFLOP/s (ridge {TRN2.peak_fp32_flops / BW:.0f} FLOP/B)") in out
    # the training step of the test suite runs FP32 matmuls with auto-cast off (tests/conftest.py)
    a = ProfileAnalysis(load_profile(train_profile))
    buffer = io.StringIO()
    assert main(["summary", str(train_profile)], console=Console(file=buffer, width=220, color_system=None)) == 0
    if all(n.auto_cast in ("none", "") for n in a.device.neffs):
        assert f"MFU {a.device.mfu_percent:.1f}% of FP32 peak {TRN2.peak_fp32_flops / 1e12:.1f} TFLOP/s (" in buffer.getvalue()
        mm = next(lim for lim in a.kernel_limits if lim.name.startswith("mm_"))
        assert mm.limiter == COMPUTE_LIMIT and mm.position == "near"


def test_inspect_says_which_peak(peaks, peaks_profile):
    a, k = peaks
    for kind, words in (("fp32", "FP32 peak"), ("bf16", "BF16 peak"), ("autocast", "BF16 peak")):
        n = k[kind][0]
        buffer = io.StringIO()
        assert main(["inspect", str(peaks_profile / f"neff_{n.neff_id}.neff")],
                    console=Console(file=buffer, width=220, color_system=None)) == 0
        assert f"MFU {n.mfu_percent:.1f}% of {words}" in buffer.getvalue()
