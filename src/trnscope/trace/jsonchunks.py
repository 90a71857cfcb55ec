"""Stream a Chrome/Kineto JSON trace as parsed chunks of events, plus its other top-level keys.

Parsing a whole trace at once is what makes big traces expensive: a parser's working memory grows
with the document, and parsed events cost a few hundred bytes each. Instead the file is read in
1 MB blocks (gunzipped on the fly), the ``traceEvents`` array is cut into pieces of about 1 MB at
event boundaries, and each piece is decoded (eventschema.decode_events: typed events, or dicts
for a piece off the schema), handed to the caller and dropped. Parsing then needs a few MB however
big the trace is.

Cutting needs no tokenizer: a cut is made only after a ``}`` that is followed by ``,`` and ``{``.
If that spot is not really between two top-level events (it is inside a string or a nested
object), the piece before it is not a complete JSON array and the parser rejects it; the piece is
then extended to the next such spot. The last piece is parsed as "the rest of an array", and orjson's
report of where that array ends locates the top-level keys that follow it.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from os import PathLike
from pathlib import Path
from typing import IO, Union

import orjson

from .errors import TraceFormatError
from .eventschema import decode_events

# A decoded 1 MB piece holds ~7,000 events (a few MB of objects; orjson's dicts, on the fallback
# path, about 12x while parsing). Smaller pieces cost more per-piece numpy calls than they save.
CHUNK_BYTES = 1 << 20
_READ_BYTES = 1 << 20
# Memory stays bounded by what one piece can grow to: text with no event boundary for this long (a
# 1 GB name, a gigabyte of spaces inside an event) is refused, as is a document that has to be
# parsed whole (an unusual shape) beyond MAX_WHOLE_BYTES. docs/hardening.md lists the limits.
MAX_PIECE_BYTES = 64 << 20
MAX_WHOLE_BYTES = 512 << 20
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
_AFTER_DOCUMENT = "unexpected content after document"

CHROME_FORMAT_HINT = (
    "A Chrome/Kineto trace is a JSON object with a 'traceEvents' list, or a bare JSON list of events"
)
_TRUNCATED_HINT = "The file looks truncated (was the profiler still writing it?); export the trace again"
_BROKEN_HINT = "Check that the file is a trace from torch.profiler (export_chrome_trace) or Chrome tracing"


class NeedsWholeParse(Exception):
    """The document's shape is unusual; read it with ``ChromeSource.parse_whole()`` instead."""


# what a trace is read from: a file, a GzipFile over one, a BytesIO
_Binary = Union[IO[bytes], io.BufferedIOBase]

class ChromeSource:
    """A trace file (or bytes) that can be read more than once: streamed for speed, or whole when
    its shape calls for it. :attr:`metadata` is complete after :meth:`chunks` has finished."""

    def __init__(self, open_binary: Callable[[], _Binary], source: str) -> None:
        self._open_binary = open_binary
        self.source = source
        self.metadata: dict = {}

    @classmethod
    def from_path(cls, path: str | PathLike[str]) -> ChromeSource:
        path = Path(path)
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or device would block or never end
            raise TraceFormatError(path, "not a regular file", "Pass a trace file (.json / .json.gz)")
        with open(path, "rb") as probe:  # FileNotFoundError etc. surface here, as for open()
            gzipped = probe.read(2) == _GZIP_MAGIC
        if gzipped:
            return cls(lambda: gzip.GzipFile(path, "rb"), str(path))
        return cls(lambda: open(path, "rb"), str(path))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<trace>") -> ChromeSource:
        if data[:2] == _GZIP_MAGIC:
            return cls(lambda: gzip.GzipFile(fileobj=io.BytesIO(data)), source)
        return cls(lambda: io.BytesIO(data), source)

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes of the (gunzipped) text."""
        with self._open_binary() as stream:
            return _read(stream, size, self.source)

    # --- streaming -------------------------------------------------------------------------

    def chunks(
        self, chunk_bytes: int = CHUNK_BYTES, transform: Callable[[bytes], bytes] | None = None
    ) -> Iterator[list]:
        """Lists of events (eventschema.Event, or dicts for a piece off the schema) in file order.
        ``transform`` rewrites each piece's text before it is parsed. Raises NeedsWholeParse when
        the document is not shaped like a trace."""
        with self._open_binary() as stream:
            window = _Window(stream, self.source)
            start = window.skip_whitespace(0)
            if start is None:
                raise TraceFormatError(self.source, "the file is empty", CHROME_FORMAT_HINT)
            if window.buf.startswith(_UTF8_BOM, start):
                start = window.skip_whitespace(start + len(_UTF8_BOM))
                if start is None:
                    raise TraceFormatError(self.source, "the file is empty (only a byte-order mark)", CHROME_FORMAT_HINT)
            first = window.buf[start : start + 1]
            if first == b"[":
                open_at, header = start, None
            elif first == b"{":
                key = window.find(_TRACE_EVENTS_KEY, start, limit=start + MAX_PIECE_BYTES)
                if key is None:
                    raise NeedsWholeParse
                open_at = key.end() - 1
                header = window.buf[start:open_at]
            else:
                raise NeedsWholeParse
            pieces = _Pieces(window, chunk_bytes, transform, bare=header is None, locate=self._line_and_column)
            yield from pieces.read(open_at + 1)
            trailer = window.rest(pieces.end)
        if header is None:
            if trailer.strip(_WHITESPACE):
                raise NeedsWholeParse
            return
        self.metadata = _top_level_keys(header, trailer)

    def _line_and_column(self, offset: int) -> tuple[int, int]:
        # Counting lines on every piece would tax every load; errors re-read the text instead.
        with self._open_binary() as stream:
            line, line_start, seen = 1, 0, 0
            while seen < offset:
                block = stream.read(min(_READ_BYTES, offset - seen))
                if not block:
                    break
                newlines = block.count(b"\n")
                if newlines:
                    line += newlines
                    line_start = seen + block.rfind(b"\n") + 1
                seen += len(block)
        return line, offset - line_start + 1

    # --- whole document --------------------------------------------------------------------

    def parse_whole(self, transform: Callable[[bytes], bytes] | None = None) -> list:
        """All events from one full parse; raises TraceFormatError describing what is wrong."""
        with self._open_binary() as stream:
            text = _read(stream, MAX_WHOLE_BYTES + 1, self.source)
        if len(text) > MAX_WHOLE_BYTES:
            raise TraceFormatError(
                self.source, f"larger than {MAX_WHOLE_BYTES >> 20} MB and not shaped like a Kineto trace, so it "
                f"would have to be parsed whole", "Write it as {\"traceEvents\": [...], ...} or as a bare list of events")
        if text.lstrip(_WHITESPACE).startswith(_UTF8_BOM):
            text = text.lstrip(_WHITESPACE)[len(_UTF8_BOM):]
        if transform is not None:
            text = transform(text)
        source = self.source
        start = len(text) - len(text.lstrip(_WHITESPACE))
        if not text[start:]:
            raise TraceFormatError(source, "the file is empty", CHROME_FORMAT_HINT)
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            document = _unterminated_list(text)
            if document is None:
                hint = _TRUNCATED_HINT if exc.pos >= len(text.rstrip(_WHITESPACE)) - 1 else _BROKEN_HINT
                raise TraceFormatError(
                    source, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", hint
                ) from None
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


class _Pieces:
    """Cuts the events array into pieces and parses them; ``end`` is set, as an offset into the
    window, just past the array's closing ']' once :meth:`read` is exhausted."""

    def __init__(self, window: _Window, chunk_bytes: int, transform, bare: bool, locate) -> None:
        self.window = window
        self.locate = locate  # file offset -> (line, column), for error messages
        self.chunk_bytes = chunk_bytes
        self.transform = transform
        self.bare = bare
        self.end = -1

    def read(self, start: int) -> Iterator[list]:
        window = self.window
        after = start
        while True:
            pos = window.skip_whitespace(after)
            if pos is None:
                if self.bare:  # Chrome's JSON Array Format may end without ']'
                    self.end = window.size()
                    return
                raise self._error("unexpected end of data inside 'traceEvents'", window.size(), _TRUNCATED_HINT)
            if window.buf[pos : pos + 1] == b"]":
                self.end = pos + 1
                return
            boundary = self._boundary(pos, pos + self.chunk_bytes)
            while boundary is not None:
                piece = window.buf[pos : boundary.start() + 1]
                document = b"".join((b"[", self._text(piece), b"]"))
                try:
                    events = decode_events(document)
                except orjson.JSONDecodeError as exc:
                    end = _array_end(piece)
                    if end is not None:  # the array closed inside this piece
                        yield self._elements(piece[:end])
                        self.end = pos + end
                        return
                    if self.transform:  # locate the failure in the text as it is in the file
                        document = b"".join((b"[", piece, b"]"))
                        exc = _parse_error(document) or exc
                    failed_at = _byte_offset(document, exc.pos)
                    if failed_at < len(document) - 1:
                        # A cut inside a string or object fails at the very end; this is a
                        # real error in the text.
                        hint = _TRUNCATED_HINT if exc.msg.startswith("unexpected end") else _BROKEN_HINT
                        raise self._error(exc.msg, pos + failed_at - 1, hint) from None
                    # Not an event boundary: retry with a piece twice as long, so a giant
                    # event costs O(n log n) parsing, not O(n^2).
                    boundary = self._boundary(pos, pos + 2 * len(piece))
                    continue
                yield events
                break
            if boundary is None:
                yield from self._last_piece(pos)
                return
            after = window.discard_before(boundary.end() - 1)

    def _boundary(self, pos: int, at: int) -> re.Match | None:
        """The next possible cut at or after ``at``; None at the end of the stream. Raises
        TraceFormatError when the text from ``pos`` grows past MAX_PIECE_BYTES without one."""
        limit = pos + MAX_PIECE_BYTES
        if at >= limit:
            at = limit  # the last doubling: one more search up to the limit
        found = self.window.find(_EVENT_BOUNDARY, at, limit=limit)
        if found is None and not self.window.at_end(limit):
            raise self._error(f"more than {MAX_PIECE_BYTES >> 20} MB of text without an event boundary (one "
                              f"event that large is not read)", pos, _BROKEN_HINT)
        return found

    def _last_piece(self, pos: int) -> Iterator[list]:
        piece = self.window.buf[pos:]
        try:
            orjson.loads(b"".join((b"[", piece)))
            end = len(piece)
        except orjson.JSONDecodeError as exc:
            if exc.msg == _AFTER_DOCUMENT:
                found = _array_end(piece)
                if found is None:
                    raise self._error(exc.msg, pos, _BROKEN_HINT) from None
                end = found
            elif self.bare and exc.msg.startswith("unexpected end"):
                # Chrome's JSON Array Format may end without ']' (a writer that was still running).
                yield self._elements(piece.rstrip(_WHITESPACE).rstrip(b",") + b"]")
                self.end = self.window.size()
                return
            else:
                hint = _TRUNCATED_HINT if exc.msg.startswith("unexpected end") else _BROKEN_HINT
                offset = _byte_offset(b"".join((b"[", piece)), exc.pos) - 1
                raise self._error(exc.msg, pos + offset, hint) from None
        yield self._elements(piece[:end])
        self.end = pos + end

    def _text(self, piece: bytes | bytearray) -> bytes | bytearray:
        return self.transform(piece) if self.transform else piece

    def _elements(self, elements_and_bracket: bytes | bytearray) -> list:
        document = b"".join((b"[", self._text(elements_and_bracket)))
        try:
            return decode_events(document)
        except orjson.JSONDecodeError as exc:
            hint = _TRUNCATED_HINT if exc.msg.startswith("unexpected end") else _BROKEN_HINT
            raise self._error(exc.msg, _byte_offset(document, exc.pos) - 1, hint) from None

    def _error(self, problem: str, offset: int, hint: str) -> TraceFormatError:
        line, column = self.locate(self.window.offset + offset)
        return TraceFormatError(self.window.source, f"not valid JSON: {problem} at line {line}, column {column}", hint)


class _Window:
    """The part of a stream pulled into memory and not yet consumed, and where it sits."""

    def __init__(self, stream: _Binary, source: str) -> None:
        self.stream = stream
        self.source = source
        # A bytearray grows in place and drops a consumed prefix with one memmove; rebuilding a
        # bytes object for each would copy the whole buffer every time.
        self.buf = bytearray()
        self.offset = 0  # stream offset of buf[0]
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        block = _read(self.stream, _READ_BYTES, self.source)
        if not block:
            self.eof = True
            return False
        self.buf += block
        return True

    def size(self) -> int:
        return len(self.buf)

    def skip_whitespace(self, pos: int) -> int | None:
        """Offset of the first non-space byte at or after ``pos``; None at the end of the stream.
        Whitespace read past is dropped from the buffer (a gigabyte of it costs a block)."""
        while True:
            found = _NON_SPACE.search(self.buf, pos)
            if found is not None:
                return found.start()
            pos = self.discard_before(len(self.buf))
            if not self.more():
                return None

    def find(self, pattern: re.Pattern, pos: int, limit: int | None = None) -> re.Match | None:
        """The next match at or after ``pos``, reading on as needed; None at the end of the
        stream, or when none starts before ``limit`` (then the buffer holds at most ``limit``
        bytes and a read block more). Its offsets stay valid until discard_before()."""
        while True:
            while len(self.buf) <= pos and self.more():
                pass
            match = pattern.search(self.buf, min(pos, len(self.buf)))
            if match is not None and (limit is None or match.start() < limit):
                return match
            searched = len(self.buf)
            if (limit is not None and searched >= limit) or not self.more():
                return None
            pos = max(pos, searched - 64)  # a match may straddle the old end

    def at_end(self, pos: int) -> bool:
        """Whether the stream ends before ``pos`` (everything up to it is in the buffer)."""
        return self.eof and len(self.buf) < pos

    def discard_before(self, pos: int) -> int:
        """Forget the text before ``pos`` (once enough has piled up); returns where ``pos`` is now."""
        if pos < _READ_BYTES:
            return pos
        del self.buf[:pos]
        self.offset += pos
        return 0

    def rest(self, pos: int) -> bytes:
        while self.more():
            pass
        return bytes(self.buf[pos:])



def _read(stream: _Binary, size: int, source: str) -> bytes:
    try:
        return stream.read(size)
    except EOFError as exc:
        raise TraceFormatError(
            source, f"the gzip data is truncated ({exc})", "The file was cut short; copy or export it again"
        ) from None
    except (OSError, zlib.error) as exc:
        raise TraceFormatError(
            source, f"the gzip data is corrupt ({exc})", "Re-export the trace, or gunzip it to see what is left"
        ) from None


def _array_end(elements: bytes | bytearray) -> int | None:
    """If ``elements`` holds the rest of an array and then more text, the offset just past the
    array's ']'; None if it does not."""
    document = b"".join((b"[", elements))
    try:
        orjson.loads(document)
        return None
    except orjson.JSONDecodeError as exc:
        if exc.msg != _AFTER_DOCUMENT:
            return None
        end = _byte_offset(document, exc.pos)  # the first non-space byte after the array
    while document[end - 1] in _WHITESPACE:
        end -= 1
    return end - 1


def _parse_error(document: bytes) -> orjson.JSONDecodeError | None:
    try:
        orjson.loads(document)
    except orjson.JSONDecodeError as exc:
        return exc
    return None


def _byte_offset(document: bytes, char_offset: int) -> int:
    """orjson reports positions in characters; the window works in bytes."""
    head = document[:char_offset]
    if head.isascii():
        return char_offset
    return len(document.decode("utf-8", "replace")[:char_offset].encode("utf-8", "replace"))


def _top_level_keys(header: bytes | bytearray, trailer: bytes | bytearray) -> dict:
    try:
        document = orjson.loads(b"".join((header, b"[]", trailer)))
    except orjson.JSONDecodeError:
        raise NeedsWholeParse from None
    # A 'traceEvents' match inside some string would leave a different shape here.
    if not isinstance(document, dict) or document.get("traceEvents") != []:
        raise NeedsWholeParse
    del document["traceEvents"]
    return document


def _unterminated_list(text: bytes) -> list | None:
    """The Chrome "JSON Array Format" lets a writer that is still running omit the closing ']'."""
    if not text.lstrip(_WHITESPACE).startswith(b"["):
        return None
    try:
        document = orjson.loads(text.rstrip(_WHITESPACE).rstrip(b",") + b"]")
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, list) else None
