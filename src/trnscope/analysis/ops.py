"""The operator table: per framework op, its host time, the device time it caused and what moved.

Mirrors ``prof.key_averages()`` with the columns Neuron's operator table adds. For every name of a
slice on a host thread (ops, annotations, runtime calls; Python frames are left out):

* ``calls``; ``cpu_total_ns`` (sum of durations) and ``cpu_self_ns`` (minus time in child slices);
* ``device_self_ns``: device time of executions whose nearest op above the launching runtime call
  is this one; ``device_total_ns``: executions launched anywhere under it (each execution counted
  once per name, so an op nested in itself is not counted twice);
* ``dispatches``: device executions launched under it; ``programs``: the distinct NEFFs (Neuron)
  or kernels (CUDA) among them; ``bytes``: bytes they moved (HBM traffic of NEFFs, copy sizes).

Device kernels (NEFFs, CUDA kernels, copies) get a table of their own, grouped by name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace import Trace
from .device_work import DeviceWork, device_work
from .lanes import FRAME_CATEGORIES, RUNTIME_CATEGORIES, Role, lane_infos


@dataclass
class OpRow:
    name: str
    category: str
    calls: int
    cpu_total_ns: int
    cpu_self_ns: int
    device_total_ns: int
    device_self_ns: int
    dispatches: int
    programs: list[str]
    bytes: int
    first_row: int  # a slice of this op, for "show in timeline"


@dataclass
class KernelRow:
    name: str
    program: str  # NEFF id or kernel name
    calls: int
    device_total_ns: int
    device_min_ns: int
    device_max_ns: int
    bytes: int
    is_copy: bool
    ops: list[str]  # framework ops that launched it
    mfu_percent: float | None = None
    mbu_percent: float | None = None
    bottleneck: str = ""
    first_row: int = -1


@dataclass
class OpTable:
    ops: list[OpRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    cpu_self_total_ns: int = 0
    device_total_ns: int = 0

    def by_name(self) -> dict[str, OpRow]:
        return {row.name: row for row in self.ops}

    def to_dict(self) -> dict:
        return {"ops": [asdict(r) for r in self.ops], "kernels": [asdict(k) for k in self.kernels],
                "cpu_self_total_ns": self.cpu_self_total_ns, "device_total_ns": self.device_total_ns}


def op_table(trace: Trace) -> OpTable:
    work = device_work(trace)
    host = _host_rows(trace)
    s = trace.slices
    frame_ids = _ids(trace, FRAME_CATEGORIES)
    runtime_ids = _ids(trace, RUNTIME_CATEGORIES)
    is_frame = np.zeros(len(s), dtype=bool)
    is_runtime = np.zeros(len(s), dtype=bool)
    is_frame[host] = np.isin(s.cat[host], frame_ids)
    is_runtime[host] = np.isin(s.cat[host], runtime_ids)
    listed = host[~is_frame[host]]

    child_time = _child_time(trace, host)
    self_ns = s.dur_ns[listed] - child_time[listed]
    name_ids = s.name[listed]
    unique_names, inverse = np.unique(name_ids, return_inverse=True)
    calls = np.bincount(inverse, minlength=len(unique_names))
    cpu_total = np.bincount(inverse, weights=s.dur_ns[listed], minlength=len(unique_names))
    cpu_self = np.bincount(inverse, weights=np.maximum(self_ns, 0), minlength=len(unique_names))
    first_row = np.full(len(unique_names), -1, dtype=np.int64)
    first_row[inverse[::-1]] = listed[::-1]  # the earliest row of each name wins

    device = _device_attribution(trace, work, is_frame, is_runtime)
    rows = []
    for i, name_id in enumerate(unique_names.tolist()):
        name = trace.strings[name_id]
        category = trace.strings[int(s.cat[first_row[i]])]
        d = device.get(name_id, _EMPTY)
        rows.append(OpRow(
            name=name, category=category, calls=int(calls[i]), cpu_total_ns=int(cpu_total[i]),
            cpu_self_ns=int(cpu_self[i]), device_total_ns=int(d["total"]), device_self_ns=int(d["self"]),
            dispatches=int(d["dispatches"]), programs=sorted(d["programs"]), bytes=int(d["bytes"]),
            first_row=int(first_row[i]),
        ))
    rows.sort(key=lambda r: (-r.device_self_ns, -r.cpu_total_ns, r.name))
    return OpTable(
        ops=rows, kernels=_kernel_rows(trace, work),
        cpu_self_total_ns=int(cpu_self.sum()), device_total_ns=int((work.end - work.start).sum()),
    )


_EMPTY = {"total": 0, "self": 0, "dispatches": 0, "programs": set(), "bytes": 0}


def _host_rows(trace: Trace) -> np.ndarray:
    offsets = trace.slices.track_offsets
    tracks = [i.track for i in lane_infos(trace) if i.role is Role.HOST_THREAD]
    parts = [np.arange(offsets[t], offsets[t + 1], dtype=np.int64) for t in tracks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _ids(trace: Trace, values) -> np.ndarray:
    return np.array([i for i in (trace.strings.id_of(v) for v in values) if i is not None], dtype=np.int32)


def _child_time(trace: Trace, host: np.ndarray) -> np.ndarray:
    """Per slice row, the summed duration of its direct children."""
    s = trace.slices
    children = host[s.parent[host] >= 0]
    return np.bincount(s.parent[children], weights=s.dur_ns[children], minlength=len(s)).astype(np.int64)


def _device_attribution(trace: Trace, work: DeviceWork, is_frame: np.ndarray, is_runtime: np.ndarray) -> dict:
    """name id -> {total, self, dispatches, programs, bytes} over the device executions."""
    s = trace.slices
    known = np.flatnonzero(work.launcher >= 0)
    duration = work.end - work.start
    pairs_row, pairs_exec = [], []
    owner = np.full(len(known), -1, dtype=np.int64)  # nearest op (not a runtime call, not a frame)
    current = work.launcher[known].copy()
    while True:
        alive = current >= 0
        if not alive.any():
            break
        idx = np.flatnonzero(alive)
        rows = current[idx]
        counted = ~is_frame[rows]
        pairs_row.append(rows[counted])
        pairs_exec.append(known[idx[counted]])
        take = (owner[idx] < 0) & counted & ~is_runtime[rows]
        owner[idx[take]] = rows[take]
        current[idx] = s.parent[rows]
    owner = np.where(owner >= 0, owner, work.launcher[known])
    out: dict[int, dict] = {}

    def slot(name_id: int) -> dict:
        entry = out.get(name_id)
        if entry is None:
            entry = out[name_id] = {"total": 0, "self": 0, "dispatches": 0, "programs": set(), "bytes": 0}
        return entry

    for name_id, execs in _group(s.name[owner], known):
        slot(name_id)["self"] += int(duration[execs].sum())
    if pairs_row:
        names = s.name[np.concatenate(pairs_row)].astype(np.int64)
        execs = np.concatenate(pairs_exec)
        # one (name, execution) pair per execution even when an op nests in an op of the same name
        key = np.unique(names * (len(work) + 1) + execs)
        names, execs = key // (len(work) + 1), key % (len(work) + 1)
        for name_id, chosen in _group(names, execs):
            entry = slot(name_id)
            entry["total"] += int(duration[chosen].sum())
            entry["dispatches"] += int(len(chosen))
            entry["bytes"] += int(work.bytes[chosen].sum())
            entry["programs"].update(str(p) for p in work.program[chosen[~work.is_copy[chosen]]])
    return out


def _group(keys: np.ndarray, values: np.ndarray):
    """(key, values with that key) for each distinct key."""
    if not len(keys):
        return
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    for chunk_keys, chunk in zip(np.split(keys, cuts), np.split(values, cuts)):
        yield int(chunk_keys[0]), chunk


def _kernel_rows(trace: Trace, work: DeviceWork) -> list[KernelRow]:
    if not len(work):
        return []
    names = trace.slice_names(work.rows)
    duration = work.end - work.start
    launch_op = _launching_ops(trace, work)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names.tolist()):
        groups.setdefault(str(name), []).append(i)
    out = []
    for name, members in groups.items():
        m = np.asarray(members)
        d = duration[m]
        args = work.args[members[0]]
        weights = d.astype(np.float64)
        out.append(KernelRow(
            name=name, program=str(work.program[members[0]]), calls=len(members), device_total_ns=int(d.sum()),
            device_min_ns=int(d.min()), device_max_ns=int(d.max()), bytes=int(work.bytes[m].sum()),
            is_copy=bool(work.is_copy[members[0]]), ops=sorted({launch_op[i] for i in members if launch_op[i]}),
            mfu_percent=_weighted(work, members, "mfu_estimated_percent", weights),
            mbu_percent=_weighted(work, members, "mbu_estimated_percent", weights),
            bottleneck=str(args.bottleneck or ""), first_row=int(work.rows[members[0]]),
        ))
    out.sort(key=lambda k: -k.device_total_ns)
    return out


def _weighted(work: DeviceWork, members: list[int], key: str, weights: np.ndarray) -> float | None:
    values = [getattr(work.args[i], key) for i in members]
    if any(v is None for v in values):
        return None
    total = weights.sum()
    return float(np.dot(np.asarray(values, dtype=np.float64), weights) / total) if total else float(values[0])


def _launching_ops(trace: Trace, work: DeviceWork) -> list[str]:
    """Per execution: the framework op named in its args (Neuron), else the op above its launcher."""
    s = trace.slices
    frame_ids = set(_ids(trace, FRAME_CATEGORIES).tolist()) | set(_ids(trace, RUNTIME_CATEGORIES).tolist())
    out = []
    for i, launcher in enumerate(work.launcher.tolist()):
        named = work.args[i].op or work.args[i].framework_op
        if named:
            out.append(str(named))
            continue
        row = int(s.parent[launcher]) if launcher >= 0 else -1
        while row >= 0 and int(s.cat[row]) in frame_ids:
            row = int(s.parent[row])
        out.append(trace.strings[int(s.name[row])] if row >= 0 else "")
    return out
