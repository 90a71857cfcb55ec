"""Read a Chrome/Kineto JSON trace as a stream of parsed event chunks plus its top-level keys.

Parsing a whole trace at once holds every event as a Python dict (about 1 KB each) until the last
one is converted; a million-event trace then needs gigabytes. Instead the ``traceEvents`` array is
cut into chunks of a few MB at event boundaries and each chunk is parsed with orjson, converted to
columns by the caller and dropped, so the peak is the file text plus one chunk of dicts.

Cutting is safe without a tokenizer: a cut is made only after a ``}`` followed by ``,`` and ``{``.
If that spot is not really between two top-level events (it is inside a string or a nested
object), the text before it is not a complete JSON array and orjson rejects it. The last chunk is
parsed as "the rest of an array"; orjson reports where that array ends, which locates the other
top-level keys. Whenever anything does not line up, :class:`NeedsWholeParse` tells the caller to
start over with :meth:`ChromeDocument.parse_whole`, which also yields the precise error for a file
that is really broken.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from os import PathLike
from pathlib import Path

import orjson

from .errors import TraceFormatError

CHUNK_BYTES = 8 << 20
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
_AFTER_DOCUMENT = "unexpected content after document"

CHROME_FORMAT_HINT = (
    "A Chrome/Kineto trace is a JSON object with a 'traceEvents' list, or a bare JSON list of events"
)


class NeedsWholeParse(Exception):
    """Chunked reading could not proceed; read the document with ``parse_whole()`` instead."""


def read_trace_bytes(path: str | PathLike[str]) -> bytes:
    """The file's text, gunzipped when it is gzip data (whatever its name says)."""
    raw = Path(path).read_bytes()
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError as exc:
        raise TraceFormatError(
            path, f"the gzip data is truncated ({exc})", "The file was cut short; copy or export it again"
        ) from None
    except (OSError, zlib.error) as exc:
        raise TraceFormatError(
            path, f"the gzip data is corrupt ({exc})", "Re-export the trace, or gunzip it to see what is left"
        ) from None


class ChromeDocument:
    """A trace's text. Iterate :meth:`chunks` for the events; :attr:`metadata` (the top-level keys
    other than ``traceEvents``) is complete once the iteration has finished."""

    def __init__(self, text: bytes, source: str) -> None:
        self.text = text
        self.source = source
        self.metadata: dict = {}
        start = _skip_whitespace(text, 0)
        if text.startswith(_UTF8_BOM, start):
            start = _skip_whitespace(text, start + 3)
        if start == len(text):
            raise TraceFormatError(source, "the file is empty", CHROME_FORMAT_HINT)
        self._start = start

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[list]:
        """Lists of event dicts in file order; raises NeedsWholeParse when it cannot cut safely."""
        text, first = self.text, self.text[self._start : self._start + 1]
        if first == b"[":
            yield from self._array_chunks(self._start, chunk_bytes, bare=True)
            return
        if first != b"{":
            raise NeedsWholeParse
        key = _TRACE_EVENTS_KEY.search(text, self._start)
        if key is None:
            raise NeedsWholeParse
        yield from self._array_chunks(key.end() - 1, chunk_bytes, bare=False)

    def _array_chunks(self, open_at: int, chunk_bytes: int, bare: bool) -> Iterator[list]:
        text = self.text
        view = memoryview(text)
        pos = _skip_whitespace(text, open_at + 1)
        while True:
            if pos < len(text) and text[pos] == ord("]"):
                end = pos + 1
                break
            boundary = None
            if pos + chunk_bytes < len(text):
                boundary = _EVENT_BOUNDARY.search(text, pos + chunk_bytes)
            if boundary is not None:
                try:
                    events = orjson.loads(b"".join((b"[", view[pos : boundary.start() + 1], b"]")))
                except orjson.JSONDecodeError:
                    boundary = None  # not a real event boundary: read the rest in one go
                else:
                    yield events
                    pos = boundary.end() - 1
                    continue
            events, end = _rest_of_array(text, pos)
            yield events
            break
        if bare:
            if text[end:].strip(_WHITESPACE):
                raise NeedsWholeParse
            return
        self.metadata = _top_level_keys(text, open_at, end)

    def parse_whole(self) -> list:
        """All events from one full parse; raises TraceFormatError describing what is wrong."""
        text, source = self.text, self.source
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            document = _unterminated_list(text, self._start)
            if document is None:
                raise TraceFormatError(source, f"not valid JSON: {_describe(exc, text)}", _hint(exc, text)) from None
        if isinstance(document, list):
            return document
        if not isinstance(document, dict):
            raise TraceFormatError(
                source, f"the top-level JSON value is a {type(document).__name__}, not an object or list",
                CHROME_FORMAT_HINT,
            )
        events = document.pop("traceEvents", None)
        if events is None:
            raise TraceFormatError(source, "the JSON object has no 'traceEvents' key", CHROME_FORMAT_HINT)
        if not isinstance(events, list):
            raise TraceFormatError(
                source, f"'traceEvents' is a {type(events).__name__}, not a list", CHROME_FORMAT_HINT
            )
        self.metadata = document
        return events


def _skip_whitespace(text: bytes, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _rest_of_array(text: bytes, pos: int) -> tuple[list, int]:
    """Parse ``text[pos:]`` as the remaining elements of an array: (elements, offset past ']')."""
    document = b"".join((b"[", memoryview(text)[pos:]))
    try:
        return orjson.loads(document), len(text)
    except orjson.JSONDecodeError as exc:
        if exc.msg != _AFTER_DOCUMENT:
            raise NeedsWholeParse from None
        end = exc.pos  # first non-space byte after the array
    while document[end - 1] in _WHITESPACE:
        end -= 1
    return orjson.loads(memoryview(document)[:end]), pos + end - 1


def _top_level_keys(text: bytes, open_at: int, end: int) -> dict:
    try:
        document = orjson.loads(b"".join((memoryview(text)[:open_at], b"[]", memoryview(text)[end:])))
    except orjson.JSONDecodeError:
        raise NeedsWholeParse from None
    # A 'traceEvents' match inside some string would leave a different shape here.
    if not isinstance(document, dict) or document.get("traceEvents") != []:
        raise NeedsWholeParse
    del document["traceEvents"]
    return document


def _unterminated_list(text: bytes, start: int) -> list | None:
    """The Chrome "JSON Array Format" lets a writer that is still running omit the closing ']'."""
    if text[start : start + 1] != b"[":
        return None
    body = text.rstrip(_WHITESPACE).rstrip(b",")
    try:
        document = orjson.loads(body + b"]")
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, list) else None


def _describe(exc: orjson.JSONDecodeError, text: bytes) -> str:
    return f"{exc.msg} at line {exc.lineno}, column {exc.colno} (byte {exc.pos} of {len(text)})"


def _hint(exc: orjson.JSONDecodeError, text: bytes) -> str:
    if exc.msg.startswith("unexpected end of data") or exc.pos >= len(text.rstrip(_WHITESPACE)) - 1:
        return "The file looks truncated (was the profiler still writing it?); export the trace again"
    return "Check that the file is a trace from torch.profiler (export_chrome_trace) or Chrome tracing"
