"""The per-step overview (trnscope.analysis.steps): each ProfilerStep's duration split into device
busy, host dispatch, launch latency and idle, on a recorded torch.compile profile and on synthetic
steps whose split is worked out by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.gaps import LAUNCH_WINDOW_NS
from trnscope.analysis.steps import step_overview

sys.path.insert(0, str(Path(__file__).resolve().parent))


def test_recorded_steps_add_up(with_stack_profile):
    a = ProfileAnalysis(load_profile(with_stack_profile))
    steps = a.steps
    assert [s.name for s in steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    for s in steps:
        assert s.busy_ns + s.host_dispatch_ns + s.launch_ns + s.idle_ns == s.dur_ns
        assert s.executions == 1 and s.busy_ns > 0
    # over all steps, busy is the device's busy time inside them
    assert sum(s.busy_ns for s in steps) <= a.idle.busy_ns
    assert a.to_dict()["steps"][0]["name"] == "ProfilerStep#1"


def test_split_by_hand(tmp_path):
    """Step 1 [0, 100 us): launch at 10 us, runs 50-80 us: host 0-10, launch 10-40, idle 40-50,
    busy 50-80, host 80-100 (nothing more launched in the step). Step 2 [100, 200 us): launch at
    150 us, runs 160-190: host 100-150, launch 150-160, busy 160-190, host 190-200."""
    import orjson

    us = 1000
    events = [
        {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "ProfilerStep#2", "cat": "user_annotation", "ts": 100, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 10, "dur": 2, "pid": 1, "tid": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 150, "dur": 2, "pid": 1, "tid": 1,
         "args": {"correlation": 2}},
        {"ph": "X", "name": "k1", "cat": "kernel", "ts": 50, "dur": 30, "pid": 0, "tid": 7,
         "args": {"correlation": 1, "device": 0, "stream": 7}},
        {"ph": "X", "name": "k2", "cat": "kernel", "ts": 160, "dur": 30, "pid": 0, "tid": 7,
         "args": {"correlation": 2, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "steps.pt.trace.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    first, second = step_overview(load_profile(path).trace)
    assert LAUNCH_WINDOW_NS == 30 * us
    assert (first.busy_ns, first.host_dispatch_ns, first.launch_ns, first.idle_ns) == (30 * us, 30 * us, 30 * us, 10 * us)
    assert (second.busy_ns, second.host_dispatch_ns, second.launch_ns, second.idle_ns) == (30 * us, 60 * us, 10 * us, 0)
