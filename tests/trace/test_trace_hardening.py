"""Regression tests for the loader cases of issue 19: each input is generated here, small."""

from __future__ import annotations

import gzip

import numpy as np
import orjson
import pytest

from trnscope.trace import TraceFormatError, dumps_kineto, parse_kineto, read_kineto
from trnscope.trace.timeunits import TIME_LIMIT_US, rewrite_ts_and_dur_as_ns, rewrite_ts_as_ns

EPOCH_US = 1712195495406752


def event(**fields) -> dict:
    return {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 1, "dur": 1, **fields}


def doc(*events: dict) -> bytes:
    return orjson.dumps({"traceEvents": list(events)})


def test_rewrite_keeps_zero_and_sub_microsecond_stamps_valid_json():
    assert rewrite_ts_as_ns(b'{"ts": 0, "ts": 0.5, "ts": -0.25, "ts": 0.000, "ts": 12, "ts": 007}') == (
        b'{"ts": 0, "ts": 500, "ts": -250, "ts": 0, "ts": 12000, "ts": 007}'  # 007 is left for the parser
    )
    assert rewrite_ts_and_dur_as_ns(b'{"ts": 0.5, "dur": 1712195495406752.291}') == (
        b'{"ts": 500, "dur": 1712195495406752291}'
    )


def test_metadata_at_time_zero_next_to_fractional_epoch_stamps_reads():
    text = (
        b'{"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0.000, '
        b'"args": {"name": "main"}}, {"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, '
        b'"ts": %d.797, "dur": 1.5}]}' % EPOCH_US
    )
    trace = parse_kineto(text)
    assert trace.slices.ts_ns.tolist() == [EPOCH_US * 1000 + 797]
    assert trace.tracks[0].name == "main"


def test_exported_trace_starting_at_zero_reads_back():
    first = parse_kineto(doc(event(ts=0, dur=2), event(ts=EPOCH_US + 0.5, dur=1)))
    again = parse_kineto(dumps_kineto(first))
    assert again.slices.ts_ns.tolist() == first.slices.ts_ns.tolist()


@pytest.mark.parametrize(
    "field,text",
    [("ts", b"10000000000000000"), ("ts", b"9223372036854775808"), ("ts", b"18446744073709551615"),
     ("ts", b"1e308"), ("ts", b"-1e17"), ("dur", b"4611686018427387904"), ("dur", b"1e300"),
     ("dur", b"-9223372036854775808"), ("ts", b"-9223372036854775808")],
)
def test_times_beyond_int64_nanoseconds_are_errors_not_wraps(field, text):
    body = doc(event(ts=7, dur=3)).replace(f'"{field}":{7 if field == "ts" else 3}'.encode(), f'"{field}":'.encode() + text)
    with pytest.raises(TraceFormatError, match=f"'{field}' = .* outside"):
        parse_kineto(body, "huge.json")


def test_largest_time_allowed_still_reads():
    trace = parse_kineto(doc(event(ts=TIME_LIMIT_US - 10, dur=5)))
    assert trace.slices.ts_ns[0] == (TIME_LIMIT_US - 10) * 1000 and trace.slices.dur_ns[0] == 5000


@pytest.mark.parametrize("value", [True, False, [1], {"a": 1}, "5"])
def test_non_number_timestamps_are_named(value):
    with pytest.raises(TraceFormatError, match=r"event #1 .*'ts' = .*not a number"):
        parse_kineto(doc(event(ts=1.5), event(ts=value)), "bad-ts.json")


def test_bool_timestamp_among_many_float_ones():
    events = [event(ts=i + 0.5) for i in range(3000)]
    events[1234]["ts"] = True
    with pytest.raises(TraceFormatError, match="event #1234"):
        parse_kineto(doc(*events))


def test_file_that_is_only_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(TraceFormatError, match="bom.json: the file is empty"):
        read_kineto(path)


def test_byte_order_mark_before_a_document_is_skipped():
    assert len(parse_kineto(b"\xef\xbb\xbf" + doc(event())).slices) == 1


@pytest.mark.parametrize("depth", [255, 600, 1000, 1020, 1100])
def test_deeply_nested_args_are_a_clean_error(depth):
    args = b'{"a":' * depth + b"1" + b"}" * depth
    text = doc(event(args={"x": 1}))[:-3].replace(b'{"x":1}', args) + b"}]}"
    with pytest.raises(TraceFormatError, match="nested|depth"):
        parse_kineto(text, "deep.json")


def test_args_nested_within_the_limit_read_and_write_back():
    args = {"a": 1}
    for _ in range(200):
        args = {"a": args}
    trace = parse_kineto(doc(event(args=args)))
    assert parse_kineto(dumps_kineto(trace)).slices.args.get(0) == args


@pytest.mark.parametrize("tid", [2**64, -(2**63) - 1, 10**30])
def test_thread_ids_past_64_bits_are_refused(tid):
    text = doc(event()).replace(b'"tid":1', b'"tid":' + str(tid).encode())
    with pytest.raises(TraceFormatError, match="'tid' = .*64 bits"):
        parse_kineto(text, "tid.json")


def test_largest_unsigned_thread_id_reads_and_exports():
    text = doc(event()).replace(b'"tid":1', b'"tid":18446744073709551615')
    again = parse_kineto(dumps_kineto(parse_kineto(text)))
    assert again.tracks[0].tid == 2**64 - 1


def _many_events(count: int = 20_000) -> list[dict]:
    return [event(ts=i, args={"pad": "x" * 60}) for i in range(count)]


@pytest.mark.parametrize("where", ["key", "args"])
def test_invalid_utf8_early_in_a_big_file_is_refused(where):
    text = doc(*_many_events())
    assert len(text) > 2 << 20  # the damage sits in a piece before the last one
    damaged = text.replace(b'"tid":1,"ts":100,', b'"t\xffd":1,"ts":100,', 1) if where == "key" else (
        text.replace(b'"pad":"xx', b'"pad":"\xff\xfe', 1)
    )
    assert damaged != text
    with pytest.raises(TraceFormatError, match="invalid UTF-8"):
        parse_kineto(damaged, "utf8.json")


def test_begin_end_nanoseconds_kept_when_they_come_after_the_sniff():
    events = [event(ts=EPOCH_US + i) for i in range(40_000)]  # integer stamps: nothing to sniff
    text = doc(*events)[:-2] + (
        b',{"ph":"B","name":"b","pid":1,"tid":2,"ts":%d.123},{"ph":"E","pid":1,"tid":2,"ts":%d.456}]}'
        % (EPOCH_US + 10, EPOCH_US + 10)
    )
    assert len(text) > 2 << 20
    trace = parse_kineto(text)
    row = int(np.flatnonzero(trace.slices.name == trace.strings.id_of("b"))[0])
    assert trace.slices.ts_ns[row] == (EPOCH_US + 10) * 1000 + 123
    assert trace.slices.dur_ns[row] == 333


def test_gzip_of_a_bad_trace_still_names_the_file(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc(event(ts=1e20))))
    with pytest.raises(TraceFormatError, match="t.json.gz"):
        read_kineto(path)


def _gzip_stream(parts) -> bytes:
    """gzip of the concatenated parts; (bytes, repeat) pairs make long runs cheaply."""
    import zlib

    packer = zlib.compressobj(1, zlib.DEFLATED, 31)
    out = []
    for part, repeat in parts:
        for _ in range(repeat):
            out.append(packer.compress(part))
    out.append(packer.flush())
    return b"".join(out)


def _peak_bytes(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
    except TraceFormatError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


MB = 1 << 20


def test_a_gigabyte_of_leading_whitespace_costs_a_block_not_a_gigabyte():
    data = _gzip_stream([(b" " * MB, 100), (doc(event()), 1)])  # 100 MB of spaces, then a trace
    assert len(data) < 2 * MB
    assert len(parse_kineto(data).slices) == 1
    assert _peak_bytes(lambda: parse_kineto(data)) < 32 * MB


def test_only_whitespace_is_an_empty_file_in_bounded_memory():
    data = _gzip_stream([(b"\n" * MB, 100)])
    with pytest.raises(TraceFormatError, match="empty"):
        parse_kineto(data, "blank.json.gz")
    assert _peak_bytes(lambda: parse_kineto(data)) < 32 * MB


@pytest.mark.parametrize("inside", ["name", "whitespace"])
def test_a_giant_event_is_refused_before_it_is_all_in_memory(inside):
    head = b'{"traceEvents": [' + doc(event())[17:-2] + b', {"ph": "X", "ts": 1, "dur": 1, "name": '
    filler = (b"x" * MB, 160) if inside == "name" else (b" " * MB, 160)
    opener = b'"' if inside == "name" else b""
    data = _gzip_stream([(head + opener, 1), filler, (opener + b"}]}", 1)])
    with pytest.raises(TraceFormatError, match="without an event boundary"):
        parse_kineto(data, "giant.json.gz")
    assert _peak_bytes(lambda: parse_kineto(data)) < 160 * MB  # less than the event: never held whole


def test_identical_events_nest_at_most_max_depth_levels():
    from trnscope.trace.nesting import MAX_DEPTH

    count = 20_000
    text = b'{"traceEvents": [' + b",".join([orjson.dumps(event(ts=5, dur=3))] * count) + b"]}"
    trace = parse_kineto(text)
    s = trace.slices
    assert len(s) == count and int(s.depth.max()) == MAX_DEPTH - 1
    assert trace.diagnostics["slices_at_max_nesting_depth"] == count - (MAX_DEPTH - 1)
    assert len(trace.index.level_start) == MAX_DEPTH  # what every query loops over
    assert int(s.parent[count - 1]) == count - 2  # parents stay exact below the cap
    assert len(trace.window(0, 10_000)) == count  # overlapping slices on the last level are all found
    view = trace.lod(0, 10_000, 100)
    assert 0 < len(view.rows) <= MAX_DEPTH * 100 and int(view.merged.sum()) == count


@pytest.mark.parametrize("kind", ["X", "B/E", "i", "C"])
def test_a_trace_past_the_event_limit_is_refused_with_the_way_to_open_it(monkeypatch, kind):
    from trnscope.trace.builder import MAX_EVENTS_VARIABLE

    monkeypatch.setenv(MAX_EVENTS_VARIABLE, "1000")
    make = {"X": lambda i: [event(ts=i, dur=1)],
            "B/E": lambda i: [{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 2 * i},
                              {"ph": "E", "pid": 1, "tid": 1, "ts": 2 * i + 1}],
            "i": lambda i: [{"ph": "i", "name": "m", "pid": 1, "tid": 1, "ts": i}],
            "C": lambda i: [{"ph": "C", "name": "c", "pid": 1, "ts": i, "args": {"v": i}}]}[kind]
    per = 2 if kind == "B/E" else 1
    fits = [e for i in range(1000 // per) for e in make(i)]
    assert parse_kineto(doc(*fits)) is not None  # exactly at the limit: read
    with pytest.raises(TraceFormatError, match=rf"big.json: more than 1,000 events.*{MAX_EVENTS_VARIABLE}"):
        parse_kineto(doc(*fits, *make(10_000)), "big.json")


def test_the_event_limit_variable_must_be_a_number(monkeypatch):
    from trnscope.trace.builder import MAX_EVENTS_VARIABLE

    monkeypatch.setenv(MAX_EVENTS_VARIABLE, "lots")
    with pytest.raises(TraceFormatError, match=f"{MAX_EVENTS_VARIABLE}: 'lots' is not a number"):
        parse_kineto(doc(event(ts=1, dur=1)))


def test_a_begin_left_open_in_an_epoch_trace_keeps_its_nanoseconds_through_export():
    text = doc(event(ts=EPOCH_US + 0.125, dur=2), {"ph": "B", "name": "open", "pid": 1, "tid": 2, "ts": 1.5},
               event(ts=EPOCH_US + 3.25, dur=1.5))
    trace = parse_kineto(text)
    open_row = int(np.flatnonzero(trace.slices.name == trace.strings.id_of("open"))[0])
    assert trace.slices.dur_ns[open_row] == (EPOCH_US + 4.75) * 1000 - 1500  # a duration of 54 years, exact
    again = parse_kineto(dumps_kineto(trace))
    assert sorted(again.slices.dur_ns.tolist()) == sorted(trace.slices.dur_ns.tolist())


def test_giant_fractional_durations_keep_their_nanoseconds():
    trace = parse_kineto(doc(event(ts=1, dur=7)).replace(b'"dur":7', b'"dur":%d.291' % EPOCH_US))
    assert trace.slices.dur_ns.tolist() == [EPOCH_US * 1000 + 291]
