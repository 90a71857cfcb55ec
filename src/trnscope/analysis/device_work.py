"""The device executions of a trace and the host calls that launched them, resolved once.

Every analysis that relates host and device (operator device time, dispatch counts, idle gaps and
their cause) starts from the same join: device slice -> the runtime call that launched it (Kineto's
``ac2g`` flow; its ``correlation`` arg when a trace has no flows) -> the ops above that call. This
module does the join once per trace, with numpy, and keeps the result beside the trace.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..trace import Trace
from .lanes import DEVICE_ANNOTATION_CATEGORIES, RUNTIME_CATEGORIES, Role, lane_infos

_COPY_CATEGORIES = frozenset({"gpu_memcpy", "gpu_memset"})


@dataclass
class DeviceWork:
    """Columns over the device executions, ordered by (lane, start)."""

    rows: np.ndarray  # int64 slice rows on device-stream lanes (annotation spans excluded)
    track: np.ndarray  # int32 lane of each
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    launcher: np.ndarray  # int64 host slice row of the runtime call that launched it, -1 if unknown
    submit: np.ndarray  # int64 ns when it was launched (start of the launcher), -1 if unknown
    is_copy: np.ndarray  # bool: memcpy / memset rather than a kernel or NEFF
    bytes: np.ndarray  # int64 bytes moved (HBM reads + writes for NEFFs, size for copies)
    program: np.ndarray  # object: NEFF id (Neuron) or kernel name: what "distinct programs" counts
    args: list[dict]  # decoded args of each execution

    def __len__(self) -> int:
        return len(self.rows)


_CACHE: "weakref.WeakKeyDictionary[Trace, DeviceWork]" = weakref.WeakKeyDictionary()


def device_work(trace: Trace) -> DeviceWork:
    work = _CACHE.get(trace)
    if work is None:
        work = _CACHE[trace] = _build(trace)
    return work


def _build(trace: Trace) -> DeviceWork:
    infos = lane_infos(trace)
    device_tracks = [i.track for i in infos if i.role is Role.DEVICE_STREAM]
    host_tracks = [i.track for i in infos if i.role is Role.HOST_THREAD]
    s = trace.slices
    rows = _rows_of(trace, device_tracks)
    skip_ids = _string_ids(trace, DEVICE_ANNOTATION_CATEGORIES)
    if len(skip_ids):
        rows = rows[~np.isin(s.cat[rows], skip_ids)]
    args = s.args.get_many(rows) if len(rows) else []
    launcher = _launchers(trace, rows, host_tracks, args)
    submit = np.where(launcher >= 0, s.ts_ns[np.maximum(launcher, 0)], -1)
    names = trace.slice_names(rows) if len(rows) else np.zeros(0, dtype=object)
    cats = trace.strings.lookup(s.cat[rows]) if len(rows) else np.zeros(0, dtype=object)
    is_copy = np.array([_is_copy(str(n), str(c), a) for n, c, a in zip(names, cats, args)], dtype=bool)
    moved = np.array([_bytes(a, copy) for a, copy in zip(args, is_copy)], dtype=np.int64)
    program = np.array([str(a.get("neff_id") or n) for n, a in zip(names, args)], dtype=object)
    return DeviceWork(
        rows=rows, track=s.track[rows], start=s.ts_ns[rows], end=s.ts_ns[rows] + s.dur_ns[rows],
        launcher=launcher, submit=submit, is_copy=is_copy, bytes=moved, program=program, args=args,
    )


def _rows_of(trace: Trace, tracks: list[int]) -> np.ndarray:
    offsets = trace.slices.track_offsets
    parts = [np.arange(offsets[t], offsets[t + 1], dtype=np.int64) for t in tracks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _string_ids(trace: Trace, values) -> np.ndarray:
    return np.array([i for i in (trace.strings.id_of(v) for v in values) if i is not None], dtype=np.int32)


def _launchers(trace: Trace, rows: np.ndarray, host_tracks: list[int], args: list[dict]) -> np.ndarray:
    """Host row that launched each device row: a flow from a host thread into it, else the host
    runtime call with the same ``correlation`` arg."""
    launcher = np.full(len(rows), -1, dtype=np.int64)
    if not len(rows):
        return launcher
    s, f = trace.slices, trace.flows
    position = {int(r): i for i, r in enumerate(rows.tolist())}
    if len(f):
        host = np.isin(s.track[f.start_row], np.asarray(host_tracks, dtype=np.int32))
        ends = f.end_row[host]
        starts = f.start_row[host]
        for start, end in zip(starts.tolist(), ends.tolist()):
            i = position.get(end)
            if i is not None and launcher[i] < 0:
                launcher[i] = start
    missing = np.flatnonzero(launcher < 0)
    if len(missing):
        _by_correlation(trace, rows, host_tracks, args, launcher, missing)
    return launcher


def _by_correlation(trace, rows, host_tracks, args, launcher, missing) -> None:
    wanted = {}
    for i in missing.tolist():
        c = args[i].get("correlation")
        if c is not None:
            wanted[c] = i
    if not wanted:
        return
    host_rows = _rows_of(trace, host_tracks)
    runtime = host_rows[np.isin(trace.slices.cat[host_rows], _string_ids(trace, RUNTIME_CATEGORIES))]
    for row, a in zip(runtime.tolist(), trace.slices.args.get_many(runtime)):
        i = wanted.get(a.get("correlation"))
        if i is not None and launcher[i] < 0:
            launcher[i] = row


def _is_copy(name: str, cat: str, args: dict) -> bool:
    if cat in _COPY_CATEGORIES:
        return True
    return name.startswith(("Memcpy", "Memset")) and "neff_id" not in args


def _bytes(args: dict, is_copy: bool) -> int:
    if "hbm_read_bytes" in args or "hbm_write_bytes" in args:
        return int(args.get("hbm_read_bytes") or 0) + int(args.get("hbm_write_bytes") or 0)
    if is_copy:
        return int(args.get("bytes") or 0)
    return 0
