"""What each track of a trace is for: the role analyses and the explorer's lane groups rely on.

The trace model sorts tracks into broad kinds (host thread, GPU stream, device queue, counter).
Neuron profiles need finer names: the system trace puts its runtime (``neuron_rt/NC:<n>``),
hardware (``neuron_hw/NC:<n>``) and transfer lanes on the host process, so by kind they look like
host threads. Roles are decided from the lane names trnscope's system trace and Neuron Explorer
use, falling back to the track kind for any other Kineto trace.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple

import numpy as np

from ..trace import Trace, Track, TrackKind


class Role(str, Enum):
    HOST_THREAD = "host_thread"  # a framework/CPU thread: ops, runtime API calls
    DEVICE_STREAM = "device_stream"  # device work as the framework sees it: CUDA stream, Neuron Stream 0
    NEURON_RT = "neuron_rt"  # Neuron runtime calls for one NeuronCore (nrt_execute, tensor reads/writes)
    NEURON_QUEUE = "neuron_queue"  # submitted executions waiting for a busy NeuronCore
    NEURON_HW = "neuron_hw"  # hardware executions (nc_exec_running) on one NeuronCore
    TRANSFER = "transfer"  # host<->device copies
    HBM = "hbm"  # device memory usage counter
    CPU_UTIL = "cpu_util"  # host CPU utilisation counter
    HOST_MEMORY = "host_memory"  # host memory counter
    COUNTER = "counter"  # any other counter
    OTHER = "other"  # profiler spans and markers


# Host-side API calls into a device runtime or driver: Kineto activity categories.
RUNTIME_CATEGORIES = frozenset({
    "cuda_runtime", "cuda_driver", "privateuse1_runtime", "hip_runtime", "xpu_runtime", "mtia_runtime",
    "cuda_sync",
})
# CUPTI synchronisation records on a device lane: a host call waiting, not device work.
SYNC_CATEGORIES = frozenset({"cuda_sync"})
# Python stack frames (with_stack=True): part of the call tree, not operators.
FRAME_CATEGORIES = frozenset({"python_function"})
# Device spans that wrap kernels rather than being executions themselves: annotation ranges, and
# CUPTI range-profiler ranges (kernels replayed for counters; their times are not execution times).
DEVICE_ANNOTATION_CATEGORIES = frozenset({"gpu_user_annotation", "cuda_profiler_range"})

_NC = re.compile(r"\bNC:?(\d+)")
# The framework trace names each NeuronCore's device process "neuron:<n>" (as Kineto names GPUs).
_NEURON_PROCESS = re.compile(r"^neuron:(\d+)$")


class LaneInfo(NamedTuple):
    track: int
    role: Role
    neuron_core: int | None  # the NeuronCore a Neuron lane belongs to


def track_role(track: Track) -> Role:
    name = track.name or ""
    if track.kind is TrackKind.COUNTER:
        if name.endswith("hbm_usage"):
            return Role.HBM
        if name.endswith("host_cpu_util"):
            return Role.CPU_UTIL
        if name.startswith("host_memory"):
            return Role.HOST_MEMORY
        return Role.COUNTER
    if name.startswith("neuron_rt/"):
        return Role.NEURON_QUEUE if name.endswith("/exec_queue") else Role.NEURON_RT
    if name.startswith("neuron_hw/"):
        return Role.NEURON_HW
    if name.endswith("_transfers"):
        return Role.TRANSFER
    if track.kind in (TrackKind.GPU_STREAM, TrackKind.DEVICE_QUEUE):
        return Role.DEVICE_STREAM
    if track.kind is TrackKind.CPU_THREAD:
        return Role.HOST_THREAD
    return Role.OTHER


def lane_infos(trace: Trace) -> list[LaneInfo]:
    """The role of every track, in track order. Worked out once per trace (most analyses and the
    explorer's layout ask) and once per distinct (kind, name, process name): a trace may have a
    thread per event, and those share a role."""
    cached: list[LaneInfo] | None = trace.derived.get("lane_infos")  # type: ignore[assignment]
    if cached is not None:
        return cached
    decided: dict[tuple, tuple[Role, int | None]] = {}
    out: list[LaneInfo] = []
    for track in trace.tracks:
        key = (track.kind, track.name, track.process_name)
        found = decided.get(key)
        if found is None:
            found = decided[key] = _role_and_core(track)
        out.append(LaneInfo(track.id, *found))
    trace.derived["lane_infos"] = out
    return out


def _role_and_core(track: Track) -> tuple[Role, int | None]:
    role = track_role(track)
    core = None
    if role in (Role.NEURON_RT, Role.NEURON_QUEUE, Role.NEURON_HW, Role.TRANSFER, Role.HBM):
        match = _NC.search(track.name or "")
        core = int(match.group(1)) if match else None
    elif role is Role.DEVICE_STREAM:
        match = _NEURON_PROCESS.search(track.process_name or "")
        core = int(match.group(1)) if match else None
    return role, core


def extent(trace: Trace, tracks) -> tuple[int, int] | None:
    """(first start, last end) in ns of the slices, instants and counter samples on ``tracks``;
    None when they hold nothing."""
    wanted = np.zeros(len(trace.tracks), dtype=bool)
    wanted[np.asarray(sorted(tracks), dtype=np.int64)] = True
    starts, ends = [], []
    s = trace.slices
    if len(s):
        mine = wanted[s.track]
        if mine.any():
            starts.append(int(s.ts_ns[mine].min()))
            ends.append(int(s.end_ns[mine].max()))
    i = trace.instants
    if len(i):
        mine = wanted[i.track]
        if mine.any():
            starts.append(int(i.ts_ns[mine].min()))
            ends.append(int(i.ts_ns[mine].max()))
    c = trace.counters
    if len(c):
        mine = wanted[c.series_track[c.series]]
        if mine.any():
            starts.append(int(c.ts_ns[mine].min()))
            ends.append(int(c.ts_ns[mine].max()))
    return (min(starts), max(ends)) if starts else None


def activity_extent(trace: Trace) -> tuple[int, int]:
    """The span of what the program did: every lane but the profiler's own bookkeeping (its
    session span and markers such as "Record Window End", role OTHER) and the host CPU and memory
    samples. Those start at the profiler's
    start, schedule warm-up steps included, and end wherever the profiler stopped, so the whole
    trace's span can be mostly empty. The whole trace when only bookkeeping is left."""
    # host CPU and memory counters are sampled for the whole session, busy or not
    tracks = [info.track for info in lane_infos(trace)
              if info.role not in (Role.OTHER, Role.CPU_UTIL, Role.HOST_MEMORY)]
    found = extent(trace, tracks) if tracks else None
    return found if found is not None else (trace.start_ns, trace.end_ns)
