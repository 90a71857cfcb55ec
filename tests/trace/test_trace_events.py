"""Event kinds on small hand-written traces: B/E pairing, flows, instants, counters, metadata."""

from __future__ import annotations

import numpy as np

from trnscope.trace import TrackKind

from trace_testdata import trace_of, x


def slices_as_tuples(trace):
    s = trace.slices
    names = trace.strings.lookup(s.name)
    return [
        (names[r], int(s.ts_ns[r]), int(s.dur_ns[r]), int(s.depth[r]))
        for r in range(len(s))
    ]


def test_begin_end_events_pair_per_thread():
    trace = trace_of(
        [
            {"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 1, "args": {"a": 1}},
            {"ph": "B", "name": "inner", "ts": 2, "pid": 1, "tid": 1},
            {"ph": "B", "name": "other thread", "ts": 3, "pid": 1, "tid": 2},
            {"ph": "E", "ts": 4, "pid": 1, "tid": 1},
            {"ph": "E", "ts": 9, "pid": 1, "tid": 1, "args": {"b": 2}},
            {"ph": "E", "ts": 5, "pid": 1, "tid": 2},
            {"ph": "E", "ts": 6, "pid": 1, "tid": 3},  # nothing open on thread 3
            {"ph": "B", "name": "never ends", "ts": 7, "pid": 1, "tid": 4},
        ]
    )
    assert sorted(slices_as_tuples(trace)) == [
        ("inner", 2000, 2000, 1),
        ("never ends", 7000, 2000, 0),  # runs to the last timestamp of the trace
        ("other thread", 3000, 2000, 0),
        ("outer", 0, 9000, 0),
    ]
    outer = int(np.flatnonzero(trace.slice_names() == "outer")[0])
    assert trace.slice_args(outer) == {"a": 1, "b": 2}  # E's args merge into the slice
    assert trace.diagnostics == {"begin_events_without_end": 1, "end_events_without_begin": 1}


def test_flow_end_binds_to_enclosing_or_next_slice():
    trace = trace_of(
        [
            x("launch", 10, 5, tid=1),
            x("kernel", 30, 10, tid=2, cat="kernel"),
            x("later", 50, 10, tid=3),
            {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "ts": 12, "pid": 1, "tid": 1},
            {"ph": "f", "id": 1, "cat": "ac2g", "name": "ac2g", "ts": 30, "pid": 1, "tid": 2, "bp": "e"},
            # no "bp": the end binds to the next slice that starts at or after its time
            {"ph": "s", "id": 2, "cat": "ac2g", "name": "ac2g", "ts": 14, "pid": 1, "tid": 1},
            {"ph": "f", "id": 2, "cat": "ac2g", "name": "ac2g", "ts": 45, "pid": 1, "tid": 3},
        ]
    )
    names = trace.slice_names()
    f = trace.flows
    assert [(names[a], names[b]) for a, b in zip(f.start_row, f.end_row)] == [
        ("launch", "kernel"),
        ("launch", "later"),
    ]
    assert f.end_next_slice.tolist() == [False, True]
    launch = int(np.flatnonzero(names == "launch")[0])
    assert trace.flows_from(launch).tolist() == [0, 1]


def test_flow_ids_are_scoped_by_category_and_steps_chain():
    trace = trace_of(
        [
            x("a", 0, 10, tid=1),
            x("b", 20, 10, tid=2),
            x("c", 40, 10, tid=3),
            # same id, two categories: two separate arrows
            {"ph": "s", "id": 7, "cat": "ac2g", "name": "ac2g", "ts": 1, "pid": 1, "tid": 1},
            {"ph": "f", "id": 7, "cat": "ac2g", "name": "ac2g", "ts": 20, "pid": 1, "tid": 2, "bp": "e"},
            {"ph": "s", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 2, "pid": 1, "tid": 1},
            {"ph": "t", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 25, "pid": 1, "tid": 2},
            {"ph": "f", "id": 7, "cat": "fwdbwd", "name": "fwdbwd", "ts": 41, "pid": 1, "tid": 3, "bp": "e"},
            # string ids and an end without a start
            {"ph": "s", "id": "0x10", "cat": "x", "name": "x", "ts": 3, "pid": 1, "tid": 1},
            {"ph": "f", "id": "0x10", "cat": "x", "name": "x", "ts": 45, "pid": 1, "tid": 3, "bp": "e"},
            {"ph": "f", "id": 99, "cat": "ac2g", "name": "ac2g", "ts": 45, "pid": 1, "tid": 3, "bp": "e"},
        ]
    )
    names = trace.slice_names()
    f = trace.flows
    arrows = sorted(
        (trace.strings[int(c)], int(i), names[a], names[b])
        for c, i, a, b in zip(f.cat, f.flow_id, f.start_row, f.end_row)
    )
    assert arrows == [
        ("ac2g", 7, "a", "b"),
        ("fwdbwd", 7, "a", "b"),
        ("fwdbwd", 7, "b", "c"),
        ("x", 16, "a", "c"),
    ]
    assert trace.diagnostics["unpaired_flow_events"] == 1


def test_flow_survives_clock_skew_between_host_and_device():
    trace = trace_of(
        [
            x("launch", 100, 10, tid=1),
            x("kernel", 90, 5, tid=2, cat="kernel"),
            {"ph": "s", "id": 3, "cat": "ac2g", "name": "ac2g", "ts": 101, "pid": 1, "tid": 1},
            {"ph": "f", "id": 3, "cat": "ac2g", "name": "ac2g", "ts": 90, "pid": 1, "tid": 2, "bp": "e"},
        ]
    )
    names = trace.slice_names()
    assert [(names[a], names[b]) for a, b in zip(trace.flows.start_row, trace.flows.end_row)] == [
        ("launch", "kernel")
    ]


def test_instants_counters_and_metadata():
    trace = trace_of(
        [
            {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
            {"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "main"}},
            {"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": 5, "args": {"sort_index": 3}},
            {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "device"}},
            {"ph": "M", "name": "process_labels", "pid": 2, "tid": 0, "args": {"labels": "NeuronCore 0"}},
            x("op", 0, 10, pid=1, tid=5),
            x("matmul", 2, 3, pid=2, tid=1, cat="kernel"),
            {"ph": "i", "name": "mark", "ts": 4, "pid": 1, "tid": 5, "s": "t", "args": {"k": 1}},
            {"ph": "I", "name": "global", "ts": 6, "pid": "", "tid": "", "s": "g"},
            {"ph": "C", "name": "memory", "ts": 1, "pid": 1, "args": {"allocated": 10, "reserved": 20}},
            {"ph": "C", "name": "memory", "ts": 3, "pid": 1, "args": {"allocated": 15}},
            {"ph": "X", "name": "odd", "ts": 1.5, "pid": 1, "tid": 5},  # no dur, no cat
            {"ph": "b", "name": "async", "ts": 1, "pid": 1, "id": 1},
        ],
        displayTimeUnit="ns",
    )
    kinds = {t.name or t.process_name: t.kind for t in trace.tracks}
    assert kinds["main"] is TrackKind.CPU_THREAD
    assert kinds["memory"] is TrackKind.COUNTER
    assert kinds["device"] is TrackKind.DEVICE_QUEUE
    main = next(t for t in trace.tracks if t.name == "main")
    assert (main.process_name, main.process_labels, main.thread_sort_index) == ("python3", "CPU", 3)
    # Instants are ordered by track; the global one sits on the profiler's own ("") lane, last.
    assert [trace.instant_record(r)["name"] for r in range(len(trace.instants))] == ["mark", "global"]
    mark = next(r for r in range(len(trace.instants)) if trace.instant_record(r)["name"] == "mark")
    assert trace.instant_record(mark)["args"] == {"k": 1}
    assert trace.instant_record(mark)["scope"] == "t"
    c = trace.counters
    series = {trace.strings[int(c.series_name[s])]: s for s in range(c.series_count)}
    allocated = c.value[c.series == series["allocated"]].tolist()
    assert allocated == [10.0, 15.0]
    assert trace.counter_window(2000, 5000).size == 3  # two in force at 2000 ns, plus the one at 3000
    odd = int(np.flatnonzero(trace.slice_names() == "odd")[0])
    assert trace.slice_record(odd)["ts_ns"] == 1500 and trace.slice_record(odd)["dur_ns"] == 0
    assert trace.metadata == {"displayTimeUnit": "ns"}
    assert trace.diagnostics["skipped_events_ph_b"] == 1


def test_bare_list_and_missing_metadata():
    from trnscope.trace import parse_kineto

    trace = parse_kineto(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]')
    assert len(trace.slices) == 1 and trace.metadata == {}
    # Chrome's JSON Array Format allows leaving the list open.
    trace = parse_kineto(b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1},\n')
    assert len(trace.slices) == 1
    assert len(parse_kineto(b'{"traceEvents": []}').slices) == 0


def test_instant_window():
    trace = trace_of(
        [
            {"ph": "i", "name": f"m{i}", "ts": i, "pid": 1, "tid": 1 + i % 2, "s": "t"}
            for i in range(10)
        ]
    )

    def names(rows):
        return sorted(trace.instant_record(r)["name"] for r in rows)

    assert names(trace.instant_window(2000, 5000)) == ["m2", "m3", "m4"]
    first_thread = [t.id for t in trace.tracks if t.tid == 1]
    assert names(trace.instant_window(0, 10_000, first_thread)) == ["m0", "m2", "m4", "m6", "m8"]
