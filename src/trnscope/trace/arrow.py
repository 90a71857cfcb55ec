"""pyarrow, imported when first used.

Importing pyarrow costs about 30 MB of memory and 40 ms, which reading a Kineto JSON file and
summarising it does not need (the args blocks are zstd frames written with ``zstandard``); only
Parquet files (saved traces, the trace cache, NTFF tables) do. ``pa`` and ``pq`` stand for
``pyarrow`` and ``pyarrow.parquet`` and import them on the first attribute looked up.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING


class _Lazy:
    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)


if TYPE_CHECKING:  # for the type checker, the modules themselves
    import pyarrow as pa
    import pyarrow.parquet as pq
else:
    pa = _Lazy("pyarrow")
    pq = _Lazy("pyarrow.parquet")
