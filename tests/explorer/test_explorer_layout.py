"""Torch-free checks of what a system trace opens on: the window of recorded activity (not the
profiler's session span and stop marker), lanes only for NeuronCores that did something, and short
profile names."""

from __future__ import annotations

from pathlib import Path

import orjson

from trnscope.analysis import ProfileAnalysis, activity_extent, load_profile
from trnscope.explorer.catalog import Catalog
from trnscope.explorer.layout import system_layout
from trnscope.explorer.system_view import SystemView
from trnscope.trace import parse_kineto

PID, RT, HW0, HW1, HW2 = 7, 1073741824, 1073741826, 1073741842, 1073741858


def neuron_like_trace() -> bytes:
    """Kineto's bookkeeping (a session span from the profiler's start, warm-up included, and a
    "Record Window End" marker long after the last event) around a step that ran on NC 0, with
    lanes named for NCs 1 and 2 that did nothing."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": PID, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": RT, "args": {"name": "neuron_rt/NC:0"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": HW0, "args": {"name": "neuron_hw/NC:0"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": HW1, "args": {"name": "neuron_hw/NC:1"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": HW2, "args": {"name": "neuron_hw/NC:2"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1000, "dur": 2000},
        {"ph": "i", "s": "t", "name": "Record Window End", "pid": "", "tid": "", "ts": 16000},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": PID, "tid": PID, "ts": 1500, "dur": 600},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": PID, "tid": PID, "ts": 1550, "dur": 100},
        {"ph": "X", "cat": "neuron_rt", "name": "nrt_execute", "pid": PID, "tid": RT, "ts": 1600, "dur": 0},
        {"ph": "X", "cat": "neuron_hw", "name": "nc_exec_running", "pid": PID, "tid": HW0, "ts": 1620, "dur": 300},
        # host CPU utilisation is sampled for the whole session, busy or not
        {"ph": "C", "name": "CPU:0/host_cpu_util", "pid": PID, "ts": 1000, "args": {"util": 5}},
        {"ph": "C", "name": "CPU:0/host_cpu_util", "pid": PID, "ts": 9000, "args": {"util": 3}},
    ]
    return orjson.dumps({"traceEvents": events})


def test_the_window_opens_on_recorded_activity_not_the_profiler_session(tmp_path):
    path = tmp_path / "session.pt.trace.json"
    path.write_bytes(neuron_like_trace())
    profile = load_profile(path)
    trace = profile.trace
    assert (trace.start_ns, trace.end_ns) == (1_000_000, 16_000_000)
    assert activity_extent(trace) == (1_500_000, 2_100_000)
    view = SystemView(profile)
    layout = view.describe()
    assert layout["start"] == 0 and layout["end"] == 15_000_000  # the whole trace is still reachable
    assert (layout["focus_start"], layout["focus_end"]) == (500_000, 1_100_000)
    first = view.initial_lod(400)
    assert first["t0"] < 500_000 < 1_100_000 < first["t1"] < 1_200_000  # the focus, 1% margin, not 15 ms


def test_headline_wall_time_is_the_recorded_activity(tmp_path):
    path = tmp_path / "session.pt.trace.json"
    path.write_bytes(neuron_like_trace())
    analysis = ProfileAnalysis(load_profile(path))
    assert analysis.headline()["wall_ns"] == 600_000


def test_idle_neuron_cores_get_no_lanes():
    trace = parse_kineto(neuron_like_trace())
    titles = [lane.title for lane in system_layout(trace, neuron=True).lanes]
    assert "neuron_hw/NC:0" in titles
    assert "neuron_hw/NC:1" not in titles and "neuron_hw/NC:2" not in titles


def test_a_busy_core_keeps_its_empty_hardware_lane():
    """A core whose runtime lane has calls but whose hardware lane is empty (submitted, never ran)
    keeps the empty lane: that emptiness is the finding."""
    events = orjson.loads(neuron_like_trace())["traceEvents"]
    events = [e for e in events if e.get("name") != "nc_exec_running"]
    trace = parse_kineto(orjson.dumps({"traceEvents": events}))
    titles = [lane.title for lane in system_layout(trace, neuron=True).lanes]
    assert "neuron_hw/NC:0" in titles and "neuron_hw/NC:1" not in titles


def profile_dir(root: Path, *parts: str) -> Path:
    path = root.joinpath(*parts)
    path.mkdir(parents=True)
    (path / "trace.json").write_bytes(neuron_like_trace())
    (path / "system_trace.json").write_bytes(orjson.dumps({"traceEvents": []}))
    return path


def test_profile_names_are_the_run_folder_and_stay_unique(tmp_path):
    profile_dir(tmp_path, "naive", "vm_pid_1", "20261202_193717_186838")
    profile_dir(tmp_path, "fused", "vm_pid_1", "20261202_193718_000001")
    profile_dir(tmp_path, "runs", "compiled", "vm_pid_2", "20261202_193719_000002")
    profile_dir(tmp_path, "compiled", "vm_pid_2", "20261202_193719_000002")
    profile_dir(tmp_path, "again", "vm_pid_3", "20261202_100000_000001")
    profile_dir(tmp_path, "again", "vm_pid_3", "20261202_110000_000002")
    names = {e.relpath: e.display_name for e in Catalog([tmp_path]).entries()}
    assert names["naive/vm_pid_1/20261202_193717_186838"] == "naive"
    assert names["fused/vm_pid_1/20261202_193718_000001"] == "fused"
    assert names["runs/compiled/vm_pid_2/20261202_193719_000002"] == "runs/compiled"
    assert names["compiled/vm_pid_2/20261202_193719_000002"] == "compiled"
    # two recordings in one folder: told apart by when they were made
    assert names["again/vm_pid_3/20261202_100000_000001"] == "again · 2026-12-02 10:00:00"
    assert names["again/vm_pid_3/20261202_110000_000002"] == "again · 2026-12-02 11:00:00"
    assert len(set(names.values())) == len(names)
