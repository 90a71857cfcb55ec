"""Time-window and level-of-detail queries over slices.

Slices are regrouped into *levels*: one per (track, depth), each in time order. The nesting pass
guarantees that slices of one level never overlap, so inside a level both starts and ends are
sorted and a window is two binary searches away. Level of detail follows Perfetto's slice mipmap:
split the window into pixel buckets and, per level and bucket, keep only the longest slice that
starts there (a range arg-max on durations) together with how many slices it stands for.

A zero-length slice is treated as lasting 1 ns, so it is found by windows that contain its
timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rangemax import RangeArgMax
from .tables import SliceTable


@dataclass(frozen=True)
class LodResult:
    """Representative slices for one level-of-detail query, ordered by (track, depth, time)."""

    rows: np.ndarray  # int64 slice rows
    merged: np.ndarray  # int64 number of slices each representative stands for (>= 1)
    bucket: np.ndarray  # int64 pixel bucket of each representative

    def __len__(self) -> int:
        return len(self.rows)


class SliceIndex:
    def __init__(self, slices: SliceTable, track_count: int) -> None:
        n = len(slices)
        rows = np.arange(n, dtype=np.int64)
        # Rows of a track are already in time order, so (track, depth, row) is (track, depth, ts).
        self.rows = np.lexsort((rows, slices.depth, slices.track)).astype(np.int64)
        self.ts = slices.ts_ns[self.rows]
        self.dur = slices.dur_ns[self.rows]
        self.end = self.ts + np.maximum(self.dur, 1)
        track = slices.track[self.rows]
        depth = slices.depth[self.rows]
        change = np.flatnonzero((track[1:] != track[:-1]) | (depth[1:] != depth[:-1])) + 1
        self.level_start = np.concatenate(([0], change)).astype(np.int64) if n else np.zeros(0, np.int64)
        self.level_end = np.concatenate((change, [n])).astype(np.int64) if n else np.zeros(0, np.int64)
        self.level_track = track[self.level_start]
        self.level_depth = depth[self.level_start]
        self.track_levels = np.searchsorted(self.level_track, np.arange(track_count + 1)).astype(np.int64)
        self._make_ends_searchable()
        self._argmax: RangeArgMax | None = None

    def _make_ends_searchable(self) -> None:
        # Ends are sorted within a level when its slices are disjoint (what nesting.py produces);
        # a table built some other way gets the running maximum instead, which is still sorted
        # and still finds every overlapping slice (the caller filters on the true end).
        self.max_end = self.end
        unsorted = np.flatnonzero(self.end[1:] < self.end[:-1]) + 1
        if len(unsorted) == 0:
            return
        inside = unsorted[~np.isin(unsorted, self.level_start)]
        if len(inside) == 0:
            return
        self.max_end = self.end.copy()
        for level in np.unique(np.searchsorted(self.level_start, inside, side="right") - 1):
            lo, hi = self.level_start[level], self.level_end[level]
            np.maximum.accumulate(self.end[lo:hi], out=self.max_end[lo:hi])

    @property
    def argmax(self) -> RangeArgMax:
        if self._argmax is None:
            self._argmax = RangeArgMax(self.dur)
        return self._argmax

    def levels_of(self, track_ids) -> np.ndarray:
        if track_ids is None:
            return np.arange(len(self.level_start), dtype=np.int64)
        tracks = np.unique(np.asarray(track_ids, dtype=np.int64).ravel())
        tracks = tracks[(tracks >= 0) & (tracks < len(self.track_levels) - 1)]
        starts, stops = self.track_levels[tracks], self.track_levels[tracks + 1]
        return _expand_ranges(starts, stops)

    def window(self, t0: int, t1: int, track_ids=None) -> np.ndarray:
        """Rows of slices overlapping [t0, t1), in row order."""
        if t1 <= t0:
            return np.zeros(0, dtype=np.int64)
        firsts, stops = [], []
        for level in self.levels_of(track_ids).tolist():
            lo, hi = self.level_start[level], self.level_end[level]
            first = lo + np.searchsorted(self.max_end[lo:hi], t0, side="right")
            stop = lo + np.searchsorted(self.ts[lo:hi], t1, side="left")
            if first < stop:
                firsts.append(first)
                stops.append(stop)
        positions = _expand_ranges(np.array(firsts, np.int64), np.array(stops, np.int64))
        positions = positions[self.end[positions] > t0]
        return np.sort(self.rows[positions])

    def lod(self, t0: int, t1: int, buckets: int, track_ids=None) -> LodResult:
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {buckets}")
        if t1 <= t0:
            raise ValueError(f"the window must have t1 > t0, got [{t0}, {t1})")
        span = t1 - t0
        # Bucket b is [t0 + ceil(b*span/B), t0 + ceil((b+1)*span/B)): the same split that
        # floor((ts - t0) * B / span) makes, so both ways of bucketing in _level_ranges agree.
        if span * buckets < _INT64_LIMIT:
            inner_edges = t0 + (np.arange(1, buckets, dtype=np.int64) * span + buckets - 1) // buckets
        else:  # a window of weeks at thousands of pixels: the products need Python's exact integers
            inner_edges = np.array([t0 + (k * span + buckets - 1) // buckets for k in range(1, buckets)], np.int64)
        lows: list = []
        highs: list = []
        ids: list = []
        straddlers: list = []
        for level in self.levels_of(track_ids).tolist():
            level_ranges = self._level_ranges(level, t0, t1, buckets, inner_edges)
            if level_ranges is not None:
                for column, value in zip((lows, highs, ids, straddlers), level_ranges):
                    column.append(value)
        if not lows:
            empty = np.zeros(0, dtype=np.int64)
            return LodResult(empty, empty, empty)
        return self._representatives(lows, highs, ids, straddlers)

    def _level_ranges(self, level: int, t0: int, t1: int, buckets: int, inner_edges: np.ndarray):
        """(lows, highs, bucket ids, straddler) for one level: per non-empty bucket the position
        range of slices starting in it, and the longest slice begun before t0 but still running
        (with how many such slices there are), which belongs to bucket 0. None if nothing shows."""
        lo, hi = int(self.level_start[level]), int(self.level_end[level])
        first = lo + int(np.searchsorted(self.max_end[lo:hi], t0, side="right"))
        start = lo + int(np.searchsorted(self.ts[lo:hi], t0, side="left"))
        stop = lo + int(np.searchsorted(self.ts[lo:hi], t1, side="left"))
        straddler = None
        if first < start:
            begun = first + np.flatnonzero(self.end[first:start] > t0)
            if len(begun):
                straddler = (int(begun[np.argmax(self.dur[begun])]), len(begun))
        if start == stop:
            if straddler is None:
                return None
            none = np.zeros(0, dtype=np.int64)
            return none, none, none, straddler
        if stop - start <= buckets:
            # Few slices: bucket each one directly (cost proportional to the slices shown).
            if (t1 - t0) * buckets < _INT64_LIMIT:
                bucket = (self.ts[start:stop] - t0) * buckets // (t1 - t0)
            else:  # at most `buckets` values: exact Python integers cost nothing here
                bucket = np.array([(t - t0) * buckets // (t1 - t0) for t in self.ts[start:stop].tolist()], np.int64)
            cuts = np.flatnonzero(bucket[1:] != bucket[:-1]) + 1
            lows = start + np.concatenate(([0], cuts))
            highs = np.concatenate((lows[1:], [stop]))
            return lows, highs, bucket[lows - start], straddler
        # Many slices: binary-search the bucket edges (cost proportional to the pixel width).
        bounds = start + np.searchsorted(self.ts[start:stop], inner_edges, side="left")
        lows = np.concatenate(([start], bounds))
        highs = np.concatenate((bounds, [stop]))
        ids = np.flatnonzero(highs > lows)
        return lows[ids], highs[ids], ids, straddler

    def _representatives(self, lows, highs, ids, straddlers) -> LodResult:
        sizes = np.array([len(a) for a in lows], dtype=np.int64)
        lows, highs, ids = (np.concatenate(a).astype(np.int64) for a in (lows, highs, ids))
        best = self.argmax.query(lows, highs) if len(lows) else np.zeros(0, np.int64)
        merged = highs - lows
        extra_rows, extra_merged, extra_ids = [], [], []
        level_first = np.cumsum(sizes) - sizes
        for level_index, straddler in enumerate(straddlers):
            if straddler is None:
                continue
            position, count = straddler
            at = level_first[level_index]
            if sizes[level_index] and ids[at] == 0:
                if self.dur[position] >= self.dur[best[at]]:  # ties go to the earlier slice
                    best[at] = position
                merged[at] += count
            else:
                extra_rows.append(position)
                extra_merged.append(count)
                extra_ids.append(level_index)
        rows = self.rows[best]
        if extra_rows:
            # Levels whose only visible slice began before the window: add it as bucket 0 and
            # restore (level, bucket) order with one stable sort.
            level_of = np.repeat(np.arange(len(sizes)), sizes)
            rows = np.concatenate((rows, self.rows[np.array(extra_rows, np.int64)]))
            merged = np.concatenate((merged, np.array(extra_merged, np.int64)))
            level_of = np.concatenate((level_of, np.array(extra_ids, np.int64)))
            ids = np.concatenate((ids, np.zeros(len(extra_rows), np.int64)))
            order = np.lexsort((ids, level_of))
            rows, merged, ids = rows[order], merged[order], ids[order]
        return LodResult(rows, merged, ids)


_INT64_LIMIT = 2**63


def _expand_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, e) for each pair, without a Python loop."""
    lengths = stops - starts
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lengths)
