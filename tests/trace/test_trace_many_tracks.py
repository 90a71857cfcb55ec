"""Traces with many tracks (a thread per event): the per-track work is done for all tracks at once,
and must give what each track gives on its own (issue 19, item 7)."""

from __future__ import annotations

import numpy as np
import pytest

from trnscope.trace.nesting import compute_nesting
from trnscope.trace.segments import LONG, searchsorted_segments
from trnscope.trace.tables import SliceTable
from trnscope.trace.timeindex import SliceIndex


@pytest.mark.parametrize("side", ["left", "right"])
def test_segmented_search_is_numpys_search_in_each_segment(side):
    rng = np.random.default_rng(7)
    lengths = np.concatenate((rng.integers(0, 40, 300), [LONG + 5, 0, 1, 2 * LONG]))  # short and long ones
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    a = np.concatenate([np.sort(rng.integers(0, 100, k)) for k in lengths])
    segment = rng.integers(0, len(lengths), 5000)
    values = rng.integers(-5, 105, 5000)
    want = [bounds[s] + np.searchsorted(a[bounds[s]:bounds[s + 1]], v, side=side) for s, v in zip(segment, values)]
    assert searchsorted_segments(a, bounds, segment, values, side).tolist() == want
    order = np.argsort(segment, kind="stable")  # sorted queries take the per-run path for long segments
    assert searchsorted_segments(a, bounds, segment[order], values[order], side).tolist() == [want[i] for i in order]


def random_slices(rng, tracks: int, n: int):
    track = np.sort(rng.integers(0, tracks, n))
    ts = rng.integers(0, 200, n)
    dur = rng.integers(0, 60, n) * (rng.random(n) < 0.85)
    order = np.lexsort((-dur, ts, track))
    ts, dur, track = ts[order], dur[order], track[order]
    offsets = np.searchsorted(track, np.arange(tracks + 1))
    return ts, dur, track, offsets


def test_nesting_of_all_tracks_at_once_is_each_tracks_own():
    rng = np.random.default_rng(11)
    for _ in range(40):
        ts, dur, track, offsets = random_slices(rng, int(rng.integers(1, 30)), int(rng.integers(0, 400)))
        depth, parent = compute_nesting(ts, dur, offsets)
        for t in range(len(offsets) - 1):
            lo, hi = offsets[t], offsets[t + 1]
            own_depth, own_parent = compute_nesting(ts[lo:hi], dur[lo:hi], np.array([0, hi - lo]))
            assert depth[lo:hi].tolist() == own_depth.tolist()
            assert parent[lo:hi].tolist() == np.where(own_parent >= 0, own_parent + lo, -1).tolist()


def test_a_thread_per_event_nests_nothing():
    n = 50_000
    depth, parent = compute_nesting(np.arange(n), np.full(n, 5), np.arange(n + 1))
    assert not depth.any() and (parent == -1).all()


def test_level_of_detail_over_many_tracks_is_each_tracks_own():
    rng = np.random.default_rng(5)
    for _ in range(30):
        tracks = int(rng.integers(1, 40))
        ts, dur, track, offsets = random_slices(rng, tracks, int(rng.integers(1, 500)))
        depth, parent = compute_nesting(ts, dur, offsets)
        zeros = np.zeros(len(ts), np.int32)
        index = SliceIndex(SliceTable(ts, dur, track.astype(np.int32), zeros, zeros, depth, parent, None, offsets),
                           tracks)
        t0 = int(rng.integers(-20, 150))
        t1 = t0 + int(rng.integers(1, 300))
        buckets = int(rng.integers(1, 50))
        whole = index.lod(t0, t1, buckets)
        rows, merged, bucket = [], [], []
        for t in range(tracks):
            own = index.lod(t0, t1, buckets, [t])
            rows += own.rows.tolist()
            merged += own.merged.tolist()
            bucket += own.bucket.tolist()
        assert (whole.rows.tolist(), whole.merged.tolist(), whole.bucket.tolist()) == (rows, merged, bucket)
        window = index.window(t0, t1)
        assert window.tolist() == sorted(r for t in range(tracks) for r in index.window(t0, t1, [t]).tolist())
