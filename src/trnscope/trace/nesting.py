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

# Drawn levels per track. Deeper slices (9.8M identical events nest 9.8M deep) share the last
# level, where they may overlap (timeindex.py handles overlapping slices within a level); their
# parents stay exact. Without a cap, every later pass (levels, layout, drawing) costs per level.
MAX_DEPTH = 512


def capped_depth_count(depth: np.ndarray) -> int:
    """How many slices sit on the last drawn level (nested MAX_DEPTH - 1 deep or deeper)."""
    return int(np.count_nonzero(depth >= MAX_DEPTH - 1)) if len(depth) and depth.max() >= MAX_DEPTH - 1 else 0


def compute_nesting(ts: np.ndarray, dur: np.ndarray, track_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depth int32, parent int64 row or -1) for slices sorted by (track, ts, -dur); depth is at
    most MAX_DEPTH - 1."""
    depth = np.zeros(len(ts), dtype=np.int32)
    parent = np.full(len(ts), -1, dtype=np.int64)
    end = ts + dur
    for track in range(len(track_offsets) - 1):
        lo, hi = int(track_offsets[track]), int(track_offsets[track + 1])
        if hi - lo < 2:
            continue
        t_ts, t_end, t_dur = ts[lo:hi], end[lo:hi], dur[lo:hi]
        t_depth = _depth_if_nested(t_ts, t_end, t_dur)
        if t_depth is None:
            t_depth, t_parent = _stack_walk(t_ts, t_end)
        else:
            t_parent = _parents(t_depth)
        depth[lo:hi] = np.minimum(t_depth, MAX_DEPTH - 1)
        parent[lo:hi] = np.where(t_parent >= 0, t_parent + lo, -1)
    return depth, parent


def _depth_if_nested(ts: np.ndarray, end: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    n = len(ts)
    position = np.arange(n, dtype=np.int64)
    # Slices closed by the time slice i starts: every slice ending at or before ts[i] ...
    closed = np.searchsorted(np.sort(end), ts, side="right")
    # ... except zero-length slices at ts[i] sorted at or after i (they sort last among equal ts),
    # which "end" at ts[i] without having started before it.
    group_end = np.searchsorted(ts, ts, side="right")
    zero_start = _first_zero_length_at_same_ts(ts, dur, group_end)
    closed -= np.where(zero_start < group_end, group_end - np.maximum(position, zero_start), 0)
    depth = (position - closed).astype(np.int32)
    if not _levels_disjoint(ts, end, depth):
        return None
    return depth


def _first_zero_length_at_same_ts(ts: np.ndarray, dur: np.ndarray, group_end: np.ndarray) -> np.ndarray:
    """For each row: the first row of its equal-ts group that has zero duration (group end if none)."""
    zero = dur == 0
    if not zero.any():
        return group_end
    # Within an equal-ts group durations are sorted longest first, so zero-length rows form a
    # suffix; the first of them is found by counting them.
    zero_count_upto = np.concatenate(([0], np.cumsum(zero)))
    group_start = np.searchsorted(ts, ts, side="left")
    zeros_in_group = zero_count_upto[group_end] - zero_count_upto[group_start]
    return group_end - zeros_in_group


def _levels_disjoint(ts: np.ndarray, end: np.ndarray, depth: np.ndarray) -> bool:
    if depth.min() < 0:
        return False
    order = np.lexsort((ts, depth))  # stable: rows of one level stay in time order
    same_level = depth[order][1:] == depth[order][:-1]
    return bool(np.all(~same_level | (ts[order][1:] >= end[order][:-1])))


def _parents(depth: np.ndarray) -> np.ndarray:
    """Parent of row i = the last earlier row one level up (exact for properly nested slices)."""
    n = len(depth)
    position = np.arange(n, dtype=np.int64)
    key = depth.astype(np.int64) * n + position
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    wanted = (depth.astype(np.int64) - 1) * n + position
    found = np.searchsorted(sorted_key, wanted, side="left") - 1
    valid = (depth > 0) & (found >= 0)
    candidate = order[np.clip(found, 0, n - 1)]
    valid &= depth[candidate] == depth - 1
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
