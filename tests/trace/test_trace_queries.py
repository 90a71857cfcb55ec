"""window() and lod() against brute force on random slices, nested and badly nested."""

from __future__ import annotations

import numpy as np
import pytest

from trnscope.trace import TraceFormatError  # noqa: F401  (the package imports cleanly)
from trnscope.trace.args import ArgsColumn
from trnscope.trace.builder import TraceBuilder
from trnscope.trace.nesting import _stack_walk, compute_nesting
from trnscope.trace.rangemax import RangeArgMax


def random_trace(seed: int, slices: int = 3000, tracks: int = 4, nested: bool = True):
    """Slices on several tracks: properly nested call trees, or arbitrary overlapping intervals."""
    rng = np.random.default_rng(seed)
    builder = TraceBuilder(source=f"random-{seed}")
    ts_all, dur_all, track_all = [], [], []
    for t in range(tracks):
        track = builder.track_for(1, t)
        count = slices // tracks
        if nested:
            ts, dur = _random_call_tree(rng, count)
        else:
            ts = rng.integers(0, 1_000_000, count)
            dur = rng.integers(0, 50_000, count) * (rng.random(count) < 0.9)
        ts_all.append(ts)
        dur_all.append(dur)
        track_all.append(np.full(len(ts), track))
    ts, dur, track = (np.concatenate(a) for a in (ts_all, dur_all, track_all))
    names = [builder.intern(f"op{i % 7}") for i in range(len(ts))]
    builder.add_slices(track, ts, dur, names, [builder.intern("cpu_op")] * len(ts), [b""] * len(ts))
    return builder.finish()


def _random_call_tree(rng, count):
    ts, dur = [], []

    def fill(start, end, depth):
        cursor = start
        while len(ts) < count and cursor < end:
            gap = int(rng.integers(0, 200))
            length = int(rng.integers(0, max(1, (end - cursor) // 2)))
            begin = cursor + gap
            if begin + length > end:
                break
            ts.append(begin)
            dur.append(length)
            if depth < 6 and length > 20 and rng.random() < 0.6:
                fill(begin, begin + length, depth + 1)
            cursor = begin + length

    top = 0
    while len(ts) < count:
        length = int(rng.integers(100, 20_000))
        fill_start = top + int(rng.integers(0, 500))
        ts.append(fill_start)
        dur.append(length)
        fill(fill_start, fill_start + length, 1)
        top = fill_start + length
    return np.array(ts[:count]), np.array(dur[:count])


def brute_window(trace, t0, t1, track_ids=None):
    s = trace.slices
    end = s.ts_ns + np.maximum(s.dur_ns, 1)
    hit = (s.ts_ns < t1) & (end > t0)
    if track_ids is not None:
        hit &= np.isin(s.track, track_ids)
    return np.flatnonzero(hit)


@pytest.mark.parametrize("nested", [True, False], ids=["nested", "overlapping"])
@pytest.mark.parametrize("seed", range(3))
def test_window_matches_brute_force(seed, nested):
    trace = random_trace(seed, nested=nested)
    rng = np.random.default_rng(100 + seed)
    lo, hi = trace.start_ns, trace.end_ns
    for _ in range(60):
        t0 = int(rng.integers(lo - 1000, hi))
        t1 = t0 + int(rng.integers(1, (hi - lo) // 3))
        tracks = None if rng.random() < 0.5 else rng.choice(len(trace.tracks), 2, replace=False)
        assert np.array_equal(trace.window(t0, t1, tracks), brute_window(trace, t0, t1, tracks))
    assert len(trace.window(5, 5)) == 0


def test_window_finds_zero_length_slices_and_touching_edges():
    builder = TraceBuilder()
    t = builder.track_for(1, 1)
    n = builder.intern("x")
    builder.add_slices([t, t, t], [0, 10, 10], [10, 0, 5], [n] * 3, [n] * 3, [b""] * 3)
    trace = builder.finish()
    s = trace.slices

    def rows(t0, t1):
        found = trace.window(t0, t1)
        return sorted(zip(s.ts_ns[found].tolist(), s.dur_ns[found].tolist()))

    assert rows(10, 11) == [(10, 0), (10, 5)]  # [0,10) ends where the window starts
    assert rows(9, 10) == [(0, 10)]
    assert rows(0, 100) == [(0, 10), (10, 0), (10, 5)]


def brute_lod(trace, t0, t1, buckets, track_ids=None):
    """{(track, depth, bucket): (max dur, count)} by definition."""
    s = trace.slices
    rows = brute_window(trace, t0, t1, track_ids)
    out: dict = {}
    for row in rows:
        start = max(int(s.ts_ns[row]), t0)
        bucket = (start - t0) * buckets // (t1 - t0)
        key = (int(s.track[row]), int(s.depth[row]), bucket)
        best, count = out.get(key, (-1, 0))
        out[key] = (max(best, int(s.dur_ns[row])), count + 1)
    return out


@pytest.mark.parametrize("nested", [True, False], ids=["nested", "overlapping"])
@pytest.mark.parametrize("seed", range(3))
def test_lod_keeps_the_longest_slice_per_bucket(seed, nested):
    trace = random_trace(seed, nested=nested)
    s = trace.slices
    rng = np.random.default_rng(200 + seed)
    lo, hi = trace.start_ns, trace.end_ns
    for _ in range(30):
        t0 = int(rng.integers(lo - 1000, hi))
        t1 = t0 + int(rng.integers(1, hi - lo))
        buckets = int(rng.choice([1, 3, 17, 200, 1600]))
        tracks = None if rng.random() < 0.5 else rng.choice(len(trace.tracks), 2, replace=False)
        result = trace.lod(t0, t1, buckets, tracks)
        expected = brute_lod(trace, t0, t1, buckets, tracks)
        got = {}
        for row, merged, bucket in zip(result.rows, result.merged, result.bucket):
            key = (int(s.track[row]), int(s.depth[row]), int(bucket))
            assert key not in got, "two representatives for one bucket"
            got[key] = (int(s.dur_ns[row]), int(merged))
        assert got == expected
        per_level = {}
        for track, depth, _ in got:
            per_level[(track, depth)] = per_level.get((track, depth), 0) + 1
        assert all(count <= buckets for count in per_level.values())
        # Every representative really overlaps the window.
        assert np.all(s.ts_ns[result.rows] < t1)
        assert np.all(s.ts_ns[result.rows] + np.maximum(s.dur_ns[result.rows], 1) > t0)


def test_lod_collapses_a_million_slices_to_the_pixel_width():
    rng = np.random.default_rng(7)
    builder = TraceBuilder()
    track = builder.track_for(1, 1)
    n = 1_000_000
    ts = np.cumsum(rng.integers(1, 100, n))
    dur = np.minimum(rng.integers(0, 100, n), np.diff(np.append(ts, ts[-1] + 100)))
    name = builder.intern("k")
    builder.add_slices(np.full(n, track), ts, dur, np.full(n, name), np.full(n, name), [b""] * n)
    trace = builder.finish()
    result = trace.lod(trace.start_ns, trace.end_ns, 1000)
    assert len(result) == 1000
    assert result.merged.sum() == n
    longest = np.argmax(trace.slices.dur_ns)
    assert trace.slices.dur_ns[result.rows].max() == trace.slices.dur_ns[longest]


def test_lod_rejects_empty_windows_and_bucket_counts():
    trace = random_trace(0, slices=40)
    with pytest.raises(ValueError):
        trace.lod(10, 10, 100)
    with pytest.raises(ValueError):
        trace.lod(0, 10, 0)


@pytest.mark.parametrize("seed", range(4))
def test_nesting_matches_a_stack_walk(seed):
    trace = random_trace(seed, nested=True)
    s = trace.slices
    for t in range(len(trace.tracks)):
        rows = s.rows_of_track(t)
        ts, end = s.ts_ns[rows.start : rows.stop], s.end_ns[rows.start : rows.stop]
        depth, parent = _stack_walk(ts, end)
        assert np.array_equal(s.depth[rows.start : rows.stop], depth)
        expected_parent = np.where(parent >= 0, parent + rows.start, -1)
        assert np.array_equal(s.parent[rows.start : rows.stop], expected_parent)


@pytest.mark.parametrize("seed", range(4))
def test_no_two_slices_of_one_level_overlap(seed):
    trace = random_trace(seed, nested=False)
    s = trace.slices
    order = np.lexsort((s.ts_ns, s.depth, s.track))
    same = (s.track[order][1:] == s.track[order][:-1]) & (s.depth[order][1:] == s.depth[order][:-1])
    assert np.all(~same | (s.ts_ns[order][1:] >= s.end_ns[order][:-1]))


def test_nesting_handles_equal_starts_and_zero_lengths():
    ts = np.array([0, 0, 0, 5, 5, 5, 10])
    dur = np.array([10, 10, 5, 0, 0, 0, 0])
    depth, parent = compute_nesting(ts, dur, np.array([0, len(ts)]))
    assert depth.tolist() == [0, 1, 2, 2, 2, 2, 0]
    assert parent.tolist() == [-1, 0, 1, 1, 1, 1, -1]


def test_range_argmax_matches_brute_force():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 5, 8, 13, 100, 1000):
        values = rng.integers(0, 20, n)
        tree = RangeArgMax(values)
        lo = rng.integers(0, n, 300)
        hi = np.minimum(n, lo + 1 + rng.integers(0, n, 300))
        expected = [l + int(np.argmax(values[l:h])) for l, h in zip(lo, hi)]
        assert tree.query(lo, hi).tolist() == expected


def test_args_column_survives_reordering():
    column = ArgsColumn.from_dicts([{"a": i} if i % 3 else None for i in range(10)])
    taken = column.take(np.array([9, 1, 0]))
    assert [taken.get(i) for i in range(3)] == [{}, {"a": 1}, {}]
    assert column.get_many([2, 4]) == [{"a": 2}, {"a": 4}]
    assert column.text_bytes == sum(len(b'{"a":1}') for i in range(10) if i % 3)
