"""How busy each device was, as Holistic Trace Analysis defines it.

Per device (every stream of one GPU, or one NeuronCore):

* **span**: first execution start to last execution end;
* **busy**: the union of the execution intervals over all its streams (two kernels running at
  once on two streams count once; an idle copy or NCCL stream does not make the device less busy);
  **idle** = span - busy. This is HTA's temporal breakdown (``_get_idle_time_for_kernels``);
* **compute** / **non-compute**: the union of computation kernels, and busy - compute (HTA:
  communication or memory time that overlaps computation counts as compute);
* **kernel-type breakdown**: the busy time split into exclusive combinations of computation,
  communication and memory ("computation", "computation + communication", ...), as HTA's
  ``get_gpu_kernel_breakdown`` kernel-type table (kernels of type *other* are left out of it,
  as in HTA);
* **communication/computation overlap**: time both ran / communication time (HTA's
  ``get_comm_comp_overlap``), None when nothing communicated;
* **per stream**: each lane's own busy time and span, beside the device's.

Times are the trace's integer nanoseconds; HTA rounds each event inward to whole microseconds
(``round_down_time_stamps``), which on nanosecond traces with many short kernels shifts its
figures by a fraction of a percentage point. The analysis covers every execution recorded; HTA by
default drops the last ProfilerStep's kernels (``include_last_profiler_step=False``).
"""

from __future__ import annotations

import weakref
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import caches
from ..trace import Trace
from .device_work import DeviceWork, device_work
from .kernel_types import BREAKDOWN_TYPES, COMMUNICATION, COMPUTATION, MEMORY, OTHER


@dataclass
class StreamUse:
    track: int
    name: str
    executions: int
    busy_ns: int
    start_ns: int
    end_ns: int

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class DeviceUse:
    device: str
    executions: int
    start_ns: int
    end_ns: int
    busy_ns: int
    compute_ns: int  # union of computation kernels
    communication_ns: int  # union of communication kernels
    memory_ns: int  # union of memory (copy / memset) executions
    other_ns: int  # union of executions of type other
    comm_comp_overlap_ns: int  # time computation and communication both ran
    kernel_types: dict[str, int] = field(default_factory=dict)  # exclusive combination -> ns
    streams: list[StreamUse] = field(default_factory=list)

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def non_compute_ns(self) -> int:
        return self.busy_ns - self.compute_ns

    def share(self, part_ns: int) -> float:
        return part_ns / self.span_ns if self.span_ns else 0.0

    @property
    def comm_comp_overlap(self) -> float | None:
        """Share of communication time during which computation also ran (HTA)."""
        return self.comm_comp_overlap_ns / self.communication_ns if self.communication_ns else None

    def kernel_type_shares(self) -> dict[str, float]:
        total = sum(self.kernel_types.values())
        return {k: v / total for k, v in self.kernel_types.items()} if total else {}

    def to_dict(self) -> dict:
        out = asdict(self)
        out["streams"] = [{**asdict(s), "span_ns": s.span_ns, "busy_share": s.busy_ns / s.span_ns if s.span_ns else 0.0}
                          for s in self.streams]
        out.update(span_ns=self.span_ns, idle_ns=self.idle_ns, non_compute_ns=self.non_compute_ns,
                   busy_share=self.share(self.busy_ns), idle_share=self.share(self.idle_ns),
                   compute_share=self.share(self.compute_ns), non_compute_share=self.share(self.non_compute_ns),
                   comm_comp_overlap=self.comm_comp_overlap, kernel_type_shares=self.kernel_type_shares())
        return out


@dataclass
class Utilization:
    devices: list[DeviceUse] = field(default_factory=list)

    @property
    def span_ns(self) -> int:
        return sum(d.span_ns for d in self.devices)

    @property
    def busy_ns(self) -> int:
        return sum(d.busy_ns for d in self.devices)

    @property
    def busy_share(self) -> float | None:
        """Busy over span, summed over devices (one device: HTA's 1 - idle share)."""
        return self.busy_ns / self.span_ns if self.span_ns else None

    def to_dict(self) -> dict:
        return {"devices": [d.to_dict() for d in self.devices], "span_ns": self.span_ns, "busy_ns": self.busy_ns,
                "busy_share": self.busy_share}


_CACHE: "weakref.WeakKeyDictionary[Trace, Utilization]" = weakref.WeakKeyDictionary()
caches.register("analysis.utilization: device use per trace", _CACHE.clear)


def utilization(trace: Trace) -> Utilization:
    found = _CACHE.get(trace)
    if found is None:
        found = _CACHE[trace] = _build(trace, device_work(trace))
    return found


def _build(trace: Trace, work: DeviceWork) -> Utilization:
    result = Utilization()
    for index, name in enumerate(work.devices):
        mine = np.flatnonzero(work.device == index)
        if len(mine):
            result.devices.append(device_use(trace, work, name, mine))
    return result


def device_use(trace: Trace, work: DeviceWork, name: str, mine: np.ndarray) -> DeviceUse:
    """The figures of one device over the executions ``mine`` (indices into ``work``)."""
    start, end, kind = work.start[mine], work.end[mine], work.kind[mine]
    merged = {t: merge_intervals(start[kind == t], end[kind == t]) for t in (*BREAKDOWN_TYPES, OTHER)}
    all_merged = merge_intervals(start, end)
    streams = []
    for track in np.unique(work.track[mine]).tolist():
        lane = work.track[mine] == track
        s, e = start[lane], end[lane]
        streams.append(StreamUse(track=int(track), name=trace.tracks[track].name or f"track {track}",
                                 executions=int(lane.sum()), busy_ns=union_length(s, e),
                                 start_ns=int(s.min()), end_ns=int(e.max())))
    types = exclusive_combinations({t: merged[t] for t in BREAKDOWN_TYPES})
    overlap = sum(ns for combo, ns in types.items() if {COMPUTATION, COMMUNICATION} <= set(combo.split(" + ")))
    return DeviceUse(
        device=name, executions=len(mine), start_ns=int(start.min()), end_ns=int(end.max()),
        busy_ns=_length(all_merged), compute_ns=_length(merged[COMPUTATION]),
        communication_ns=_length(merged[COMMUNICATION]), memory_ns=_length(merged[MEMORY]),
        other_ns=_length(merged[OTHER]), comm_comp_overlap_ns=overlap, kernel_types=types, streams=streams,
    )


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [start, end) intervals as disjoint, sorted intervals (touching ones merged)."""
    if not len(start):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts], reach[lasts]


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    return _length(merge_intervals(start, end))


def _length(merged: tuple[np.ndarray, np.ndarray]) -> int:
    return int((merged[1] - merged[0]).sum())


def exclusive_combinations(merged: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Time during which exactly each combination of the given types ran: a sweep over the
    types' merged intervals, each type a bit of a running mask (HTA ``_get_gpu_kernel_type_time``)."""
    names = list(merged)
    times, deltas = [], []
    for bit, name in enumerate(names):
        s, e = merged[name]
        times += [s, e]
        deltas += [np.full(len(s), 1 << bit, dtype=np.int64), np.full(len(e), -(1 << bit), dtype=np.int64)]
    if not times:
        return {}
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    mask = np.cumsum(d)
    length = np.diff(t)
    mask = mask[:-1]
    out: dict[str, int] = {}
    for value in np.unique(mask[(mask > 0) & (length > 0)]).tolist():
        combo = " + ".join(name for bit, name in enumerate(names) if value & (1 << bit))
        out[combo] = int(length[mask == value].sum())
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
