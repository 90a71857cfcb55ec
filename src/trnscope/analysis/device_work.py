"""The device executions of a trace and the host calls that launched them, resolved once.

Every analysis that relates host and device (operator device time, dispatch counts, idle gaps and
their cause) starts from the same join: device slice -> the runtime call that launched it (Kineto's
``ac2g`` flow; its ``correlation`` arg when a trace has no flows) -> the ops above that call. This
module does the join once per trace, with numpy, and keeps the result beside the trace.

Executions are the slices on device-stream lanes, less two kinds of span that are not work:
``gpu_user_annotation`` ranges (they wrap kernels) and ``cuda_sync`` events (CUPTI's
synchronisation records: how long a host call such as ``cudaStreamSynchronize`` waited, drawn on
the stream it waited for). Each execution belongs to a *device*: the process its lane is in
(Kineto gives each GPU its own pid; trnscope each NeuronCore).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .. import caches
from ..trace import Trace
from .exec_args import ExecArgs, LaunchArgs, decode_args
from .kernel_types import MEMORY, MEMORY_CATEGORIES, kernel_type
from .lanes import DEVICE_ANNOTATION_CATEGORIES, RUNTIME_CATEGORIES, SYNC_CATEGORIES, Role, lane_infos


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
    kind: np.ndarray  # object: computation / communication / memory / other (kernel_types)
    device: np.ndarray  # int32 index into ``devices``
    devices: list[str]  # device names: "GPU 0", "neuron:0", ...
    args: list[ExecArgs]  # the args the analyses read, by key

    def __len__(self) -> int:
        return len(self.rows)


_CACHE: "weakref.WeakKeyDictionary[Trace, DeviceWork]" = weakref.WeakKeyDictionary()
caches.register("analysis.device_work: device work per trace", _CACHE.clear)


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
    skip_ids = _string_ids(trace, DEVICE_ANNOTATION_CATEGORIES | SYNC_CATEGORIES)
    if len(skip_ids):
        rows = rows[~np.isin(s.cat[rows], skip_ids)]
    args = decode_args(s.args.raw_many(rows)) if len(rows) else []
    launcher = _launchers(trace, rows, host_tracks, args)
    submit = np.where(launcher >= 0, s.ts_ns[np.maximum(launcher, 0)], -1)
    n = len(rows)
    # what depends on the name and category only is worked out once per distinct pair
    width = int(s.cat[rows].max()) + 1 if n else 1
    keys, pair_of = np.unique(s.name[rows].astype(np.int64) * width + s.cat[rows], return_inverse=True)
    pair_of = pair_of.reshape(-1)
    pair_names = [trace.strings[int(i)] for i in keys // width]
    pair_cats = [trace.strings[int(i)] for i in keys % width]
    memory_cat = np.array([c in MEMORY_CATEGORIES for c in pair_cats], dtype=bool)
    copy_named = np.array([nm.startswith(("Memcpy", "Memset")) for nm in pair_names], dtype=bool)
    has_neff = np.fromiter((a.neff_id is not None for a in args), dtype=bool, count=n)
    is_copy = memory_cat[pair_of] | (copy_named[pair_of] & ~has_neff)
    kind_by_pair = np.array([kernel_type(nm, c) for nm, c in zip(pair_names, pair_cats)] or [""], dtype=object)
    kind = kind_by_pair[pair_of] if n else np.zeros(0, dtype=object)
    kind[is_copy] = MEMORY
    moved = _bytes(args, is_copy)
    program = np.array(pair_names or [""], dtype=object)[pair_of] if n else np.zeros(0, dtype=object)
    for i in np.flatnonzero(has_neff).tolist():
        program[i] = str(args[i].neff_id)
    track = s.track[rows]
    device, devices = _devices(trace, track)
    return DeviceWork(
        rows=rows, track=track, start=s.ts_ns[rows], end=s.ts_ns[rows] + s.dur_ns[rows],
        launcher=launcher, submit=submit, is_copy=is_copy, bytes=moved, program=program, kind=kind,
        device=device, devices=devices, args=args,
    )


def _devices(trace: Trace, track: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per execution the index of its device (its lane's process), and the devices' names."""
    by_pid: dict[object, int] = {}
    names: list[str] = []
    of_track: dict[int, int] = {}
    for t in np.unique(track).tolist():
        info = trace.tracks[t]
        index = by_pid.get(info.pid)
        if index is None:
            index = by_pid[info.pid] = len(names)
            names.append(_device_name(info))
        of_track[t] = index
    lookup = np.zeros(len(trace.tracks), dtype=np.int32)
    for t, index in of_track.items():
        lookup[t] = index
    return lookup[track] if len(track) else np.zeros(0, dtype=np.int32), names


def _device_name(track) -> str:
    for text in (track.process_labels, track.process_name):
        if text and text not in ("CPU",):
            return str(text)
    return f"device {track.pid}"


def _rows_of(trace: Trace, tracks: list[int]) -> np.ndarray:
    offsets = trace.slices.track_offsets
    parts = [np.arange(offsets[t], offsets[t + 1], dtype=np.int64) for t in tracks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _string_ids(trace: Trace, values) -> np.ndarray:
    return np.array([i for i in (trace.strings.id_of(v) for v in values) if i is not None], dtype=np.int32)


def _launchers(trace: Trace, rows: np.ndarray, host_tracks: list[int], args: list[ExecArgs]) -> np.ndarray:
    """Host row that launched each device row: a flow from a host thread into it, else the host
    runtime call with the same ``correlation`` arg."""
    launcher = np.full(len(rows), -1, dtype=np.int64)
    if not len(rows):
        return launcher
    s, f = trace.slices, trace.flows
    if len(f):
        position = np.full(len(s), -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        host = np.isin(s.track[f.start_row], np.asarray(host_tracks, dtype=np.int32))
        target = position[f.end_row[host]]
        linked = target >= 0
        # the first flow into an execution wins (written in reverse so earlier ones land last)
        launcher[target[linked][::-1]] = f.start_row[host][linked][::-1]
    missing = np.flatnonzero(launcher < 0)
    if len(missing):
        _by_correlation(trace, rows, host_tracks, args, launcher, missing)
    return launcher


def _by_correlation(trace, rows, host_tracks, args, launcher, missing) -> None:
    # one launch may start many executions: a cudaGraphLaunch replays a whole graph of kernels under
    # its correlation id (Kineto then writes one flow start and many ends with the same id)
    wanted = _correlations([args[i] for i in missing.tolist()])
    if not (wanted >= 0).any():
        return
    host_rows = _rows_of(trace, host_tracks)
    runtime = host_rows[np.isin(trace.slices.cat[host_rows], _string_ids(trace, RUNTIME_CATEGORIES))]
    have = _correlations(decode_args(trace.slices.args.raw_many(runtime), LaunchArgs))
    valid = have >= 0
    runtime, have = runtime[valid], have[valid]
    if not len(have):
        return
    # the first runtime call (in row order) with each correlation id launched it
    have, first = np.unique(have, return_index=True)
    at = np.searchsorted(have, wanted)
    hit = (wanted >= 0) & (at < len(have)) & (have[np.minimum(at, len(have) - 1)] == wanted)
    launcher[missing[hit]] = runtime[first[at[hit]]]


def _correlations(args) -> np.ndarray:
    """The integer correlation id of each (-1 where absent or not an integer)."""
    return np.fromiter((a.correlation if type(a.correlation) is int and a.correlation >= 0 else -1 for a in args),
                       dtype=np.int64, count=len(args))


def _bytes(args: list[ExecArgs], is_copy: np.ndarray) -> np.ndarray:
    """Bytes each execution moved: HBM reads + writes when recorded (NEFFs), else a copy's size."""
    n = len(args)
    read = np.fromiter((a.hbm_read_bytes if a.hbm_read_bytes is not None else -1 for a in args), np.float64, n)
    write = np.fromiter((a.hbm_write_bytes if a.hbm_write_bytes is not None else -1 for a in args), np.float64, n)
    size = np.fromiter((a.bytes if a.bytes is not None else 0 for a in args), np.float64, n)
    recorded = (read >= 0) | (write >= 0)
    hbm = np.maximum(read, 0) + np.maximum(write, 0)
    return np.where(recorded, hbm, np.where(is_copy, size, 0)).astype(np.int64)
