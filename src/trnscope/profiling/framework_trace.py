"""The framework trace (``trace.json``): Kineto's Chrome JSON, on the emulated clock, with device lanes.

Built from the JSON Kineto itself writes (``kineto_results.save``), so every field torch records
stays as torch writes it (``Input Dims``/shapes with ``record_shapes``, ``python_function`` frames
with ``with_stack``, ``ProfilerStep#N``, ``fwdbwd`` flows, metadata). trnscope then

* drops emulator machinery and folds structured ops (:func:`.correlate.classify`, the same
  classification ``key_averages()`` uses), and the allocator's ``[memory]`` instants recorded
  inside emulator work (the host numerics' scratch tensors);
* moves every timestamp onto the emulated clock (``ts`` stays in Kineto's units: µs from
  ``baseTimeNanoseconds``; emulated ns are put on the epoch axis with the window's offset);
* adds, per completed device execution of the window:
  - on the dispatching thread, nested in the op: a runtime call ``nrt_execute`` (kernels),
    ``nrt_tensor_write``/``nrt_tensor_read`` (copies) or ``cpu_fallback`` (ops without a kernel),
    category ``privateuse1_runtime``;
  - on the device process ``neuron:<nc>`` (pid = NeuronCore index, as Kineto numbers GPUs), lane
    ``Stream 0``: the NEFF execution (named by its program) or the memcpy, category
    ``privateuse1_driver``, with NEFF id, framework op, queue wait and summary metrics in ``args``;
  - an ``ac2g`` flow (``s`` at the runtime call, ``f`` with ``bp: "e"`` at the device event), id =
    the execution's sequence number, also in ``args.correlation`` of both ends.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson

from ..formats.profile import neff_file_name, temporary_name
from ..hosttime import MIXED
from ..hosttime import NOTES as HOST_TIME_NOTES
from ..trace.timeunits import us_to_ns
from .correlate import classify, emulator_functions
from .events import device_row_name

HOST_CATEGORIES_SKIP = {"Trace"}
MEMORY_EVENT = "[memory]"  # Kineto's allocator instants (profile_memory=True)
RUNTIME_CAT = "privateuse1_runtime"
DRIVER_CAT = "privateuse1_driver"
RUNTIME_CALL = {"kernel": "nrt_execute", "h2d": "nrt_tensor_write", "d2h": "nrt_tensor_read",
                "fallback": "cpu_fallback"}


def device_pid(window, nc: int):
    return nc if nc != window.pid else 1_000_000 + nc


class FrameworkView:
    """Kineto's events of one window, classified and on the emulated clock (shared by the exporters)."""

    def __init__(self, prof, window) -> None:
        self.window = window
        raw = _kineto_json(prof)
        self.meta = {k: v for k, v in raw.items() if k != "traceEvents"}
        self.base = int(self.meta.get("baseTimeNanoseconds", 0) or 0)
        cm = window.clockmap
        events = raw.get("traceEvents", [])
        host_idx = [i for i, e in enumerate(events)
                    if e.get("ph") == "X" and isinstance(e.get("pid"), int) and e.get("cat") not in HOST_CATEGORIES_SKIP]
        starts = [self.epoch(events[i]["ts"]) for i in host_idx]
        ends = [self.epoch(events[i]["ts"] + events[i].get("dur", 0)) for i in host_idx]
        cls = classify([(events[i]["pid"], events[i].get("tid")) for i in host_idx], starts, ends,
                       [events[i].get("name", "") for i in host_idx],
                       [events[i].get("cat") == "python_function" for i in host_idx],
                       in_cut=cm.in_cut, machinery=emulator_functions(), span_seqs=window.span_of)
        self.dropped_internal = cls.internal
        self.folded = cls.folded
        drop = set()
        for k, i in enumerate(host_idx):
            e = events[i]
            if not cls.keep[k]:
                drop.add(i)
                continue
            s, t = cm.emulated(starts[k]), cm.emulated(ends[k])
            e["ts"] = self.ts(s)
            e["dur"] = round(max(0, t - s) / 1000.0, 3)
        host_set = set(host_idx)
        for i, e in enumerate(events):  # everything else that has a time: spans, instants, flows, counters
            if i in host_set or "ts" not in e or e.get("ph") == "M":
                continue
            a = self.epoch(e["ts"])
            if e.get("name") == MEMORY_EVENT and cm.in_cut(a, a):
                # an allocation made inside emulator work is the emulator's own (the host numerics'
                # scratch tensors: a NeuronCore backend allocates nothing on the host there);
                # kept, each would be a spike of CPU memory at one emulated instant
                drop.add(i)
                self.dropped_internal += 1
                continue
            s = cm.emulated(a)
            if e.get("ph") == "X":
                t = cm.emulated(a + int(round(float(e.get("dur", 0)) * 1000)))
                e["dur"] = self.dur(s, t)
            e["ts"] = self.ts(s)
        self._clip_session_span(events)
        self.events = [e for i, e in enumerate(events) if i not in drop]
        # the op that dispatched each execution (an event dict, already remapped)
        self.dispatch_op = {seq: events[host_idx[k]] for seq, k in cls.dispatcher.items() if k >= 0}
        self.pid = next((e["pid"] for e in self.events if e.get("ph") == "X" and isinstance(e.get("pid"), int)),
                        window.pid)

    def _clip_session_span(self, events: list) -> None:
        """Kineto's session span (``PyTorch Profiler (0)``, cat ``Trace``) and its ``Iteration
        Start`` instant are stamped when Kineto starts, before trnscope's window opens, and the
        span (and the ``Record Window End`` instant) run on through torch's processing after it
        closes. Kineto's start-up takes from
        0.2 ms to several ms of host time (longer after large numerics or a garbage collection),
        so left as is the span makes viewers, which size the timeline by the earliest event,
        open on a stretch with no events that is not idle device time but the profiler starting
        (up to 80 % of a short RMSNorm window). Nothing outside the window is recorded, so the
        span is clipped to it."""
        w = self.window
        lo = self.ts(w.start_em)
        hi = self.ts(w.close_em if w.close_em is not None else w.start_em)
        for e in events:
            if e.get("ph") == "X" and e.get("cat") == "Trace":
                a = min(max(e["ts"], lo), hi)
                b = max(min(e["ts"] + float(e.get("dur", 0)), hi), a)
                # in whole ns: far from the base, two floats' difference can be 1 ns off
                ns_a, ns_b = us_to_ns([a, b]).tolist()
                e["ts"], e["dur"] = a, (ns_b - ns_a) / 1000.0
            elif e.get("ph") == "i" and str(e.get("name", "")).startswith(("Iteration Start", "Record Window End")):
                e["ts"] = min(max(e["ts"], lo), hi)

    # --- time axes ---------------------------------------------------------------------------
    def epoch(self, ts_us) -> int:
        return self.base + int(round(float(ts_us) * 1000))

    def ts(self, emulated_ns: int) -> float:
        return round((self.window.clockmap.to_epoch(emulated_ns) - self.base) / 1000.0, 3)

    def dur(self, a: int, b: int) -> float:
        return round(max(0, b - a) / 1000.0, 3)

    # --- device lanes ------------------------------------------------------------------------
    def lane_tid(self, rec) -> int:
        op = self.dispatch_op.get(rec.seq)
        if op is not None:
            return op.get("tid")
        return self.window.native_tid.get(rec.thread, self.window.pid)

    def device_events(self, ntff_files: dict | None = None) -> list[dict]:
        w = self.window
        out: list[dict] = []
        if not w.capture_device:
            return out
        from ..hw import get_spec

        spec = get_spec()
        for nc in w.lane_cores():
            pid = device_pid(w, nc)
            out += [
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"neuron:{nc}"}},
                {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                 "args": {"labels": f"NeuronCore {nc} ({spec.neuroncore}, {spec.name}, emulated)"}},
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 5000000 + nc}},
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "Stream 0"}},
            ]
        for r in w.records:
            tid = self.lane_tid(r)
            op = self.dispatch_op.get(r.seq)
            ext = op.get("args", {}).get("External id") if op is not None else None
            call = RUNTIME_CALL.get(r.kind, r.kind)
            args = {"correlation": r.seq, "device": r.device, "op": r.op}
            if ext is not None:
                args["External id"] = ext
            source = w.source_args(r.seq)
            args.update(source)
            if r.kind == "kernel":
                args.update({"neff_id": str(r.neff_id), "neff_name": r.neff_name, "compile_ns": r.compile_ns})
            elif r.kind == "fallback":
                args.update({"fallback": True, "reason": r.neff_name or "no neuron kernel"})
            else:
                args["bytes"] = r.bytes
            out.append({"ph": "X", "cat": RUNTIME_CAT, "name": call, "pid": self.pid, "tid": tid,
                        "ts": self.ts(r.host_start_ns), "dur": self.dur(r.host_start_ns, r.host_end_ns), "args": args})
            if r.kind == "fallback":
                continue
            pid = device_pid(w, r.device)
            dargs = {"device": r.device, "stream": 0, "correlation": r.seq, "op": r.op}
            if ext is not None:
                dargs["External id"] = ext
            dargs.update(source)
            if r.kind == "kernel":
                s = r.timeline.summary if r.timeline is not None else {}
                dargs.update({
                    "neff_id": str(r.neff_id), "queue_wait_ns": r.queue_wait_ns,
                    "device_time_ns": r.device_end_ns - r.device_start_ns,
                    "instructions": s.get("instruction_count", 0),
                    "mfu_estimated_percent": round(s.get("mfu_estimated_percent", 0.0), 4),
                    "mbu_estimated_percent": round(s.get("mbu_estimated_percent", 0.0), 4),
                    "hbm_read_bytes": s.get("hbm_read_bytes", 0), "hbm_write_bytes": s.get("hbm_write_bytes", 0),
                    "bottleneck": s.get("bottleneck", ""),
                })
                if ntff_files and (r.neff_id, r.device) in ntff_files:
                    dargs["ntff"] = ntff_files[(r.neff_id, r.device)]
                    dargs["neff"] = neff_file_name(r.neff_id)
            else:
                dargs["bytes"] = r.bytes
            ts_dev = self.ts(r.device_start_ns)
            out.append({"ph": "X", "cat": DRIVER_CAT, "name": device_row_name(r), "pid": pid, "tid": 0,
                        "ts": ts_dev, "dur": self.dur(r.device_start_ns, r.device_end_ns), "args": dargs})
            out.append({"ph": "s", "id": r.seq, "pid": self.pid, "tid": tid, "ts": self.ts(r.host_start_ns),
                        "cat": "ac2g", "name": "ac2g"})
            out.append({"ph": "f", "id": r.seq, "pid": pid, "tid": 0, "ts": ts_dev, "cat": "ac2g",
                        "name": "ac2g", "bp": "e"})
        return out

    def document(self, ntff_files: dict | None = None, trace_name: str | None = None) -> dict:
        w = self.window
        # Kineto writes placeholder process metadata (labels "GPU <n>") for pids 0..15 whether or
        # not a device exists; on a Neuron trace they are empty "GPU" lanes. They are dropped, and
        # the NeuronCores with lanes get their own metadata (device_events).
        placeholders = {e.get("pid") for e in self.events
                        if e.get("ph") == "M" and e.get("name") == "process_labels"
                        and (e.get("args") or {}).get("labels") == f"GPU {e.get('pid')}"}
        placeholders.discard(self.pid)
        events = [e for e in self.events if not (e.get("ph") == "M" and e.get("pid") in placeholders)]
        events += self.device_events(ntff_files)
        doc = dict(self.meta)
        if w.capture_device:
            from ..device import memory
            from ..hw import get_spec

            spec = get_spec()
            props = list(doc.get("deviceProperties") or [])
            for nc in sorted(set(w.cores)):
                try:
                    hbm = memory.capacity(nc)
                except Exception:
                    hbm = spec.hbm_bytes_per_core
                props.append({"id": nc, "name": f"{spec.neuroncore} (emulated {spec.name})", "backend": "neuron",
                              "totalGlobalMem": hbm})
            doc["deviceProperties"] = props
        if trace_name is not None:
            doc["traceName"] = trace_name
        doc["trnscope"] = self.window_metadata()
        doc["traceEvents"] = events
        from ..distributed.trace_events import add_to_document

        add_to_document(self, doc, device_pid)  # distributedInfo and collectives, in a multi-rank run
        return doc

    def window_metadata(self) -> dict:
        w = self.window
        return {
            "clock": "emulated",
            "clock_note": HOST_TIME_NOTES.get(w.host_time, HOST_TIME_NOTES[MIXED]),
            "host_time": w.host_time_metadata(),
            **w.target_metadata(),
            "epoch_offset_ns": w.clockmap.offset,
            "window_start_ns": w.clockmap.to_epoch(w.start_em),
            "window_end_ns": w.clockmap.to_epoch(w.close_em if w.close_em is not None else w.start_em),
            "neuron_cores": w.cores,
            "active_neuron_cores": w.lane_cores(),
            "executions": len(w.records),
            "missing_in_flight": len(w.missing),
            "dropped_emulator_events": self.dropped_internal,
            "folded_structured_ops": self.folded,
        }


def _kineto_json(prof) -> dict:
    """What ``kineto_results.save`` writes, parsed."""
    fd, tmp = tempfile.mkstemp(prefix="trnscope_kineto_", suffix=".json")
    os.close(fd)
    try:
        prof.kineto_results.save(tmp)
        data = Path(tmp).read_bytes()
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    doc = orjson.loads(data) if data.strip() else {}
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _dumps(doc) -> bytes:
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    if info is None:
        return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    # distributedInfo first, spaced as Kineto writes it: HTA finds a file's rank with the pattern
    # '"rank":\s+(\d+)' on the raw text, and orjson writes no spaces
    import json

    body = orjson.dumps({k: v for k, v in doc.items() if k != "distributedInfo"}, option=orjson.OPT_SERIALIZE_NUMPY)
    head = b'{"distributedInfo": ' + json.dumps(info, default=str).encode()
    return head + (b", " + body[1:] if body != b"{}" else b"}")


def write_json_atomic(path, doc) -> int:
    """Write ``doc`` (or bytes already serialised) to ``path`` under a temporary name, then rename."""
    path = Path(path)
    tmp = temporary_name(path, str(os.getpid()))
    data = doc if isinstance(doc, bytes) else _dumps(doc)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half-written copy
        raise
    return len(data)


def write_framework_trace(prof, window, path, ntff_files: dict | None = None, view: FrameworkView | None = None):
    """Write the framework trace of ``window`` (``prof.export_chrome_trace`` lands here)."""
    view = view or FrameworkView(prof, window)
    write_json_atomic(path, view.document(ntff_files, trace_name=str(path)))
    return view
