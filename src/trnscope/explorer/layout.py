"""How a trace's tracks are shown: lanes, grouped and ordered as Neuron Explorer groups them.

A lane is one row block on screen: a slice track (all its nesting levels), a counter track, or a
*runtime lane*, a derived lane that repeats only the runtime API calls of a host thread (cuda*,
nrt_*), as Nsight Systems shows "CUDA API" under each thread. Lanes are grouped:

* Neuron profiles: framework threads, framework device streams, neuron_rt and neuron_hw per
  NeuronCore, host<->device transfers, HBM usage, host CPU and memory;
* other Kineto traces: CPU threads, runtime API, GPU streams, counters;
* device traces: DMA queues, engines, counters.

Lane ids are stable strings (``t<track>``, ``r<track>``, ``c<track>``) that the API and the
browser use to ask for data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..analysis.device_kind import device_kind
from ..analysis.lanes import RUNTIME_CATEGORIES, Role, lane_infos
from ..analysis.memory import HBM_SOURCE, MemoryTimeline
from ..trace import Trace, TrackKind

SLICES, COUNTER = "slices", "counter"


@dataclass
class Lane:
    id: str
    kind: str  # SLICES or COUNTER
    track: int
    title: str
    group: str
    subtitle: str = ""
    depth: int = 1  # nesting levels (rows) of a slice lane
    runtime_only: bool = False  # a derived lane of a host thread's runtime calls
    series: list[dict] = field(default_factory=list)  # counters: [{id, name, min, max}]
    role: str = ""
    neuron_core: int | None = None
    source: str = ""  # "memory": a counter lane derived by the analyses, not a counter track (track -1)

    def to_dict(self) -> dict:
        # Not dataclasses.asdict: it deep-copies every value and cost ~1 ms a lane (a trace with
        # 200k threads has 200k lanes). Only ``series`` holds containers: its dicts are copied.
        out = self.__dict__.copy()
        if self.series:
            out["series"] = [dict(item) for item in self.series]
        else:
            out["series"] = []
        return out


@dataclass
class Group:
    id: str
    title: str
    collapsed: bool = False


@dataclass
class Layout:
    groups: list[Group]
    lanes: list[Lane]
    color_by: str  # "name" or "cat": what picks a slice's colour

    def to_dict(self) -> dict:
        return {"groups": [asdict(g) for g in self.groups], "lanes": [lane.to_dict() for lane in self.lanes],
                "color_by": self.color_by}


NEURON_GROUPS = (
    Group("framework", "Framework threads"),
    Group("framework_stream", "Framework device streams"),
    Group("neuron_rt", "neuron_rt"),
    Group("neuron_hw", "neuron_hw"),
    Group("transfers", "Host ↔ device transfers"),
    Group("hbm", "HBM usage"),
    Group("memory", "Memory (allocator events)"),
    Group("host", "Host CPU utilisation and memory"),
    Group("other", "Other", collapsed=True),
)
KINETO_GROUPS = (
    Group("cpu", "CPU threads"),
    Group("runtime", "Runtime API"),
    Group("gpu", "GPU streams"),
    Group("device", "Device lanes"),
    Group("memory", "Memory (allocator events)"),
    Group("counters", "Counters"),
    Group("other", "Other", collapsed=True),
)
DEVICE_GROUPS = (
    Group("dma", "DMA queues"),
    Group("engines", "Engines"),
    Group("counters", "Counters"),
)


def max_depths(trace: Trace) -> np.ndarray:
    """Nesting levels per track (0 for tracks without slices)."""
    s = trace.slices
    out = np.zeros(len(trace.tracks), dtype=np.int64)
    if len(s):
        np.maximum.at(out, s.track, s.depth.astype(np.int64) + 1)
    return out


def counter_series(trace: Trace) -> dict[int, list[dict]]:
    c = trace.counters
    out: dict[int, list[dict]] = {}
    for sid in range(c.series_count):
        lo, hi = int(c.series_offsets[sid]), int(c.series_offsets[sid + 1])
        values = c.value[lo:hi]
        out.setdefault(int(c.series_track[sid]), []).append({
            "id": sid, "name": trace.strings[int(c.series_name[sid])],
            "min": float(values.min()) if hi > lo else 0.0, "max": float(values.max()) if hi > lo else 0.0,
        })
    return out


def runtime_tracks(trace: Trace) -> set[int]:
    """Host-thread tracks holding runtime API calls (they get a runtime lane)."""
    ids = [i for i in (trace.strings.id_of(c) for c in RUNTIME_CATEGORIES) if i is not None]
    if not ids:
        return set()
    s = trace.slices
    return set(np.unique(s.track[np.isin(s.cat, np.asarray(ids, dtype=np.int32))]).tolist())


def system_layout(trace: Trace, neuron: bool, memory: MemoryTimeline | None = None) -> Layout:
    """``memory``: allocation timelines to show as counter lanes (one per device; a Neuron core's
    HBM usage is already a counter track of its own)."""
    depths = max_depths(trace)
    series = counter_series(trace)
    runtime = runtime_tracks(trace)
    lanes: list[Lane] = []
    # "CUDA runtime", "HIP runtime" (ROCm writes its calls under cuda_runtime too), ...
    runtime_title = device_kind(trace, neuron_profile=neuron).runtime_title
    infos = lane_infos(trace)
    # tracks with something to draw (slices or instants)
    shown = (depths > 0) | (np.bincount(trace.instants.track, minlength=len(depths))[:len(depths)] > 0)
    shown_list = shown.tolist()
    # NeuronCores that did something: an idle core's hardware lane stays (empty) beside its busy
    # runtime lane, where it says "submitted, never ran"; a core nothing ran on gets no lanes
    working = {info.neuron_core for info, track in zip(infos, trace.tracks)
               if info.neuron_core is not None and track.kind is not TrackKind.COUNTER and shown_list[track.id]}
    depth_list = np.maximum(depths, 1).tolist()
    process_labels = _ProcessLabels()
    for info, track in zip(infos, trace.tracks):
        role = info.role
        depth = depth_list[track.id]
        if role is Role.HOST_THREAD and not neuron:  # a CPU thread: all of a trace with 200k threads
            if not shown_list[track.id]:
                continue
            title = track.name or (f"thread {track.tid}" if track.tid is not None else f"process {track.pid}")
            lanes.append(_slice_lane(f"t{track.id}", track.id, title, "cpu", process_labels.of(track), depth,
                                     _HOST_THREAD, info.neuron_core))
            if track.id in runtime:
                lanes.append(Lane(f"r{track.id}", SLICES, track.id, f"{title} · {runtime_title}", "runtime",
                                  subtitle="runtime calls of this thread", depth=1, runtime_only=True,
                                  role=role.value))
            continue
        if track.kind is TrackKind.COUNTER:
            group = _counter_group(role, neuron)
            mine = series.get(track.id, [])
            lanes.append(Lane(f"c{track.id}", COUNTER, track.id, track.name or "counter", group,
                              subtitle=", ".join(s["name"] for s in mine), series=mine, role=role.value,
                              neuron_core=info.neuron_core))
            continue
        if not shown_list[track.id] and not (role is Role.NEURON_HW and info.neuron_core in working):
            continue  # empty lanes (e.g. a transfer direction never used, an idle core) only take space
        group, title, subtitle = _slice_lane_names(track, role, neuron, process_labels)
        lanes.append(Lane(f"t{track.id}", SLICES, track.id, title, group, subtitle=subtitle, depth=depth,
                          role=role.value, neuron_core=info.neuron_core))
        if not neuron and role is Role.HOST_THREAD and track.id in runtime:
            lanes.append(Lane(f"r{track.id}", SLICES, track.id, f"{title} · {runtime_title}", "runtime",
                              subtitle="runtime calls of this thread", depth=1, runtime_only=True,
                              role=role.value))
    lanes += memory_lanes(memory)
    groups = NEURON_GROUPS if neuron else tuple(
        Group(g.id, runtime_title if g.id == "runtime" else g.title, g.collapsed) for g in KINETO_GROUPS)
    return Layout(groups=_used(groups, lanes), lanes=_ordered(groups, lanes), color_by="name")


_HOST_THREAD = Role.HOST_THREAD.value


def _slice_lane(lane_id: str, track: int, title: str, group: str, subtitle: str, depth: int, role: str,
                neuron_core: int | None) -> Lane:
    """A slice lane, made without the dataclass's __init__ (a lane per thread; the fields in
    declaration order, so its dict is what Lane(...) gives)."""
    lane = object.__new__(Lane)
    lane.__dict__ = {"id": lane_id, "kind": SLICES, "track": track, "title": title, "group": group,
                     "subtitle": subtitle, "depth": depth, "runtime_only": False, "series": [], "role": role,
                     "neuron_core": neuron_core, "source": ""}
    return lane


def memory_series_id(index: int, name: str) -> str:
    return f"m{index}.{name}"


def memory_lanes(memory: MemoryTimeline | None) -> list[Lane]:
    """A counter lane per device with allocator events: allocated bytes (drawn), reserved bytes."""
    lanes = []
    for index, m in enumerate(memory.devices if memory is not None else []):
        if m.source == HBM_SOURCE:
            continue
        series = [{"id": memory_series_id(index, "allocated"), "name": "allocated bytes",
                   "min": float(m.allocated.min()), "max": float(m.allocated.max())}]
        if m.reserved is not None:
            series.append({"id": memory_series_id(index, "reserved"), "name": "reserved bytes",
                           "min": float(m.reserved.min()), "max": float(m.reserved.max())})
        lanes.append(Lane(f"m{index}", COUNTER, -1, f"{m.device} memory", "memory",
                          subtitle=f"{m.allocations:,} allocations, {m.frees:,} frees", series=series,
                          role="memory", source="memory"))
    return lanes


def device_layout(trace: Trace, engine_titles: set[str], counter_order: tuple[str, ...] = ()) -> Layout:
    """``counter_order``: counter rows by title, in this order first (the rest after them)."""
    depths = max_depths(trace)
    series = counter_series(trace)
    lanes = []
    for track in trace.tracks:
        if track.kind is TrackKind.COUNTER:
            mine = series.get(track.id, [])
            lanes.append(Lane(f"c{track.id}", COUNTER, track.id, track.name, "counters",
                              subtitle=", ".join(s["name"] for s in mine), series=mine, role="counter"))
            continue
        group = "engines" if track.name in engine_titles else "dma"
        lanes.append(Lane(f"t{track.id}", SLICES, track.id, track.name, group,
                          depth=int(max(1, depths[track.id])), role="engine" if group == "engines" else "dma_queue"))
    group_rank = {g.id: i for i, g in enumerate(DEVICE_GROUPS)}
    rank = {title: i for i, title in enumerate(counter_order)}
    ordered = sorted(_ordered(DEVICE_GROUPS, lanes),  # stable: other lanes keep their order
                     key=lambda lane: (group_rank[lane.group], rank.get(lane.title, len(rank)) if lane.kind == COUNTER else 0))
    return Layout(groups=_used(DEVICE_GROUPS, lanes), lanes=ordered, color_by="cat")


class _ProcessLabels(dict):
    """Track.process_label once per process (its threads share it)."""

    def of(self, track) -> str:
        label = self.get(track.pid)
        if label is None:
            label = self[track.pid] = track.process_label
        return label


def _slice_lane_names(track, role: Role, neuron: bool, labels: _ProcessLabels) -> tuple[str, str, str]:
    name = track.name or track.label
    if neuron:
        if role is Role.HOST_THREAD:
            return "framework", f"framework/TID:{track.tid}", name
        if role is Role.DEVICE_STREAM:
            stream = name.replace("Stream ", "Stream:") if name.startswith("Stream ") else name
            return "framework_stream", f"framework/{stream}", labels.of(track)
        if role in (Role.NEURON_RT, Role.NEURON_QUEUE):
            return "neuron_rt", name, ""
        if role is Role.NEURON_HW:
            return "neuron_hw", name, ""
        if role is Role.TRANSFER:
            return "transfers", name, ""
        return "other", track.label, labels.of(track)
    if role is Role.HOST_THREAD:
        return "cpu", track.label, labels.of(track)
    if track.kind is TrackKind.GPU_STREAM:
        return "gpu", f"{labels.of(track)} · {track.label}".strip(" ·"), ""
    if track.kind is TrackKind.DEVICE_QUEUE:
        return "device", f"{labels.of(track)} · {track.label}".strip(" ·"), ""
    return "other", track.label, labels.of(track)


def _counter_group(role: Role, neuron: bool) -> str:
    if neuron:
        if role is Role.HBM:
            return "hbm"
        if role in (Role.CPU_UTIL, Role.HOST_MEMORY):
            return "host"
        return "other"
    return "counters"


def _used(groups, lanes: list[Lane]) -> list[Group]:
    present = {lane.group for lane in lanes}
    return [g for g in groups if g.id in present]


def _ordered(groups, lanes: list[Lane]) -> list[Lane]:
    rank = {g.id: i for i, g in enumerate(groups)}
    # within a group: by NeuronCore (Neuron lanes), then the trace's own display order. Lanes are
    # made in track order (a thread's runtime lane right after it), so sorting each group by core
    # alone (stable) gives that order without a key per lane.
    by_group: dict[str, list[Lane]] = {}
    for lane in lanes:
        by_group.setdefault(lane.group, []).append(lane)
    with_core = {lane.group for lane in lanes if lane.neuron_core is not None}
    out: list[Lane] = []
    for group in sorted(by_group, key=lambda g: rank.get(g, len(rank))):
        mine = by_group[group]
        if group in with_core:
            mine.sort(key=lambda lane: lane.neuron_core if lane.neuron_core is not None else -1)
        out += mine
    return out
