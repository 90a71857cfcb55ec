"""Every real Kineto trace in shared/data/kineto-traces reads correctly."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import gzip
import json

import numpy as np
import pytest

from trnscope.trace import TrackKind

from trace_testdata import FIXTURE_FILES, FIXTURES, fixture_ids, naive_events

ALEXNET = "critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
NS_RESOLUTION = "ns_resolution_trace_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def test_fixture_folder_is_present():
    assert FIXTURE_FILES, f"no Kineto traces found in {FIXTURES} (shared/ must sit beside the repo)"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_event_counts_match_a_naive_count(path, fixture_traces):
    trace = fixture_traces[path.name]
    events = naive_events(path)
    phases = Counter(e.get("ph") for e in events)
    assert len(trace.slices) == phases["X"] + phases["B"]
    assert len(trace.instants) == phases["i"] + phases["I"]
    expected = Counter(e["name"] for e in events if e.get("ph") == "X")
    assert Counter(trace.slice_names()) == expected


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_slices_nest_inside_their_parents(path, fixture_traces):
    s = fixture_traces[path.name].slices
    has_parent = s.parent >= 0
    parent = s.parent[has_parent]
    assert np.all(s.depth[has_parent] == s.depth[parent] + 1)
    assert np.all(s.track[has_parent] == s.track[parent])
    assert np.all(s.ts_ns[parent] <= s.ts_ns[has_parent])
    # Track rows are contiguous and time-ordered.
    for t in range(len(s.track_offsets) - 1):
        rows = s.rows_of_track(t)
        assert np.all(s.track[rows.start : rows.stop] == t)
        assert np.all(np.diff(s.ts_ns[rows.start : rows.stop]) >= 0)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_ids(FIXTURE_FILES))
def test_track_kinds_follow_the_lanes(path, fixture_traces):
    trace = fixture_traces[path.name]
    s = trace.slices
    cats = trace.strings.lookup(s.cat)
    for track in trace.tracks:
        rows = s.rows_of_track(track.id)
        track_cats = set(cats[rows.start : rows.stop])
        if track_cats & GPU_CATEGORIES:
            assert track.kind is TrackKind.GPU_STREAM, track
        if track_cats & {"cpu_op", "cuda_runtime", "python_function"}:
            assert track.kind is TrackKind.CPU_THREAD, track


def test_gpu_streams_and_cpu_threads_are_told_apart(fixture_traces):
    trace = fixture_traces[ALEXNET]
    streams = trace.tracks_of_kind(TrackKind.GPU_STREAM)
    threads = trace.tracks_of_kind(TrackKind.CPU_THREAD)
    assert {t.name.strip() for t in streams} >= {"stream 7", "stream 20"}
    assert all(t.process_labels.startswith("GPU") for t in streams)
    assert [t.tid for t in threads] == [2869224]
    # Display order: the CPU process (sort index = pid) before the GPU (16777216 + device).
    assert max(t.id for t in threads) < min(t.id for t in streams)


def test_ac2g_flows_are_paired_launch_to_kernel(fixture_traces):
    trace = fixture_traces[ALEXNET]
    events = naive_events(FIXTURES / ALEXNET)
    ends = Counter((e["cat"], e["id"]) for e in events if e.get("ph") in ("s", "f"))
    both_ends = {key for key in ends if ends[key] == 2}
    assert len(trace.flows) == len(both_ends) == 139
    f, s = trace.flows, trace.slices
    assert set(trace.strings.lookup(f.cat)) == {"ac2g"}
    start_cats = Counter(trace.strings.lookup(s.cat[f.start_row]))
    end_cats = Counter(trace.strings.lookup(s.cat[f.end_row]))
    assert set(start_cats) == {"cuda_runtime"}
    assert set(end_cats) <= GPU_CATEGORIES | {"cuda_sync"}
    start_kinds = {trace.tracks[t].kind for t in s.track[f.start_row]}
    end_kinds = {trace.tracks[t].kind for t in s.track[f.end_row]}
    assert start_kinds == {TrackKind.CPU_THREAD} and end_kinds == {TrackKind.GPU_STREAM}
    # The launch encloses the flow start; the device op starts where the flow ends.
    assert np.all(s.ts_ns[f.start_row] <= f.start_ts_ns)
    zero_length = s.dur_ns[f.start_row] == 0  # a zero-length launch contains only its own start
    assert np.all((f.start_ts_ns < s.end_ns[f.start_row]) | zero_length)
    assert np.all(s.ts_ns[f.end_row] == f.end_ts_ns)
    # Kineto's correlation id is the flow id.
    for row in range(len(f)):
        assert trace.slice_args(int(f.end_row[row]))["correlation"] == f.flow_id[row]


def test_flow_start_binds_to_the_deepest_enclosing_slice(fixture_traces):
    trace = fixture_traces[NS_RESOLUTION]
    f, s = trace.flows, trace.slices
    ac2g = trace.strings.id_of("ac2g")
    launches = f.start_row[f.cat == ac2g]
    # cudaLaunchKernel sits inside the aten op that called it; the arrow leaves the launch.
    assert set(trace.strings.lookup(s.cat[launches])) == {"cuda_runtime"}
    fwdbwd = f.cat == trace.strings.id_of("fwdbwd")
    assert fwdbwd.sum() == 905
    assert set(trace.strings.lookup(s.cat[f.start_row[fwdbwd]])) == {"cpu_op"}


def test_nanosecond_timestamps_are_exact(fixture_traces):
    trace = fixture_traces[NS_RESOLUTION]
    with gzip.open(FIXTURES / NS_RESOLUTION, "rb") as handle:
        events = json.load(handle, parse_float=Decimal)["traceEvents"]
    expected = sorted(int(Decimal(e["ts"]) * 1000) for e in events if e.get("ph") == "X")
    assert sorted(trace.slices.ts_ns.tolist()) == expected
    expected_dur = sorted(int(Decimal(e["dur"]) * 1000) for e in events if e.get("ph") == "X")
    assert sorted(trace.slices.dur_ns.tolist()) == expected_dur
    # With exact integers no CPU op pokes out of its parent (HTA needed rounding tricks for this).
    s = trace.slices
    child = np.flatnonzero(s.parent >= 0)
    assert np.all(s.end_ns[child] <= s.end_ns[s.parent[child]])


def test_metadata_keeps_the_top_level_keys(fixture_traces):
    trace = fixture_traces[NS_RESOLUTION]
    assert trace.metadata["displayTimeUnit"] == "ns"
    assert trace.metadata["distributedInfo"]["rank"] == 0
    assert trace.metadata["deviceProperties"][0]["name"] == "Tesla V100-SXM2-32GB"
    assert "traceEvents" not in trace.metadata
    cpu_only = fixture_traces["cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"]
    assert cpu_only.metadata["baseTimeNanoseconds"] > 0
    assert cpu_only.metadata["distributedInfo"]["world_size"] == 300


def test_thread_names_and_later_renames(fixture_traces):
    trace = fixture_traces[NS_RESOLUTION]
    names = {t.tid: t.name for t in trace.tracks_of_kind(TrackKind.CPU_THREAD)}
    # Kineto named thread 1262 twice; as in chrome://tracing the last name wins.
    assert names[1262] == "thread 1262 (pt_autograd_0)"


def test_args_are_decoded_on_demand(fixture_traces):
    trace = fixture_traces[ALEXNET]
    events = [e for e in naive_events(FIXTURES / ALEXNET) if e.get("ph") == "X"]
    by_key = {(e["name"], round(e["ts"] * 1000), e["dur"] * 1000): e.get("args", {}) for e in events}
    s = trace.slices
    for row in range(0, len(s), 37):
        key = (trace.strings[int(s.name[row])], int(s.ts_ns[row]), int(s.dur_ns[row]))
        assert trace.slice_args(row) == by_key[key]
    assert trace.slices.args.get_many([0, 5, 3]) == [trace.slice_args(r) for r in (0, 5, 3)]
    kernels = np.flatnonzero(s.cat == trace.strings.id_of("kernel"))
    expected_ids = [e["args"]["correlation"] for e in events if e.get("cat") == "kernel"]
    assert sorted(trace.slice_arg_values("correlation", kernels)) == sorted(expected_ids)
