"""Level-of-detail payloads: what the browser needs to draw a time window at its pixel width.

The browser never receives a whole large trace. For a window [t0, t1) drawn ``px`` pixels wide it
gets, per lane:

* slices: per nesting level and pixel, the longest slice starting there and how many it stands
  for (the trace model's slice mipmap, after Perfetto); runtime lanes use the same rule over their
  subset of rows;
* counters: per series and pixel, the last value and the min/max envelope (so a spike narrower
  than a pixel still shows);
* instants: at most one per lane and pixel.

Times are sent as ns relative to the view's origin, small enough to be exact as JavaScript
numbers (absolute epoch ns are not). Names are string ids plus a table of the ids used.
"""

from __future__ import annotations

import numpy as np

from ..trace import Trace


class RuntimeRows:
    """The runtime-API slices of one host-thread track, time-sorted, for runtime lanes."""

    def __init__(self, trace: Trace, track: int, category_ids: np.ndarray) -> None:
        s = trace.slices
        span = s.rows_of_track(track)
        rows = np.arange(span.start, span.stop, dtype=np.int64)
        self.rows = rows[np.isin(s.cat[rows], category_ids)]
        self.ts = s.ts_ns[self.rows]
        self.dur = s.dur_ns[self.rows]
        self.end = self.ts + np.maximum(self.dur, 1)
        self.max_end = np.maximum.accumulate(self.end) if len(self.end) else self.end

    def lod(self, t0: int, t1: int, px: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, merged): per pixel bucket the longest call starting there."""
        lo = int(np.searchsorted(self.max_end, t0, side="right"))
        hi = int(np.searchsorted(self.ts, t1, side="left"))
        idx = np.arange(lo, hi, dtype=np.int64)
        idx = idx[self.end[idx] > t0]
        if len(idx) <= px:
            return self.rows[idx], np.ones(len(idx), dtype=np.int64)
        # ts is sorted, so buckets come in runs: per run the longest call (the first, on ties)
        # without sorting, which matters on the first, whole-trace view of a big trace
        bucket = np.clip((self.ts[idx] - t0) * px // max(1, t1 - t0), 0, px - 1)
        starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
        counts = np.diff(np.concatenate((starts, [len(idx)])))
        dur = self.dur[idx]
        longest = np.repeat(np.maximum.reduceat(dur, starts), counts)
        hits = np.flatnonzero(dur == longest)
        run = np.searchsorted(starts, hits, side="right") - 1
        first_hit = hits[np.concatenate(([True], run[1:] != run[:-1]))]
        return self.rows[idx[first_hit]], counts.astype(np.int64)


def slice_columns(trace: Trace, rows: np.ndarray, merged: np.ndarray, origin: int, color_by: str) -> dict:
    """Columns as arrays: the JSON encoder writes them as lists, the binary one as they are."""
    s = trace.slices
    color = s.cat[rows] if color_by == "cat" else s.name[rows]
    return {
        "ts": s.ts_ns[rows] - origin,
        "dur": s.dur_ns[rows],
        "depth": s.depth[rows],
        "name": s.name[rows],
        "color": color,
        "row": rows,
        "merged": merged,
    }


def counter_columns(trace: Trace, series_ids: list[int], t0: int, t1: int, px: int, origin: int) -> dict:
    c = trace.counters
    out = {}
    for sid in series_ids:
        rows = trace.counter_window(t0, t1, [sid])
        out[str(sid)] = bucket_series(c.ts_ns[rows], c.value[rows], t0, t1, px, origin)
    return out


def series_columns(ts: np.ndarray, value: np.ndarray, t0: int, t1: int, px: int, origin: int) -> dict:
    """A series kept outside the trace's counter table (time-sorted): its samples in [t0, t1) plus
    the one in force when the window opens, bucketed like a counter."""
    lo = max(0, int(np.searchsorted(ts, t0, side="right")) - 1)
    hi = int(np.searchsorted(ts, t1, side="left"))
    return bucket_series(ts[lo:hi], value[lo:hi], t0, t1, px, origin)


def bucket_series(ts: np.ndarray, value: np.ndarray, t0: int, t1: int, px: int, origin: int) -> dict:
    """Per pixel the last value and the min/max envelope, when there are more samples than pixels."""
    if len(ts) > 2 * px:
        bucket = np.clip((ts - t0) * px // max(1, t1 - t0), 0, px - 1)
        starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
        ends = np.concatenate((starts[1:], [len(ts)]))
        return {
            "ts": ts[starts] - origin,
            "v": value[ends - 1],
            "min": np.minimum.reduceat(value, starts),
            "max": np.maximum.reduceat(value, starts),
        }
    return {"ts": ts - origin, "v": value}


def instant_columns(trace: Trace, tracks: list[int], t0: int, t1: int, px: int, origin: int) -> dict[int, dict]:
    if not len(trace.instants) or not tracks:
        return {}
    i = trace.instants
    rows = trace.instant_window(t0, t1, tracks)
    out: dict[int, dict] = {}
    if not len(rows):
        return out
    # rows come sorted by (track, ts): each track's are one run
    track_of = i.track[rows]
    cuts = np.flatnonzero(np.concatenate(([True], track_of[1:] != track_of[:-1], [True])))
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        mine = rows[lo:hi]
        bucket = np.clip((i.ts_ns[mine] - t0) * px // max(1, t1 - t0), 0, px - 1)
        keep = mine[np.concatenate(([True], bucket[1:] != bucket[:-1]))] if len(mine) > px else mine
        out[int(track_of[lo])] = {"ts": i.ts_ns[keep] - origin, "name": i.name[keep], "row": keep}
    return out


def strings_for(trace: Trace, *id_lists) -> dict[str, str]:
    arrays = [np.asarray(v, dtype=np.int64) for v in id_lists if len(v)]
    ids = np.unique(np.concatenate(arrays)) if arrays else np.zeros(0, np.int64)
    return {str(k): trace.strings[k] for k in ids.tolist()}
