"""Event ``args`` kept out of the hot columns: compact JSON, zstd-compressed in blocks, decoded
only when asked for.

A dict per event costs several hundred bytes of Python objects, and args are most of a trace's
text. Here each event's args are re-encoded as compact JSON, the JSON of a few thousand
consecutive events is compressed as one block (Kineto args are repetitive: 10-30x smaller), and a
row keeps only where its text starts and how long it is. Reading one row decompresses one block
(well under a millisecond; recent blocks are cached); bulk readers decompress each block once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

import numpy as np
import orjson
import zstandard

# Level-1 zstd frames (the same bytes pyarrow's zstd codec writes, so saved traces read either way).
# Not pyarrow's codec: importing pyarrow costs 30 MB and 40 ms that loading a JSON trace does not need.
# One compressor and decompressor per thread: zstandard's may not be used by two threads at once (the
# explorer loads traces on several; a shared one failed with "cannot compress: Error (generic)").
_ZSTD = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_ZSTD, "compressor", None)
    if c is None:
        c = _ZSTD.compressor = zstandard.ZstdCompressor(level=1)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_ZSTD, "decompressor", None)
    if d is None:
        d = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return d

_CACHED_BLOCKS = 8


class ArgsColumn:
    """Row i's args are the JSON text at ``starts[i]:starts[i]+lengths[i]`` of the uncompressed
    concatenation of ``blocks``; a length of 0 means no args. Block b holds text from
    ``block_starts[b]`` to ``block_starts[b+1]``; no row's text crosses a block boundary."""

    __slots__ = ("starts", "lengths", "blocks", "block_starts", "_cache")

    def __init__(
        self, starts: np.ndarray, lengths: np.ndarray, blocks: Sequence[bytes], block_starts: np.ndarray
    ) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self.lengths = np.asarray(lengths, dtype=np.int32)
        self.blocks = list(blocks)
        self.block_starts = np.asarray(block_starts, dtype=np.int64)
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    @classmethod
    def empty(cls, rows: int = 0) -> ArgsColumn:
        return cls(np.zeros(rows, np.int64), np.zeros(rows, np.int32), [], np.zeros(1, np.int64))

    @classmethod
    def from_dicts(cls, args: Sequence[dict | None]) -> ArgsColumn:
        builder = ArgsBuilder()
        builder.extend([orjson.dumps(a) if a else b"" for a in args])
        return builder.finish()

    def __len__(self) -> int:
        return len(self.starts)

    def take(self, rows: np.ndarray) -> ArgsColumn:
        """The column for a table re-ordered (or filtered) to ``rows``; blocks are shared."""
        column = ArgsColumn(self.starts[rows], self.lengths[rows], self.blocks, self.block_starts)
        column._cache = self._cache
        return column

    @property
    def nbytes(self) -> int:
        return self.starts.nbytes + self.lengths.nbytes + sum(len(b) for b in self.blocks)

    @property
    def text_bytes(self) -> int:
        """Size of all args as uncompressed JSON."""
        return int(self.block_starts[-1])

    # --- reading ---------------------------------------------------------------------------

    def raw(self, row: int) -> bytes:
        length = int(self.lengths[row])
        if length == 0:
            return b""
        start = int(self.starts[row])
        block = int(np.searchsorted(self.block_starts, start, side="right")) - 1
        local = start - int(self.block_starts[block])
        return self._block(block)[local : local + length]

    def get(self, row: int) -> dict:
        text = self.raw(row)
        return orjson.loads(text) if text else {}

    def raw_many(self, rows: Sequence[int] | np.ndarray | None = None) -> list[bytes]:
        """JSON text of many rows (all when None), decompressing each block at most once. The texts of
        one block are cut out in one C-level call (``itemgetter`` over slices), not a Python step per row."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.full(len(rows), b"", dtype=object)
        starts, lengths = self.starts[rows], self.lengths[rows]
        has_args = np.flatnonzero(lengths > 0)
        if not len(has_args):
            return out.tolist()
        block_of = np.searchsorted(self.block_starts, starts[has_args], side="right") - 1
        order = np.argsort(block_of, kind="stable")
        has_args, block_of = has_args[order], block_of[order]
        cuts = np.flatnonzero(block_of[1:] != block_of[:-1]) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(has_args)])).tolist()):
            block = int(block_of[lo])
            mine = has_args[lo:hi]
            local = starts[mine] - int(self.block_starts[block])
            texts = itemgetter(*map(slice, local.tolist(), (local + lengths[mine]).tolist()))(self._decompress(block))
            if hi - lo == 1:
                out[mine[0]] = texts
            else:
                holder = np.empty(hi - lo, dtype=object)
                holder[:] = texts
                out[mine] = holder
        return out.tolist()

    def get_many(self, rows: Sequence[int] | np.ndarray | None = None) -> list[dict]:
        return [orjson.loads(t) if t else {} for t in self.raw_many(rows)]

    def _block(self, block: int) -> bytes:
        data = self._cache.get(block)
        if data is None:
            data = self._decompress(block)
            self._cache[block] = data
            if len(self._cache) > _CACHED_BLOCKS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(block)
        return data

    def _decompress(self, block: int) -> bytes:
        size = int(self.block_starts[block + 1] - self.block_starts[block])
        return _decompressor().decompress(self.blocks[block], max_output_size=size)


class JoinedJSON(NamedTuple):
    """The JSON texts of consecutive rows as one bytes object: row i is
    ``text[starts[i]:starts[i] + lengths[i]]`` (length 0: no args)."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    text: bytes

    @classmethod
    def of(cls, texts: Sequence[bytes]) -> JoinedJSON:
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        return cls(np.cumsum(lengths) - lengths, lengths, b"".join(texts))

    @classmethod
    def of_objects(cls, texts: Sequence) -> JoinedJSON:
        """From raw JSON values (bytes-like) as a trace holds them: each must be an object or
        null; ``{}`` and ``null`` count as no args. Raises TypeError naming nothing: the caller
        finds the offending event (per-row checks would cost more than the whole join)."""
        joined = cls.of(texts)
        starts, lengths, text = joined
        present = np.flatnonzero(lengths)
        if len(present):
            chars = np.frombuffer(text, dtype=np.uint8)
            first = chars[starts[present]]
            null = first == _NULL_START  # a JSON value starting with "n" can only be null
            if np.any((first != _OPEN_BRACE) & ~null):
                raise TypeError("an event's 'args' is not a JSON object")
            empty = (lengths[present] == 2) & (chars[starts[present] + 1] == _CLOSE_BRACE)
            lengths[present[empty | null]] = 0  # their bytes stay in the text, unreferenced
            for row in np.flatnonzero(lengths >= 2 * MAX_ARGS_DEPTH).tolist():
                if not writable(text[starts[row] : starts[row] + lengths[row]]):
                    raise TypeError(f"an event's 'args' nests more than {MAX_ARGS_DEPTH} levels deep")
        return joined


_OPEN_BRACE, _CLOSE_BRACE, _NULL_START = ord("{"), ord("}"), ord("n")

# orjson writes at most this many nested levels, and every answer that shows args (the explorer's
# details, an export) writes them again; deeper args are refused when read instead.
MAX_ARGS_DEPTH = 254


def writable(args_json: bytes) -> bool:
    """Whether the args can be read and written again. Only text with enough brackets to nest
    MAX_ARGS_DEPTH levels is decoded to find out, so ordinary args cost two byte counts."""
    if args_json.count(b"{") + args_json.count(b"[") < MAX_ARGS_DEPTH:
        return True
    try:
        orjson.dumps(orjson.loads(args_json))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return False
    return True


class ArgsBuilder:
    """Collects encoded args batch by batch; each batch becomes one compressed block."""

    def __init__(self) -> None:
        self._starts: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._blocks: list[bytes] = []
        self._block_starts: list[int] = [0]

    def extend(self, encoded: Sequence[bytes] | JoinedJSON) -> None:
        """Add rows: each row's JSON text (b"" for none), or a :class:`JoinedJSON` of them."""
        starts, lengths, text = encoded if isinstance(encoded, JoinedJSON) else JoinedJSON.of(encoded)
        offset = self._block_starts[-1]
        self._starts.append(offset + starts)
        self._lengths.append(lengths.astype(np.int32))
        if text:
            self._blocks.append(_compressor().compress(text))
            self._block_starts.append(offset + len(text))

    def finish(self) -> ArgsColumn:
        if not self._starts:
            return ArgsColumn.empty()
        return ArgsColumn(
            np.concatenate(self._starts), np.concatenate(self._lengths), self._blocks, np.array(self._block_starts)
        )
