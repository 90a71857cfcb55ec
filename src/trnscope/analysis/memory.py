"""Memory over time, per device: the allocator's ``[memory]`` events, or Neuron's HBM usage.

``torch.profiler.profile(profile_memory=True)`` writes an instant ``[memory]`` for every
allocation and free with the allocator's totals after it: ``Bytes`` (negative for a free),
``Total Allocated``, ``Total Reserved``, ``Device Type`` (c10's DeviceType: 0 CPU, 1 CUDA, 12 XPU,
19 MTIA, 20 PrivateUse1) and ``Device Id``. Each device becomes one series of (time, allocated,
reserved) samples with its peak. A trnscope profile's system trace also samples each NeuronCore's
HBM usage as a counter (``NC:<n>/hbm_usage``); a core without ``[memory]`` events gets that series.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import msgspec
import numpy as np

from .. import caches
from ..trace import Trace
from .lanes import Role, lane_infos

MEMORY_EVENT = "[memory]"
KINETO_SOURCE = "[memory] events"
HBM_SOURCE = "hbm_usage counter"
# c10::DeviceType values Kineto writes in "Device Type"
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia",
                 20: "privateuse1"}


class _MemoryArgs(msgspec.Struct, frozen=True, gc=False, rename={
        "bytes": "Bytes", "allocated": "Total Allocated", "reserved": "Total Reserved",
        "device_type": "Device Type", "device_id": "Device Id"}):
    bytes: int | float = 0
    allocated: int | float | None = None
    reserved: int | float | None = None
    device_type: int = -1
    device_id: int = -1


@dataclass
class MemorySeries:
    device: str  # "cuda:0", "cpu", "neuron:0"
    source: str
    ts_ns: np.ndarray  # int64, sorted
    allocated: np.ndarray  # float64 bytes after each event
    reserved: np.ndarray | None  # float64 bytes (None when the source has none)
    allocations: int = 0
    frees: int = 0

    @property
    def peak_bytes(self) -> int:
        return int(self.allocated.max()) if len(self.allocated) else 0

    @property
    def peak_ns(self) -> int | None:
        return int(self.ts_ns[int(np.argmax(self.allocated))]) if len(self.allocated) else None

    def to_dict(self, points: int = 0) -> dict:
        out = {"device": self.device, "source": self.source, "samples": int(len(self.ts_ns)),
               "peak_bytes": self.peak_bytes, "peak_ns": self.peak_ns,
               "peak_reserved_bytes": int(self.reserved.max()) if self.reserved is not None and len(self.reserved) else None,
               "final_bytes": int(self.allocated[-1]) if len(self.allocated) else 0,
               "allocations": self.allocations, "frees": self.frees}
        if points:
            out["points"] = self.downsample(points)
        return out

    def downsample(self, points: int) -> list[list[int]]:
        """At most ``points`` (ts, allocated) pairs, keeping each bucket's maximum (peaks survive)."""
        n = len(self.ts_ns)
        if n <= points:
            return [[int(t), int(v)] for t, v in zip(self.ts_ns.tolist(), self.allocated.tolist())]
        edges = np.linspace(0, n, points + 1).astype(np.int64)
        out = []
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
            if hi > lo:
                i = lo + int(np.argmax(self.allocated[lo:hi]))
                out.append([int(self.ts_ns[i]), int(self.allocated[i])])
        return out


@dataclass
class MemoryTimeline:
    devices: list[MemorySeries]

    @property
    def peak_bytes(self) -> int:
        """The highest peak among the accelerators (the CPU's only when there is no other)."""
        accel = [d for d in self.devices if d.device != "cpu"]
        return max((d.peak_bytes for d in (accel or self.devices)), default=0)

    def series(self, device: str) -> MemorySeries | None:
        return next((d for d in self.devices if d.device == device), None)

    def to_dict(self, points: int = 0) -> dict:
        return {"devices": [d.to_dict(points) for d in self.devices], "peak_bytes": self.peak_bytes}


_CACHE: "weakref.WeakKeyDictionary[Trace, MemoryTimeline]" = weakref.WeakKeyDictionary()
caches.register("analysis.memory: memory timelines per trace", _CACHE.clear)


def memory_timeline(trace: Trace) -> MemoryTimeline:
    found = _CACHE.get(trace)
    if found is None:
        found = _CACHE[trace] = MemoryTimeline(devices=_from_events(trace))
        known = {d.device for d in found.devices}
        found.devices += [s for s in _from_hbm_counters(trace) if s.device not in known]
    return found


def _from_events(trace: Trace) -> list[MemorySeries]:
    name_id = trace.strings.id_of(MEMORY_EVENT)
    if name_id is None or not len(trace.instants):
        return []
    i = trace.instants
    rows = np.flatnonzero(i.name == name_id)
    if not len(rows):
        return []
    rows = rows[np.argsort(i.ts_ns[rows], kind="stable")]
    texts = i.args.raw_many(rows)
    try:
        args = msgspec.json.decode(b"[" + b",".join(t or b"{}" for t in texts) + b"]", type=list[_MemoryArgs])
    except (msgspec.ValidationError, msgspec.DecodeError):
        args = [_decode(t) for t in texts]
    neuron = _privateuse1_is_neuron(trace)
    ts = i.ts_ns[rows]
    kinds = np.array([a.device_type for a in args], dtype=np.int64)
    ids = np.array([a.device_id for a in args], dtype=np.int64)
    out = []
    for kind, index in sorted({(int(k), int(d)) for k, d in zip(kinds.tolist(), ids.tolist())}):
        mine = np.flatnonzero((kinds == kind) & (ids == index))
        chosen = [args[j] for j in mine.tolist()]
        allocated = np.array([float(a.allocated) if a.allocated is not None else np.nan for a in chosen])
        if np.isnan(allocated).all():
            # older traces carry only Bytes: the running sum is the allocated total
            allocated = np.cumsum([float(a.bytes) for a in chosen])
        else:
            allocated = _fill_forward(allocated)
        raw = np.array([float(a.reserved) if a.reserved is not None else np.nan for a in chosen])
        reserved = None if np.isnan(raw).all() else _fill_forward(raw)
        sizes = np.array([float(a.bytes) for a in chosen])
        out.append(MemorySeries(device=_device_name(kind, index, neuron), source=KINETO_SOURCE, ts_ns=ts[mine],
                                allocated=allocated, reserved=reserved, allocations=int((sizes > 0).sum()),
                                frees=int((sizes < 0).sum())))
    return out


def _decode(text: bytes) -> _MemoryArgs:
    try:
        return msgspec.json.decode(text or b"{}", type=_MemoryArgs)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _MemoryArgs()


def _fill_forward(values: np.ndarray) -> np.ndarray:
    missing = np.isnan(values)
    if not missing.any():
        return values
    index = np.where(~missing, np.arange(len(values)), 0)
    np.maximum.accumulate(index, out=index)
    filled = values[index]
    return np.where(np.isnan(filled), 0.0, filled)


def _device_name(kind: int, index: int, neuron: bool) -> str:
    name = _DEVICE_TYPES.get(kind, f"device type {kind}")
    if name == "privateuse1" and neuron:
        name = "neuron"
    return name if name == "cpu" or index < 0 else f"{name}:{index}"


def _privateuse1_is_neuron(trace: Trace) -> bool:
    return bool(trace.metadata.get("neuron")) or any(
        (t.process_name or "").startswith("neuron:") for t in trace.tracks)


def _from_hbm_counters(trace: Trace) -> list[MemorySeries]:
    c = trace.counters
    if not len(c):
        return []
    out = []
    for info in lane_infos(trace):
        if info.role is not Role.HBM:
            continue
        series = np.flatnonzero(c.series_track == info.track)
        if not len(series):
            continue
        sid = int(series[0])
        lo, hi = int(c.series_offsets[sid]), int(c.series_offsets[sid + 1])
        if hi <= lo:
            continue
        values = c.value[lo:hi].astype(np.float64)
        steps = np.diff(values, prepend=0.0)
        out.append(MemorySeries(device=f"neuron:{info.neuron_core}" if info.neuron_core is not None else
                                trace.tracks[info.track].name, source=HBM_SOURCE, ts_ns=c.ts_ns[lo:hi],
                                allocated=values, reserved=None, allocations=int((steps > 0).sum()),
                                frees=int((steps < 0).sum())))
    return out
