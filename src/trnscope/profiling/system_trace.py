"""The system trace (``system_trace.json``): what Neuron keeps in ``ntrace.pb`` + ``trace_info.pb``.

A Chrome trace-event JSON document (so Perfetto and chrome://tracing open it as is) whose lanes are
named as Neuron Explorer's system-trace tracks, under one process ``<host>/PID:<pid>``:

=============================================  ==========================================================
lane (thread_name)                             events
=============================================  ==========================================================
``framework/TID:<tid>``                        the ops that dispatched device work (cat ``framework``);
                                               ``cpu_fallback: <op>`` for ops without a device kernel
``neuron_rt/NC:<n>``                           ``nrt_execute`` per NEFF dispatch, with a ``neff_compile``
                                               child when the call compiled (cache miss) and instants
                                               ``nrt_load`` (first execution of the NEFF) or
                                               ``neff_cache_hit``; ``nrt_tensor_write``/``nrt_tensor_read``
                                               for copies (cat ``neuron_rt``)
``neuron_rt/NC:<n>/exec_queue``                ``queue_wait``: submitted NEFF waiting for the busy core
``neuron_hw/NC:<n>``                           ``nc_exec_running`` per NEFF execution (cat ``neuron_hw``)
``NC:<n>/host_to_device_transfers``            ``host_to_device`` copies (cat ``dma``)
``NC:<n>/device_to_host_transfers``            ``device_to_host`` copies
=============================================  ==========================================================

Lanes exist for the NeuronCores that completed work in the window, plus any that
``capture_enabled_for_nc`` names explicitly (``Window.lane_cores``); of a core's lanes, the queue
and transfer lanes appear only when they hold events.

Counters (``ph: "C"``): ``NC:<n>/hbm_usage`` (bytes and percent of HBM, sampled at each runtime
call), and with CPU_UTIL / HOST_MEMORY ``host_cpu_util`` (all CPUs) and ``host_memory``.

Flows (``ph: "s"``/``"f"``, ``bp: "e"``, cat ``neuron_flow``): framework op -> runtime call (id
``2*seq``) and runtime call -> hardware execution or transfer (id ``2*seq+1``); every event of a
chain also carries ``flow_in``/``flow_out`` and the execution's ``seq`` in ``args``.

Timestamps: ``ts`` in µs from ``baseTimeNanoseconds`` (the framework trace's base), on the
emulated clock. The top-level ``neuron`` object holds the schema name, version, instance and
process ids, NeuronCores, per-NEFF execution statistics and the lane table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..formats.profile import SYSTEM_TRACE_SCHEMA, neff_file_name

SCHEMA, VERSION = SYSTEM_TRACE_SCHEMA
LANE_BASE = 1 << 30


def _lane_ids(nc: int) -> dict[str, int]:
    b = LANE_BASE + nc * 16
    return {"rt": b, "queue": b + 1, "hw": b + 2, "h2d": b + 3, "d2h": b + 4}


@dataclass
class _SystemTrace:
    """The system trace of one recording window while it is built: the events in the order they
    are emitted, and what later records and the closing tables need to know of earlier ones."""

    view: Any                    # the framework trace's view of the window (FrameworkView)
    ntff_files: dict | None
    events: list[dict] = field(default_factory=list)
    framework_tids: set = field(default_factory=set)
    emitted_ops: set[int] = field(default_factory=set)
    seen_neffs: set[int] = field(default_factory=set)
    neffs: dict[int, dict] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.view.pid

    def ts(self, ns: int) -> float:
        return self.view.ts(ns)

    def dur(self, start_ns: int, end_ns: int) -> float:
        return self.view.dur(start_ns, end_ns)

    def add_record(self, r) -> None:
        """One runtime record: its framework op (once), a CPU fallback, or a runtime call with its
        device execution or transfer, chained by flows."""
        view, pid, events = self.view, self.pid, self.events
        lanes = _lane_ids(r.device)
        tid = view.lane_tid(r)
        self.framework_tids.add(tid)
        op = view.dispatch_op.get(r.seq)
        a, b = 2 * r.seq, 2 * r.seq + 1
        if op is not None:
            self.add_framework_op(op, tid)
            if r.kind != "fallback":
                events.append({"ph": "s", "cat": "neuron_flow", "name": "framework_to_runtime", "id": a,
                               "pid": pid, "tid": tid, "ts": self.ts(r.host_start_ns)})
        if r.kind == "fallback":
            events.append({"ph": "X", "cat": "cpu_fallback", "name": f"cpu_fallback: {r.op}", "pid": pid, "tid": tid,
                           "ts": self.ts(r.host_start_ns), "dur": self.dur(r.host_start_ns, r.host_end_ns),
                           "args": {"seq": r.seq, "op": r.op, "fallback": True,
                                    "reason": r.neff_name or "no neuron kernel", "nc": r.device}})
            return
        rt_args = {"seq": r.seq, "nc": r.device, "op": r.op, "flow_out": b}
        source = view.window.source_args(r.seq)
        rt_args.update(source)
        if op is not None:
            rt_args["flow_in"] = a
        if r.kind == "kernel":
            self.add_execution(r, lanes, rt_args, source)
        else:
            self.add_transfer(r, lanes, rt_args)
        if op is not None:
            events.append({"ph": "f", "bp": "e", "cat": "neuron_flow", "name": "framework_to_runtime", "id": a,
                           "pid": pid, "tid": lanes["rt"], "ts": self.ts(r.host_start_ns)})

    def add_framework_op(self, op: dict, tid) -> None:
        """The framework op that dispatched the work, once however many records it made."""
        if id(op) in self.emitted_ops:
            return
        self.emitted_ops.add(id(op))
        oargs = {"External id": op.get("args", {}).get("External id")}
        for k in ("Input Dims", "Input type"):
            if k in op.get("args", {}):
                oargs[k] = op["args"][k]
        self.events.append({"ph": "X", "cat": "framework", "name": op.get("name", ""), "pid": self.pid, "tid": tid,
                            "ts": op["ts"], "dur": op.get("dur", 0), "args": oargs})

    def add_execution(self, r, lanes: dict[str, int], rt_args: dict, source: dict) -> None:
        """nrt_execute (with neff_compile and nrt_load on a cache miss, neff_cache_hit otherwise),
        the queue wait, and nc_exec_running on the hardware lane; counted in the NEFF table."""
        pid, events, ts, dur = self.pid, self.events, self.ts, self.dur
        b = 2 * r.seq + 1
        first = r.neff_id not in self.seen_neffs
        self.seen_neffs.add(r.neff_id)
        rt_args.update({"neff_id": str(r.neff_id), "neff_name": r.neff_name, "compile_ns": r.compile_ns,
                        "cache": "miss" if r.compile_ns > 0 else "hit"})
        events.append({"ph": "X", "cat": "neuron_rt", "name": "nrt_execute", "pid": pid, "tid": lanes["rt"],
                       "ts": ts(r.host_start_ns), "dur": dur(r.host_start_ns, r.host_end_ns), "args": rt_args})
        if r.compile_ns > 0:
            c_end = min(r.host_start_ns + r.compile_ns, r.host_end_ns)
            events.append({"ph": "X", "cat": "neuron_rt", "name": "neff_compile", "pid": pid, "tid": lanes["rt"],
                           "ts": ts(r.host_start_ns), "dur": dur(r.host_start_ns, c_end),
                           "args": {"seq": r.seq, "neff_id": str(r.neff_id), "compile_ns": r.compile_ns}})
            events.append({"ph": "i", "s": "t", "cat": "neuron_rt", "name": "nrt_load", "pid": pid,
                           "tid": lanes["rt"], "ts": ts(c_end), "args": {"seq": r.seq, "neff_id": str(r.neff_id)}})
        else:
            events.append({"ph": "i", "s": "t", "cat": "neuron_rt", "name": "neff_cache_hit", "pid": pid,
                           "tid": lanes["rt"], "ts": ts(r.host_start_ns),
                           "args": {"seq": r.seq, "neff_id": str(r.neff_id), "first_in_window": first}})
        if r.queue_wait_ns > 0:
            q0 = r.device_start_ns - r.queue_wait_ns
            events.append({"ph": "X", "cat": "neuron_rt", "name": "queue_wait", "pid": pid, "tid": lanes["queue"],
                           "ts": ts(q0), "dur": dur(q0, r.device_start_ns),
                           "args": {"seq": r.seq, "neff_id": str(r.neff_id), "queue_wait_ns": r.queue_wait_ns}})
        s = r.timeline.summary if r.timeline is not None else {}
        hw_args = {"seq": r.seq, "nc": r.device, "neff_id": str(r.neff_id), "neff_name": r.neff_name,
                   "framework_op": r.op, **source,
                   "flow_in": b, "device_time_ns": r.device_end_ns - r.device_start_ns,
                   "instruction_count": s.get("instruction_count", 0),
                   "mfu_estimated_percent": round(s.get("mfu_estimated_percent", 0.0), 4),
                   "mbu_estimated_percent": round(s.get("mbu_estimated_percent", 0.0), 4),
                   "bottleneck": s.get("bottleneck", ""),
                   # LNC=2: the execution ran on this many of the logical core's physical cores
                   "lnc": s.get("lnc", 1), "physical_cores_used": s.get("physical_cores_used", 1)}
        ntff_files = self.ntff_files
        if ntff_files and (r.neff_id, r.device) in ntff_files:
            hw_args["ntff"] = ntff_files[(r.neff_id, r.device)]
            hw_args["neff"] = neff_file_name(r.neff_id)
        events.append({"ph": "X", "cat": "neuron_hw", "name": "nc_exec_running", "pid": pid, "tid": lanes["hw"],
                       "ts": ts(r.device_start_ns), "dur": dur(r.device_start_ns, r.device_end_ns), "args": hw_args})
        self.add_runtime_to_hardware(r, lanes["rt"], lanes["hw"])
        n = self.neffs.setdefault(r.neff_id, {"neff_name": r.neff_name, "framework_op": r.op, "executions": 0,
                                              "device_time_ns": 0, "cores": set(),
                                              "neff": neff_file_name(r.neff_id)})
        n["executions"] += 1
        n["device_time_ns"] += r.device_end_ns - r.device_start_ns
        n["cores"].add(r.device)

    def add_transfer(self, r, lanes: dict[str, int], rt_args: dict) -> None:
        """nrt_tensor_write/read and the DMA on the core's transfer lane."""
        pid, events, ts, dur = self.pid, self.events, self.ts, self.dur
        call = "nrt_tensor_write" if r.kind == "h2d" else "nrt_tensor_read"
        lane = lanes["h2d"] if r.kind == "h2d" else lanes["d2h"]
        name = "host_to_device" if r.kind == "h2d" else "device_to_host"
        rt_args["bytes"] = r.bytes
        events.append({"ph": "X", "cat": "neuron_rt", "name": call, "pid": pid, "tid": lanes["rt"],
                       "ts": ts(r.host_start_ns), "dur": dur(r.host_start_ns, r.host_end_ns), "args": rt_args})
        d = max(1, r.device_end_ns - r.device_start_ns)
        events.append({"ph": "X", "cat": "dma", "name": name, "pid": pid, "tid": lane,
                       "ts": ts(r.device_start_ns), "dur": dur(r.device_start_ns, r.device_end_ns),
                       "args": {"seq": r.seq, "nc": r.device, "bytes": r.bytes, "flow_in": 2 * r.seq + 1,
                                "bandwidth_gbps": round(r.bytes / d, 4), "op": r.op}})
        self.add_runtime_to_hardware(r, lanes["rt"], lane)

    def add_runtime_to_hardware(self, r, rt_lane: int, device_lane: int) -> None:
        b = 2 * r.seq + 1
        self.events.append({"ph": "s", "cat": "neuron_flow", "name": "runtime_to_hardware", "id": b, "pid": self.pid,
                            "tid": rt_lane, "ts": self.ts(r.host_start_ns)})
        self.events.append({"ph": "f", "bp": "e", "cat": "neuron_flow", "name": "runtime_to_hardware", "id": b,
                            "pid": self.pid, "tid": device_lane, "ts": self.ts(r.device_start_ns)})

    def lane_metadata(self, cores) -> list[dict]:
        """The process name, and the names and order of the lanes: runtime and hardware for every
        NeuronCore with lanes; queue and transfer lanes only where something happened on them (most
        cores never wait or copy in a window); the framework threads."""
        w, pid = self.view.window, self.pid
        meta: list[dict] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"{w.hostname}/PID:{pid}"}},
        ]
        used_tids = {e.get("tid") for e in self.events}
        for nc in cores:
            ids = _lane_ids(nc)
            for key, name, order in (("rt", f"neuron_rt/NC:{nc}", 10), ("queue", f"neuron_rt/NC:{nc}/exec_queue", 11),
                                     ("hw", f"neuron_hw/NC:{nc}", 12), ("h2d", f"NC:{nc}/host_to_device_transfers", 13),
                                     ("d2h", f"NC:{nc}/device_to_host_transfers", 14)):
                if key not in ("rt", "hw") and ids[key] not in used_tids:
                    continue
                meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": ids[key], "args": {"name": name}})
                meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": ids[key],
                             "args": {"sort_index": 1000 + nc * 100 + order}})
        for tid in sorted(self.framework_tids, key=str):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                         "args": {"name": f"framework/TID:{tid}"}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": 100}})
        return meta

    def add_counters(self) -> None:
        """HBM usage per NeuronCore, and the host samples (CPU_UTIL / HOST_MEMORY modes)."""
        from ..hw import get_spec

        w, pid, events, ts = self.view.window, self.pid, self.events, self.ts
        hbm_total = get_spec().hbm_bytes_per_core
        for t, nc, nbytes in sorted(w.hbm):
            if w.close_em is not None and t > w.close_em:
                continue
            events.append({"ph": "C", "name": f"NC:{nc}/hbm_usage", "pid": pid, "tid": 0, "ts": ts(t),
                           "args": {"bytes": nbytes, "percent": round(100.0 * nbytes / hbm_total, 6)}})
        if w.sampler is not None:  # stamped on the emulated clock already (see .hostsamples)
            for t0, _t1, cpu, util in w.sampler.cpu_samples:
                if cpu == -1:
                    events.append({"ph": "C", "name": "host_cpu_util", "pid": pid, "tid": 0,
                                   "ts": ts(t0), "args": {"util": round(util, 3)}})
            for t, vals in w.sampler.mem_samples:
                events.append({"ph": "C", "name": "host_memory", "pid": pid, "tid": 0, "ts": ts(t),
                               "args": {"rss": vals.get("rss", 0)}})

    def neff_table(self) -> dict[str, dict]:
        ntff_files = self.ntff_files
        return {str(k): {**v, "cores": sorted(v["cores"]),
                         "ntff": [ntff_files[(k, c)] for c in sorted(v["cores"]) if ntff_files and (k, c) in ntff_files]}
                for k, v in self.neffs.items()}


def build_system_trace(view, ntff_files: dict | None = None) -> dict:
    w = view.window
    cores = w.lane_cores()
    st = _SystemTrace(view, ntff_files)
    for r in w.records:
        st.add_record(r)
    meta = st.lane_metadata(cores)
    st.add_counters()
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": view.base,
        "neuron": {
            "schema": SCHEMA,
            "version": VERSION,
            "instance_id": w.hostname,
            "process_id": w.pid,
            "neuron_cores": cores,
            "captured_neuron_cores": w.cores,
            "clock": "emulated",
            "window": view.window_metadata(),
            "lanes": {"framework": "framework/TID:<tid>", "runtime": "neuron_rt/NC:<n>",
                      "queue": "neuron_rt/NC:<n>/exec_queue", "hardware": "neuron_hw/NC:<n>",
                      "host_to_device": "NC:<n>/host_to_device_transfers",
                      "device_to_host": "NC:<n>/device_to_host_transfers"},
            "neffs": st.neff_table(),
            "missing_in_flight": [{"seq": r.seq, "kind": r.kind, "op": r.op, "neff_id": str(r.neff_id)}
                                  for r in w.missing],
        },
        "traceEvents": meta + st.events,
    }


__all__ = ["build_system_trace"]
