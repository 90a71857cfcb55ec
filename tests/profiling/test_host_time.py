"""Honest time: events on the device queue, no emulator work in host time, reproducible profiles.

Every assertion here is on the emulated clock (the host-cost model and the simulator), never on
how fast this machine runs: the verdicts are the same on an idle and on a loaded machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from trnscope import runtime
from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.profiling import NeuronConfig, ProfileMode
from trnscope.profiling.export import load_manifest

from .helpers import ACTIVITIES, load_json, profile_once

COSTS = runtime.host_costs()


def _device_ns(prof, key: str) -> float:
    """Self device time (ns) of the device rows named ``key`` in key_averages."""
    rows = [e for e in prof.key_averages() if e.key == key]
    assert rows, [e.key for e in prof.key_averages()]
    return rows[0].self_device_time_total * 1e3


def _timed_on_a_busy_queue(fn, busy):
    """Events around ``fn`` with earlier work still queued, as one times a kernel with events:
    the start event completes when that work ends, the end event when ``fn``'s work ends."""
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    busy()
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e6, out


@pytest.mark.parametrize("case", ["large matmul", "small add"])
def test_event_elapsed_time_is_the_device_time(tmp_path, case):
    """Measured both ways in one window: the events' elapsed time is the profiler's device time of
    the same execution plus the per-NEFF start overhead it pays behind the busy queue (within 1%),
    for a long kernel and for a 3 us one."""
    g = torch.Generator().manual_seed(0)
    big = torch.randn(1024, 1024, generator=g).to("neuron")
    if case == "large matmul":
        a = torch.randn(1024, 2048, generator=g, dtype=torch.bfloat16).to("neuron")
        b = torch.randn(2048, 2048, generator=g, dtype=torch.bfloat16).to("neuron")
        fn, key = (lambda: a @ b), "mm_1024x2048_2048x2048"
    else:
        a = torch.randn(1024, generator=g).to("neuron")
        fn, key = (lambda: a + a), "add.Tensor_1024_1024"

    def busy():
        return big @ big

    for _ in range(2):  # warm: NEFFs compiled
        busy(), fn()
    torch.neuron.synchronize()
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=tmp_path)
    with torch.profiler.profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
        elapsed_ns, _ = _timed_on_a_busy_queue(fn, busy)
        torch.neuron.synchronize()
    device_ns = _device_ns(prof, key)
    start_overhead = runtime.core(0).spec.neff_launch_latency_ns
    assert elapsed_ns == pytest.approx(device_ns + start_overhead, rel=0.01)


def test_event_on_an_idle_queue_includes_dispatch_and_launch():
    """On an idle NeuronCore the start event completes at once; the kernel then waits for its
    dispatch and the NEFF launch latency, which the elapsed time shows, as CUDA's would."""
    a = torch.randn(1024).to("neuron")
    a + a
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    rt = runtime.core(0)
    rt.records.clear()
    rt.recording = True
    try:
        start.record()
        a + a
        end.record()
        end.synchronize()
    finally:
        rt.recording = False
    (ex,) = [r for r in rt.records if r.kind == "kernel"]
    assert end._time_ns == ex.device_end_ns
    launch = int(rt.spec.neff_launch_latency_ns)
    expected = COSTS.framework_op_ns + COSTS.backend_op_ns + COSTS.submit_ns + launch + (ex.device_end_ns -
                                                                                         ex.device_start_ns)
    assert (end._time_ns - start._time_ns) == expected  # modelled host time: exact


def test_query_is_false_while_work_runs_on_the_modelled_clock():
    x = torch.randn(1024, 1024).to("neuron")
    x @ x
    torch.neuron.synchronize()
    s = torch.neuron.current_stream()
    e = torch.neuron.Event()
    assert e.query()  # never recorded: complete, as CUDA's
    x @ x  # hundreds of us of device time, microseconds of host time
    e.record()
    assert not e.query() and not s.query() and not torch.neuron.query()
    e.synchronize()
    assert e.query() and s.query() and torch.neuron.query()
    assert runtime.CLOCK.now() >= e._time_ns


def test_elapsed_time_needs_completed_events():
    x = torch.randn(1024, 1024).to("neuron")
    x @ x
    torch.neuron.synchronize()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    x @ x
    end.record()
    with pytest.raises(RuntimeError, match="completed"):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) > 0


def _kernels_during(fn, cores=(0,)):
    rts = [runtime.core(i) for i in cores]
    for rt in rts:
        rt.records.clear()
        rt.recording = True
    try:
        fn()
    finally:
        for rt in rts:
            rt.recording = False
    return {rt.index: [r for r in rt.records if r.kind == "kernel"] for rt in rts}


def test_wait_event_orders_work_across_neuroncores():
    """neuron:1's stream waits for an event of neuron:0: its next kernel starts no earlier, although
    neuron:1 itself is idle."""
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two NeuronCores")
    x0 = torch.randn(1024, 1024).to("neuron:0")
    x1 = torch.randn(64).to("neuron:1")
    x0 @ x0, x1 + x1
    torch.neuron.synchronize("neuron:0"), torch.neuron.synchronize("neuron:1")
    done = torch.neuron.Event()
    s1 = torch.neuron.Stream("neuron:1")

    def run():
        x0 @ x0
        done.record()  # on neuron:0's current stream
        s1.wait_event(done)
        with torch.neuron.stream(s1):
            x1 + x1
        torch.neuron.synchronize("neuron:0"), torch.neuron.synchronize("neuron:1")

    kernels = _kernels_during(run, cores=(0, 1))
    (mm,), (add,) = kernels[0], kernels[1]
    assert add.device_start_ns >= done._time_ns == mm.device_end_ns


def test_wait_stream_orders_two_streams_of_one_core():
    x = torch.randn(1024, 1024).to("neuron")
    y = torch.randn(64).to("neuron")
    x @ x, y + y
    torch.neuron.synchronize()
    side = torch.neuron.Stream()

    def run():
        with torch.neuron.stream(side):
            x @ x
        torch.neuron.current_stream().wait_stream(side)
        y + y
        torch.neuron.synchronize()

    (mm, add) = _kernels_during(run)[0]
    assert add.device_start_ns >= mm.device_end_ns
    assert side.query() and side != torch.neuron.default_stream() and side.stream_id > 0


# --- host time --------------------------------------------------------------------------------


def _add_host_ns(n: int, tmp_path) -> float:
    a = torch.randn(n).to("neuron")
    cfg = NeuronConfig(modes=[ProfileMode.RUNTIME], profile_output_dir=tmp_path)

    def loop():
        for _ in range(10):
            a + a

    loop()
    torch.neuron.synchronize()
    with torch.profiler.profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
        loop()
        torch.neuron.synchronize()
    (row,) = [e for e in prof.key_averages() if e.key == "aten::add"]
    return row.cpu_time_total / row.count * 1e3


def test_an_ops_host_time_is_flat_from_1k_to_64m_elements(tmp_path):
    """RUNTIME mode, key_averages: the host pays the model's dispatch whatever the tensor's size
    (the emulator's numerics, 64k times more work at 64M, are not host time)."""
    sizes = (1 << 10, 1 << 20, 1 << 24, 1 << 26)
    host = [_add_host_ns(n, tmp_path) for n in sizes]
    assert host == [COSTS.framework_op_ns + COSTS.backend_op_ns + COSTS.submit_ns] * len(sizes)


SLOW_S = 0.05  # what each injected piece of emulator work costs in real time


def _slowed(monkeypatch, owner, name):
    orig = getattr(owner, name)

    def slow(*args, **kwargs):
        time.sleep(SLOW_S)
        return orig(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)


def _warm_emulator_work():
    from trnscope.device import host
    from trnscope.profiling import capture, hostsamples

    return {"numerics": (host, "run"), "recording": (capture.Window, "execution"),
            "host samples": (hostsamples, "read_host_memory")}


@pytest.mark.parametrize("work", ["numerics", "recording", "host samples"])
def test_emulator_work_is_never_host_time_in_real_mode(tmp_path, monkeypatch, work):
    """In real mode the user's Python is measured, the emulator's is not: make a piece of the
    emulator's work take 50 ms longer per op and the op's CPU time does not move by that."""
    a = torch.randn(64).to("neuron")
    a + a
    torch.neuron.synchronize()
    _slowed(monkeypatch, *_warm_emulator_work()[work])
    cfg = NeuronConfig(modes=[ProfileMode.RUNTIME, ProfileMode.HOST_MEMORY], profile_output_dir=tmp_path)
    with runtime.host_time_mode("real"):
        with torch.profiler.profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
            for _ in range(3):
                a + a
            torch.neuron.synchronize()
    (row,) = [e for e in prof.key_averages() if e.key == "aten::add"]
    assert row.count == 3 and row.cpu_time_total / row.count < SLOW_S * 1e6 / 2


@pytest.mark.parametrize("work", ["lowering", "simulation"])
def test_compiling_costs_the_modelled_compile_not_trnscopes(tmp_path, monkeypatch, work):
    """A NEFF-cache miss in real mode: the op costs the host the model's compile, however long
    trnscope's own lowering (and NEFF hashing) or simulation took."""
    import importlib

    from trnscope.compiler import lowering
    sim = importlib.import_module("trnscope.sim")  # the runtime imports simulate from here at first use

    owner, name = {"lowering": (lowering, "build"), "simulation": (sim, "simulate")}[work]
    _slowed(monkeypatch, owner, name)
    a = torch.randn(3 if work == "lowering" else 5, 77).to("neuron")  # shapes no other test compiles
    with runtime.host_time_mode("real"):
        _, where, _ = profile_once(lambda: a * 3.5 - a, tmp_path, warmup=0,
                                   modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME])
    trace = load_json(where / "trace.json")
    ops = [e for e in trace["traceEvents"] if e.get("name") in ("aten::mul", "aten::sub") and e.get("ph") == "X"]
    calls = {e["args"]["op"]: e for e in trace["traceEvents"] if e.get("name") == "nrt_execute"}
    assert len(ops) == 2 and len(calls) == 2
    for op in ops:
        call = next(c for c in calls.values() if c["args"]["op"].startswith(op["name"]))
        modelled_ns = call["args"]["compile_ns"] + COSTS.backend_op_ns + COSTS.submit_ns
        assert call["args"]["compile_ns"] >= COSTS.compile_fixed_ns
        assert op["dur"] * 1e3 - modelled_ns < SLOW_S * 1e9 / 2


def _adamw_step_profile(tmp_path, steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(16, 32).to("neuron")

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    for _ in range(3):
        step()
    torch.neuron.synchronize()
    _, where, _ = profile_once(lambda: [step() for _ in range(steps)], tmp_path, warmup=0,
                               modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME])
    return load_json(where / "system_trace.json")


def _nrt_executes(system):
    return [e for e in system["traceEvents"] if e.get("name") == "nrt_execute"]


def test_nrt_execute_is_the_modelled_submit_in_both_modes(tmp_path):
    """An nrt_execute on a NEFF-cache hit lasts exactly the model's submit, in real mode as in
    modelled mode (it is the backend's cost, never trnscope's); a miss adds the model's compile."""
    for mode in ("modelled", "real"):
        with runtime.host_time_mode(mode):
            system = _adamw_step_profile(tmp_path / mode, steps=1)
        calls = _nrt_executes(system)
        assert calls
        for e in calls:
            expect = COSTS.submit_ns + e["args"]["compile_ns"]
            assert round(e["dur"] * 1e3) == expect, (mode, e)
        misses = [e for e in calls if e["args"]["cache"] == "miss"]
        assert all(e["args"]["compile_ns"] >= COSTS.compile_fixed_ns for e in misses)


def test_no_nrt_execute_in_a_warm_adamw_loop_exceeds_the_submit_cost(tmp_path):
    system = _adamw_step_profile(tmp_path, steps=2)
    assert max(e["dur"] * 1e3 for e in _nrt_executes(system)) <= COSTS.submit_ns


def test_profile_records_its_host_time_mode(tmp_path):
    x = torch.randn(8, 64).to("neuron")
    _, where, _ = profile_once(lambda: x * x, tmp_path / "m", modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME])
    trace = load_json(where / "trace.json")
    assert trace["trnscope"]["host_time"]["mode"] == "modelled"
    assert trace["trnscope"]["host_time"]["costs"]["submit_ns"] == COSTS.submit_ns
    assert trace["trnscope"]["target"] == runtime.core(0).spec.name
    window = load_manifest(where)["window"]
    assert window["host_time"] == "modelled" and window["target"] == runtime.core(0).spec.name
    profile = load_profile(where)
    assert profile.host_time == "modelled" and ProfileAnalysis(profile).headline()["host_time"] == "modelled"

    def switching():
        x * x
        runtime.set_host_time("real")
        x * x

    _, where, _ = profile_once(switching, tmp_path / "mixed", warmup=0)
    assert load_manifest(where)["window"]["host_time"] == "mixed"


def test_summary_says_how_host_time_was_made(tmp_path):
    x = torch.randn(8, 64).to("neuron")
    _, where, _ = profile_once(lambda: x * x, tmp_path, modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME])
    out = subprocess.run([sys.executable, "-m", "trnscope.cli.main", "summary", str(where)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "host time modelled (reproducible)" in out.stdout and f"target {runtime.core(0).spec.name}" in out.stdout


_SCRIPT = r"""
import json, torch, trnscope
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode
x = torch.randn(128, 1024).to("neuron"); w = torch.randn(1024).to("neuron")
def naive(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
for _ in range(2): naive(x, w)
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=__import__("sys").argv[1])
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg) as p:
    for _ in range(3): naive(x, w)
    torch.neuron.synchronize()
print(json.dumps(sorted((e.key, e.count, e.cpu_time_total, e.self_device_time_total) for e in p.key_averages())))
"""


def test_modelled_profiles_are_the_same_on_every_run(tmp_path):
    """The same script in two processes: identical host and device figures, op by op."""
    runs = []
    for i in range(2):
        out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / str(i))], capture_output=True, text=True,
                             timeout=600, env={**os.environ, "TRNSCOPE_HOST_TIME": "modelled"})
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1]
    cpu = {key: total for key, _, total, _ in runs[0]}
    assert cpu["aten::pow"] > 0 and cpu["aten::mean"] > 0
