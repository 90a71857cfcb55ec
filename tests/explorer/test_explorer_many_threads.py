"""A trace with a thread per event opens with a small, fixed amount of Python work per thread
(issue 19, item 7: 200k events on 200k threads within 10x of the same events on 10 threads).

Wall-clock ratios belong in benchmarks/bench_many_threads.py; this test counts the Python function
calls of the explorer's open path (load, session, layout, first level of detail, a full-width level
of detail of every lane), which does not depend on the machine. Before the per-track steps were
vectorised an extra thread cost 155 calls (a lane layout, a nesting pass, a level-of-detail pass
and a slice-column pass each); now it costs 16 (its Track, role and lane, and its piece of the
level of detail)."""

from __future__ import annotations

import sys

import orjson

from trnscope.explorer.app import Explorer
from trnscope.explorer.views import INITIAL_LANES

EVENTS = 3000
CALLS_PER_THREAD = 25


def write_trace(path, threads: int) -> None:
    rows = [{"ph": "X", "name": f"op{i % 50}", "cat": "cpu_op", "pid": 1, "tid": i % threads, "ts": i, "dur": 1}
            for i in range(EVENTS)]
    path.write_bytes(orjson.dumps({"traceEvents": rows}))


def calls_to_open(path) -> tuple[int, dict]:
    explorer = Explorer([path], cache=None)
    entry = explorer.catalog.entries()[0]
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        view = explorer.sessions.get(entry).system
        layout = view.describe()
        first = view.initial_lod(1600)
        everything = view.lod(layout["start"], layout["end"] + 1, 1600, None)
    finally:
        sys.setprofile(None)
    return count, {"layout": layout, "first": first, "all": everything}


def test_python_calls_per_extra_thread_stay_few(tmp_path):
    few, many = tmp_path / "few.pt.trace.json", tmp_path / "many.pt.trace.json"
    write_trace(few, 10)
    write_trace(many, EVENTS)
    base, _ = calls_to_open(few)
    calls, opened = calls_to_open(many)
    per_thread = (calls - base) / (EVENTS - 10)
    assert per_thread <= CALLS_PER_THREAD, f"{per_thread:.0f} Python calls per extra thread"
    lanes = opened["layout"]["lanes"]
    assert len(lanes) == EVENTS  # every thread is still a lane of its own
    # the first level of detail covers the first screens; a full-width one every lane, one slice each
    assert len(opened["first"]["lanes"]) == INITIAL_LANES
    assert len(opened["all"]["lanes"]) == EVENTS
    assert all(len(columns["ts"]) == 1 for columns in opened["all"]["lanes"].values())


def test_a_trace_past_the_event_limit_is_an_error_with_the_way_to_open_it(tmp_path, monkeypatch):
    import pytest

    from trnscope.analysis import ProfileError
    from trnscope.trace.builder import MAX_EVENTS_VARIABLE

    monkeypatch.setenv(MAX_EVENTS_VARIABLE, "100")
    path = tmp_path / "big.pt.trace.json"
    write_trace(path, 10)
    explorer = Explorer([path], cache=None)
    entry = explorer.catalog.entries()[0]
    with pytest.raises(ProfileError) as raised:
        explorer.sessions.get(entry)
    assert "more than 100 events" in raised.value.problem and MAX_EVENTS_VARIABLE in raised.value.hint
    assert explorer.sessions.status(entry) == "error"  # kept: the next request does not parse it again


def test_loaded_traces_hold_at_most_the_event_limit_together(tmp_path, monkeypatch):
    from trnscope.trace.builder import MAX_EVENTS_VARIABLE

    monkeypatch.setenv(MAX_EVENTS_VARIABLE, str(2 * EVENTS + 10))
    for name in ("a", "b", "c"):
        write_trace(tmp_path / f"{name}.pt.trace.json", 10)
    explorer = Explorer([tmp_path], cache=None)
    entries = sorted(explorer.catalog.entries(), key=lambda e: e.relpath)
    for entry in entries:
        explorer.sessions.get(entry)
    # two traces of EVENTS fit the budget, the third pushes the least recently used one out
    assert [explorer.sessions.status(e) for e in entries] == ["not loaded", "loaded", "loaded"]
    explorer.sessions.get(entries[0])  # opened again when asked for
    assert [explorer.sessions.status(e) for e in entries] == ["loaded", "not loaded", "loaded"]
