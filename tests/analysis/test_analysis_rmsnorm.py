"""Analyses of RMSNorm profiles recorded on the emulated NeuronCore: naive ops vs torch.rms_norm
(vs torch.compile when it records)."""

from __future__ import annotations

import numpy as np
import pytest

from trnscope.analysis import (
    NEURON, ProfileAnalysis, Role, TraceCache, diff_profiles, lane_infos, load_profile,
)
from trnscope.analysis.gaps import HOST_BOUND, LAUNCH_BOUND

NAIVE_OPS = {"aten::pow": 1, "aten::mean": 1, "aten::add": 1, "aten::rsqrt": 1, "aten::mul": 2}  # op -> NEFFs
CALLS = 3  # the profiled window runs the function three times


@pytest.fixture(scope="module")
def naive(rmsnorm):
    return ProfileAnalysis(load_profile(rmsnorm["naive"]))


@pytest.fixture(scope="module")
def fused(rmsnorm):
    return ProfileAnalysis(load_profile(rmsnorm["fused"]))


def test_profile_merges_framework_and_system_lanes(naive):
    profile = naive.profile
    assert profile.kind == NEURON
    roles = [info.role for info in lane_infos(profile.trace)]
    for role in (Role.HOST_THREAD, Role.DEVICE_STREAM, Role.NEURON_RT, Role.NEURON_HW, Role.HBM):
        assert role in roles, role
    cats = {profile.trace.strings[int(c)] for c in np.unique(profile.trace.flows.cat)}
    assert {"ac2g", "neuron_flow"} <= cats
    # the system trace repeats the dispatching ops; the merged timeline holds each op once
    mul = profile.trace.strings.id_of("aten::mul")
    assert int(np.count_nonzero(profile.trace.slices.name == mul)) == 2 * CALLS
    assert profile.warnings == []


def test_operator_table_naive(naive):
    ops = naive.ops.by_name()
    for name, neffs in NAIVE_OPS.items():
        row = ops[name]
        calls = CALLS * (2 if name == "aten::mul" else 1)
        assert row.calls == calls
        assert row.dispatches == calls, name
        assert len(row.programs) == neffs, name
        assert row.device_self_ns > 0 and row.device_self_ns == row.device_total_ns
        assert row.cpu_total_ns >= row.cpu_self_ns > 0
        assert row.bytes > 0
    # every device execution has exactly one owning op: self times add up to the device total
    assert sum(r.device_self_ns for r in naive.ops.ops) == naive.ops.device_total_ns
    # the runtime calls carry the device time they launched, as totals
    assert ops["nrt_execute"].calls == len(NAIVE_OPS) * CALLS + CALLS
    assert ops["nrt_execute"].device_total_ns > 0 and ops["nrt_execute"].device_self_ns == 0


def test_operator_table_fused(fused):
    row = fused.ops.by_name()["aten::rms_norm"]
    assert row.calls == CALLS and row.dispatches == CALLS and len(row.programs) == 1
    kernels = [k for k in fused.ops.kernels if not k.is_copy]
    assert len(kernels) == 1 and kernels[0].calls == CALLS and kernels[0].ops == ["aten::rms_norm"]
    assert kernels[0].bottleneck and kernels[0].mbu_percent is not None


def test_device_summary_from_ntff(naive, fused):
    d = naive.device
    assert d.source == "ntff"
    assert d.kernels == len(NAIVE_OPS) * CALLS + CALLS and d.copies == 1 and d.programs == 6
    engines = {e.engine: e for e in d.engines}
    assert set(engines) == {"tensor", "vector", "scalar", "gpsimd", "sync", "dma"}
    assert all(0.0 <= e.active_percent <= 100.0 for e in d.engines)
    assert engines["dma"].active_percent > 0 and engines["tensor"].active_percent == 0  # no matmul in RMSNorm
    assert 0 < d.mbu_percent <= 100 and d.mfu_percent == 0
    assert d.dma_transfers > 0 and d.dma_average_bytes == pytest.approx(d.dma_bytes / d.dma_transfers)
    assert {n.neff_id for n in d.neffs} == {k.program for k in naive.ops.kernels if not k.is_copy}
    assert all(n.ntff for n in d.neffs)  # every NEFF has its device trace
    # fusing keeps intermediates on chip: less HBM traffic, fewer NEFFs
    f = fused.device
    assert f.hbm_read_bytes + f.hbm_write_bytes < d.hbm_read_bytes + d.hbm_write_bytes
    assert f.programs == 1


def test_idle_gaps_add_up_and_name_the_cause(naive):
    idle = naive.idle
    shares = idle.to_dict()["shares"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
    assert idle.busy_ns + idle.host_dispatch_ns + idle.launch_ns + idle.dependency_ns + idle.unknown_ns == idle.span_ns
    assert idle.gap_count >= len(NAIVE_OPS) * CALLS  # one lane, an execution after every gap
    assert idle.dependency_ns == 0 and idle.unknown_ns == 0  # one core, every launch known
    # dispatch overhead, not the device, sets the pace: the host submits a kernel every 13 us
    # (modelled), faster than the 20 us launch latency, so every gap opens with the next NEFF already
    # submitted (launch latency), and together they are more than a third of the device's span
    assert idle.regime in (HOST_BOUND, LAUNCH_BOUND)
    assert idle.launch_overhead_share > 1 / 3
    for gap in idle.largest:
        assert gap.end_ns > gap.start_ns and gap.host_wait_ns + gap.launch_ns <= gap.duration_ns
    assert [g.duration_ns for g in idle.largest] == sorted((g.duration_ns for g in idle.largest), reverse=True)


def test_recommendations(naive, fused):
    rules = [r.rule for r in naive.recommendations]
    assert rules[0] == "many_small_dispatches"
    assert 1 <= len(rules) <= 4
    first = naive.recommendations[0]
    assert "torch.rms_norm" in first.detail and "aten::mul ×6" in first.detail
    assert "ProfilerStep" not in first.detail  # annotations around the ops are nothing to fuse
    assert [r.impact for r in naive.recommendations] == sorted((r.impact for r in naive.recommendations), reverse=True)
    assert "many_small_dispatches" not in [r.rule for r in fused.recommendations]


def test_recommendations_for_large_kernels(rmsnorm_large):
    """The same six ops at 1024x4096 keep the device busy: no dispatch advice, and the kernels that
    move data near HBM bandwidth are named."""
    large = ProfileAnalysis(load_profile(rmsnorm_large["naive"]))
    assert large.idle.regime == "device bound"
    rules = [r.rule for r in large.recommendations]
    assert rules[0] == "hbm_bound" and "many_small_dispatches" not in rules
    hbm = large.recommendations[0]
    listed = {n.neff_id: n for n in large.device.neffs if n.neff_id in hbm.evidence["neffs"]}
    # tiny kernels labelled dma/hbm but nowhere near the bandwidth are not "HBM-bound"
    assert listed and all((n.mbu_percent or 0) >= 40 for n in listed.values())


def test_diff_naive_vs_fused(naive, fused):
    diff = diff_profiles(naive, fused)
    summary = {row["key"]: row for row in diff["summary"]}
    assert summary["dispatches"]["base"] == len(NAIVE_OPS) * CALLS + CALLS
    assert summary["dispatches"]["test"] == CALLS
    assert summary["dispatches"]["delta"] == CALLS - (len(NAIVE_OPS) * CALLS + CALLS)
    assert summary["programs"]["test"] == 1 and summary["programs"]["base"] == 6
    assert summary["hbm_bytes"]["ratio"] < 1 and summary["device_time_ns"]["delta"] < 0
    ops = {d["name"]: d for d in diff["ops"]}
    assert ops["aten::rms_norm"]["status"] == "added" and ops["aten::mul"]["status"] == "removed"
    assert ops["aten::mul"]["delta"]["dispatches"] == -2 * CALLS
    assert ops["nrt_execute"]["status"] == "both"


def test_compiled_graph_is_one_neff_per_call(rmsnorm):
    if "compiled" not in rmsnorm:
        pytest.skip("torch.compile(backend='neuron') did not record a profile here")
    compiled = ProfileAnalysis(load_profile(rmsnorm["compiled"]))
    assert compiled.device.kernels == CALLS and compiled.device.programs == 1


def test_trace_cache_round_trip(rmsnorm, tmp_path):
    cache = TraceCache(tmp_path / "cache")
    first = load_profile(rmsnorm["naive"], cache=cache)
    assert cache.wait(timeout=60)  # the entry is written in the background
    second = load_profile(rmsnorm["naive"], cache=cache)
    assert not first.from_cache and second.from_cache
    a, b = ProfileAnalysis(first), ProfileAnalysis(second)
    assert [(r.name, r.device_self_ns, r.dispatches) for r in a.ops.ops] == \
        [(r.name, r.device_self_ns, r.dispatches) for r in b.ops.ops]
    assert second.neuron["neffs"] == first.neuron["neffs"]
