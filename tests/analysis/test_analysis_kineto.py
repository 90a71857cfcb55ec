"""Analyses on real torch.profiler traces (CPU-only and CUDA) from the shared fixtures."""

from __future__ import annotations

import pytest

import orjson

from trnscope.analysis import KINETO, ProfileAnalysis, Role, diff_profiles, lane_infos, load_profile
from trnscope.analysis.gaps import NO_DEVICE


def analyse(path):
    return ProfileAnalysis(load_profile(path))


def test_cpu_only_trace(kineto_fixture):
    a = analyse(kineto_fixture("cpu_only"))
    assert a.profile.kind == KINETO
    assert a.device.executions == 0 and a.device.source == "none"
    assert a.idle.regime == NO_DEVICE and a.recommendations == []
    assert a.ops.ops and all(r.device_total_ns == 0 for r in a.ops.ops)
    assert all(r.cpu_total_ns >= r.cpu_self_ns >= 0 for r in a.ops.ops)
    roles = {i.role for i in lane_infos(a.profile.trace)}
    assert Role.HOST_THREAD in roles and Role.DEVICE_STREAM not in roles


def test_cuda_trace_links_kernels_to_ops(kineto_fixture):
    a = analyse(kineto_fixture("critical_path_alexnet"))
    # 79 kernels and 19 copies; the 41 cuda_sync records on the stream lanes are host waits, not work
    assert a.device.executions == 98 and a.device.kernels == 79 and a.device.copies == 19
    # every kernel was found through its ac2g flow, so device self times add up to the total
    assert sum(r.device_self_ns for r in a.ops.ops) == a.ops.device_total_ns
    rows = a.ops.by_name()
    assert rows["cudaLaunchKernel"].dispatches > 0
    top = [r for r in a.ops.ops if r.category == "cpu_op"][0]
    assert top.name == "aten::copy_" and top.device_self_ns > 0 and top.bytes > 0  # the host-to-device copies
    kernels = [r for r in a.ops.ops if r.category == "cpu_op" and r.programs]
    assert kernels and kernels[0].device_self_ns > 0
    kernels = {k.name: k for k in a.ops.kernels}
    assert all(k.calls >= 1 and k.device_min_ns <= k.device_max_ns for k in kernels.values())
    assert any(k.is_copy for k in kernels.values())


def test_cuda_idle_gaps_over_several_streams(kineto_fixture):
    a = analyse(kineto_fixture("critical_path_cuda_event_sync"))
    idle = a.idle
    assert idle.executions == 6 and idle.devices == 1  # and 5 cuda_sync waits, which are not work
    assert idle.busy_ns + idle.host_dispatch_ns + idle.launch_ns + idle.dependency_ns + idle.unknown_ns == idle.span_ns
    # busy is the union over the device's streams: never more than the span, never less than any one stream
    use = a.utilization.devices[0]
    assert len(use.streams) >= 2 and use.busy_ns == idle.busy_ns
    assert max(s.busy_ns for s in use.streams) <= use.busy_ns <= sum(s.busy_ns for s in use.streams)
    assert {g.track for g in idle.largest} <= {s.track for s in use.streams}


def test_nanosecond_trace_links_every_kernel(kineto_fixture):
    # ns-resolution traces keep nanosecond timestamps; links and times must survive them
    a = analyse(kineto_fixture("ns_resolution"))
    assert a.device.executions > 1000
    assert sum(r.device_self_ns for r in a.ops.ops) == a.ops.device_total_ns


def test_diff_control_vs_test(kineto_fixture):
    base, test = analyse(kineto_fixture("trace_diff_control")), analyse(kineto_fixture("trace_diff_test"))
    diff = diff_profiles(base, test)
    assert {row["key"] for row in diff["summary"]} >= {"wall_ns", "device_time_ns", "dispatches"}
    statuses = {d["status"] for d in diff["ops"]}
    assert "both" in statuses
    both = [d for d in diff["ops"] if d["status"] == "both"]
    for d in both[:50]:
        assert d["delta"]["calls"] == d["test"]["calls"] - d["base"]["calls"]
    devices = [abs(d["delta"]["device_total_ns"]) for d in diff["ops"]]
    assert devices == sorted(devices, reverse=True)  # biggest device-time change first


@pytest.mark.parametrize("prefix", ["call_stack_backward", "cupti_profiler", "timeline_analysis", "triton_example"])
def test_every_fixture_analyses(kineto_fixture, prefix):
    a = analyse(kineto_fixture(prefix))
    data = a.to_dict()
    assert data["headline"]["wall_ns"] > 0
    assert len(a.recommendations) <= 4
    shares = data["idle"]["shares"]
    if a.idle.span_ns:
        assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
        assert sum(data["idle"]["window_shares"].values()) == pytest.approx(1.0, abs=1e-9)


def test_correlation_ids_link_when_a_trace_has_no_flows(tmp_path):
    """Older or filtered traces drop the ac2g flow events; the correlation arg still links them."""
    events = [
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 100, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 10,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 130, "dur": 40,
         "args": {"correlation": 7, "stream": 7}},
    ]
    path = tmp_path / "noflows.pt.trace.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    a = analyse(path)
    row = a.ops.by_name()["aten::mm"]
    assert row.device_self_ns == 40_000 and row.dispatches == 1 and row.programs == ["gemm"]
    gap_free = a.idle
    assert gap_free.executions == 1 and gap_free.busy_ns == 40_000
