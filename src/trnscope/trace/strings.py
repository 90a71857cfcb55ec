"""Interned strings: every name and category in a trace is stored once and referred to by id."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


class StringTable:
    """Append-only table of unique strings; id 0 is always the empty string.

    ``ids`` maps strings to ids and is also consulted with raw JSON values (None, numbers), which
    are stored as their text; readers look values up in it directly in their hot loops.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = [""]
        self.ids: dict[object, int] = {"": 0, None: 0}
        self._array: np.ndarray | None = None
        for value in values:
            self.intern(value)

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, string_id: int) -> str:
        return self._values[string_id]

    def __iter__(self):
        return iter(self._values)

    def intern(self, value: object) -> int:
        """Id of ``value`` (None -> "", other non-strings -> their str()), adding it if new."""
        string_id = self.ids.get(value)
        if string_id is not None:
            return string_id
        text = value if isinstance(value, str) else str(value)
        string_id = self.ids.get(text)
        if string_id is None:
            string_id = len(self._values)
            self._values.append(text)
            self.ids[text] = string_id
            self._array = None
        self.ids[value] = string_id
        return string_id

    def id_of(self, value: str) -> int | None:
        """The id of ``value``, or None when the trace never uses it (so a filter can match nothing)."""
        return self.ids.get(value)

    def encode(self, values: Sequence[object]) -> np.ndarray:
        """Ids (int32) for a column of strings."""
        get, intern = self.ids.get, self.intern
        return np.fromiter(
            (i if (i := get(v)) is not None else intern(v) for v in values), dtype=np.int32, count=len(values)
        )

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Strings (object array) for an array of ids."""
        if self._array is None:
            self._array = np.array(self._values, dtype=object)
        return self._array[np.asarray(ids)]

    def to_list(self) -> list[str]:
        return list(self._values)
