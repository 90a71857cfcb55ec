"""Event ``args`` kept out of the hot columns: one JSON text per event, decoded only when asked for.

A dict per event costs several hundred bytes of Python objects; the same args as compact JSON in
one shared buffer cost their text length plus an 8-byte offset, and the explorer only ever decodes
the handful of rows a user clicks on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import orjson


class ArgsColumn:
    """Entry k's args are ``data[offsets[k]:offsets[k+1]]`` as JSON (empty range: no args).

    Tables are sorted after loading; rather than copying the text into the new order, ``index``
    maps a table row to its entry, so re-sorting costs one integer array.
    """

    __slots__ = ("data", "offsets", "index")

    def __init__(self, data: bytes | memoryview, offsets: np.ndarray, index: np.ndarray | None = None) -> None:
        self.data = data
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.index = None if index is None else np.asarray(index, dtype=np.int64)

    @classmethod
    def empty(cls, rows: int = 0) -> ArgsColumn:
        return cls(b"", np.zeros(rows + 1, dtype=np.int64))

    @classmethod
    def from_dicts(cls, args: Iterable[dict | None]) -> ArgsColumn:
        builder = ArgsBuilder()
        builder.extend([orjson.dumps(a) if a else b"" for a in args])
        return builder.finish()

    def __len__(self) -> int:
        return len(self.index) if self.index is not None else len(self.offsets) - 1

    def _entry(self, row: int) -> int:
        return int(self.index[row]) if self.index is not None else int(row)

    def raw(self, row: int) -> bytes:
        entry = self._entry(row)
        return bytes(self.data[self.offsets[entry] : self.offsets[entry + 1]])

    def get(self, row: int) -> dict:
        entry = self._entry(row)
        start, end = self.offsets[entry], self.offsets[entry + 1]
        return orjson.loads(self.data[start:end]) if end > start else {}

    def get_many(self, rows: Sequence[int] | np.ndarray) -> list[dict]:
        return [self.get(int(r)) for r in rows]

    def take(self, rows: np.ndarray) -> ArgsColumn:
        """The column for a table re-ordered (or filtered) to ``rows``; the text is shared."""
        rows = np.asarray(rows, dtype=np.int64)
        index = rows if self.index is None else self.index[rows]
        return ArgsColumn(self.data, self.offsets, index)

    def entries(self) -> np.ndarray:
        """Entry number of every row (the identity when the column was never re-ordered)."""
        return self.index if self.index is not None else np.arange(len(self.offsets) - 1, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return len(self.data) + self.offsets.nbytes + (0 if self.index is None else self.index.nbytes)


class ArgsBuilder:
    """Collects encoded args chunk by chunk, so a million events never exist as a million objects."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._lengths: list[np.ndarray] = []

    def extend(self, encoded: Sequence[bytes]) -> None:
        self._chunks.append(b"".join(encoded))
        self._lengths.append(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))

    def finish(self) -> ArgsColumn:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return ArgsColumn(b"".join(self._chunks), offsets)
