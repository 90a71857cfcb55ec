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

from typing import Literal

import numpy as np

from .rangemax import RangeArgMax
from .segments import expand_ranges, searchsorted_segments
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
        self.level_bounds = np.append(self.level_start, n).astype(np.int64)
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
        return expand_ranges(starts, stops)

    def window(self, t0: int, t1: int, track_ids=None) -> np.ndarray:
        """Rows of slices overlapping [t0, t1), in row order."""
        if t1 <= t0:
            return np.zeros(0, dtype=np.int64)
        levels = self.levels_of(track_ids)
        first = self._search(self.max_end, levels, t0, "right")
        stop = self._search(self.ts, levels, t1, "left")
        positions = expand_ranges(first, stop)
        positions = positions[self.end[positions] > t0]
        return np.sort(self.rows[positions])

    def _search(self, column: np.ndarray, levels: np.ndarray, value: int, side: Literal["left", "right"]) -> np.ndarray:
        """Per level, where ``value`` falls in ``column`` (sorted within each level)."""
        return searchsorted_segments(column, self.level_bounds, levels, np.full(len(levels), value, np.int64), side)

    def lod(self, t0: int, t1: int, buckets: int, track_ids=None) -> LodResult:
        """All levels at once: a trace with a thread per event has as many levels as slices, so
        nothing here takes a Python step per level."""
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {buckets}")
        if t1 <= t0:
            raise ValueError(f"the window must have t1 > t0, got [{t0}, {t1})")
        span = t1 - t0
        # Bucket b is [t0 + ceil(b*span/B), t0 + ceil((b+1)*span/B)): the same split that
        # floor((ts - t0) * B / span) makes, so both ways of bucketing below agree.
        exact_products = span * buckets < _INT64_LIMIT
        if exact_products:
            inner_edges = t0 + (np.arange(1, buckets, dtype=np.int64) * span + buckets - 1) // buckets
        else:  # a window of weeks at thousands of pixels: the products need Python's exact integers
            inner_edges = np.array([t0 + (k * span + buckets - 1) // buckets for k in range(1, buckets)], np.int64)
        levels = self.levels_of(track_ids)
        first = self._search(self.max_end, levels, t0, "right")
        start = self._search(self.ts, levels, t0, "left")
        stop = self._search(self.ts, levels, t1, "left")
        count = stop - start
        # Few slices in a level: bucket each one (cost proportional to the slices shown) ...
        few = np.flatnonzero((count > 0) & (count <= buckets))
        positions = expand_ranges(start[few], stop[few])
        owner = np.repeat(few, count[few])
        if exact_products:
            bucket = (self.ts[positions] - t0) * buckets // span
        else:
            bucket = np.searchsorted(inner_edges, self.ts[positions], side="right").astype(np.int64)
        run = np.ones(len(positions), dtype=bool)
        run[1:] = (owner[1:] != owner[:-1]) | (bucket[1:] != bucket[:-1])
        run_starts = np.flatnonzero(run)
        lows, level_of, ids = positions[run_starts], owner[run_starts], bucket[run_starts]
        highs = np.append(positions[run_starts[1:] - 1] + 1, positions[-1] + 1) if len(positions) else lows
        # ... many: binary-search the bucket edges (cost proportional to the pixel width).
        many = np.flatnonzero(count > buckets)
        if len(many):
            edges = len(inner_edges)
            bounds = searchsorted_segments(self.ts, self.level_bounds, np.repeat(levels[many], edges),
                                           np.tile(inner_edges, len(many)), "left").reshape(len(many), edges)
            m_lows = np.concatenate((start[many, None], bounds), axis=1).ravel()
            m_highs = np.concatenate((bounds, stop[many, None]), axis=1).ravel()
            m_ids = np.tile(np.arange(buckets, dtype=np.int64), len(many))
            m_level = np.repeat(many, buckets)
            keep = m_highs > m_lows
            lows = np.concatenate((lows, m_lows[keep]))
            highs = np.concatenate((highs, m_highs[keep]))
            ids = np.concatenate((ids, m_ids[keep]))
            level_of = np.concatenate((level_of, m_level[keep]))
            order = np.lexsort((ids, level_of))
            lows, highs, ids, level_of = lows[order], highs[order], ids[order], level_of[order]
        best = self.argmax.query(lows, highs) if len(lows) else np.zeros(0, np.int64)
        merged = highs - lows
        return self._with_straddlers(levels, first, start, t0, best, merged, ids, level_of)

    def _with_straddlers(self, levels, first, start, t0, best, merged, ids, level_of) -> LodResult:
        """Add to bucket 0 of each level the longest slice begun before t0 and still running
        there (with how many such slices there are)."""
        positions = expand_ranges(first, start)
        owner = np.repeat(np.arange(len(levels), dtype=np.int64), np.maximum(start - first, 0))
        running = self.end[positions] > t0
        positions, owner = positions[running], owner[running]
        if len(positions):
            counts = np.bincount(owner, minlength=len(levels))
            order = np.lexsort((positions, -self.dur[positions], owner))  # longest, then earliest
            lead = order[np.concatenate(([True], owner[order][1:] != owner[order][:-1]))]
            s_level, s_pos = owner[lead], positions[lead]
            s_count = counts[s_level]
            at = np.searchsorted(level_of, s_level, side="left")
            inside = np.minimum(at, max(len(level_of) - 1, 0))
            joins = (at < len(level_of)) & (level_of[inside] == s_level) & (ids[inside] == 0) if len(level_of) \
                else np.zeros(len(s_level), dtype=bool)
            at_join, pos_join = at[joins], s_pos[joins]
            longer = self.dur[pos_join] >= self.dur[best[at_join]]  # ties go to the earlier slice
            best[at_join[longer]] = pos_join[longer]
            merged[at_join] += s_count[joins]
            if not joins.all():
                # Levels whose only visible slice began before the window: add it as bucket 0 and
                # restore (level, bucket) order with one stable sort.
                alone = ~joins
                best = np.concatenate((best, s_pos[alone]))
                merged = np.concatenate((merged, s_count[alone]))
                level_of = np.concatenate((level_of, s_level[alone]))
                ids = np.concatenate((ids, np.zeros(int(alone.sum()), np.int64)))
                order = np.lexsort((ids, level_of))
                best, merged, ids = best[order], merged[order], ids[order]
        return LodResult(self.rows[best], merged.astype(np.int64), ids.astype(np.int64))


_INT64_LIMIT = 2**63
