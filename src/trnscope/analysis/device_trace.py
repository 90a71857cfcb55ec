"""One NEFF execution on one NeuronCore (an NTFF) as a trace: lanes per engine and DMA queue.

The instruction trace becomes the same columnar trace model as any timeline, so the explorer's
level-of-detail queries, selection summaries and details work on it unchanged. Lanes follow
Neuron Explorer's device trace viewer:

* one lane per DMA queue (the transfer's data phase, from the DMA table);
* ``Tensor`` (LoadStationary), ``TensorMatrix`` (MultiplyMoving), ``Vector``, ``Scalar``,
  ``GpSimd``, ``Sync``: one lane per engine, always shown so an idle engine is visible;
* semaphore waits on the engine lanes: the time an engine sat blocked before an instruction
  (``evt_wait_time_ns``), drawn as their own slices (``semaphore wait``);
* counters computed from the DMA table: DMA throughput (bytes in flight per second, summed over
  queues) and pending DMAs (triggered, not yet complete);
* on-chip memory counters from the allocation table (NTFF 1.1): ``SBUF usage`` and ``PSUM usage``,
  the bytes held by live tiles over time and their share of the capacity in the header's
  ``memory``. A tile's byte range is reserved in every partition (the compiler's arenas allocate
  so), so bytes = live bytes per partition x partitions. NTFFs without the table get no such rows.

Each instruction slice's category is its originating framework op, which the explorer uses to
colour it. Dependencies come from the semaphore table: a wait for ``S >= v`` is released by the
signal that brought ``S`` to ``v``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import orjson

from ..trace import Trace, TrackKind
from ..trace.builder import TraceBuilder
from .profile_dir import Ntff

ENGINE_LANES = ("Tensor", "TensorMatrix", "Vector", "Scalar", "GpSimd", "Sync")
ENGINE_TITLES = {
    "Tensor": "Tensor (LoadStationary)",
    "TensorMatrix": "TensorMatrix (MultiplyMoving)",
}
WAIT_NAME = "semaphore wait"
WAIT_CATEGORY = "semaphore"
DMA_THROUGHPUT = "DMA throughput"
PENDING_DMA = "Pending DMAs"
MEMORY_COUNTERS = (("sbuf", "SBUF usage"), ("psum", "PSUM usage"))


@dataclass
class Dependency:
    instruction: int
    semaphore: str
    value: int


@dataclass
class DeviceTrace:
    trace: Trace
    header: dict
    ntff: Ntff
    _rows_by_id: dict[int, int] | None = field(default=None, repr=False)
    _deps: tuple[dict, dict] | None = field(default=None, repr=False)
    # per space ("sbuf", "psum"): peak bytes, when, capacity; absent when the NTFF has no allocations
    memory: dict[str, dict] = field(default_factory=dict)

    @property
    def instruction_table(self) -> dict[str, np.ndarray]:
        return self.ntff.table("instruction")

    def row_of_instruction(self, instruction_id: int) -> int | None:
        if self._rows_by_id is None:
            ids = self.trace.slice_arg_values("id")
            waits = self.trace.slice_names() == WAIT_NAME
            self._rows_by_id = {int(i): row for row, (i, w) in enumerate(zip(ids, waits)) if i is not None and not w}
        return self._rows_by_id.get(int(instruction_id))

    def dependencies(self, instruction_id: int) -> tuple[list[Dependency], list[Dependency]]:
        """(predecessors, successors) of an instruction through semaphores."""
        if self._deps is None:
            self._deps = _semaphore_dependencies(self.ntff.table("semaphore"))
        before, after = self._deps
        return before.get(int(instruction_id), []), after.get(int(instruction_id), [])


def build_device_trace(ntff: Ntff) -> DeviceTrace:
    header = ntff.header
    nc = header.get("vnc", 0)
    builder = TraceBuilder(source=str(ntff.path))
    pid = f"NC:{nc}"
    builder.process(pid).name = f"NeuronCore {nc} · {header.get('neff_name', '')}"
    ins = ntff.table("instruction")
    dma = ntff.table("dma")
    queues = _dma_queue_order(ins, dma)
    order = [*queues, *ENGINE_LANES, *_other_core_lanes(ins)]
    tracks = {}
    for position, lane in enumerate(order):
        track = builder.track_for(pid, position)
        info = builder.thread(pid, position)
        base, at, core = lane.partition("@")
        info.name = ENGINE_TITLES.get(base, base) + (f" · {core}" if at and base in ENGINE_LANES else "")
        info.sort_index = position
        info.kind = TrackKind.DEVICE_QUEUE
        tracks[lane] = track
    _add_instructions(builder, ins, dma, tracks)
    _add_dma_counters(builder, pid, dma)
    memory = (_add_memory_counters(builder, pid, ntff.table("allocation"), header.get("memory") or {})
              if "allocation" in ntff.tables else {})  # NTFF 1.0: usage not recorded
    builder.metadata = {"ntff": {k: v for k, v in header.items() if k != "tables"}}
    trace = builder.finish()
    return DeviceTrace(trace=trace, header=header, ntff=ntff, memory=memory)


def _dma_queue_order(ins: dict, dma: dict) -> list[str]:
    names = set(dma.get("queue", np.zeros(0, dtype=object)).tolist())
    if "engine" in ins:
        names |= set(ins["timeline_track"][ins["engine"] == "dma"].tolist())
    return sorted(names, key=_natural_key)


def _other_core_lanes(ins: dict) -> list[str]:
    """Engine lanes of a logical core's other physical cores (LNC=2: ``Vector@nc1``...), core by core."""
    if "timeline_track" not in ins:
        return []
    names = {t for t in set(ins["timeline_track"].tolist()) if "@nc" in t and t.partition("@")[0] in ENGINE_LANES}
    return sorted(names, key=lambda t: (_natural_key(t.partition("@")[2]), ENGINE_LANES.index(t.partition("@")[0])))


def _natural_key(text: str) -> tuple:
    parts = []
    for chunk in re.split(r"(\d+)", text):
        parts.append((0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk))
    return tuple(parts)


def _add_instructions(builder: TraceBuilder, ins: dict, dma: dict, tracks: dict[str, int]) -> None:
    n = len(ins.get("id", ()))
    if n == 0:
        return
    ids = ins["id"].astype(np.int64)
    start = ins["start_ns"].astype(np.float64)
    end = ins["end_ns"].astype(np.float64)
    data_start = _dma_data_start(ids, dma, start)
    is_dma = ins["engine"] == "dma"
    slice_start = np.where(is_dma, data_start, start)
    track = np.array([tracks.get(t, tracks["Sync"]) for t in ins["timeline_track"].tolist()], dtype=np.int32)
    ts = np.rint(slice_start).astype(np.int64)
    dur = np.maximum(np.rint(end).astype(np.int64) - ts, 0)
    name_ids = builder.strings.encode(ins["opcode"].tolist())
    cat_ids = builder.strings.encode([op or "(no op)" for op in ins["framework_op"].tolist()])
    args = [orjson.dumps(a) for a in _instruction_args(ins, is_dma, data_start)]
    builder.add_slices(track, ts, dur, name_ids, cat_ids, args)
    wait = ins["evt_wait_time_ns"].astype(np.float64)
    waiting = np.flatnonzero((wait > 0) & ~is_dma)
    if len(waiting):
        w_end = np.rint(start[waiting]).astype(np.int64)
        w_start = np.rint(start[waiting] - wait[waiting]).astype(np.int64)
        w_args = [orjson.dumps({"instruction": int(ids[i]), "waits": ins["waits"][i], "wait_ns": float(wait[i])})
                  for i in waiting.tolist()]
        builder.add_slices(track[waiting], w_start, np.maximum(w_end - w_start, 0),
                           np.full(len(waiting), builder.intern(WAIT_NAME), np.int32),
                           np.full(len(waiting), builder.intern(WAIT_CATEGORY), np.int32), w_args)


def _dma_data_start(ids: np.ndarray, dma: dict, fallback: np.ndarray) -> np.ndarray:
    out = fallback.copy()
    if not len(dma.get("id", ())):
        return out
    position = {int(i): k for k, i in enumerate(ids.tolist())}
    for dma_id, data_start in zip(dma["id"].tolist(), dma["data_start_ns"].tolist()):
        k = position.get(int(dma_id))
        if k is not None:
            out[k] = data_start
    return out


_ARG_COLUMNS = ("id", "opcode", "engine", "timeline_track", "operands", "framework_op", "start_ns", "end_ns",
                "evt_wait_time_ns", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes",
                "psum_read_bytes", "psum_write_bytes", "raw_flops", "model_flops", "waits", "signals",
                "nki_source_location")


def _instruction_args(ins: dict, is_dma: np.ndarray, data_start: np.ndarray) -> list[dict]:
    columns = {c: ins[c].tolist() for c in _ARG_COLUMNS if c in ins}
    out = []
    for i in range(len(is_dma)):
        args = {c: values[i] for c, values in columns.items()}
        if is_dma[i]:
            args["dma_trigger_ns"] = args.get("start_ns")
            args["dma_data_start_ns"] = float(data_start[i])
        out.append(args)
    return out


def _add_dma_counters(builder: TraceBuilder, pid: str, dma: dict) -> None:
    """Step functions from the DMA table: summed transfer rate and transfers pending."""
    n = len(dma.get("id", ()))
    if n == 0:
        return
    data_start = dma["data_start_ns"].astype(np.float64)
    end = dma["end_ns"].astype(np.float64)
    trigger = dma["trigger_ns"].astype(np.float64)
    size = dma["transfer_bytes"].astype(np.float64)
    rate = np.where(end > data_start, size / np.maximum(end - data_start, 1e-9), 0.0)  # bytes per ns = GB/s
    ts, value = _step(np.concatenate((data_start, end)), np.concatenate((rate, -rate)))
    track = builder.counter_track_for(pid, DMA_THROUGHPUT)
    builder.add_counter_samples(np.full(len(ts), track, np.int32), np.full(len(ts), builder.intern("GB/s"), np.int32),
                                ts, np.maximum(value, 0.0))
    ts, value = _step(np.concatenate((trigger, end)), np.concatenate((np.ones(n), -np.ones(n))))
    track = builder.counter_track_for(pid, PENDING_DMA)
    builder.add_counter_samples(np.full(len(ts), track, np.int32), np.full(len(ts), builder.intern("count"), np.int32),
                                ts, np.maximum(value, 0.0))


def memory_usage(allocation: dict, space: str, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """(times, bytes held after each time) of one on-chip space from the allocation table."""
    mine = np.flatnonzero(allocation["space"] == space) if len(allocation.get("space", ())) else np.zeros(0, int)
    if not len(mine):
        return np.zeros(0, np.int64), np.zeros(0)
    size = allocation["bytes_per_partition"][mine].astype(np.float64) * partitions
    start = allocation["start_ns"][mine].astype(np.float64)
    end = allocation["end_ns"][mine].astype(np.float64)
    ts, value = _step(np.concatenate((start, end)), np.concatenate((size, -size)))
    return ts, np.maximum(value, 0.0)


def _add_memory_counters(builder: TraceBuilder, pid: str, allocation: dict, capacity: dict) -> dict[str, dict]:
    """SBUF and PSUM usage rows: bytes and, when the header has the capacity, percent of it."""
    out: dict[str, dict] = {}
    spaces = allocation.get("space", np.zeros(0, dtype=object))
    partitions = int(capacity.get("partitions") or 128)
    for space, title in MEMORY_COUNTERS:
        ts, value = memory_usage(allocation, space, partitions)
        total = capacity.get(f"{space}_bytes")
        track = builder.counter_track_for(pid, title)
        if not len(ts):  # an unused space is a flat zero row: its absence is worth seeing
            ts, value = np.zeros(1, np.int64), np.zeros(1)
        builder.add_counter_samples(np.full(len(ts), track, np.int32), np.full(len(ts), builder.intern("bytes"), np.int32),
                                    ts, value)
        if total:
            builder.add_counter_samples(np.full(len(ts), track, np.int32),
                                        np.full(len(ts), builder.intern("percent"), np.int32),
                                        ts, 100.0 * value / float(total))
        peak = int(np.argmax(value))
        out[space] = {"peak_bytes": float(value[peak]), "peak_ns": int(ts[peak]), "capacity_bytes": total,
                      "peak_percent": 100.0 * float(value[peak]) / float(total) if total else None,
                      "allocations": int(np.count_nonzero(spaces == space)) if len(spaces) else 0}
    return out


def _step(times: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value after each distinct time of a sum of step changes."""
    ts = np.rint(times).astype(np.int64)
    order = np.argsort(ts, kind="stable")
    ts, level = ts[order], np.cumsum(deltas[order])
    last = np.concatenate((ts[1:] != ts[:-1], [True]))  # keep the level after all changes at a time
    return ts[last], np.round(level[last], 9)


def _semaphore_dependencies(sem: dict) -> tuple[dict, dict]:
    before: dict[int, list[Dependency]] = {}
    after: dict[int, list[Dependency]] = {}
    if not len(sem.get("instruction_id", ())):
        return before, after
    names = sem["semaphore"]
    kinds = sem["kind"]
    for name in np.unique(names).tolist():
        mine = names == name
        signal = np.flatnonzero(mine & (kinds == "signal"))
        wait = np.flatnonzero(mine & (kinds == "wait"))
        if not len(signal) or not len(wait):
            continue
        signal = signal[np.argsort(sem["time_ns"][signal], kind="stable")]
        level = np.maximum.accumulate(np.cumsum(sem["value"][signal].astype(np.int64)))
        found = np.searchsorted(level, sem["value"][wait].astype(np.int64), side="left")
        for w, k in zip(wait.tolist(), found.tolist()):
            if k >= len(signal):
                continue
            waiter = int(sem["instruction_id"][w])
            signaller = int(sem["instruction_id"][signal[k]])
            value = int(sem["value"][w])
            before.setdefault(waiter, []).append(Dependency(signaller, name, value))
            after.setdefault(signaller, []).append(Dependency(waiter, name, value))
    return before, after
