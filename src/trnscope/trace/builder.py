"""Assemble a Trace from events given in any order, in batches.

Readers (and exporters that build traces directly) hand over columns chunk by chunk;
:meth:`TraceBuilder.finish` then does the work that needs everything at once: pairing B/E events,
deciding track kinds and display order, sorting, nesting, and binding flows to slice rows.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from .args import ArgsBuilder, JoinedJSON
from .errors import TraceFormatError
from .flows import bind_to_slices, pair_flow_events
from .model import Trace
from .nesting import capped_depth_count, compute_nesting
from .strings import StringTable
from .tables import CounterTable, FlowTable, InstantTable, SliceTable
from .track_kinds import DEVICE_CATEGORIES, classify
from .tracks import Track, TrackKind, process_display_key, thread_display_key


@dataclass
class ProcessInfo:
    name: str = ""
    labels: str = ""
    sort_index: int | None = None


@dataclass(slots=True)
class TrackInfo:
    pid: Any  # as the trace wrote it (an int or a string: _check_track_key)
    tid: Any
    counter: bool = False
    name: str = ""
    sort_index: int | None = None
    kind: TrackKind | None = None  # set by producers that know better than the heuristics


# Events one trace may hold, and what each costs to open in the explorer: 9.8M identical events
# (a 2 MB gzip) peak at 1.83 GiB of resident memory, about 200 bytes an event, so the default
# keeps a trace under about 10 GiB. TRNSCOPE_MAX_TRACE_EVENTS raises (or lowers) it.
MAX_EVENTS = 50_000_000
BYTES_PER_EVENT = 200
MAX_EVENTS_VARIABLE = "TRNSCOPE_MAX_TRACE_EVENTS"


def max_events() -> int:
    value = os.environ.get(MAX_EVENTS_VARIABLE, "")
    try:
        return max(1, int(value)) if value.strip() else MAX_EVENTS
    except ValueError:
        raise TraceFormatError(f"${MAX_EVENTS_VARIABLE}", f"{value!r} is not a number of events",
                               f"Set {MAX_EVENTS_VARIABLE} to a whole number, e.g. 100000000") from None


class TraceBuilder:
    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.events = 0
        self.max_events = max_events()
        self.strings = StringTable()
        self.metadata: dict = {}
        self.diagnostics: Counter = Counter()
        self.processes: dict[object, ProcessInfo] = {}
        self.track_infos: list[TrackInfo] = []
        self.track_keys: dict[tuple, int] = {}
        self._slices: list[tuple[np.ndarray, ...]] = []
        self._slice_args = ArgsBuilder()
        self._begin_end: list[tuple] = []
        self._instants: list[tuple[np.ndarray, ...]] = []
        self._instant_args = ArgsBuilder()
        self._samples: list[tuple[np.ndarray, ...]] = []
        self._flow_events: list[tuple[np.ndarray, ...]] = []

    # --- tracks and processes --------------------------------------------------------------

    def track_for(self, pid: object, tid: object) -> int:
        key = (pid, tid)
        track = self.track_keys.get(key)
        if track is None:
            _check_track_key(pid)
            _check_track_key(tid)
            track = self.track_keys[key] = len(self.track_infos)
            self.track_infos.append(TrackInfo(pid, tid))
        return track

    def add_tracks(self, keys) -> None:
        """Tracks for (pid, tid) keys not seen yet, in the order given (a chunk's new threads
        at once: a trace may have a thread per event)."""
        new = [key for key in keys if key not in self.track_keys]
        if not new:
            return
        pids, tids = zip(*new)
        for values in (pids, tids):
            if set(map(type, values)) != {int} or min(values) < -(2**63) or max(values) >= 2**64:
                for value in values:  # the odd one out, with its own message
                    _check_track_key(value)
        first = len(self.track_infos)
        self.track_keys.update(zip(new, range(first, first + len(new))))
        self.track_infos.extend(map(TrackInfo, pids, tids))

    def counter_track_for(self, pid: object, name: str) -> int:
        key = ("counter", pid, name)
        track = self.track_keys.get(key)
        if track is None:
            track = self.track_keys[key] = len(self.track_infos)
            self.track_infos.append(TrackInfo(pid, None, counter=True, name=name))
        return track

    def process(self, pid: object) -> ProcessInfo:
        info = self.processes.get(pid)
        if info is None:
            info = self.processes[pid] = ProcessInfo()
        return info

    def thread(self, pid: object, tid: object) -> TrackInfo:
        return self.track_infos[self.track_for(pid, tid)]

    # --- events, in batches ----------------------------------------------------------------

    def intern(self, value: object) -> int:
        return self.strings.intern(value)

    def _count(self, events: int) -> None:
        """Refuse a trace past the event limit before its columns are assembled (the memory an
        event costs is spent mostly after reading, by sorting, nesting and indexing)."""
        self.events += events
        if self.events > self.max_events:
            raise TraceFormatError(
                self.source or "<trace>",
                f"more than {self.max_events:,} events; opening it would take about "
                f"{self.events * BYTES_PER_EVENT / 2**30:.1f} GiB of memory or more",
                f"Record a shorter window, or set {MAX_EVENTS_VARIABLE} to a larger number of events on a "
                f"machine with the memory (about {BYTES_PER_EVENT} bytes an event)")

    def add_slices(self, track, ts_ns, dur_ns, name_ids, cat_ids, args: Sequence[bytes] | JoinedJSON,
                   counted: bool = False) -> None:
        """Complete events. Names and categories are ids from :meth:`intern`; ``args`` holds each
        event's args as JSON text (b"" for none), or all of them joined (args.JoinedJSON).
        ``counted``: the events were counted against the limit already (paired B/E events)."""
        if len(ts_ns) == 0:
            return
        if not counted:
            self._count(len(ts_ns))
        self._slices.append(
            (
                np.asarray(ts_ns, dtype=np.int64),
                np.asarray(dur_ns, dtype=np.int64),
                np.asarray(track, dtype=np.int32),
                np.asarray(name_ids, dtype=np.int32),
                np.asarray(cat_ids, dtype=np.int32),
            )
        )
        self._slice_args.extend(args)

    def add_begin_end(self, track: int, ts_ns: int, phase: str, name, cat, args: dict | None) -> None:
        """One B or E event; they are paired per track in finish()."""
        self._count(1)
        self._begin_end.append((track, ts_ns, len(self._begin_end), phase, name, cat, args))

    def add_instants(self, track, ts_ns, name_ids, cat_ids, scopes, args: Sequence[bytes]) -> None:
        if len(ts_ns) == 0:
            return
        self._count(len(ts_ns))
        self._instants.append(
            (
                np.asarray(ts_ns, dtype=np.int64),
                np.asarray(track, dtype=np.int32),
                np.asarray(name_ids, dtype=np.int32),
                np.asarray(cat_ids, dtype=np.int32),
                np.asarray(scopes, dtype=np.uint8),
            )
        )
        self._instant_args.extend(args)

    def add_counter_samples(self, track, series_name_ids, ts_ns, values) -> None:
        if len(ts_ns) == 0:
            return
        self._count(len(ts_ns))
        self._samples.append(
            (
                np.asarray(track, dtype=np.int32),
                np.asarray(series_name_ids, dtype=np.int32),
                np.asarray(ts_ns, dtype=np.int64),
                np.asarray(values, dtype=np.float64),
            )
        )

    def add_flow_events(self, track, ts_ns, phase, flow_id, name_ids, cat_ids, next_slice) -> None:
        """Flow events (phase: flows.PHASE_START/STEP/FINISH); ``flow_id`` as int64 (see
        :func:`flow_id_number` for ids written as strings)."""
        if len(ts_ns) == 0:
            return
        self._count(len(ts_ns))
        self._flow_events.append(
            (
                np.asarray(track, dtype=np.int32),
                np.asarray(ts_ns, dtype=np.int64),
                np.asarray(phase, dtype=np.int8),
                np.asarray(flow_id, dtype=np.int64),
                np.asarray(name_ids, dtype=np.int32),
                np.asarray(cat_ids, dtype=np.int32),
                np.asarray(next_slice, dtype=bool),
            )
        )

    def flow_id_number(self, value: object) -> int:
        """An int64 for a flow id: numbers as written, "0x1f"-style strings parsed, other strings
        a negative number unique to the string."""
        try:
            return int(value, 0) if isinstance(value, str) else int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return -1 - self.strings.intern(str(value))

    # --- assembly --------------------------------------------------------------------------

    def finish(self) -> Trace:
        self._pair_begin_end()
        ts, dur, track, name, cat = _concat(self._slices, [np.int64, np.int64, np.int32, np.int32, np.int32])
        args = self._slice_args.finish()
        if np.any(dur < 0):
            self.diagnostics["negative_durations_clamped"] += int(np.count_nonzero(dur < 0))
            dur = np.maximum(dur, 0)
        tracks, new_id = self._final_tracks(track, cat)
        track = new_id[track] if len(track) else track

        order = np.lexsort((-dur, ts, track))  # stable: equal slices keep file order
        ts, dur, track, name, cat = ts[order], dur[order], track[order], name[order], cat[order]
        track_offsets = np.searchsorted(track, np.arange(len(tracks) + 1)).astype(np.int64)
        depth, parent = compute_nesting(ts, dur, track_offsets)
        self.diagnostics["slices_at_max_nesting_depth"] += capped_depth_count(depth)
        slices = SliceTable(ts, dur, track, name, cat, depth, parent, args.take(order), track_offsets)

        instants = self._instant_table(new_id)
        counters = self._counter_table(new_id)
        flows = self._flow_table(slices, new_id)
        return Trace(
            slices=slices,
            tracks=tracks,
            instants=instants,
            counters=counters,
            flows=flows,
            strings=self.strings,
            metadata=self.metadata,
            diagnostics={k: v for k, v in sorted(self.diagnostics.items()) if v},
            source=self.source,
        )

    def _pair_begin_end(self) -> None:
        if not self._begin_end:
            return
        events = sorted(self._begin_end, key=lambda e: (e[0], e[1], e[2]))
        last_ts = max(
            [e[1] for e in events] + [int((p[0] + p[1]).max()) for p in self._slices if len(p[0])]
        )
        open_by_track: dict[int, list[tuple]] = {}
        slices = []
        for track, ts, _, phase, name, cat, args in events:
            stack = open_by_track.setdefault(track, [])
            if phase == "B":
                stack.append((track, ts, name, cat, dict(args or {})))
            elif stack:
                _, start, b_name, b_cat, b_args = stack.pop()
                b_args.update(args or {})  # Chrome merges the E event's args into the slice
                slices.append((track, start, ts - start, b_name, b_cat, b_args))
            else:
                self.diagnostics["end_events_without_begin"] += 1
        for stack in open_by_track.values():
            for track, start, name, cat, args in stack:
                # Still open when the trace stopped: show it running to the end of the trace.
                self.diagnostics["begin_events_without_end"] += 1
                slices.append((track, start, last_ts - start, name, cat, args))
        if slices:
            columns = list(zip(*slices))
            self.add_slices(
                columns[0], columns[1], columns[2], self.strings.encode(columns[3]),
                self.strings.encode(columns[4]), [orjson.dumps(a) if a else b"" for a in columns[5]], counted=True,
            )
        self._begin_end = []

    def _final_tracks(self, track: np.ndarray, cat: np.ndarray) -> tuple[list[Track], np.ndarray]:
        """Tracks with kinds, numbered in display order, and the old->new id map.

        A trace may have a thread per event (200k threads), so the per-track step is kept to a
        dictionary lookup or two: the kind depends on a few features that threads share (decided
        once per distinct combination), the process's half of the sort key once per process, and
        each Track is made once, with its final id."""
        count = len(self.track_infos)
        device_ids = [i for i in (self.strings.id_of(c) for c in DEVICE_CATEGORIES) if i is not None]
        total = np.bincount(track, minlength=count)
        device = np.bincount(track[np.isin(cat, device_ids)], minlength=count)
        mostly_device = (2 * device > total).tolist()  # classify's device_fraction > 0.5
        no_process = ProcessInfo()
        kinds: dict[tuple, TrackKind] = {}
        processes: dict[object, tuple] = {}  # pid -> (ProcessInfo, its half of the display key)
        keys, fields = [], []
        for old, info in enumerate(self.track_infos):
            pid, tid, name = info.pid, info.tid, info.name
            known = processes.get(pid)
            if known is None:
                process = self.processes.get(pid, no_process)
                known = processes[pid] = (process, process_display_key(pid, process.sort_index))
            process, process_key = known
            kind = info.kind
            if kind is None:
                # what classify() decides by (a pid or tid that is an int, not a bool: type() is int)
                features = (info.counter, type(pid) is int, type(tid) is int, name, process.name, process.labels,
                            mostly_device[old])
                kind = kinds.get(features)
                if kind is None:
                    kind = kinds[features] = classify(
                        is_counter=info.counter, pid=pid, tid=tid, thread_name=name,
                        process_name=process.name, process_labels=process.labels,
                        device_fraction=1.0 if mostly_device[old] else 0.0)
            if info.sort_index is None and type(tid) is int:  # most threads: thread_display_key inlined
                keys.append(process_key + (kind is TrackKind.COUNTER, (0, tid), (0, tid, ""), name))
            else:
                keys.append(process_key + thread_display_key(kind, tid, info.sort_index, name))
            fields.append((kind, pid, tid, name, process.name, process.labels, process.sort_index, info.sort_index))
        ordered = sorted(range(count), key=keys.__getitem__)
        new_id = np.zeros(count, dtype=np.int32)
        new_id[np.asarray(ordered, dtype=np.int64)] = np.arange(count, dtype=np.int32)
        return [Track.unchecked(position, *fields[old]) for position, old in enumerate(ordered)], new_id

    def _instant_table(self, new_id: np.ndarray) -> InstantTable:
        ts, track, name, cat, scope = _concat(self._instants, [np.int64, np.int32, np.int32, np.int32, np.uint8])
        args = self._instant_args.finish()
        track = new_id[track] if len(track) else track
        order = np.lexsort((ts, track))
        return InstantTable(ts[order], track[order], name[order], cat[order], scope[order], args.take(order))

    def _counter_table(self, new_id: np.ndarray) -> CounterTable:
        track, series_name, ts, value = _concat(self._samples, [np.int32, np.int32, np.int64, np.float64])
        track = new_id[track] if len(track) else track
        series_key = (track.astype(np.int64) << 32) | series_name.astype(np.int64)
        keys, series = np.unique(series_key, return_inverse=True)
        series = series.astype(np.int32)
        order = np.lexsort((ts, series))
        offsets = np.searchsorted(series[order], np.arange(len(keys) + 1)).astype(np.int64)
        return CounterTable(
            series_track=(keys >> 32).astype(np.int32),
            series_name=(keys & 0xFFFFFFFF).astype(np.int32),
            series=series[order],
            ts_ns=ts[order],
            value=value[order],
            series_offsets=offsets,
        )

    def _flow_table(self, slices: SliceTable, new_id: np.ndarray) -> FlowTable:
        track, ts, phase, flow_id, name, cat, next_slice = _concat(
            self._flow_events, [np.int32, np.int64, np.int8, np.int64, np.int32, np.int32, bool]
        )
        track = new_id[track] if len(track) else track
        source, target = pair_flow_events(cat, flow_id, phase, ts)
        paired = np.zeros(len(flow_id), dtype=bool)
        paired[source] = paired[target] = True
        self.diagnostics["unpaired_flow_events"] += int(np.count_nonzero(~paired))
        rows = bind_to_slices(slices, track, ts, next_slice)
        bound = (rows[source] >= 0) & (rows[target] >= 0)
        self.diagnostics["flows_without_slice"] += int(np.count_nonzero(~bound))
        source, target = source[bound], target[bound]
        return FlowTable(
            flow_id=flow_id[source],
            name=name[source],
            cat=cat[source],
            start_row=rows[source],
            end_row=rows[target],
            start_ts_ns=ts[source],
            end_ts_ns=ts[target],
            end_next_slice=next_slice[target],
        )


def _check_track_key(value: object) -> None:
    """pid/tid are strings, numbers or absent; integers must be writable again (64 bits)."""
    if isinstance(value, bool) or not (value is None or isinstance(value, (int, str, float))):
        raise TypeError(f"pid/tid {value!r} is not a string or a number")
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        raise ValueError(f"pid/tid {value} does not fit in 64 bits")


def _concat(parts: list[tuple[np.ndarray, ...]], dtypes: list) -> list[np.ndarray]:
    if not parts:
        return [np.zeros(0, dtype=d) for d in dtypes]
    return [np.concatenate([p[i] for p in parts]).astype(d, copy=False) for i, d in enumerate(dtypes)]
