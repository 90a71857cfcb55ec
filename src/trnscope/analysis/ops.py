"""The operator table: per framework op, its host time, the device time it caused and what moved.

Mirrors ``prof.key_averages()`` with the columns Neuron's operator table adds. For every name of a
slice on a host thread (ops, annotations, runtime calls; Python frames are left out):

* ``calls``; ``cpu_total_ns`` (sum of durations) and ``cpu_self_ns`` (minus time in child slices);
* ``device_self_ns``: device time of executions whose nearest op above the launching runtime call
  is this one; ``device_total_ns``: executions launched anywhere under it (each execution counted
  once per name, so an op nested in itself is not counted twice);
* ``dispatches``: device executions launched under it; ``programs``: the distinct NEFFs (Neuron)
  or kernels (CUDA) among them; ``bytes``: bytes they moved (HBM traffic of NEFFs, copy sizes).

Device kernels (NEFFs, CUDA kernels, copies) get a table of their own, grouped by name. Their MFU
is the executions' args' (against the BF16 peak, as the framework trace records it) unless
``mfu_scale`` gives a NEFF's factor to its own dtype's peak (:mod:`.tensor_peak`; from the NTFFs),
applied per execution: two NEFFs of one name (an FP32 and a BF16 mm) each get their own.
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
    # per device execution (device_work order): its owning op's slice row (-1: none) and the
    # framework op that launched it (for the source-line table; not serialised)
    owner_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    launch_ops: list[str] = field(default_factory=list, repr=False)

    def by_name(self) -> dict[str, OpRow]:
        return {row.name: row for row in self.ops}

    def to_dict(self) -> dict:
        return {"ops": [asdict(r) for r in self.ops], "kernels": [asdict(k) for k in self.kernels],
                "cpu_self_total_ns": self.cpu_self_total_ns, "device_total_ns": self.device_total_ns}


def op_table(trace: Trace, mfu_scale: dict[str, float] | None = None) -> OpTable:
    """``mfu_scale``: NEFF id -> BF16 peak / its own peak (DeviceSummary.mfu_scales)."""
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

    device, owner_of = _device_attribution(trace, work, is_frame, is_runtime)
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
    launch_ops = _launching_op_names(trace, work, owner_of)
    return OpTable(
        ops=rows, kernels=_kernel_rows(trace, work, owner_of, launch_ops, mfu_scale or {}),
        cpu_self_total_ns=int(cpu_self.sum()), device_total_ns=int((work.end - work.start).sum()),
        owner_of=owner_of, launch_ops=launch_ops,
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


def _device_attribution(trace: Trace, work: DeviceWork, is_frame: np.ndarray,
                        is_runtime: np.ndarray) -> tuple[dict, np.ndarray]:
    """(name id -> {total, self, dispatches, programs, bytes} over the device executions, and per
    execution its owning op: the nearest slice at or above its launcher that is neither a runtime
    call nor a Python frame, -1 when there is none or the launch is unknown)."""
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
    owner_of = np.full(len(work), -1, dtype=np.int64)
    owner_of[known] = owner
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
            entry["programs"].update(work.program[chosen[~work.is_copy[chosen]]].tolist())
    return out, owner_of


def _group(keys: np.ndarray, values: np.ndarray):
    """(key, values with that key) for each distinct key."""
    if not len(keys):
        return
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    for chunk_keys, chunk in zip(np.split(keys, cuts), np.split(values, cuts)):
        yield int(chunk_keys[0]), chunk


def _kernel_rows(trace: Trace, work: DeviceWork, owner_of: np.ndarray, launch_ops: list[str],
                 mfu_scale: dict[str, float]) -> list[KernelRow]:
    if not len(work):
        return []
    s = trace.slices
    names, group = np.unique(s.name[work.rows], return_inverse=True)
    group = group.reshape(-1)
    count = len(names)
    duration = (work.end - work.start).astype(np.int64)
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(count))
    first = order[starts]  # the earliest execution of each name
    total = np.bincount(group, weights=duration, minlength=count)
    low = np.minimum.reduceat(duration[order], starts)
    high = np.maximum.reduceat(duration[order], starts)
    moved = np.bincount(group, weights=work.bytes, minlength=count)
    ops_of: list[set] = [set() for _ in range(count)]
    for g, op in {(int(g), op) for g, op in zip(group.tolist(), launch_ops) if op}:
        ops_of[g].add(op)
    scale = np.fromiter((mfu_scale.get(str(p), 1.0) for p in work.program.tolist()), np.float64, len(work)) \
        if mfu_scale else None
    mfu = _weighted(work, group, count, "mfu_estimated_percent", duration, scale)
    mbu = _weighted(work, group, count, "mbu_estimated_percent", duration)
    calls = np.bincount(group, minlength=count)
    out = []
    for g in range(count):
        i = int(first[g])
        out.append(KernelRow(
            name=trace.strings[int(names[g])], program=str(work.program[i]), calls=int(calls[g]),
            device_total_ns=int(total[g]), device_min_ns=int(low[g]), device_max_ns=int(high[g]),
            bytes=int(moved[g]), is_copy=bool(work.is_copy[i]), ops=sorted(ops_of[g]), mfu_percent=mfu[g],
            mbu_percent=mbu[g], bottleneck=str(work.args[i].bottleneck or ""), first_row=int(work.rows[i]),
        ))
    out.sort(key=lambda k: -k.device_total_ns)
    return out


def _weighted(work: DeviceWork, group: np.ndarray, count: int, key: str, weights: np.ndarray,
              scale: np.ndarray | None = None) -> list[float | None]:
    """Per group the duration-weighted mean of an execution arg (times ``scale``, per execution);
    None when any execution lacks it."""
    values = np.fromiter((v if (v := getattr(a, key)) is not None else np.nan for a in work.args), np.float64,
                         len(work.args))
    if scale is not None:
        values = values * scale
    missing = np.bincount(group, weights=np.isnan(values), minlength=count) > 0
    w = weights.astype(np.float64)
    total = np.bincount(group, weights=w, minlength=count)
    dot = np.bincount(group, weights=np.nan_to_num(values) * w, minlength=count)
    first = np.full(count, np.nan)
    first[group[::-1]] = values[::-1]
    return [None if missing[g] else float(dot[g] / total[g]) if total[g] else float(first[g]) for g in range(count)]


def _launching_op_names(trace: Trace, work: DeviceWork, owner_of: np.ndarray) -> list[str]:
    """Per execution: the framework op named in its args (Neuron), else its owning op's name."""
    names = trace.strings.lookup(trace.slices.name[np.maximum(owner_of, 0)]).tolist() if len(owner_of) else []
    return [str(a.op or a.framework_op) if (a.op or a.framework_op) else (name if owner >= 0 else "")
            for a, name, owner in zip(work.args, names, owner_of.tolist())]
