"""Overlapping slices are never dropped: a trace built to overlap in every way a real one can
(random partial overlaps, a staircase where each slice overlaps the next, exact duplicates,
zero-length slices, a stack nested deeper than the drawn levels) keeps every slice, on sub-lanes
where they overlap, and every level-of-detail answer accounts for each slice in its window once."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from trnscope.analysis import load_profile
from trnscope.explorer import create_app
from trnscope.trace.nesting import MAX_DEPTH


def _events() -> list[dict]:
    rng = np.random.default_rng(18)
    spans = [("outer", 0, 2_000_000)]
    starts = np.sort(rng.integers(10, 1_000_000, 2500))
    spans += [(f"r{i % 7}", int(t), int(d)) for i, (t, d) in enumerate(zip(starts, rng.integers(1, 40_000, 2500)))]
    spans += [("stair", 1_100_000 + 10 * i, 25) for i in range(300)]  # each overlaps the next
    spans += [("dup", 1_200_000, 500)] * 50 + [("zero", 1_300_000 + i, 0) for i in range(40)]
    spans += [("deep", 1_400_000 + i, 10_000 - 2 * i) for i in range(MAX_DEPTH + 100)]  # past the drawn levels
    return [{"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "cat": "cpu_op"} for name, ts, dur in spans]


@pytest.fixture(scope="module")
def overlap(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap")
    events = _events()
    (root / "overlap.pt.trace.json").write_bytes(orjson.dumps({"traceEvents": events}))
    return root, events


def test_every_level_is_free_of_overlaps_and_parents_contain(overlap):
    root, events = overlap
    trace = load_profile(root / "overlap.pt.trace.json").trace
    s = trace.slices
    assert len(s) == len(events)  # nothing dropped when loading
    end = s.ts_ns + s.dur_ns
    for level in range(int(s.depth.max())):
        if level >= MAX_DEPTH - 1:
            break  # the last drawn level holds everything nested deeper (their parents stay exact)
        rows = np.flatnonzero(s.depth == level)
        rows = rows[np.argsort(s.ts_ns[rows], kind="stable")]
        assert np.all(s.ts_ns[rows][1:] >= end[rows][:-1]), f"level {level} has overlapping slices"
    has = s.parent >= 0
    assert np.all(s.ts_ns[s.parent[has]] <= s.ts_ns[has]) and np.all(end[s.parent[has]] >= end[has])
    assert int(np.count_nonzero(s.depth == MAX_DEPTH - 1)) > 1  # the deep stack reached the cap


@pytest.mark.parametrize("window, px", [(None, 1), (None, 7), (None, 1500), (None, 8192), ((1_099_990, 1_101_000), 8192),
                                        ((1_199_999, 1_200_001), 3), ((1_399_000, 1_412_000), 640),
                                        ((0, 500_000), 200), ((999_990, 1_000_010), 8192)])
def test_the_level_of_detail_accounts_for_every_slice(overlap, window, px):
    root, events = overlap
    with TestClient(create_app([root])) as c:
        entry = c.get("/api/entries").json()["entries"][0]["id"]
        layout = c.get(f"/api/entries/{entry}/timeline").json()
        lane = next(lane for lane in layout["lanes"] if lane["kind"] == "slices" and not lane["runtime_only"])
        origin = int(layout["origin_ns"])
        a, b = (layout["start"], layout["end"] + 1) if window is None else (w * 1000 - origin for w in window)
        lod = c.get(f"/api/entries/{entry}/lod", params={"t0": a, "t1": b, "px": px, "lanes": lane["id"]}).json()
    got = lod["lanes"][lane["id"]]
    ts = np.array([e["ts"] for e in events], dtype=np.int64) * 1000 - origin
    dur = np.array([e["dur"] for e in events], dtype=np.int64) * 1000
    inside = (ts < b) & ((ts + dur > a) | ((dur == 0) & (ts >= a)))
    # each slice in the window is drawn, or counted by the slice drawn for its pixel and level
    assert sum(got["merged"]) == int(inside.sum()), (sum(got["merged"]), int(inside.sum()))
    assert lane["depth"] == MAX_DEPTH
    # a drawn slice stands for at least itself
    assert min(got["merged"]) >= 1
