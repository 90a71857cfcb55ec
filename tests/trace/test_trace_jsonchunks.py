"""Streaming the events array in pieces gives exactly what a whole-document parse gives."""

from __future__ import annotations

import gzip

import orjson
import pytest

from trnscope.trace.eventschema import Event, as_dict, decode_events
from trnscope.trace.jsonchunks import ChromeSource, NeedsWholeParse
from trnscope.trace.timeunits import rewrite_ts_as_ns

from trace_testdata import FIXTURE_FILES, fixture_ids, load_json

TRICKY_EVENTS = [
    {"ph": "X", "name": "has }, { inside", "ts": 1, "args": {"s": "}, {", "nested": [{"a": 1}, {"b": 2}]}},
    {"ph": "X", "name": "unicode \u00e9\u4e2d", "ts": 2, "args": {"list": [{"x": "},{"}, {}]}},
    {"ph": "i", "name": "]", "ts": 3},
]


def streamed(text: bytes, chunk_bytes: int, transform=None) -> tuple[list, dict]:
    source = ChromeSource.from_bytes(text)
    events = [plain(event) for chunk in source.chunks(chunk_bytes, transform) for event in chunk]
    return events, source.metadata


def plain(event) -> dict:
    """An event as the reader sees it (the schema's fields, with its defaults), whether it came
    decoded as an Event or as a dict from a whole-document parse."""
    if type(event) is not Event:
        [event] = decode_events(orjson.dumps([event]))
    return as_dict(event) if type(event) is Event else event


def plain_all(events: list) -> list[dict]:
    return [plain(event) for event in events]


@pytest.mark.parametrize("chunk_bytes", [1, 40, 1000])
@pytest.mark.parametrize("layout", ["object", "object-keys-after", "bare-list", "pretty", "bom"])
def test_pieces_match_a_whole_parse(layout, chunk_bytes):
    events = TRICKY_EVENTS * 20
    if layout == "object":
        text = orjson.dumps({"a": [{"x": 1}, {"y": 2}], "traceEvents": events})
    elif layout == "object-keys-after":
        text = orjson.dumps({"traceEvents": events, "pg": [{"ranks": [1]}, {"ranks": [2]}], "z": "}, {"})
    elif layout == "bare-list":
        text = orjson.dumps(events)
    elif layout == "pretty":
        text = orjson.dumps({"traceEvents": events, "meta": {"k": [{}, {}]}}, option=orjson.OPT_INDENT_2)
    else:
        text = b"\xef\xbb\xbf  " + orjson.dumps({"traceEvents": events})
    got, metadata = streamed(text, chunk_bytes)
    assert got == plain_all(events)
    whole = orjson.loads(text.removeprefix(b"\xef\xbb\xbf"))
    expected_metadata = {k: v for k, v in whole.items() if k != "traceEvents"} if isinstance(whole, dict) else {}
    assert metadata == expected_metadata


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_real_traces_stream_like_a_whole_parse(path):
    document = load_json(path)
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    events, metadata = streamed(text, 64 << 10)
    expected = document["traceEvents"] if isinstance(document, dict) else document
    assert len(events) == len(expected)
    assert events[:50] == plain_all(expected[:50]) and events[-50:] == plain_all(expected[-50:])
    if isinstance(document, dict):
        assert metadata == {k: v for k, v in document.items() if k != "traceEvents"}


def test_gzip_is_detected_by_content():
    text = orjson.dumps({"traceEvents": TRICKY_EVENTS})
    events, _ = streamed(gzip.compress(text), 10)
    assert events == plain_all(TRICKY_EVENTS)


def test_transform_applies_to_every_piece():
    events = [{"ph": "X", "ts": 0, "name": str(i)} for i in range(50)]
    text = orjson.dumps({"traceEvents": events}).replace(b'"ts":0', b'"ts":1712195495406752.797')
    got, _ = streamed(text, 64, rewrite_ts_as_ns)
    assert {e["ts"] for e in got} == {1712195495406752797}


def test_errors_mid_file_are_found_with_rewritten_timestamps():
    from trnscope.trace import TraceFormatError

    events = [{"ph": "X", "name": str(i), "ts": 1712195495406752.797} for i in range(2000)]
    text = orjson.dumps({"traceEvents": events}, option=orjson.OPT_INDENT_2)
    text = text.replace(b'"name": "1000"', b'"name": 1000"')
    with pytest.raises(TraceFormatError, match="line"):
        streamed(text, 4096, rewrite_ts_as_ns)


def test_unusual_shapes_ask_for_a_whole_parse():
    for text in (b'{"no": "events"}', b"42", b'[{"ph": "X"}] trailing'):
        with pytest.raises(NeedsWholeParse):
            list(ChromeSource.from_bytes(text).chunks(16))
