"""The roofline per NEFF and per op (trnscope.analysis.roofline) on a recorded nn.Linear training
step, and its table in `trnscope summary`."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.roofline import COMPUTE, MEMORY, NO_FLOPS
from trnscope.cli.main import main
from trnscope.hw import logical_spec

# the profile was recorded at trn2's default LNC (2): its roofs are the logical core's
TRN2 = logical_spec("trn2")


@pytest.fixture(scope="module")
def analysis(train_profile):
    return ProfileAnalysis(load_profile(train_profile))


def test_roofs_are_the_targets(analysis):
    r = analysis.roofline
    assert r.target == "trn2" and r.roofs_from == "ntff"  # read off the NTFFs: MFU and MBU give them back
    assert r.peak_flops_per_s == pytest.approx(TRN2.peak_bf16_flops, rel=1e-9)
    assert r.hbm_bytes_per_s == pytest.approx(TRN2.hbm_bytes_per_s_per_core, rel=1e-9)
    assert r.ridge == pytest.approx(TRN2.peak_bf16_flops / TRN2.hbm_bytes_per_s_per_core)


def test_points_per_neff_and_per_op(analysis):
    r = analysis.roofline
    addmm = next(p for p in r.neffs if p.name.startswith("addmm_1024"))
    assert addmm.flops == pytest.approx(addmm.executions * 2 * 1024 ** 3)  # model FLOPs of a 1024^3 matmul
    assert addmm.intensity == pytest.approx(addmm.flops / addmm.hbm_bytes)
    # its roof is TensorE's peak for the dtype it streamed: the suite compiles FP32 matmuls with
    # auto-cast off (tests/conftest.py), so FP32's quarter rate; auto-cast to BF16, BF16's
    stat = next(n for n in analysis.device.neffs if n.neff_id == addmm.neff_id)
    peak = TRN2.peak_fp32_flops if stat.auto_cast == "none" else TRN2.peak_bf16_flops
    assert addmm.peak_flops_per_s == pytest.approx(peak, rel=1e-9)
    roof = min(peak, addmm.intensity * r.hbm_bytes_per_s)
    assert addmm.of_roof == pytest.approx(addmm.flops / (addmm.time_ns * 1e-9) / roof)
    assert addmm.bound == (COMPUTE if addmm.intensity >= peak / r.hbm_bytes_per_s else MEMORY)
    # the point agrees with the NEFF table's MFU (same FLOPs, time and peak)
    assert 100 * addmm.flops_per_s / peak == pytest.approx(stat.mfu_percent, rel=1e-6)
    # eager: one op per NEFF, so the op's point is its NEFF's (over the op's NEFFs)
    op = next(p for p in r.ops if p.name == "aten::addmm")
    assert (op.flops, op.hbm_bytes) == pytest.approx((addmm.flops, addmm.hbm_bytes))
    adds = [p for p in r.neffs if p.ops == ["aten::add.Tensor"]]
    assert adds and all(p.bound == NO_FLOPS and p.of_roof is None and p.bandwidth_share > 0 for p in adds)
    assert sum(p.time_ns for p in r.neffs) == pytest.approx(analysis.device.kernel_time_ns, rel=1e-3)


def test_summary_prints_the_roofline(train_profile):
    buffer = io.StringIO()
    assert main(["summary", str(train_profile)], console=Console(file=buffer, width=140, color_system=None)) == 0
    out = buffer.getvalue()
    assert f"Roofline (trn2: peak BF16 {TRN2.peak_bf16_flops / 1e12:.1f} TFLOP/s" in out and "Roofline, per op" in out and "aten::addmm" in out
