"""Capture semantics: schedules, in-flight work at window close, caps, numerics, fallbacks, threads."""

import dataclasses
import re
import warnings

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

from trnscope import runtime
from trnscope.profiling import NeuronConfig, NeuronProfiler, NeuronProfilerWarning, ProfileMode
from trnscope.profiling.export import load_manifest
from trnscope.profiling.ntff import read_ntff
from trnscope.runtime import observe

from .helpers import ACTIVITIES, check_trace_event_format, load_json, profile_once, x_events


def naive(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _device_rows(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def test_schedule_keeps_only_active_steps(xw, tmp_path):
    x, w = xw
    naive(x, w)
    cfg = NeuronConfig(profile_output_dir=tmp_path)
    exporter = NeuronProfiler(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=ACTIVITIES, experimental_config=cfg, on_trace_ready=exporter.export_trace,
                     schedule=schedule(wait=1, warmup=1, active=2, repeat=1)) as prof:
            for _ in range(5):
                naive(x, w)
                torch.neuron.synchronize()
                prof.step()
    assert len(exporter.exports) == 1
    doc = load_json(exporter.last_export / "trace.json")
    check_trace_event_format(doc)
    steps = sorted(e["name"] for e in x_events(doc, "user_annotation") if e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]  # wait (0) and warm-up (1) excluded
    assert len(x_events(doc, "privateuse1_driver")) == 12  # 2 active steps x 6 kernels
    assert len(_device_rows(prof)) == 12
    assert load_manifest(exporter.last_export)["window"]["kernels"] == 12


def test_repeat_writes_one_directory_per_cycle(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir=tmp_path)
    exporter = NeuronProfiler(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=ACTIVITIES, experimental_config=cfg, on_trace_ready=exporter.export_trace,
                     schedule=schedule(wait=0, warmup=1, active=1, repeat=2)) as prof:
            for _ in range(4):
                naive(x, w)
                torch.neuron.synchronize()
                prof.step()
    assert len(exporter.exports) == 2 and len(set(exporter.exports)) == 2
    for d in exporter.exports:
        assert load_manifest(d)["window"]["kernels"] == 6


@pytest.fixture
def slow_work():
    """A step whose last kernel is still running when the host leaves the profile context: the
    target's HBM/DMA bandwidth is divided by 1000 so a 64x1024 multiply takes ~1.7 ms of device
    time (the tests' conftest restores the target afterwards)."""
    from trnscope import hw

    spec = hw.get_spec()
    hw.set_instance(dataclasses.replace(spec, hbm_bytes_per_s_per_core=spec.hbm_bytes_per_s_per_core / 1000,
                                        dma_bytes_per_ns_per_engine=spec.dma_bytes_per_ns_per_engine / 1000))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 1024, generator=g).to("neuron")

    def run():
        y = x * 2
        torch.neuron.synchronize()  # this one completes inside the window
        return y + 1                # this one does not, unless the caller synchronises

    return run


def test_missing_synchronize_drops_in_flight_work_and_warns_once(slow_work, tmp_path):
    cfg = NeuronConfig(profile_output_dir=tmp_path)
    with pytest.warns(NeuronProfilerWarning, match=r"torch\.neuron\.synchronize\(\) before prof\.step\(\)") as rec:
        prof, where, _ = profile_once(slow_work, None, modes=cfg, sync=False, warmup=1)
    # the warning points at the user's code (here: the `with profile(...)` in helpers.py)
    assert any(r.filename.endswith("helpers.py") for r in rec.list if issubclass(r.category, NeuronProfilerWarning))
    m = load_manifest(where)
    assert m["complete"] is True
    assert m["window"]["missing_in_flight"] == 1
    assert m["window"]["kernels"] == 1  # the multiply finished; the add did not
    assert any("synchronize" in s for s in m["warnings"])
    doc = load_json(where / "trace.json")
    assert [e["args"]["op"] for e in x_events(doc, "privateuse1_driver")] == ["aten::mul.Tensor"]
    assert [e.name for e in prof.events() if e.kernels] == ["aten::mul"]
    # the dropped execution is named in the system trace
    dropped = load_json(where / "system_trace.json")["neuron"]["missing_in_flight"]
    assert [r["op"] for r in dropped] == ["aten::add.Tensor"]
    # once per NeuronConfig
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile_once(slow_work, None, modes=cfg, sync=False, warmup=0)
    assert not [c for c in caught if issubclass(c.category, NeuronProfilerWarning)]
    # with the synchronize, everything is in
    _, where, _ = profile_once(slow_work, tmp_path / "synced", sync=True, warmup=0)
    assert load_manifest(where)["window"]["kernels"] == 2


def test_synchronized_window_warns_nothing(xw, tmp_path):
    x, w = xw
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile_once(lambda: naive(x, w), tmp_path)
    assert not [c for c in caught if issubclass(c.category, NeuronProfilerWarning)]


def test_max_events_per_nc_caps_instruction_events(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path, max_events_per_nc=7)
    with pytest.warns(NeuronProfilerWarning, match=r"max_events_per_nc=7"):
        _, where, _ = profile_once(lambda: naive(x, w), None, modes=cfg)
    written, truncated = 0, 0
    for p in where.glob("*.ntff"):
        header, tables = read_ntff(p)
        assert tables["instruction"].num_rows == header["instructions_written"]
        written += header["instructions_written"]
        truncated += header["truncated"]
    assert written == 7 and truncated >= 1
    m = load_manifest(where)
    assert m["complete"] is True and any("max_events_per_nc" in s for s in m["warnings"])
    assert any(f.get("truncated") for f in m["files"] if f["kind"] == "ntff")


def test_profiling_never_changes_numerics(xw, tmp_path):
    x, w = xw
    ref = naive(x, w).cpu()
    ref_fused = torch.rms_norm(x, (x.shape[-1],), w, 1e-6).cpu()
    _, _, got = profile_once(lambda: naive(x, w).cpu(), tmp_path,
                             modes=list(ProfileMode), record_shapes=True, with_stack=True)
    _, _, got_fused = profile_once(lambda: torch.rms_norm(x, (x.shape[-1],), w, 1e-6).cpu(), tmp_path)
    assert torch.equal(got, ref) and torch.equal(got_fused, ref_fused)


def test_without_correlation_there_are_no_device_columns(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path, correlate_device_time=False)
    prof, where, _ = profile_once(lambda: naive(x, w), None, modes=cfg)
    assert not _device_rows(prof) and not any(e.kernels for e in prof.events())
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    assert "NEURON" not in table and "aten::mul" in table
    # the export still has the device lanes
    assert len(x_events(load_json(where / "trace.json"), "privateuse1_driver")) == 6


def test_cpu_times_exclude_emulator_work(xw, tmp_path):
    """CPU times are on the emulated clock: the emulator's cut-out work does not count."""
    x, w = xw
    clock = runtime.CLOCK
    cut0 = len(clock.cuts)
    prof, _, _ = profile_once(lambda: naive(x, w), tmp_path)
    cut_ns = sum(b - a for a, b in clock.cuts[cut0:])
    assert cut_ns > 0
    top = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.cpu_parent is None]
    emulated_us = sum(e.cpu_time_total for e in top)
    window = prof.profiler._trnscope_window
    assert emulated_us * 1000 <= (window.close_em - window.start_em) + 1000


def test_fallback_ops_are_marked(xw, tmp_path):
    x, _ = xw
    # float64 has no NeuronCore equivalent: whatever kernels exist, the op runs on the CPU
    xd = x.to(torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof, where, _ = profile_once(lambda: torch.cumsum(xd, 0), tmp_path)
    doc = load_json(where / "system_trace.json")
    fb = x_events(doc, "cpu_fallback")
    assert fb and all(e["args"]["fallback"] is True for e in fb)
    assert any("cumsum" in e["name"] for e in fb)
    trace = load_json(where / "trace.json")
    assert any(e["name"] == "cpu_fallback" for e in x_events(trace, "privateuse1_runtime"))


def test_nc_selection_excluding_core_0_captures_nothing(xw, tmp_path):
    x, w = xw
    # cores that exist but did no work: an empty but legitimate capture, no warning
    others = f"1-{torch.neuron.device_count() - 1}" if torch.neuron.device_count() > 1 else None
    if others is not None:
        cfg = NeuronConfig(profile_output_dir=tmp_path / "others", capture_enabled_for_nc=others)
        with warnings.catch_warnings():
            warnings.simplefilter("error", NeuronProfilerWarning)
            prof, where, _ = profile_once(lambda: naive(x, w), None, modes=cfg)
        assert not _device_rows(prof)
        assert load_manifest(where)["window"]["executions"] == 0
    # cores this process does not have: nothing can be captured, which the user is told
    missing = torch.neuron.device_count() + 3
    cfg = NeuronConfig(profile_output_dir=tmp_path / "missing", capture_enabled_for_nc=f"{missing}-{missing + 2}")
    with pytest.warns(NeuronProfilerWarning, match="selects none"):
        prof, where, _ = profile_once(lambda: naive(x, w), None, modes=cfg)
    assert not _device_rows(prof)
    assert load_manifest(where)["window"]["executions"] == 0


def test_config_without_privateuse1_activity_warns(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path)
    with pytest.warns(NeuronProfilerWarning, match="ProfilerActivity.PrivateUse1"):
        with profile(activities=[ProfilerActivity.CPU], experimental_config=cfg) as prof:
            naive(x, w)
            torch.neuron.synchronize()
    assert not _device_rows(prof)
    assert runtime.core(0).recording is False and observe.observers == ()


def test_runtime_state_is_restored(xw, tmp_path):
    from trnscope.device import dispatch

    x, w = xw
    rt = runtime.core(0)
    executor = dispatch.get_executor()
    n = len(rt.records)
    profile_once(lambda: naive(x, w), tmp_path)
    assert rt.recording is False and observe.observers == ()  # nothing subscribed, nothing kept
    assert dispatch.get_executor() is executor
    assert len(rt.records) == n
    assert torch.autograd._profiler_enabled() is False


def test_backward_on_the_autograd_thread(tmp_path):
    x = torch.randn(8, 64).to("neuron").requires_grad_()
    w = torch.randn(64).to("neuron").requires_grad_()

    def step():
        loss = naive(x, w).sum()
        loss.backward()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof, where, _ = profile_once(step, tmp_path)
    rows = _device_rows(prof)
    attached = sum(len(e.kernels) for e in prof.events() if e.device_type == DeviceType.CPU)
    assert rows and attached == len(rows)  # every device execution found the op that dispatched it
    threads = {e.thread for e in prof.events() if e.device_type == DeviceType.CPU and e.kernels}
    assert len(threads) >= 1
    check_trace_event_format(load_json(where / "trace.json"))


def test_profile_all_threads_and_acc_events_work(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path, profile_all_threads=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=ACTIVITIES, experimental_config=cfg, acc_events=True,
                     schedule=schedule(wait=0, warmup=0, active=1, repeat=2)) as prof:
            for _ in range(2):
                naive(x, w)
                torch.neuron.synchronize()
                prof.step()
    assert len(_device_rows(prof)) == 12  # both cycles accumulated


def test_exception_inside_the_window_closes_it(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path)
    with pytest.raises(ZeroDivisionError):
        with profile(activities=ACTIVITIES, experimental_config=cfg):
            naive(x, w)
            1 / 0
    assert observe.observers == () and not runtime.CLOCK.held


def test_step_names_are_kept_in_key_averages(xw, tmp_path):
    x, w = xw
    cfg = NeuronConfig(profile_output_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=ACTIVITIES, experimental_config=cfg,
                     schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
            for _ in range(2):
                naive(x, w)
                torch.neuron.synchronize()
                prof.step()
    keys = [e.key for e in prof.key_averages()]
    assert any(re.fullmatch(r"ProfilerStep\*", k) for k in keys)


# Kineto stamps events with the TSC, converted to epoch ns by a linear fit it makes when the profile
# ends; the runtime's clock reads CLOCK_MONOTONIC, and the window maps one onto the other by an
# offset read once. The two disagree by one near-constant shift per profile (up to a few hundred ns
# seen), so a span's edge a hundred ns inside its cut can map just outside it. What holds on any
# machine: one shift puts every span inside its own cut.
CLOCK_AGREEMENT_NS = 1000


def test_recording_work_is_cut_from_host_time(xw, tmp_path):
    """The profiler's own bookkeeping (span open/close) happens inside emulation cuts, so it never
    shows as the op's CPU time: every span lies in a cut of the clock, up to the one shift between
    the profiler's clock and the runtime's. Executions made inside a span are linked to it through
    the runtime hook, so they need no marker events."""
    x, w = xw
    prof, _, _ = profile_once(lambda: naive(x, w), tmp_path, export=False)
    window = prof.profiler._trnscope_window
    cm = window.clockmap
    cuts = window.clock.cuts
    spans, markers = {}, 0
    room_before, room_after = [], []  # per span: how far its cut starts before it / ends after it
    for e in prof.profiler.kineto_results.events():
        if e.name().startswith("trnscope::dispatch#"):
            spans[int(e.name().rsplit("#", 1)[1])] = e
            start, end = cm.real(e.start_ns()), cm.real(e.start_ns() + e.duration_ns())
            mid = (start + end) // 2
            own = [(a, b) for a, b in cuts if a - CLOCK_AGREEMENT_NS <= mid < b + CLOCK_AGREEMENT_NS]
            assert len(own) == 1, (e.name(), own)
            room_before.append(start - own[0][0])
            room_after.append(own[0][1] - end)
        elif e.name().startswith("trnscope::exec#"):
            markers += 1
    # a shift d with start + d >= cut start and end + d <= cut end for every span, |d| within bounds
    lo, hi = -min(room_before), min(room_after)
    assert lo <= hi and lo <= CLOCK_AGREEMENT_NS and hi >= -CLOCK_AGREEMENT_NS, (lo, hi)
    kernels = [r for r in window.records if r.kind == "kernel"]
    assert len(kernels) == 6 and markers == 0
    assert all(window.span_of[r.seq] in spans for r in kernels)  # every execution's span was recorded


def test_hbm_sample_reads_the_allocator_counters():
    """The per-execution HBM sample reads the allocator's live counter (not a locked copy of all
    counters); it must agree with memory.stats() as allocations come and go, on any core."""
    from trnscope.device import memory
    from trnscope.profiling.capture import _memory_allocated

    for nc in sorted({0, torch.neuron.device_count() - 1}):
        before = memory.stats(nc).allocated
        assert _memory_allocated(nc) == before
        t = torch.empty(1 << 20, dtype=torch.uint8, device=f"neuron:{nc}")
        assert _memory_allocated(nc) == memory.stats(nc).allocated >= before + (1 << 20)
        del t
        assert _memory_allocated(nc) == memory.stats(nc).allocated


def test_host_fallback_time_stays_with_the_op(tmp_path, monkeypatch):
    """An op with no kernel runs on the host outside the emulation cut, inside its dispatch span:
    the fallback's real host time is the op's CPU time, and its execution is linked to the op."""
    import time

    x = torch.randn(8, 64).to("neuron")
    sleep_s = 0.02
    orig = runtime.NeuronCoreRuntime.fallback

    def slow(self, op, compute=None, nbytes=0, reason=""):
        def work():
            time.sleep(sleep_s)
            return compute()
        return orig(self, op, work if compute is not None else None, nbytes, reason)

    monkeypatch.setattr(runtime.NeuronCoreRuntime, "fallback", slow)
    with warnings.catch_warnings(), runtime.host_time_mode("real"):  # a real fallback is measured in real mode
        warnings.simplefilter("ignore")
        prof, _, _ = profile_once(lambda: torch.digamma(x), tmp_path)
    ops = [e for e in prof.events() if e.name == "aten::digamma" and e.device_type == DeviceType.CPU]
    assert ops and max(e.cpu_time_total for e in ops) >= sleep_s * 1e6
    window = prof.profiler._trnscope_window
    fb = [r for r in window.records if r.kind == "fallback" and "digamma" in r.op]
    assert fb and all(r.seq in window.span_of for r in fb)
