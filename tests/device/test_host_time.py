"""On the neuron device, the host-side time of an op does not grow with tensor size; its device time does."""

import torch

import trnscope  # noqa: F401
from trnscope import runtime


def _per_op(x, reps=5):
    rt = runtime.core(0)
    y = x * 2  # warm: NEFF compiled, buffers cached
    del y
    torch.neuron.synchronize()
    rt.records.clear()
    rt.recording = True
    start = runtime.CLOCK.now()
    try:
        for _ in range(reps):
            y = x * 2
            del y
        host = (runtime.CLOCK.now() - start) / reps
        torch.neuron.synchronize()
    finally:
        rt.recording = False
    kernels = [r for r in rt.records if r.kind == "kernel"]
    rt.records.clear()
    device = sum(r.device_end_ns - r.device_start_ns for r in kernels) / len(kernels)
    return host, device


def test_host_time_flat_device_time_grows():
    small_host, small_dev = _per_op(torch.randn(1024, device="neuron"))
    large_host, large_dev = _per_op(torch.randn(4096, 4096, device="neuron"))  # 16M elements
    assert large_dev > 25 * small_dev  # 16384x the data; the small op is latency-bound
    # the 64 MiB op computes for tens of ms on the host; none of that is host time
    assert large_host < 3 * small_host + 200_000


def test_clock_history_is_bounded_without_a_profiler_and_profiles_keep_their_times(tmp_path):
    """The runtime clock keeps its history (one cut per op) only while torch.profiler records: an
    unprofiled loop runs in constant clock memory, and a profile's CPU times, mapped onto the
    emulated clock, are the same right after the session and after any amount of later work."""
    from torch.profiler import ProfilerActivity, profile

    from trnscope.profiling import NeuronConfig

    clock = runtime.CLOCK
    x = torch.randn(32, 32, device="neuron")
    for _ in range(10):
        x + x
    torch.neuron.synchronize()
    size = (len(clock.cuts), clock.segments)
    for _ in range(2000):
        y = x * 2 + x
        del y
    torch.neuron.synchronize()
    assert (len(clock.cuts), clock.segments) == size  # 4000 ops, not one entry more

    cfg = NeuronConfig(profile_output_dir=tmp_path)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg) as prof:
        for _ in range(5):
            y = torch.exp(x * 2 + x)
        torch.neuron.synchronize()
    assert not clock.held
    window = prof.profiler._trnscope_window
    cm = window.clockmap
    events = [(e.start_ns(), e.start_ns() + e.duration_ns()) for e in prof.profiler.kineto_results.events()]
    assert len(events) > 15
    mapped = [(cm.emulated(s), cm.emulated(e)) for s, e in events]
    cut = [cm.in_cut(s, e) for s, e in events]
    cpu_ops = {(e.name, e.time_range.start, e.time_range.end) for e in prof.events()}
    kept = (len(clock.cuts), clock.segments)
    assert kept[0] > size[0]  # the session's cuts are kept

    for _ in range(2000):
        y = x * 2 + x
    torch.neuron.synchronize()
    assert len(clock.cuts) == kept[0] and clock.segments <= kept[1] + 1
    assert [(cm.emulated(s), cm.emulated(e)) for s, e in events] == mapped
    assert [cm.in_cut(s, e) for s, e in events] == cut
    assert {(e.name, e.time_range.start, e.time_range.end) for e in prof.events()} == cpu_ops
