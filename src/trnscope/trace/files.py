"""Open a trace in whichever stored form it is: a saved Parquet folder or Kineto/Chrome JSON."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from .errors import TraceFormatError
from .kineto import read_kineto
from .model import Trace
from .parquet import is_parquet_trace, load_parquet


def open_trace(path: str | PathLike[str]) -> Trace:
    path = Path(path)
    if path.is_dir():
        if is_parquet_trace(path):
            return load_parquet(path)
        raise TraceFormatError(
            path, "a folder that is not a saved trnscope trace",
            "Pass a trace file (.json / .json.gz) or a folder written by save_parquet",
        )
    return read_kineto(path)
