"""The C++ core of the device (``trnscope.device._core``) and the Python path beside it.

The suite runs on whichever path this machine gives (the C++ core when it builds); the tests here
run a representative set of the device tests on the other path in a subprocess, check what only
the C++ registrations can give PyTorch, and that a machine that cannot build the core gets one
clear message and a working device.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import trnscope.device  # noqa: F401
from trnscope.device import _core
from trnscope.runtime import observe

REPO = Path(__file__).resolve().parents[2]
cpp_only = pytest.mark.skipif(_core.CORE is None, reason="the C++ core is not loaded (TRNSCOPE_CPP=0 or no build)")

# the device tests that pin the contract on both paths: tensors and views, memory accounting,
# several cores and torch.accelerator, training, the runtime's dispatch plans and host time
BOTH_PATHS = (
    "tests/device/test_device_tensors.py",
    "tests/device/test_device_memory.py",
    "tests/device/test_device_multicore.py",
    "tests/device/test_device_training.py",
    "tests/device/test_host_time.py",
    "tests/runtime/test_dispatch_plans.py",
)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


@pytest.mark.slow
@cpp_only
def test_the_python_path_passes_the_device_tests():
    """This run is on the C++ path: the same tests pass with TRNSCOPE_CPP=0."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *BOTH_PATHS],
                         cwd=REPO, env=_env(TRNSCOPE_CPP="0"), capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


# the device contract tests that run on the plain host executor by default (tests/device/conftest.py)
HOST_EXECUTOR_TESTS = (
    "tests/device/test_device_tensors.py",
    "tests/device/test_device_memory.py",
    "tests/device/test_device_training.py",
    "tests/device/test_device_multicore.py",
)


@pytest.mark.slow
@cpp_only
def test_the_device_tests_pass_through_the_cpp_eager_path():
    """The device layer's contract tests, run through the runtime's executor (and so the C++ eager
    path, which a host executor turns off): the same results as on the host."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                          *HOST_EXECUTOR_TESTS], cwd=REPO, env=_env(TRNSCOPE_DEVICE_TESTS_EXECUTOR="installed"),
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(_core.CORE is not None or os.environ.get(_core.ENV) == "0",
                    reason="this run is on the C++ path, or the Python path was chosen")
def test_the_cpp_path_passes_the_device_tests():  # pragma: no cover - a machine that cannot build
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *BOTH_PATHS],
                         cwd=REPO, env=_env(TRNSCOPE_CPP="1"), capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@cpp_only
def test_factories_without_an_index_use_the_current_core():
    """ATen fills in a missing index from the device guard: only a C++ guard can answer it."""
    try:
        torch.neuron.set_device(1)
        assert torch.tensor([1.0, 2.0], device="neuron").device == torch.device("neuron", 1)
        assert torch.as_tensor([1, 2], device="neuron").device.index == 1
        assert torch.UntypedStorage(8, device="neuron").device == torch.device("neuron", 1)
        assert torch.Generator(device="neuron").device == torch.device("neuron", 1)
    finally:
        torch.neuron.set_device(0)


@cpp_only
def test_every_factory_pins_through_the_hooks():
    """pin_memory=True reaches the C++ pinned allocator from every factory, not only wrapped ones."""
    assert torch.rand(3, pin_memory=True).is_pinned()
    assert torch.arange(4, pin_memory=True).is_pinned()
    assert not torch.ones(2).is_pinned()


@cpp_only
def test_autograd_gives_each_core_its_own_device_thread():
    x = torch.ones(4, device="neuron:3", requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.device.index == 3 and x.grad.cpu().tolist() == [2.0] * 4
    assert torch._C._is_multithreading_enabled()


@cpp_only
def test_torch_events_time_on_the_device_clock():
    a = torch.randn(512, 512, device="neuron")
    start = torch.Event(device="neuron", enable_timing=True)
    end = torch.Event(device="neuron", enable_timing=True)
    start.record()
    a @ a
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0


def test_a_machine_that_cannot_build_gets_one_message_and_a_working_device(tmp_path):
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as seen:
            import torch, trnscope
            from trnscope.device import _core
            x = torch.arange(4.0, device="neuron") * 2
        mine = [w for w in seen if w.category is _core.CppCoreUnavailable]
        assert _core.CORE is None and len(mine) == 1, [str(w.message) for w in seen]
        assert "TRNSCOPE_CPP=0" in str(mine[0].message) and "compiler" in str(mine[0].message)
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    """)
    env = _env(TRNSCOPE_CPP_BUILD_DIR=str(tmp_path / "build"), CXX=str(tmp_path / "no-such-compiler"))
    env.pop(_core.ENV, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_cpp_1_requires_the_core(tmp_path):
    env = _env(TRNSCOPE_CPP="1", TRNSCOPE_CPP_BUILD_DIR=str(tmp_path / "build"), CXX=str(tmp_path / "nothing"))
    out = subprocess.run([sys.executable, "-c", "import torch, trnscope"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode != 0 and "TRNSCOPE_CPP=1 but the C++ core could not be built" in out.stderr


def test_torch_adaptations_are_declared_checked_and_only_those_of_the_path():
    from trnscope.device import torch_adaptations as ta

    assert ta.check() == []
    expected = {a.name for a in ta.active(_core.CORE is not None)}
    assert set(ta.applied()) <= expected
    if _core.CORE is not None:
        assert expected == {"profiler_capture"}
        assert torch.Tensor.to is ta.original(torch.Tensor, "to")  # torch's own
    for a in ta.ADAPTATIONS.values():
        assert a.replaces and a.why


def test_an_adaptation_refuses_a_torch_that_moved_what_it_replaces(monkeypatch):
    from trnscope.device import torch_adaptations as ta
    from trnscope.profiling import capture

    monkeypatch.setitem(ta._applied, "profiler_capture", False)
    monkeypatch.setitem(capture.EXPECTED, "_start_trace_v2", ["self"])  # a method torch no longer has
    with pytest.raises(ta.TorchChanged, match=r"profile._start_trace_v2 is gone"):
        ta.apply("profiler_capture")


_TIMELINE = textwrap.dedent("""
    import json, warnings
    warnings.simplefilter("ignore")
    import torch, trnscope
    from trnscope import runtime
    from trnscope.device import _core
    torch.manual_seed(0)
    cores = [runtime.core(0), runtime.core(1)]
    for c in cores:
        c.recording = True
    start = runtime.CLOCK.now()
    w = torch.randn(64, 64).to("neuron", non_blocking=True)
    x = torch.randn(8, 64, device="neuron", requires_grad=True)
    for _ in range(3):
        y = torch.relu(x @ w) * 2 + 1
        y.sum().backward()
    for _ in range(3):  # planned calls: functional, in place, several outputs, views, allocations
        v = (x.detach() * 3).view(4, 128).t()
        v.add_(1.5)
        m, i = torch.max(v, dim=1)
        e = torch.empty(16, 16, device="neuron").fill_(2.0)
        s = torch.sum(e, 0) + m[:16]
    torch.neuron.set_device(1)
    z = torch.ones(32, device="neuron") * 3
    back = (z + w[0, :32].to("neuron:1")).cpu()
    torch.neuron.synchronize(0)
    torch.neuron.synchronize(1)
    rows = [(r.seq, r.kind, r.op, r.device, r.host_start_ns - start, r.host_end_ns - start, r.device_start_ns - start,
             r.device_end_ns - start, r.bytes, r.neff_name, r.compile_ns, r.queue_wait_ns)
            for c in cores for r in c.records]
    values = [s.cpu().tolist(), i.cpu().tolist(), back.tolist(), x.grad.cpu().tolist()]
    print(json.dumps({"cpp": _core.CORE is not None, "rows": rows, "end": runtime.CLOCK.now() - start,
                      "stats": [c.stats() for c in cores], "values": values,
                      "counters": _core.CORE.counters() if _core.CORE is not None else None}))
""")


def _run_both(script: str, tmp_path, *args) -> dict:
    """``script`` in a subprocess on each path (modelled host time, a NEFF cache of its own each: a
    kernel loaded from disk costs less than one compiled); its last line of JSON per path."""
    import json

    runs = {}
    for flag in ("1", "0"):
        cache = str(tmp_path / f"neff-{flag}")
        env = _env(TRNSCOPE_CPP=flag, TRNSCOPE_HOST_TIME="modelled", TRNSCOPE_NEFF_CACHE_DIR=cache,
                   TORCH_NEURONX_NEFF_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", script, *[a.format(flag=flag) for a in args]], env=env,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        runs[flag] = json.loads(out.stdout.strip().splitlines()[-1])
    return runs


@pytest.mark.slow
@cpp_only
def test_both_paths_give_the_same_modelled_timeline(tmp_path):
    """In modelled host-time mode the clock advances by the host-cost model only, so the C++ core -
    whose eager path serves every planned call, allocation and view itself - must leave every
    execution's host and device times exactly where the Python path puts them: the same records
    (sequence numbers, ops, NEFFs, times, queue waits), statistics, final clock and numbers."""
    runs = _run_both(_TIMELINE, tmp_path)
    cpp, py = runs["1"], runs["0"]
    assert cpp["cpp"] and not py["cpp"]
    assert len(cpp["rows"]) > 30
    assert cpp["rows"] == py["rows"] and cpp["end"] == py["end"]
    assert cpp["stats"] == py["stats"] and cpp["values"] == py["values"]
    hot, cold = cpp["counters"]
    assert hot > cold  # the planned calls were served in C++


_PROFILE = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch, trnscope
    from torch.profiler import profile, ProfilerActivity
    from trnscope.profiling import NeuronConfig, NeuronProfiler, ProfileMode
    x = torch.randn(64, 256).to("neuron"); w = torch.randn(256).to("neuron")
    def step(x, w):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return y.view(128, 128).t().sum(0)
    for _ in range(2): step(x, w)
    torch.neuron.synchronize()
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg) as p:
        for _ in range(3): step(x, w)
        torch.neuron.synchronize()
    where = NeuronProfiler(cfg).export_trace(p)
    trace = json.load(open(f"{where}/trace.json"))
    rows = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "cpu_op"
            and not e.get("name", "").startswith("PyTorch Profiler")]  # the session's real start
    base = min(e["ts"] for e in rows)  # the emulated clock's epoch offset differs between processes
    device = sorted((e.get("name"), round(e["ts"] - base, 3), e.get("dur"), e.get("cat"),
                     json.dumps(e.get("args", {}), sort_keys=True)) for e in rows)
    ops = sorted((e.key, e.count, e.cpu_time_total, e.self_device_time_total, e.device_time_total)
                 for e in p.key_averages())
    print(json.dumps({"device": device, "ops": ops}))
""")


@pytest.mark.slow
@cpp_only
def test_both_paths_give_the_same_profile(tmp_path):
    """A DEVICE+RUNTIME profile of warm ops (the C++ eager path records them, its dispatch spans link
    them to their ops): the exported device rows and the per-op CPU and device times are those
    of the Python path."""
    runs = _run_both(_PROFILE, tmp_path, str(tmp_path / "profile-{flag}"))
    cpp, py = runs["1"], runs["0"]
    assert cpp["device"] and cpp["ops"] and cpp["ops"] == py["ops"]
    # trace times are epoch-based us with ns digits: ~16 significant digits, the last one float noise
    assert [r[:1] + r[2:] for r in cpp["device"]] == [r[:1] + r[2:] for r in py["device"]]
    assert all(abs(a[1] - b[1]) <= 0.002 for a, b in zip(cpp["device"], py["device"]))


_SERVED_IN_CPP = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch, trnscope
    from trnscope.device import _core
    root = trnscope.__file__.rsplit("/", 1)[0]
    a = torch.randn(32, 32).to("neuron"); b = torch.randn(32, 32).to("neuron")
    def ops(i):
        c = (a + b) * 2
        d = torch.exp(c).sum(-1)
        e = c.view(16, 64).t()
        e.mul_(0.5)
        f = torch.empty(8, device="neuron")
        g = a * (1.0 + i / 64)  # a runtime scalar: a new value is no new plan
        return d, e, f, g
    for i in range(3):
        ops(i)
    before = _core.CORE.counters()
    ops(3)
    after = _core.CORE.counters()
    per = after[0] - before[0]
    before = after
    entered = []
    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            entered.append(frame.f_code.co_filename)
    sys.setprofile(prof)
    for i in range(20):
        ops(4 + i)
    sys.setprofile(None)
    after = _core.CORE.counters()
    print(json.dumps({"python_calls": len(entered), "per_iteration": per, "hot": after[0] - before[0],
                      "cold": after[1] - before[1]}))
""")


@cpp_only
def test_planned_calls_never_enter_python():
    """Warm calls (functional, in place, views, allocations, a runtime scalar's new values) are
    served by the C++ eager path: no trnscope Python function runs, and the core counts no entry
    into Python."""
    import json

    out = subprocess.run([sys.executable, "-c", _SERVED_IN_CPP], env=_env(TRNSCOPE_HOST_TIME="modelled"),
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # add, mul, exp, sum, view, as_strided (t), mul_, empty, mul at least
    assert got["per_iteration"] >= 9, got
    assert got == {"python_calls": 0, "per_iteration": got["per_iteration"], "hot": 20 * got["per_iteration"],
                   "cold": 0}, got


@cpp_only
def test_the_cpp_eager_path_spends_the_host_cost_model_in_force():
    """A model installed with set_host_costs reaches the C++ eager path (a warm op's submit)."""
    from trnscope import runtime

    a = torch.randn(16, 16).to("neuron")
    for _ in range(3):
        a * a  # planned: served in C++ from now on
    rt = runtime.core(0)
    old = runtime.set_host_costs(runtime.host_costs().scaled(3))
    try:
        rt.recording = True
        rt.records.clear()
        before = _core.CORE.counters()
        a * a
        assert _core.CORE.counters()[1] == before[1]  # no call entered Python
        (rec,) = rt.records
        assert rec.host_end_ns - rec.host_start_ns == runtime.host_costs().submit_ns == 15_000
    finally:
        rt.recording = False
        rt.records.clear()
        runtime.set_host_costs(old)


@cpp_only
def test_another_target_gets_fresh_queues_on_the_cpp_eager_path():
    """After the spec in force changes, a warm call is not served on the old target's queue: the
    core's runtime for the new spec sees it (and its plan is made anew)."""
    from trnscope import hw, runtime

    a = torch.randn(16, 16).to("neuron")
    for _ in range(3):
        a + a
    old_rt = runtime.core(0)
    saved = hw.instance._current
    hw.set_instance("trn1")
    try:
        new_rt = runtime.core(0)
        assert new_rt is not old_rt and new_rt.spec.name != old_rt.spec.name
        dispatched = old_rt.stats()["dispatches"]
        a + a
        a + a
        assert old_rt.stats()["dispatches"] == dispatched and new_rt.stats()["dispatches"] == 2
    finally:
        hw.instance.reset(saved)


def test_a_planned_op_reads_top_to_bottom_on_the_python_path():
    """dispatch -> cached plan -> host numerics -> runtime submit: on the Python path a warm op
    enters the dispatch module, the runtime bridge and the runtime's executor once each, and
    nothing below the device layer calls back up into it (benchmarks/bench_eager_path.py)."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_eager_path.py")],
                         env=_env(TRNSCOPE_CPP="0"), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "0 climbs back into device/" in lines[1], lines[1]
    entered = {parts[0]: int(parts[2].rstrip("x,")) for parts in (line.split() for line in lines[2:])}
    for module in ("device/dispatch.py", "device/runtime_bridge.py", "runtime/executor.py"):
        assert entered[module] == 1, (module, lines)


class _Watcher(observe.Observer):
    def __init__(self, deferred: bool) -> None:
        self.deferred = self.sample_memory = deferred
        self.events: list = []

    def dispatch_begin(self) -> None:
        self.events.append("begin")

    def dispatch_end(self) -> None:
        self.events.append("end")

    def execution(self, ex) -> None:
        self.events.append(("now", ex.seq))

    def deferred_execution(self, ex, span, allocated, native_tid) -> None:
        self.events.append(("late", ex.seq, span, allocated, native_tid))


@cpp_only
def test_an_observer_that_needs_every_event_takes_every_op_to_python():
    """An observer that is not deferred (what a plain on_record hook was) gets every op's dispatch
    events and each execution as it happens: while it watches, the C++ eager path serves nothing
    (warm calls, allocations and views alike); once it goes, warm calls are served in C++ again."""
    a = torch.randn(16, 16).to("neuron")
    for _ in range(3):
        a * a  # planned
    watcher = _Watcher(deferred=False)
    observe.subscribe(watcher)
    try:
        hot = _core.CORE.counters()[0]
        (a * a).view(256)
        assert _core.CORE.counters()[0] == hot
    finally:
        observe.unsubscribe(watcher)
    now = [e for e in watcher.events if e[0] == "now"]
    assert len(now) == 1 and not [e for e in watcher.events if e[0] == "late"]
    assert watcher.events.count("begin") == watcher.events.count("end") >= 2
    hot = _core.CORE.counters()[0]
    a * a
    assert _core.CORE.counters()[0] > hot


@cpp_only
def test_a_deferred_observer_gets_the_cpp_eager_paths_executions_late_with_their_spans():
    """While only deferred observers watch, warm calls stay in C++ (no call enters Python), each in
    a dispatch span of its own numbered from the one sequence; their executions reach the observer
    when it unsubscribes, with the span, the core's allocated bytes and the thread's OS id. The
    core, not recording, keeps none of them; a cold call still reaches the observer at once."""
    import threading

    from trnscope import runtime

    a = torch.randn(16, 16).to("neuron")
    for _ in range(3):
        a * a
        a + a
    rt = runtime.core(0)
    kept = len(rt.records)
    watcher = _Watcher(deferred=True)
    observe.subscribe(watcher)
    try:
        cold = _core.CORE.counters()[1]
        a * a
        a + a
        assert _core.CORE.counters()[1] == cold  # served in C++
        assert watcher.events == []  # kept, not handed over yet
        a[:3] * a[:3]  # a new signature: the Python path, its events as they happen
    finally:
        observe.unsubscribe(watcher)
    late = [e for e in watcher.events if e[0] == "late"]
    assert len(late) == 2 and late[0][1] < late[1][1]
    spans = [e[2] for e in late]
    assert 0 < spans[0] < spans[1] < observe.next_span()
    # the operand and the result live at the submit
    assert all(e[3] >= 2 * a.nbytes and e[4] == threading.get_native_id() for e in late)
    assert [e for e in watcher.events if e[0] == "now"] and "begin" in watcher.events
    assert len(rt.records) == kept


@cpp_only
def test_a_profiling_session_keeps_warm_ops_in_cpp_and_records_only_the_users_ops(tmp_path):
    """Under torch.profiler with NeuronConfig(DEVICE, RUNTIME), warm ops stay on the C++ eager path
    (no call goes to Python), and Kineto records each user op and its dispatch span, nothing else:
    the ATen calls the host numerics make (mean's CPU kernel calls sum and div_) stay out whether
    the plan was first served unprofiled (where it learns that its kernel calls other ops) or
    inside the session (not known yet: kept out anyway)."""
    import collections
    import warnings

    from torch.profiler import ProfilerActivity, profile

    from trnscope.profiling import NeuronConfig, ProfileMode

    def naive(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    x, w = torch.randn(8, 64).to("neuron"), torch.randn(64).to("neuron")
    y = torch.randn(4, 32).to("neuron")
    for _ in range(3):
        naive(x, w)
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                     experimental_config=cfg) as prof:
            hot, cold = _core.CORE.counters()
            for _ in range(3):
                naive(x, w)
            after = _core.CORE.counters()
            for _ in range(3):
                y.mean(-1)  # a new signature: its first call learns the plan, the next two are served in C++
            torch.neuron.synchronize()
    assert after[1] == cold and after[0] - hot == 18
    names = collections.Counter(e.name().split("#")[0] for e in prof.profiler.kineto_results.events()
                                if e.device_type() == torch.autograd.DeviceType.CPU)
    assert names == {"aten::mul": 6, "aten::pow": 3, "aten::mean": 6, "aten::add": 3, "aten::rsqrt": 3,
                     "trnscope::dispatch": 21}


def test_a_killed_builds_lock_is_removed_and_a_live_builds_is_waited_for(tmp_path):
    """torch's build lock outlives a killed build and made every later import hang: a lock nothing has
    touched for STALE_LOCK_SECONDS is removed with a warning; a live build's is waited for."""
    import threading
    import time
    import warnings

    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "lock").touch()
    (stale / "module.o").touch()
    old = time.time() - 2 * _core.STALE_LOCK_SECONDS
    for p in stale.iterdir():
        os.utime(p, (old, old))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _core._clear_stale_lock(stale)
    assert not (stale / "lock").exists()
    assert any("killed" in str(w.message) and "lock" in str(w.message) for w in seen)

    live = tmp_path / "live"
    live.mkdir()
    (live / "lock").touch()
    done = threading.Timer(0.2, (live / "lock").unlink)   # the build finishes and removes its lock
    done.start()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _core._clear_stale_lock(live, wait_s=0.05)
    done.join()
    assert not (live / "lock").exists() and not seen

    _core._clear_stale_lock(tmp_path / "live")   # no lock: returns at once
