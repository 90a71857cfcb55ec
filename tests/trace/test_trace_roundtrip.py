"""Kineto JSON and Parquet round trips keep every event, time, name, arg, track and flow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trnscope.trace import dumps_kineto, load_parquet, open_trace, parse_kineto, read_kineto, save_parquet, write_kineto

from trace_testdata import FIXTURE_FILES, fixture_ids


def assert_same_trace(a, b):
    sa, sb = a.slices, b.slices
    for column in ("ts_ns", "dur_ns", "track", "depth", "parent"):
        assert np.array_equal(getattr(sa, column), getattr(sb, column)), column
    assert np.array_equal(a.strings.lookup(sa.name), b.strings.lookup(sb.name))
    assert np.array_equal(a.strings.lookup(sa.cat), b.strings.lookup(sb.cat))
    assert sa.args.get_many() == sb.args.get_many()
    assert [t for t in a.tracks] == [t for t in b.tracks]
    ia, ib = a.instants, b.instants
    assert np.array_equal(ia.ts_ns, ib.ts_ns) and np.array_equal(ia.track, ib.track)
    assert np.array_equal(a.strings.lookup(ia.name), b.strings.lookup(ib.name))
    assert np.array_equal(ia.scope, ib.scope)
    assert ia.args.get_many() == ib.args.get_many()
    fa, fb = a.flows, b.flows
    for column in ("flow_id", "start_row", "end_row", "start_ts_ns", "end_ts_ns", "end_next_slice"):
        assert np.array_equal(getattr(fa, column), getattr(fb, column)), column
    assert np.array_equal(a.strings.lookup(fa.cat), b.strings.lookup(fb.cat))
    ca, cb = a.counters, b.counters
    assert np.array_equal(ca.ts_ns, cb.ts_ns) and np.array_equal(ca.value, cb.value)
    assert np.array_equal(ca.series_track, cb.series_track)
    assert {"schemaVersion": 1, **a.metadata} == {"schemaVersion": 1, **b.metadata}


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_kineto_round_trip(path, fixture_traces, tmp_path):
    original = fixture_traces[path.name]
    written = write_kineto(original, tmp_path / "again.json.gz")
    assert_same_trace(original, read_kineto(written))


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_parquet_round_trip(path, fixture_traces, tmp_path):
    original = fixture_traces[path.name]
    folder = save_parquet(original, tmp_path / "saved")
    reloaded = open_trace(folder)
    assert_same_trace(original, reloaded)
    assert reloaded.diagnostics == original.diagnostics
    assert np.array_equal(reloaded.window(original.start_ns, original.end_ns), np.arange(len(original.slices)))


def test_round_trip_of_counters_steps_and_open_ended_lists(tmp_path):
    from trace_testdata import trace_of, x

    trace = trace_of(
        [
            x("a", 0, 10, tid=1),
            x("b", 20, 10, tid=2),
            x("c", 40, 10, tid=3),
            {"ph": "s", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 2, "pid": 1, "tid": 1},
            {"ph": "t", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 25, "pid": 1, "tid": 2},
            {"ph": "f", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 41, "pid": 1, "tid": 3, "bp": "e"},
            {"ph": "s", "id": 8, "cat": "fwdbwd", "name": "fwdbwd", "ts": 3, "pid": 1, "tid": 1},
            {"ph": "f", "id": 8, "cat": "fwdbwd", "name": "fwdbwd", "ts": 35, "pid": 1, "tid": 3},
            {"ph": "C", "name": "queue", "ts": 5, "pid": 1, "args": {"depth": 3, "bytes": 1.5}},
            {"ph": "i", "name": "p", "ts": 8, "pid": 1, "tid": 1, "s": "p"},
            {"ph": "X", "name": "neg", "ts": -3.25, "dur": 1.001, "pid": 1, "tid": 9},
        ]
    )
    again = parse_kineto(dumps_kineto(trace))
    assert_same_trace(trace, again)
    assert len(again.flows) == 3 and again.flows.end_next_slice.tolist() == [False, False, True]
    assert_same_trace(trace, load_parquet(save_parquet(trace, tmp_path / "p")))


def test_trace_package_never_imports_torch():
    code = (
        "import sys, trnscope.trace, trnscope.trace.kineto, trnscope.trace.parquet;"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={"PYTHONPATH": str(src), "TRNSCOPE_NO_DEVICE": "1", "PATH": ""},
    )
    assert result.returncode == 0, result.stderr
