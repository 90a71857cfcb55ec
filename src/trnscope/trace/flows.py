"""Flow events -> arrows between slice rows, resolved once at load time.

Chrome/Kineto write a flow as events at points in time on a thread: ``s`` (start), optional ``t``
(steps) and ``f`` (finish), sharing a category and an id. Binding follows the Chrome trace format
as Kineto uses it: ``s`` and ``t`` attach to the slice enclosing their timestamp on their thread
(the deepest one: for a CUDA launch that is ``cudaLaunchKernel``, not the ``aten::`` op around it);
``f`` with ``"bp": "e"`` attaches to the enclosing slice too, and ``f`` without it to the next
slice starting at or after its timestamp.
"""

from __future__ import annotations

import numpy as np

from .tables import SliceTable

PHASE_START, PHASE_STEP, PHASE_FINISH = 0, 1, 2


def bind_to_slices(slices: SliceTable, track: np.ndarray, ts: np.ndarray, next_slice: np.ndarray) -> np.ndarray:
    """Slice row for each flow endpoint, -1 where no slice qualifies."""
    rows = np.full(len(ts), -1, dtype=np.int64)
    offsets = slices.track_offsets
    for t in np.unique(track).tolist():
        mine = np.flatnonzero(track == t)
        lo, hi = int(offsets[t]), int(offsets[t + 1])
        if lo == hi:
            continue
        starts = slices.ts_ns[lo:hi]
        want_next = next_slice[mine]
        points = ts[mine]
        found = np.where(
            want_next,
            lo + np.searchsorted(starts, points, side="left"),
            lo + np.searchsorted(starts, points, side="right") - 1,
        )
        found = np.where((found >= lo) & (found < hi), found, -1)
        rows[mine] = found
        enclosing = mine[~want_next]
        rows[enclosing] = _climb_to_enclosing(slices, rows[enclosing], ts[enclosing])
    return rows


def _climb_to_enclosing(slices: SliceTable, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
    """From the last slice starting at or before each point, go up through parents until one
    contains the point (a zero-length slice contains only its own timestamp)."""
    rows = rows.copy()
    pending = np.flatnonzero(rows >= 0)
    while len(pending):
        r = rows[pending]
        start, dur = slices.ts_ns[r], slices.dur_ns[r]
        p = points[pending]
        inside = (start <= p) & ((p < start + dur) | ((dur == 0) & (p == start)))
        outside = pending[~inside]
        rows[outside] = slices.parent[rows[outside]]
        pending = outside[rows[outside] >= 0]
    return rows


def pair_flow_events(
    cat: np.ndarray, flow_id: np.ndarray, phase: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(from, to) event indices of the arrows in a set of flow events.

    Flow events belong together when they share category and id (Kineto reuses small ids across
    categories). Events of one flow are taken in time order; each s or t links to the following
    t or f. At equal times an f comes first (it closes the previous use of the id before an s
    reuses it), which also makes a chain written as separate s/f pairs read back as the same
    links. A flow with exactly one s and one f is linked whatever their times say, since clock
    skew between host and device can put a kernel "before" its launch. Events that link to
    nothing are unpaired (the trace holds only one end).
    """
    n = len(flow_id)
    if n < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    rank_at_equal_ts = PHASE_FINISH - phase
    order = np.lexsort((np.arange(n), rank_at_equal_ts, ts, flow_id, cat))
    c, i, ph = cat[order], flow_id[order], phase[order]
    same_key = (c[1:] == c[:-1]) & (i[1:] == i[:-1])
    key = np.concatenate(([0], np.cumsum(~same_key)))
    key_size = np.bincount(key)[key]
    chained = same_key & (ph[:-1] != PHASE_FINISH) & (ph[1:] != PHASE_START)
    swapped = same_key & (key_size[:-1] == 2) & (ph[:-1] == PHASE_FINISH) & (ph[1:] == PHASE_START)
    first, second = order[:-1], order[1:]
    source = np.concatenate((first[chained], second[swapped]))
    target = np.concatenate((second[chained], first[swapped]))
    return source.astype(np.int64), target.astype(np.int64)
