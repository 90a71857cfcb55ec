"""Bad input gives one TraceFormatError naming the file, the problem and what to do."""

from __future__ import annotations

import gzip

import orjson
import pytest

from trnscope.trace import TraceFormatError, load_parquet, open_trace, read_kineto

GOOD_EVENT = {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}


def big_trace_text(events: int = 20_000) -> bytes:
    """Large enough to be read in several pieces (each piece is about 1 MB)."""
    rows = [{**GOOD_EVENT, "ts": i, "args": {"External id": i, "Input Dims": [[i, 3]]}} for i in range(events)]
    return orjson.dumps({"schemaVersion": 1, "traceEvents": rows, "traceName": "big"}, option=orjson.OPT_INDENT_2)


CASES = {
    "not-json.json": (b"this is not json at all", "not valid JSON"),
    "empty.json": (b"  \n", "empty"),
    "number.json": (b"42", "top-level JSON value is a int"),
    "string.json": (b'"traceEvents"', "top-level JSON value is a str"),
    "no-events.json": (b'{"schemaVersion": 1}', "no 'traceEvents'"),
    "events-dict.json": (b'{"traceEvents": {"ph": "X"}}', "'traceEvents' is a dict"),
    "missing-ts.json": (orjson.dumps({"traceEvents": [GOOD_EVENT, {**GOOD_EVENT, "ts": None} | {}]}), "'ts'"),
    "no-ts-key.json": (orjson.dumps([GOOD_EVENT, {k: v for k, v in GOOD_EVENT.items() if k != "ts"}]), "event #1"),
    "string-ts.json": (orjson.dumps([{**GOOD_EVENT, "ts": "soon"}]), "not a number"),
    "event-not-object.json": (orjson.dumps({"traceEvents": [GOOD_EVENT, [1, 2]]}), "event #1 is a JSON list"),
    "no-phase.json": (orjson.dumps([{"name": "x", "ts": 1}]), "no 'ph'"),
    "flow-without-id.json": (orjson.dumps([{"ph": "s", "ts": 1, "pid": 1, "tid": 1}]), "without an 'id'"),
    "truncated.json": (orjson.dumps({"traceEvents": [GOOD_EVENT] * 3})[:-25], "truncated"),
    "truncated-big.json": (big_trace_text()[:-5000], "truncated"),
    "garbage-inside-big.json": (big_trace_text().replace(b'"External id": 100,', b'"External id": 1 00,'), "line"),
    "bad-utf8.json": (b'{"traceEvents": [{"ph": "X", "name": "\xff", "ts": 1}]}', "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_files_raise_trace_format_error(tmp_path, name):
    text, expected = CASES[name]
    path = tmp_path / name
    path.write_bytes(text)
    with pytest.raises(TraceFormatError) as caught:
        read_kineto(path)
    message = str(caught.value)
    assert str(path) in message
    assert expected in message
    assert caught.value.hint  # always says what to do
    assert caught.value.__cause__ is None or caught.value.__suppress_context__


def test_truncated_and_corrupt_gzip(tmp_path):
    packed = gzip.compress(big_trace_text())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(TraceFormatError, match="gzip data is truncated"):
        read_kineto(cut)
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(packed[:20] + bytes(200) + packed[220:])
    with pytest.raises(TraceFormatError, match="gzip data is corrupt|not valid JSON"):
        read_kineto(corrupt)


def test_the_same_text_reads_fine_when_whole(tmp_path):
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(big_trace_text()))
    trace = read_kineto(path)
    assert len(trace.slices) == 20_000
    assert trace.metadata == {"schemaVersion": 1, "traceName": "big"}


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_kineto(tmp_path / "nope.json")


def test_folders_that_are_not_saved_traces(tmp_path):
    with pytest.raises(TraceFormatError, match="not a saved trnscope trace"):
        open_trace(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b'{"format": "something else"}')
    with pytest.raises(TraceFormatError, match="does not describe"):
        load_parquet(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b'{"format": "trnscope-trace", "version": 99}')
    with pytest.raises(TraceFormatError, match="version 99"):
        load_parquet(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b'{"format": "trnscope-trace", "version": 1, "tracks": []}')
    with pytest.raises(TraceFormatError, match="missing or damaged"):
        load_parquet(tmp_path)
