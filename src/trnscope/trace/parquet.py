"""Save a Trace as a folder of Parquet files and load it back fast.

Reloading a million-event trace from JSON means parsing text again; from Parquet it is a few
memory-mapped column reads. The folder holds ``manifest.json`` (format version, tracks, metadata,
diagnostics) and one Parquet file per table. Args are stored as they are held in memory: their
compressed blocks in ``*_args.parquet`` and each row's position in its table, so they are still
decoded only on demand. Derived structures (the time index) are rebuilt on first query.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from functools import cache

import numpy as np
import orjson

from .args import ArgsColumn
from .arrow import pa, pq
from .errors import TraceFormatError
from .model import Trace
from .strings import StringTable
from .tables import CounterTable, FlowTable, InstantTable, SliceTable
from .tracks import Track, TrackKind

FORMAT = "trnscope-trace"
VERSION = 1
MANIFEST = "manifest.json"
_COMPRESSION = "zstd"  # level-1 zstd: smaller than snappy and still decompresses at GB/s


def save_parquet(trace: Trace, directory: str | PathLike[str]) -> Path:
    """Write ``trace`` into ``directory`` (created if needed) and return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    s, i, c, f = trace.slices, trace.instants, trace.counters, trace.flows
    tables = {
        "strings": {"value": _string_array(trace.strings.to_list())},
        "slices": {
            "ts_ns": s.ts_ns, "dur_ns": s.dur_ns, "track": s.track, "name": s.name, "cat": s.cat,
            "depth": s.depth, "parent": s.parent, "args_start": s.args.starts, "args_length": s.args.lengths,
        },
        "slice_args": _args_blocks(s.args),
        "instants": {
            "ts_ns": i.ts_ns, "track": i.track, "name": i.name, "cat": i.cat, "scope": i.scope,
            "args_start": i.args.starts, "args_length": i.args.lengths,
        },
        "instant_args": _args_blocks(i.args),
        "counter_series": {"track": c.series_track, "name": c.series_name},
        "counter_samples": {"series": c.series, "ts_ns": c.ts_ns, "value": c.value},
        "flows": {
            "flow_id": f.flow_id, "name": f.name, "cat": f.cat, "start_row": f.start_row,
            "end_row": f.end_row, "start_ts_ns": f.start_ts_ns, "end_ts_ns": f.end_ts_ns,
            "end_next_slice": f.end_next_slice,
        },
    }
    for name, columns in tables.items():
        # Args blocks are zstd already; compressing them again would only cost time.
        compression = "none" if name.endswith("_args") else _COMPRESSION
        table = pa.Table.from_arrays([_arrow(v) for v in columns.values()], names=list(columns))
        pq.write_table(table, directory / f"{name}.parquet", compression=compression,
                       use_dictionary=name == "strings")
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "source": trace.source,
        "tracks": [_track_json(t) for t in trace.tracks],
        "metadata": trace.metadata,
        "diagnostics": trace.diagnostics,
    }
    (directory / MANIFEST).write_bytes(orjson.dumps(manifest, default=str, option=orjson.OPT_INDENT_2))
    return directory


def load_parquet(directory: str | PathLike[str]) -> Trace:
    """Load a Trace written by :func:`save_parquet`. Raises TraceFormatError for anything else."""
    directory = Path(directory)
    manifest = _read_manifest(directory)
    try:
        strings = StringTable(_read(directory, "strings")["value"].to_pylist()[1:])
        sl = _read(directory, "slices")
        tracks = [_track_from_json(t) for t in manifest["tracks"]]
        track = _np(sl, "track")
        slices = SliceTable(
            ts_ns=_np(sl, "ts_ns"), dur_ns=_np(sl, "dur_ns"), track=track, name=_np(sl, "name"),
            cat=_np(sl, "cat"), depth=_np(sl, "depth"), parent=_np(sl, "parent"),
            args=_args_column(sl, _read(directory, "slice_args")),
            track_offsets=np.searchsorted(track, np.arange(len(tracks) + 1)).astype(np.int64),
        )
        it = _read(directory, "instants")
        instants = InstantTable(
            ts_ns=_np(it, "ts_ns"), track=_np(it, "track"), name=_np(it, "name"), cat=_np(it, "cat"),
            scope=_np(it, "scope"), args=_args_column(it, _read(directory, "instant_args")),
        )
        series, samples = _read(directory, "counter_series"), _read(directory, "counter_samples")
        sample_series = _np(samples, "series")
        counters = CounterTable(
            series_track=_np(series, "track"), series_name=_np(series, "name"), series=sample_series,
            ts_ns=_np(samples, "ts_ns"), value=_np(samples, "value"),
            series_offsets=np.searchsorted(sample_series, np.arange(series.num_rows + 1)).astype(np.int64),
        )
        fl = _read(directory, "flows")
        flows = FlowTable(**{name: _np(fl, name) for name in fl.column_names})
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise TraceFormatError(
            directory, f"a table is missing or damaged ({type(exc).__name__}: {exc})",
            "Delete the folder and save the trace again from its JSON",
        ) from None
    # Arrow's allocator keeps freed decode buffers for reuse; a loaded trace will not need them.
    pa.default_memory_pool().release_unused()
    return Trace(
        slices=slices, tracks=tracks, instants=instants, counters=counters, flows=flows,
        strings=strings, metadata=manifest.get("metadata") or {},
        diagnostics=manifest.get("diagnostics") or {}, source=manifest.get("source"),
    )


def is_parquet_trace(path: str | PathLike[str]) -> bool:
    return (Path(path) / MANIFEST).is_file()


def _read_manifest(directory: Path) -> dict:
    hint = "Pass a folder written by trnscope.trace.save_parquet"
    try:
        manifest = orjson.loads((directory / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise TraceFormatError(directory, f"no {MANIFEST} here, so this is not a saved trnscope trace", hint) from None
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(directory, f"{MANIFEST} is not valid JSON ({exc})", hint) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TraceFormatError(directory, f"{MANIFEST} does not describe a {FORMAT} folder", hint)
    if manifest.get("version") != VERSION:
        raise TraceFormatError(
            directory, f"saved with format version {manifest.get('version')}, this trnscope reads {VERSION}",
            "Save the trace again from its JSON with this version",
        )
    return manifest


class _Columns:
    """One saved table, read a column at a time: Arrow decodes a column in batches that must
    then be joined, so reading all columns at once would hold every column twice."""

    def __init__(self, path: Path) -> None:
        self.file = pq.ParquetFile(path, memory_map=True)
        self.num_rows = self.file.metadata.num_rows
        self.column_names = self.file.schema_arrow.names

    def __getitem__(self, name: str) -> pa.ChunkedArray:
        return self.file.read(columns=[name], use_threads=False).column(0)


def _read(directory: Path, name: str) -> _Columns:
    return _Columns(directory / f"{name}.parquet")


def _np(table: _Columns, name: str) -> np.ndarray:
    column = table[name]
    chunks = [_chunk_to_numpy(chunk) for chunk in column.chunks]
    if len(chunks) == 1:
        return chunks[0]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=_numpy_types()[column.type])


# Arrow's own numpy conversions (pa.array(ndarray), Array.to_numpy()) import pandas whenever it is
# installed, which costs a second or more at every load; these columns are plain fixed-width
# numbers without nulls, so their buffers are handed over directly instead.
@cache
def _numpy_types() -> dict:
    return {pa.int8(): np.int8, pa.uint8(): np.uint8, pa.int32(): np.int32, pa.int64(): np.int64,
            pa.float64(): np.float64, pa.bool_(): np.bool_}


def _arrow(values) -> pa.Array:
    if isinstance(values, pa.Array):
        return values
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _chunk_to_numpy(chunk: pa.Array) -> np.ndarray:
    if chunk.null_count:
        raise ValueError(f"a column of type {chunk.type} has {chunk.null_count} missing values")
    dtype = np.dtype(_numpy_types()[chunk.type])  # KeyError: a type this module never writes
    buffer = chunk.buffers()[1]
    if dtype == np.bool_:
        bits = np.frombuffer(buffer, dtype=np.uint8)
        return np.unpackbits(bits, count=chunk.offset + len(chunk), bitorder="little")[chunk.offset :].astype(bool)
    return np.frombuffer(buffer, dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)


def _offsets(items: list) -> np.ndarray:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, items), dtype=np.int64, count=len(items)), out=offsets[1:])
    return offsets


def _string_array(values: list[str]) -> pa.Array:
    encoded = [v.encode() for v in values]
    buffers = [None, pa.py_buffer(_offsets(encoded)), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.large_string(), len(encoded), buffers)


def _args_blocks(args: ArgsColumn) -> dict:
    buffers = [None, pa.py_buffer(_offsets(args.blocks)), pa.py_buffer(b"".join(args.blocks))]
    return {"block": pa.Array.from_buffers(pa.large_binary(), len(args.blocks), buffers), "text_end": args.block_starts[1:]}


def _args_column(rows: _Columns, blocks: _Columns) -> ArgsColumn:
    block_starts = np.concatenate(([0], _np(blocks, "text_end"))).astype(np.int64)
    return ArgsColumn(_np(rows, "args_start"), _np(rows, "args_length"), blocks["block"].to_pylist(), block_starts)


def _track_json(track: Track) -> dict:
    return {
        "id": track.id, "kind": track.kind.value, "pid": track.pid, "tid": track.tid, "name": track.name,
        "process_name": track.process_name, "process_labels": track.process_labels,
        "process_sort_index": track.process_sort_index, "thread_sort_index": track.thread_sort_index,
    }


def _track_from_json(data: dict) -> Track:
    return Track(**{**data, "kind": TrackKind(data["kind"])})
