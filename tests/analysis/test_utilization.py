"""Busy time, kernel types, overlap, idle causes and the regime on traces built for the purpose
(tests/analysis/synthetic.py): each case is small enough to work out by hand."""

from __future__ import annotations

import pytest

from synthetic import KinetoBuilder

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.gaps import (
    DEPENDENCY, DEPENDENCY_BOUND, DEVICE_BOUND, DEVICE_BOUND_SHARE, HOST_BOUND, HOST_DISPATCH, LAUNCH,
    LAUNCH_BOUND, LAUNCH_WINDOW_NS, NO_DEVICE, UNKNOWN, UNKNOWN_BOUND,
)

US = 1000


def analyse(builder: KinetoBuilder, tmp_path, name: str = "t.pt.trace.json") -> ProfileAnalysis:
    return ProfileAnalysis(load_profile(builder.write(tmp_path / name)))


def test_busy_is_the_union_over_streams_not_the_average(tmp_path):
    b = KinetoBuilder()
    b.op("step", 0, 300)
    b.kernel("gemm", 0, 100, stream=7, launch=0)
    b.kernel("gemm", 200, 100, stream=7, launch=1)
    b.kernel("gemm", 50, 200, stream=8, launch=2)
    # an NCCL stream that only runs a sliver at each end: idle most of the span, which must not
    # make the device look idle
    b.kernel("ncclKernel_AllReduce", 0, 1, stream=9, launch=3)
    b.kernel("ncclKernel_AllReduce", 299, 1, stream=9, launch=4)
    a = analyse(b, tmp_path)
    d = a.utilization.devices[0]
    assert d.span_ns == 300 * US and d.busy_ns == 300 * US and d.idle_ns == 0
    streams = {s.name.strip(): s for s in d.streams}
    assert streams["stream 7"].busy_ns == 200 * US and streams["stream 8"].busy_ns == 200 * US
    assert streams["stream 9"].busy_ns == 2 * US and streams["stream 9"].span_ns == 300 * US
    assert a.headline()["busy_share"] == 1.0
    # device time sums executions (streams together count twice); busy never exceeds the span
    assert a.device.device_time_ns == 402 * US > d.busy_ns


def test_kernel_type_breakdown_and_overlap(tmp_path):
    b = KinetoBuilder()
    b.op("step", 0, 160)
    b.kernel("gemm", 0, 100, stream=7, launch=0)
    b.kernel("ncclKernel_AllReduce_RING", 50, 100, stream=9, launch=1)
    b.kernel("Memcpy DtoD (Device -> Device)", 140, 20, stream=10, launch=2, cat="gpu_memcpy")
    d = analyse(b, tmp_path).utilization.devices[0]
    assert d.kernel_types == {
        "computation": 50 * US, "computation + communication": 50 * US, "communication": 40 * US,
        "communication + memory": 10 * US, "memory": 10 * US,
    }
    assert d.compute_ns == 100 * US and d.non_compute_ns == 60 * US and d.busy_ns == 160 * US
    assert d.communication_ns == 100 * US and d.comm_comp_overlap == pytest.approx(0.5)


def test_sync_records_and_annotations_are_not_work(tmp_path):
    b = KinetoBuilder()
    b.op("step", 0, 100)
    b.kernel("gemm", 0, 10, launch=0)
    b.kernel("Stream Sync", 10, 80, cat="cuda_sync", launch=1)  # the host waited 80 us
    b.kernel("my_region", 0, 100, cat="gpu_user_annotation")
    b.kernel("gemm", 90, 10, launch=2)
    a = analyse(b, tmp_path)
    assert a.device.executions == 2 and a.idle.busy_ns == 20 * US and a.idle.span_ns == 100 * US


def test_idle_causes(tmp_path):
    b = KinetoBuilder()
    b.op("step", -10, 400)
    b.kernel("A", 0, 10, launch=-5)
    b.kernel("B", 60, 10, launch=50)  # submitted 40 us after A ended, started 10 us later
    b.kernel("C", 200, 10, launch=55)  # queued long before B ended, started 130 us after it
    b.kernel("D", 300, 10)  # no launch in the trace
    idle = analyse(b, tmp_path).idle
    gaps = {g.cause: g for g in idle.largest}
    host = gaps[HOST_DISPATCH]
    assert (host.start_ns, host.end_ns, host.host_wait_ns, host.launch_ns) == (10 * US, 60 * US, 40 * US, 10 * US)
    dep = gaps[DEPENDENCY]
    assert dep.duration_ns == 130 * US and dep.host_wait_ns == 0
    assert dep.launch_ns == LAUNCH_WINDOW_NS and dep.dependency_ns == 130 * US - LAUNCH_WINDOW_NS
    assert gaps[UNKNOWN].duration_ns == 90 * US
    assert idle.host_dispatch_ns == 40 * US and idle.launch_ns == 10 * US + LAUNCH_WINDOW_NS
    assert idle.busy_ns + idle.host_dispatch_ns + idle.launch_ns + idle.dependency_ns + idle.unknown_ns == idle.span_ns
    # the window: 10 us before the first execution and 80 us after the last are host-side time
    assert idle.window_ns == 400 * US and idle.outside_ns == 90 * US
    assert sum(idle.to_dict()["window_shares"].values()) == pytest.approx(1.0)


def _regime(tmp_path, busy_us: float, window_us: float = 1000, gap_kind: str = HOST_DISPATCH, kernels: int = 10):
    """A window of ``window_us`` with ``kernels`` executions taking ``busy_us`` together; the time
    between them is of kind ``gap_kind``."""
    b = KinetoBuilder()
    b.op("step", 0, window_us)
    each = busy_us / kernels
    gap = (window_us - busy_us) / kernels
    t = 0.0
    for i in range(kernels):
        if gap_kind == HOST_DISPATCH:
            launch = t - 1  # submitted just before it starts: the gap before it waited on the host
        elif gap_kind == LAUNCH:
            launch = t - min(gap, LAUNCH_WINDOW_NS / US) + 0.5
        elif gap_kind == DEPENDENCY:
            launch = 0.0  # everything queued at once: the device waits on something else
        else:
            launch = None
        b.kernel(f"k{i}", t, each, launch=max(launch, 0.0) if launch is not None else None, launch_dur=0.5)
        t += each + gap
    return analyse(b, tmp_path, f"regime_{busy_us}_{gap_kind}.pt.trace.json").idle


def test_regime_thresholds(tmp_path):
    window = 1000
    at = _regime(tmp_path, DEVICE_BOUND_SHARE * window, window)
    assert at.window_share(at.busy_ns) == pytest.approx(DEVICE_BOUND_SHARE) and at.regime == DEVICE_BOUND
    below = _regime(tmp_path, (DEVICE_BOUND_SHARE - 0.02) * window, window)
    assert below.regime == HOST_BOUND
    assert _regime(tmp_path, 200, window, LAUNCH, kernels=40).regime == LAUNCH_BOUND
    assert _regime(tmp_path, 200, window, DEPENDENCY).regime == DEPENDENCY_BOUND
    assert _regime(tmp_path, 200, window, UNKNOWN).regime == UNKNOWN_BOUND


def test_a_burst_of_device_work_in_a_long_window_is_not_device_bound(tmp_path):
    """45 us of device work in a 413 ms profile: busy 100% of its own span, idle 99.99% of the run."""
    b = KinetoBuilder()
    b.op("train_step", 0, 413_000)
    b.kernel("gemm", 200_000, 45, launch=199_990)
    a = analyse(b, tmp_path)
    assert a.headline()["busy_share"] == 1.0
    assert a.headline()["window_busy_share"] == pytest.approx(45 / 413_000)
    assert a.idle.regime == HOST_BOUND
    top = a.recommendations[0]
    assert top.rule == "host_bound" and "45.0 µs of device work in 413.00 ms" in top.title


def test_devices_are_separate(tmp_path):
    b = KinetoBuilder()
    b.op("step", 0, 100)
    b.kernel("gemm", 0, 100, launch=0)
    b.events.append({"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "GPU 1"}})
    b.events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 1, "tid": 7, "ts": 0, "dur": 50,
                     "args": {"stream": 7, "device": 1, "correlation": 999}})
    a = analyse(b, tmp_path)
    devices = {d.device: d for d in a.utilization.devices}
    assert set(devices) == {"GPU 0", "GPU 1"}
    assert devices["GPU 0"].busy_ns == 100 * US and devices["GPU 1"].busy_ns == 50 * US
    assert a.idle.devices == 2 and a.idle.window_ns == 200 * US


def test_no_device_work(tmp_path):
    b = KinetoBuilder()
    b.op("aten::add", 0, 10)
    a = analyse(b, tmp_path)
    assert a.idle.regime == NO_DEVICE and a.utilization.devices == [] and a.recommendations == []


def test_memory_events_become_a_timeline_per_device(tmp_path):
    b = KinetoBuilder()
    b.op("step", 0, 100)
    b.kernel("gemm", 0, 10, launch=0)
    b.memory(1, 1024, 1024, 2048)
    b.memory(2, 4096, 5120, 8192)
    b.memory(3, -1024, 4096, 8192)
    b.memory(4, 512, 512, 0, device_type=0, device_id=-1)
    a = analyse(b, tmp_path)
    cuda = a.memory.series("cuda:0")
    assert cuda.peak_bytes == 5120 and cuda.allocations == 2 and cuda.frees == 1 and cuda.reserved.max() == 8192
    assert a.memory.series("cpu").peak_bytes == 512
    assert a.headline()["peak_memory_bytes"] == 5120  # the accelerator's, not the host's


def test_memory_timeline_of_a_real_cpu_profile(tmp_path):
    """torch.profiler(profile_memory=True) on the CPU: the allocator's own [memory] events."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        a = torch.ones(512, 1024)  # 2 MiB
        b = a * 2  # 2 MiB more, at once
        del a, b
    path = tmp_path / "memory.pt.trace.json"
    prof.export_chrome_trace(str(path))
    cpu = ProfileAnalysis(load_profile(path)).memory.series("cpu")
    assert cpu is not None and cpu.peak_bytes >= 4 * 2**20
    assert cpu.allocations >= 2 and cpu.frees >= 2 and cpu.allocated[-1] < cpu.peak_bytes
