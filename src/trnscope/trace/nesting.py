"""Nesting depth and parent of every slice within its track.

Slices must already be sorted by (track, ts, longest first). For properly nested slices the depth
of slice i is the number of earlier slices still open when it starts, which numpy computes for a
whole track at once from sorted end times. Tracks whose slices overlap without nesting (possible
on device lanes, with clock skew, or with ``with_stack=True``, where a ``record_function`` starts
inside the Python frame that enters it and ends inside the one that exits it) fail the check that
every depth level is free of overlaps; only those are redone with a stack walk. There a slice's
parent is the deepest slice that contains it whole, never one it merely overlaps, and it is drawn on
the first level below its parent that is free for its whole interval, so no two slices at the same
depth ever overlap (the queries in timeindex.py rely on that) and a partial overlap does not push
everything after it one level deeper.
"""

from __future__ import annotations

import numpy as np

from .segments import searchsorted_segments

# Drawn levels per track. Deeper slices (9.8M identical events nest 9.8M deep) share the last
# level, where they may overlap (timeindex.py handles overlapping slices within a level); their
# parents stay exact. Without a cap, every later pass (levels, layout, drawing) costs per level.
MAX_DEPTH = 512


def capped_depth_count(depth: np.ndarray) -> int:
    """How many slices sit on the last drawn level (nested MAX_DEPTH - 1 deep or deeper)."""
    return int(np.count_nonzero(depth >= MAX_DEPTH - 1)) if len(depth) and depth.max() >= MAX_DEPTH - 1 else 0


def compute_nesting(ts: np.ndarray, dur: np.ndarray, track_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depth int32, parent int64 row or -1) for slices sorted by (track, ts, -dur); depth is at
    most MAX_DEPTH - 1. Every track is done at once (no Python step per track: a trace may have a
    thread per event); only tracks whose slices overlap without nesting are walked one by one."""
    n = len(ts)
    depth = np.zeros(n, dtype=np.int32)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return depth, parent
    track_offsets = np.asarray(track_offsets, dtype=np.int64)
    track_of = np.repeat(np.arange(len(track_offsets) - 1, dtype=np.int64), np.diff(track_offsets))
    end = ts + dur
    full_depth = _depth_if_nested(ts, end, dur, track_of, track_offsets)
    parent[:] = _parents(full_depth, track_of)
    for track in _overlapping_tracks(ts, end, full_depth, track_of).tolist():
        lo, hi = int(track_offsets[track]), int(track_offsets[track + 1])
        t_depth, t_parent = _stack_walk(ts[lo:hi], end[lo:hi])
        full_depth[lo:hi] = t_depth
        parent[lo:hi] = np.where(t_parent >= 0, t_parent + lo, -1)
    np.minimum(full_depth, MAX_DEPTH - 1, out=depth)
    return depth, parent


def _depth_if_nested(ts: np.ndarray, end: np.ndarray, dur: np.ndarray, track_of: np.ndarray,
                     track_offsets: np.ndarray) -> np.ndarray:
    """Depth of every slice if its track is properly nested: the number of earlier slices of the
    track still open when it starts (int64; wrong, possibly negative, on tracks that are not)."""
    n = len(ts)
    row = np.arange(n, dtype=np.int64)
    # Slices closed by the time slice i starts: every slice of its track ending at or before ts[i] ...
    ends_sorted = end[np.lexsort((end, track_of))]
    closed = searchsorted_segments(ends_sorted, track_offsets, track_of, ts, side="right")
    # ... except zero-length slices at ts[i] sorted at or after i (they sort last among equal ts),
    # which "end" at ts[i] without having started before it.
    zero = dur == 0
    if zero.any():
        new_group = np.ones(n, dtype=bool)
        new_group[1:] = (track_of[1:] != track_of[:-1]) | (ts[1:] != ts[:-1])
        starts = np.flatnonzero(new_group)
        group = np.cumsum(new_group) - 1
        group_start = starts[group]
        group_end = np.append(starts[1:], n)[group]
        # Within an equal-ts group durations are sorted longest first, so zero-length rows form a
        # suffix; the first of them is found by counting them.
        zeros_upto = np.concatenate(([0], np.cumsum(zero)))
        zero_start = group_end - (zeros_upto[group_end] - zeros_upto[group_start])
        closed -= np.where(zero_start < group_end, group_end - np.maximum(row, zero_start), 0)
    return row - closed


def _overlapping_tracks(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, track_of: np.ndarray) -> np.ndarray:
    """Tracks where the nested depths put overlapping slices on one level (or went negative)."""
    order = np.lexsort((ts, depth, track_of))  # stable: rows of one level stay in time order
    t, d = track_of[order], depth[order]
    same_level = (t[1:] == t[:-1]) & (d[1:] == d[:-1])
    clash = same_level & (ts[order][1:] < end[order][:-1])
    bad = np.concatenate((t[1:][clash], track_of[depth < 0]))
    return np.unique(bad)


def _parents(depth: np.ndarray, track_of: np.ndarray) -> np.ndarray:
    """Parent of row i = the last earlier row of its track one level up (exact for properly
    nested slices)."""
    n = len(depth)
    position = np.arange(n, dtype=np.int64)
    key = depth * n + position
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    found = np.searchsorted(sorted_key, key - n, side="left") - 1
    candidate = order[np.clip(found, 0, n - 1)]
    valid = (depth > 0) & (found >= 0) & (depth[candidate] == depth - 1) & (track_of[candidate] == track_of)
    return np.where(valid, candidate, -1)


def _stack_walk(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(ts)
    depth = np.zeros(n, dtype=np.int32)
    parent = np.full(n, -1, dtype=np.int64)
    starts, ends = ts.tolist(), end.tolist()
    depths = [0] * n
    open_rows: list[int] = []  # slices open at the current start, in start order
    level_free_at: list[int] = []  # per level, the end of the last slice drawn there
    for row in range(n):
        start, stop = starts[row], ends[row]
        while open_rows and ends[open_rows[-1]] <= start:
            open_rows.pop()
        # The deepest open slice that contains this one whole. A slice that outlived the frame it
        # started in is not a child of that frame (nor is anything that starts inside it).
        owner = -1
        k = len(open_rows) - 1
        while k >= 0:
            candidate = open_rows[k]
            candidate_end = ends[candidate]
            if candidate_end <= start:
                del open_rows[k]  # ended while a longer slice above it kept it on the stack
            elif candidate_end >= stop:
                owner = candidate
                break
            k -= 1
        level = min(depths[owner] + 1, MAX_DEPTH - 1) if owner >= 0 else 0
        while level < MAX_DEPTH - 1 and level < len(level_free_at) and level_free_at[level] > start:
            level += 1
        if level == len(level_free_at):
            level_free_at.append(stop)
        else:
            level_free_at[level] = max(level_free_at[level], stop)
        depths[row] = level
        parent[row] = owner
        open_rows.append(row)
    depth[:] = depths
    return depth, parent
