"""Binary search inside many sorted segments of one array at once.

A trace's columns are sorted per track or per nesting level, not as a whole, so a question such as
"where does t0 fall in each of these 200,000 levels" is one ``np.searchsorted`` per segment when
asked segment by segment: a Python step per track, which is what made a trace with one event on
each of 200k threads open 20x slower than the same events on 10 threads. Here all queries advance
together, one numpy step per halving (about log2 of the longest small segment), and the few long
segments (at most ``len(a) / LONG`` of them) get numpy's own search.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

# Segments at least this long are searched with np.searchsorted one by one: there can be no more
# than len(a) / LONG of them, and the vector bisection needs one step per halving of the longest.
LONG = 4096


def searchsorted_segments(a: np.ndarray, bounds: np.ndarray, segment: np.ndarray, values: np.ndarray,
                          side: Literal["left", "right"] = "left") -> np.ndarray:
    """For each query i: ``bounds[s] + np.searchsorted(a[bounds[s]:bounds[s + 1]], values[i], side)``
    with ``s = segment[i]``; ``a`` is sorted within every segment. Returns int64 positions in ``a``."""
    segment = np.asarray(segment, dtype=np.int64)
    values = np.asarray(values)
    lo = np.asarray(bounds, dtype=np.int64)[segment]
    hi = np.asarray(bounds, dtype=np.int64)[segment + 1]
    out = lo.copy()
    if not len(segment):
        return out
    long = (hi - lo) >= LONG
    if long.any():
        ordered = _sorted(segment)
        for s in np.unique(segment[long]).tolist():
            mine = _run(segment, s) if ordered else np.flatnonzero(segment == s)
            start, stop = int(bounds[s]), int(bounds[s + 1])
            out[mine] = start + np.searchsorted(a[start:stop], values[mine], side=side)
        short = np.flatnonzero(~long)
    else:
        short = np.arange(len(segment))
    if len(short):
        out[short] = _bisect(a, lo[short], hi[short], values[short], side)
    return out


def _bisect(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, values: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
    lo, hi = lo.copy(), hi.copy()
    active = np.flatnonzero(lo < hi)
    while len(active):
        low, h = lo[active], hi[active]
        mid = (low + h) >> 1
        right = a[mid] < values[active] if side == "left" else a[mid] <= values[active]
        lo[active] = np.where(right, mid + 1, low)
        hi[active] = np.where(right, h, mid)
        active = active[lo[active] < hi[active]]
    return lo


def _sorted(segment: np.ndarray) -> bool:
    return bool(len(segment) < 2 or np.all(segment[1:] >= segment[:-1]))


def _run(segment: np.ndarray, s: int) -> np.ndarray:
    return np.arange(np.searchsorted(segment, s, side="left"), np.searchsorted(segment, s, side="right"))


def expand_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, e) for each pair, without a Python loop."""
    starts, stops = np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64)
    lengths = stops - starts
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(offsets - starts, lengths)
