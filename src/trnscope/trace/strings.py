"""Interned strings: every name and category in a trace is stored once and referred to by id."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa


class StringTable:
    """Append-only table of unique strings; id 0 is always the empty string."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = [""]
        self._ids: dict[str, int] = {"": 0}
        self._array: np.ndarray | None = None
        for value in values:
            self.intern(value)

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, string_id: int) -> str:
        return self._values[string_id]

    def __iter__(self):
        return iter(self._values)

    def intern(self, value: str) -> int:
        string_id = self._ids.get(value)
        if string_id is None:
            string_id = len(self._values)
            self._values.append(value)
            self._ids[value] = string_id
            self._array = None
        return string_id

    def id_of(self, value: str) -> int | None:
        """The id of ``value``, or None when the trace never uses it (so a filter can match nothing)."""
        return self._ids.get(value)

    def encode(self, values: Sequence[object]) -> np.ndarray:
        """Ids (int32) for a column of strings; None becomes "" and other non-strings their str()."""
        if len(values) == 0:
            return np.zeros(0, dtype=np.int32)
        # Dictionary-encoding in Arrow runs in C; only the (few) distinct values go through Python.
        try:
            encoded = pa.array(values, type=pa.string()).dictionary_encode()
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            encoded = pa.array(["" if v is None else str(v) for v in values]).dictionary_encode()
        dictionary = encoded.dictionary.to_pylist()
        # One extra slot at the end of the remap table catches nulls (missing names) as id 0.
        remap = np.zeros(len(dictionary) + 1, dtype=np.int32)
        for index, value in enumerate(dictionary):
            remap[index] = self.intern(value)
        indices = encoded.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
        return remap[indices]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Strings (object array) for an array of ids."""
        if self._array is None:
            self._array = np.array(self._values, dtype=object)
        return self._array[np.asarray(ids)]

    def to_list(self) -> list[str]:
        return list(self._values)

