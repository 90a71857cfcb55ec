"""Device work belongs to the op that launched it: the runtime call a flow or correlation id
names, then the op whose interval contains that call, never a Python frame or a wrapper that
merely overlaps it in time. Recorded with ``with_stack=True``, a ``record_function`` starts inside
the Python frame that enters it and ends inside the one that exits it; such slices nest by
containment and draw as stacks."""

from __future__ import annotations

import numpy as np

from synthetic import KinetoBuilder

from trnscope.analysis import ProfileAnalysis, load_profile

US = 1000


def _frame(b: KinetoBuilder, name: str, ts: float, dur: float) -> None:
    b.op(name, ts, dur, cat="python_function")


def _with_stack_steps(b: KinetoBuilder, steps: int = 3) -> None:
    """Per step: ProfilerStep#n entered inside a Python frame that returns before the step ends, a
    wrapper op (like AOTDispatcher's prologue) that ends before the launch, and the op that launches."""
    _frame(b, "script.py(1): <module>", 0, 1000 * steps + 100)
    for i in range(steps):
        t = 10 + 1000 * i
        _frame(b, "profiler.py(1): step", t, 60)
        _frame(b, "profiler.py(2): __enter__", t + 10, 40)
        b.op(f"ProfilerStep#{i + 1}", t + 20, 900, cat="user_annotation")  # outlives both frames
        _frame(b, "eval_frame.py(1): compile_wrapper", t + 70, 700)
        b.op("Torch-Compiled Region: 0/0", t + 80, 680)
        _frame(b, "runtime_wrappers.py(1): record_prologue", t + 90, 30)
        b.op("AOTDispatcher Runtime Wrapper Prologue", t + 100, 50)  # entered in a frame, ends before the launch
        _frame(b, "utils.py(91): g", t + 120, 400)  # starts inside the prologue, outlives it
        b.kernel("fwd_graph", t + 300, 100, launch=t + 200, launch_dur=20)


def test_with_stack_steps_nest_by_containment(tmp_path):
    b = KinetoBuilder()
    _with_stack_steps(b)
    a = ProfileAnalysis(load_profile(b.write(tmp_path / "stack.pt.trace.json")))
    trace = a.profile.trace
    s = trace.slices
    names = trace.slice_names()
    steps = np.flatnonzero(np.char.startswith(names.astype(str), "ProfilerStep#"))
    # every step at one depth, under the module frame (not under the frame that entered it)
    assert len({int(d) for d in s.depth[steps]}) == 1
    module = int(np.flatnonzero(names == "script.py(1): <module>")[0])
    assert all(int(s.parent[r]) == module for r in steps)
    # no level holds two overlapping slices
    host = np.flatnonzero(s.track == s.track[module])
    order = host[np.lexsort((s.ts_ns[host], s.depth[host]))]
    same = s.depth[order][1:] == s.depth[order][:-1]
    assert np.all(~same | (s.ts_ns[order][1:] >= s.end_ns[order][:-1]))
    ops = a.ops.by_name()
    # the device time is the compiled region's, not the prologue's that ended before the launch
    assert ops["Torch-Compiled Region: 0/0"].device_self_ns == 300 * US
    assert ops["AOTDispatcher Runtime Wrapper Prologue"].device_total_ns == 0
    # step totals add up: each step holds its own launch only
    assert [ops[f"ProfilerStep#{i}"].device_total_ns for i in (1, 2, 3)] == [100 * US] * 3
    assert sum(r.device_self_ns for r in a.ops.ops) == a.ops.device_total_ns


def test_with_stack_compiled_profile(with_stack_profile):
    """A real profile: torch.compile(backend="neuron") recorded with with_stack=True."""
    a = ProfileAnalysis(load_profile(with_stack_profile))
    ops = a.ops.by_name()
    steps = sorted(name for name in ops if name.startswith("ProfilerStep#"))
    assert len(steps) == 3
    per_step = [ops[name].device_total_ns for name in steps]
    assert len(set(per_step)) == 1 and sum(per_step) == a.ops.device_total_ns
    assert ops["Torch-Compiled Region: 0/0"].device_self_ns == a.ops.device_total_ns
    prologue = ops.get("AOTDispatcher Runtime Wrapper Prologue")
    assert prologue is None or prologue.device_total_ns == 0
    trace = a.profile.trace
    rows = np.flatnonzero(np.isin(trace.slice_names().astype(str), steps))
    assert len({int(d) for d in trace.slices.depth[rows]}) == 1  # the steps draw side by side, not as a staircase
