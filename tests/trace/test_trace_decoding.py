"""The typed fast path (msgspec events, column-wise) and the dict path read events identically.

Most pieces of a trace are decoded into eventschema.Event objects and collected column by column;
a piece that does not fit the schema falls back to dicts and the per-event loop. Both must build
the same trace, so these tests run the same events through each path and compare everything.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import orjson
import pytest

from trnscope.trace import TraceFormatError, parse_kineto
from trnscope.trace.builder import TraceBuilder
from trnscope.trace.eventschema import Event, decode_events
from trnscope.trace.kineto_events import collect_chunk

from trace_testdata import FIXTURE_FILES, fixture_ids, naive_events

# Every event kind and the quirks seen in real traces: string pids ("Spans"), string and reused
# flow ids, flows with and without "bp", zero and missing durations, empty and nested args,
# integer and fractional timestamps, non-ASCII names, a name repeated across pieces.
EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    {"ph": "X", "name": "ProfilerStep#0", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1.5, "dur": 20.25,
     "args": {"Input Dims": [[2, 3], [3, 4]], "External id": 7, "é": "ü"}},
    {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": 3, "dur": 2,
     "args": {}},
    {"ph": "s", "id": 7, "name": "ac2g", "cat": "ac2g", "pid": 1, "tid": 1, "ts": 3.5},
    {"ph": "X", "name": "sgemm", "cat": "kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 10, "args": {"stream": 7}},
    {"ph": "f", "id": 7, "name": "ac2g", "cat": "ac2g", "pid": 0, "tid": 7, "ts": 30, "bp": "e"},
    {"ph": "s", "id": "0x1f", "name": "fwdbwd", "cat": "fwdbwd", "pid": 1, "tid": 1, "ts": 2},
    {"ph": "t", "id": "0x1f", "name": "fwdbwd", "cat": "fwdbwd", "pid": 1, "tid": 1, "ts": 10},
    {"ph": "f", "id": "0x1f", "name": "fwdbwd", "cat": "fwdbwd", "pid": 1, "tid": 1, "ts": 60},
    {"ph": "X", "name": "backward", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 60, "dur": 0},
    {"ph": "X", "name": "no duration", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 61},
    {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 101, "dur": 50},
    {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 102, "args": {"a": 1}},
    {"ph": "E", "pid": 1, "tid": 2, "ts": 110, "args": {"b": 2}},
    {"ph": "i", "name": "mark", "cat": "instant", "pid": 1, "tid": 1, "ts": 105, "s": "p"},
    {"ph": "C", "name": "memory", "pid": 1, "ts": 106, "args": {"allocated": 10, "reserved": 20.5, "x": "n/a"}},
    {"ph": "X", "name": "Iteration Start: PyTorch Profiler", "cat": "Trace", "pid": "Spans", "tid": "PyTorch Profiler",
     "ts": 0, "dur": 200},
    {"ph": "n", "name": "async", "cat": "x", "pid": 1, "tid": 1, "ts": 120, "id": 3},
]


def build(pieces, decode):
    builder = TraceBuilder(source="<test>")
    first = 0
    for piece in pieces:
        events = decode(orjson.dumps(piece))
        collect_chunk(events, builder, False, first)
        first += len(events)
    return builder.finish()


def everything(trace) -> dict:
    s, i, c, f = trace.slices, trace.instants, trace.counters, trace.flows
    out = {
        "slices": [trace.slice_record(r) for r in range(len(s))],
        "instants": [trace.instant_record(r) for r in range(len(i))],
        "counters": [np.asarray(getattr(c, k)).tolist() for k in ("series_track", "series", "ts_ns", "value")],
        "series": trace.strings.lookup(c.series_name).tolist(),
        # Flow rows are ordered by category id, and the paths intern strings in different orders
        # (the typed one column by column): compare the arrows as a set, with strings for ids.
        "flows": sorted(zip(*(trace.strings.lookup(v).tolist() if k in ("name", "cat") else np.asarray(v).tolist()
                              for k, v in vars(f).items()))),
        "tracks": trace.tracks,
        "diagnostics": trace.diagnostics,
    }
    return out


def test_the_pieces_decode_as_typed_events():
    assert all(type(e) is Event for e in decode_events(orjson.dumps(EVENTS)))


@pytest.mark.parametrize("piece_size", [1, 4, len(EVENTS)])
def test_typed_and_dict_paths_build_the_same_trace(piece_size):
    pieces = [EVENTS[k : k + piece_size] for k in range(0, len(EVENTS), piece_size)]
    typed = build(pieces, decode_events)
    dicts = build(pieces, orjson.loads)
    assert everything(typed) == everything(dicts)
    assert len(typed.slices) == 9 and len(typed.flows) == 3 and len(typed.counters) == 2
    assert typed.diagnostics == {"non_numeric_counter_values": 1, "skipped_events_ph_n": 1}


@pytest.mark.parametrize("path", FIXTURE_FILES[:4], ids=fixture_ids(FIXTURE_FILES[:4]))
def test_typed_and_dict_paths_agree_on_real_traces(path):
    events = naive_events(path)
    pieces = [events[k : k + 500] for k in range(0, len(events), 500)]
    assert everything(build(pieces, decode_events)) == everything(build(pieces, orjson.loads))


def test_a_piece_off_the_schema_is_read_as_dicts():
    odd = [{**EVENTS[4], "name": 12}, EVENTS[5]]  # a number as a name: legal JSON, not Kineto's shape
    events = decode_events(orjson.dumps(odd))
    assert type(events[0]) is dict
    trace = parse_kineto(orjson.dumps({"traceEvents": odd}))
    assert sorted(trace.slice_names().tolist()) == ["12", "cudaLaunchKernel"]


@pytest.mark.parametrize("args", [{}, None])
def test_empty_and_null_args_are_no_args(args):
    events = [EVENTS[4], {**EVENTS[5], "args": args}]
    for text in (orjson.dumps({"traceEvents": events}), orjson.dumps({"traceEvents": [{**EVENTS[3], "name": 1}] + events})):
        trace = parse_kineto(text)  # the second text is read by the dict path
        names = trace.slice_names()
        launch, mm = (int(np.flatnonzero(names == name)[0]) for name in ("cudaLaunchKernel", "aten::mm"))
        assert trace.slices.args.raw(launch) == b"" and trace.slice_args(launch) == {}
        assert trace.slice_args(mm) == EVENTS[4]["args"]


@pytest.mark.parametrize("args", [[1, 2], [], "text", 3, True])
def test_args_that_are_not_objects_are_reported(args):
    events = [EVENTS[3], {**EVENTS[4], "args": args}]
    for text in (orjson.dumps({"traceEvents": events}), orjson.dumps({"traceEvents": [{**EVENTS[3], "name": 1}] + events})):
        with pytest.raises(TraceFormatError, match="'args' that is not an object"):
            parse_kineto(text)


def test_importing_trace_does_not_import_torch_and_the_device_still_registers():
    env = {k: v for k, v in os.environ.items() if k != "TRNSCOPE_NO_DEVICE"}
    code = (
        "import sys\n"
        "import trnscope.trace\n"
        "assert 'torch' not in sys.modules, 'trnscope.trace imported torch'\n"
        "import torch\n"  # a script that goes on to use the device still gets it
        "assert torch.ones(1, device='neuron').device.type == 'neuron'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]


def test_loading_and_saving_do_not_import_pandas(tmp_path):
    pytest.importorskip("pandas")  # Arrow imports it only when it is installed
    trace_file = FIXTURE_FILES[0] if FIXTURE_FILES else None
    if trace_file is None:
        pytest.skip("no shared trace fixtures")
    code = (
        "import sys\n"
        "from trnscope.trace import read_kineto, save_parquet, load_parquet\n"
        f"trace = read_kineto({str(trace_file)!r})\n"
        f"save_parquet(trace, {str(tmp_path / 'saved')!r})\n"
        f"again = load_parquet({str(tmp_path / 'saved')!r})\n"
        "again.lod(again.start_ns, again.end_ns, 100)\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    env = dict(os.environ, TRNSCOPE_NO_DEVICE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float64, np.bool_])
def test_columns_pass_to_arrow_and_back_unchanged(dtype):
    from trnscope.trace.parquet import _arrow, _chunk_to_numpy

    values = (np.arange(37) * 7 % 5).astype(dtype)
    array = _arrow(values)
    assert array.to_pylist() == values.tolist()
    for start, stop in ((0, 37), (3, 20), (9, 10)):  # slices start inside a byte of bits too
        assert _chunk_to_numpy(array.slice(start, stop - start)).tolist() == values[start:stop].tolist()


def test_pretty_printed_args_are_written_back_one_event_per_line():
    from trnscope.trace import dumps_kineto

    text = orjson.dumps({"traceEvents": EVENTS}, option=orjson.OPT_INDENT_2)
    trace = parse_kineto(text)
    mm = int(np.flatnonzero(trace.slice_names() == "aten::mm")[0])
    assert b"\n" in trace.slices.args.raw(mm)  # kept as the file wrote it
    lines = dumps_kineto(trace).splitlines()
    events = [orjson.loads(line.rstrip(b",")) for line in lines if line.startswith(b"{") and b'"ph"' in line]
    assert len(events) == len(lines) - 3  # the header line, and the lines opening and closing the list
    assert parse_kineto(dumps_kineto(trace)).slice_args(mm) == EVENTS[4]["args"]
