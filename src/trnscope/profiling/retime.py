"""What-if re-timing: the same recorded run on another target (``trnscope retime``).

A profile holds what re-lowering needs: every executed NEFF, and beside them (``recipes.json``)
the OpCall each eager NEFF was lowered from (``compiler.recipe``). Re-timing a profile for a target:

1. each NEFF with a recipe is lowered again for the new spec (tiling and instruction choice depend on
   the target) and simulated on it; a NEFF without one (a compiled graph's) is simulated as recorded
   on the new spec, and the output says which;
2. the device timeline is rebuilt against the recorded host intervals: on each NeuronCore, in the
   recorded order, an execution starts at max(its ``nrt_execute`` submit, the end of the execution
   before it) + the new target's per-NEFF start; host-to-device copies keep their durations and
   move only when the queue before them ends later. The host's own intervals are kept as recorded
   (a host that waited on the device would have waited a different time: that is not re-derived);
3. a new profile directory is written: the NTFFs and NEFFs of the new target under the recorded
   file names (so every link in the traces still holds; each NTFF header says ``retimed_from``),
   trace.json and system_trace.json with the moved device slices and flows, and a manifest that
   names the target, the overrides and what was re-lowered.

``--set field=value`` changes the target's spec first (``value`` a number, or ``Nx`` to scale the
field), e.g. ``hbm_bytes_per_s_per_core=2x``; ``hbm_bandwidth`` is accepted for it.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..formats import profile as layout

ALIASES = {"hbm_bandwidth": "hbm_bytes_per_s_per_core", "dma_bandwidth": "dma_bytes_per_ns_per_engine",
           "launch_latency": "neff_launch_latency_ns"}


class RetimeError(ValueError):
    """A profile or option retime cannot use (the message says which and what to do)."""


@dataclass
class RetimeResult:
    out: Path
    target: str
    relowered: list[str] = field(default_factory=list)  # NEFF ids lowered again from their recipe
    resimulated: list[str] = field(default_factory=list)  # NEFF ids without a recipe: re-simulated as recorded
    executions: int = 0
    device_time_before_ns: float = 0.0
    device_time_after_ns: float = 0.0


def target_spec(instance: str, lnc: int | None = None, overrides: list[str] | None = None):
    """The spec to re-time for: ``instance`` with ``overrides`` (``field=value`` / ``field=2x``)."""
    from ..hw import LncConfigError, UnknownInstanceError, logical_spec

    try:
        # None: $NEURON_LOGICAL_NC_CONFIG, else the target's default (2 on trn2, 1 on trn1)
        spec = logical_spec(instance, lnc)
    except UnknownInstanceError as exc:
        raise RetimeError(str(exc)) from None
    except LncConfigError as exc:
        raise RetimeError(f"--lnc: {exc}") from None
    fields = {f.name: f for f in dataclasses.fields(spec)}
    changes = {}
    for item in overrides or []:
        name, sep, value = item.partition("=")
        name = ALIASES.get(name.strip(), name.strip())
        if not sep or name not in fields:
            known = ", ".join(sorted(n for n, f in fields.items() if f.type in ("int", "float", int, float)))
            raise RetimeError(f"--set {item!r}: give field=value with a spec field ({known}; or hbm_bandwidth)")
        current = getattr(spec, name)
        if isinstance(current, bool) or not isinstance(current, (int, float)):
            raise RetimeError(f"--set {name}: only numeric fields can be set (it is {current!r})")
        value = value.strip()
        try:
            number = current * float(value[:-1]) if value.lower().endswith("x") else float(value)
        except ValueError:
            raise RetimeError(f"--set {item!r}: the value must be a number or a factor such as 2x") from None
        if number <= 0:
            raise RetimeError(f"--set {item!r}: the value must be positive")
        changes[name] = type(current)(number) if isinstance(current, int) else number
    return spec.replace(**changes) if changes else spec


def retime(src: Path, out: Path, spec, overrides: list[str] | None = None) -> RetimeResult:
    src, out = Path(src), Path(out)
    manifest_path = src / layout.MANIFEST
    if not manifest_path.is_file() or not (src / layout.FRAMEWORK_TRACE).is_file():
        raise RetimeError(f"{src}: not a trnscope profile directory (no manifest.json / trace.json); pass the folder "
                          f"NeuronProfiler wrote (<out>/<host>_pid_<pid>/<timestamp>)")
    if out.exists():
        raise RetimeError(f"{out} exists; give a new directory for the re-timed profile")
    manifest = orjson.loads(manifest_path.read_bytes())
    shutil.copytree(src, out)
    job = _Retiming(src, out, spec, list(overrides or []), manifest, RetimeResult(out=out, target=spec.name))
    new_time, new_summary = _retime_neffs(job)
    retimed = _retime_traces(job, new_time, new_summary)
    _rewrite_manifest(job, retimed)
    return job.result


@dataclass
class _Retiming:
    """One re-timing: the recorded profile, the copy being rewritten, the target and the result."""

    src: Path
    out: Path
    spec: Any
    overrides: list[str]
    manifest: dict
    result: RetimeResult


def _retime_neffs(job: _Retiming) -> tuple[dict[str, float], dict[str, dict]]:
    """Every NEFF again for the new target (lowered from its recipe, else the recorded Program
    spread over the target's cores), simulated, and its NTFFs rewritten; returns each NEFF's new
    device time and timeline summary."""
    from ..compiler import recipe as recipes
    from ..compiler.lnc import respread
    from ..compiler.lowering import NoLowering, lower
    from ..formats.ntff import read_header as read_ntff_header
    from ..isa import neff as neff_format
    from ..sim import simulate
    from . import ntff

    src, out, spec, result = job.src, job.out, job.spec, job.result
    stored = orjson.loads((src / layout.RECIPES).read_bytes()) if (src / layout.RECIPES).is_file() else {}
    new_time: dict[str, float] = {}
    new_summary: dict[str, dict] = {}
    for neff_id, neff_path in layout.neff_files(src):
        doc = stored.get(neff_id)
        program = None
        if doc is not None:
            try:
                program = lower(recipes.decode(doc), spec)
                result.relowered.append(neff_id)
            except (recipes.NoRecipe, NoLowering):
                program = None
        if program is None:
            # a one-core Program spread over the new target's physical cores, as its compiler would
            program = respread(neff_format.load(neff_path), spec)
            result.resimulated.append(neff_id)
        timeline = simulate(program, spec)
        new_time[neff_id] = float(timeline.total_ns)
        new_summary[neff_id] = timeline.summary
        neff_format.save(program, out / neff_path.name)
        for ntff_path in layout.ntff_files_of(src, neff_id):
            header = {k: v for k, v in read_ntff_header(ntff_path).items() if k not in ("tables", "format", "version", "memory")}
            header.update(target=spec.name, neuroncore=spec.neuroncore, summary=timeline.summary,
                          instruction_count=int(timeline.summary.get("instruction_count", len(program.instructions))),
                          instructions_written=int(timeline.summary.get("instruction_count", len(program.instructions))),
                          truncated=False, retimed_from={"target": header.get("target"), "neff_id": neff_id})
            ntff.write_ntff(out / ntff_path.name, header, timeline)
    return new_time, new_summary


def _retime_traces(job: _Retiming, new_time: dict[str, float], new_summary: dict[str, dict]) -> dict:
    """The device timeline against the recorded host intervals, in both traces; returns the
    ``retimed`` record the traces and the manifest carry."""
    from .framework_trace import write_json_atomic

    src, out, spec = job.src, job.out, job.spec
    system_path = src / layout.SYSTEM_TRACE
    system_doc = orjson.loads(system_path.read_bytes()) if system_path.is_file() else None
    trace_doc = orjson.loads((src / layout.FRAMEWORK_TRACE).read_bytes())
    moved = _schedule(system_doc, trace_doc, new_time, spec, job.result)
    _apply(system_doc, trace_doc, moved, new_summary)
    recorded = trace_doc.get("trnscope")
    retimed = {"from": str(src),
               "recorded": {k: job.manifest.get("window", {}).get(k) for k in ("target", "instance", "neuroncore")},
               "target": spec.name, "overrides": list(job.overrides)}
    if isinstance(recorded, dict):  # what the explorer's cards and compare read first
        recorded.update(target=spec.name, instance=spec.instance, neuroncore=spec.neuroncore, retimed=retimed)
    write_json_atomic(out / layout.FRAMEWORK_TRACE, trace_doc)
    if system_doc is not None:
        write_json_atomic(out / layout.SYSTEM_TRACE, system_doc)
    return retimed


def _rewrite_manifest(job: _Retiming, retimed: dict) -> None:
    """The manifest says what this is: the new target, what was lowered again or re-simulated, and
    the rewritten files' sizes and digests."""
    from .framework_trace import write_json_atomic

    manifest, spec, result, out = job.manifest, job.spec, job.result, job.out
    window = manifest.setdefault("window", {})
    before = {k: window.get(k) for k in ("target", "instance", "neuroncore")}
    window.update(target=spec.name, instance=spec.instance, neuroncore=spec.neuroncore)
    manifest["retimed"] = {**retimed, "recorded": before, "relowered": result.relowered,
                           "resimulated": result.resimulated, "host_intervals": "as recorded"}
    if result.resimulated:
        manifest.setdefault("warnings", []).append(
            f"{len(result.resimulated)} NEFF(s) had no recipe (compiled graphs, or recorded before recipes) and were "
            f"re-simulated as recorded on {spec.name}, not lowered again for it")
    files = []
    for entry in manifest.get("files", []):
        path = out / entry["path"]
        if path.is_file():
            entry = {**entry, **layout.file_entry(path, entry.get("kind", ""))}
        files.append(entry)
    manifest["files"] = files
    write_json_atomic(out / layout.MANIFEST, manifest)


@dataclass
class _Moved:
    seq: int
    start_ns: int  # on the trace's axis (``ts`` x 1000)
    dur_ns: int
    queue_wait_ns: int  # waited behind earlier work after it could have started

    @property
    def ts_us(self) -> float:
        return round(self.start_ns / 1000.0, 3)

    @property
    def dur_us(self) -> float:
        return round(self.dur_ns / 1000.0, 3)


def _ns(us) -> int:
    """A trace time (us with 3 decimals, as trnscope writes them) as whole ns, exactly.

    The queue is rebuilt in integers: trace times are absolute (about 5e12 us on a machine up for
    weeks), where a double is spaced 2^-10 us, about 1 ns, apart, so adding and rounding them as
    floats put about a fifth of the rebuilt starts 1-2 ns off. A parsed time is within half a
    spacing (0.49 ns) of the number written, and so is its product by 1000: rounding it recovers
    the written ns while times stay below 2^53 ns (104 days)."""
    return int(round(float(us) * 1000))


def _schedule(system_doc, trace_doc, new_time: dict[str, float], spec, result: RetimeResult) -> dict[int, _Moved]:
    """New (start, duration) per execution seq, per NeuronCore in recorded order, in whole ns."""
    events = (system_doc or trace_doc)["traceEvents"]
    submits: dict[int, int] = {}
    runs: list[tuple[int, int, int, str | None, int]] = []  # (recorded start, nc, seq, neff_id, dur), ns
    launch_ns = int(spec.neff_launch_latency_ns)
    if system_doc is not None:
        for e in events:
            args = e.get("args") or {}
            if e.get("ph") != "X" or "seq" not in args:
                continue
            if e.get("name") == "nrt_execute":
                submits[int(args["seq"])] = _ns(e["ts"]) + _ns(e.get("dur", 0))
            elif e.get("name") == "nc_exec_running" or e.get("cat") == "dma":
                runs.append((_ns(e["ts"]), int(args.get("nc", 0)), int(args["seq"]),
                             str(args["neff_id"]) if "neff_id" in args else None, _ns(e.get("dur", 0))))
    else:  # a framework trace only: its device-stream slices and their launches
        for e in events:
            args = e.get("args") or {}
            if e.get("ph") != "X" or "correlation" not in args:
                continue
            if e.get("name") == "nrt_execute":
                submits[int(args["correlation"])] = _ns(e["ts"]) + _ns(e.get("dur", 0))
            elif e.get("cat") == "privateuse1_driver":
                runs.append((_ns(e["ts"]), int(args.get("device", 0)), int(args["correlation"]),
                             str(args["neff_id"]) if "neff_id" in args else None, _ns(e.get("dur", 0))))
    free: dict[int, int] = {}
    moved: dict[int, _Moved] = {}
    for start, nc, seq, neff_id, dur in sorted(runs):
        if neff_id is not None and neff_id in new_time and seq in submits:
            # as the runtime queues it: the per-NEFF start is paid once the device is free and the
            # work submitted, so back-to-back executions pay it too (runtime.executor._enqueue)
            submitted, overhead = submits[seq], launch_ns
            new_dur = int(round(new_time[neff_id]))  # whole ns, as the runtime queues it
            result.executions += 1
            result.device_time_before_ns += dur
            result.device_time_after_ns += new_time[neff_id]
        else:  # a copy (or an execution whose NEFF is not in the profile): its recorded length
            submitted, overhead, new_dur = start, 0, dur
        begin = max(submitted, free.get(nc, submitted)) + overhead
        free[nc] = begin + new_dur
        moved[seq] = _Moved(seq, begin, new_dur, begin - submitted - overhead)
    return moved


def _apply(system_doc, trace_doc, moved: dict[int, _Moved], summaries: dict[str, dict]) -> None:
    """Move the device slices and the flows arriving at them."""
    def update(e, key: str, arrivals: dict[tuple[str, int], float]):
        args = e.get("args") or {}
        m = moved.get(int(args[key])) if key in args else None
        if m is None:
            return
        e["ts"], e["dur"] = m.ts_us, m.dur_us
        neff_id = str(args.get("neff_id")) if "neff_id" in args else None
        if neff_id in summaries:
            s = summaries[neff_id]
            args["device_time_ns"] = m.dur_ns
            for name in ("mfu_estimated_percent", "mbu_estimated_percent"):
                if name in args:
                    args[name] = round(float(s.get(name) or 0.0), 4)
            if "bottleneck" in args:
                args["bottleneck"] = s.get("bottleneck", args["bottleneck"])
            if "queue_wait_ns" in args:
                args["queue_wait_ns"] = m.queue_wait_ns
        if "flow_in" in args:
            arrivals[("flow", int(args["flow_in"]))] = m.ts_us
        if key == "correlation":
            arrivals[("ac2g", int(args["correlation"]))] = m.ts_us

    for doc, key, device in ((system_doc, "seq", lambda e: e.get("name") == "nc_exec_running" or e.get("cat") == "dma"),
                             (trace_doc, "correlation", lambda e: e.get("cat") == "privateuse1_driver")):
        if doc is None:
            continue
        arrivals: dict[tuple[str, int], float] = {}
        events = doc["traceEvents"]
        for e in events:
            if e.get("ph") == "X" and device(e):
                update(e, key, arrivals)
        for e in events:
            if e.get("ph") == "f" and "id" in e:
                kind = "ac2g" if e.get("cat") == "ac2g" else "flow"
                ts = arrivals.get((kind, int(e["id"])))
                if ts is not None:
                    e["ts"] = ts
    if system_doc is not None:
        _requeue(system_doc, moved)


def _requeue(system_doc, moved: dict[int, _Moved]) -> None:
    """The execution queue's ``queue_wait`` slices (submitted, waiting for the busy core) as the
    new target's queue has them: moved and resized, dropped where an execution no longer waits,
    added (on its core's queue lane) where one now does."""
    events = system_doc["traceEvents"]
    lanes: dict[int, tuple] = {}  # nc -> (pid, tid) of its queue lane
    lane_of_seq: dict[int, int] = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and e.get("name") == "nrt_execute" and "seq" in args:
            lane_of_seq[int(args["seq"])] = int(args.get("nc", 0))
    kept = []
    waiting = set()
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and e.get("name") == "queue_wait" and "seq" in args:
            seq = int(args["seq"])
            lanes.setdefault(lane_of_seq.get(seq, 0), (e.get("pid"), e.get("tid")))
            m = moved.get(seq)
            if m is not None:
                if m.queue_wait_ns <= 0:
                    continue
                e["ts"] = round((m.start_ns - m.queue_wait_ns) / 1000.0, 3)
                e["dur"] = round(m.queue_wait_ns / 1000.0, 3)
                args["queue_wait_ns"] = m.queue_wait_ns
            waiting.add(seq)
        kept.append(e)
    for seq, m in moved.items():
        lane = lanes.get(lane_of_seq.get(seq, -1))
        if m.queue_wait_ns > 0 and seq not in waiting and lane is not None:
            kept.append({"ph": "X", "cat": "neuron_rt", "name": "queue_wait", "pid": lane[0], "tid": lane[1],
                         "ts": round((m.start_ns - m.queue_wait_ns) / 1000.0, 3), "dur": round(m.queue_wait_ns / 1000.0, 3),
                         "args": {"seq": seq, "queue_wait_ns": m.queue_wait_ns}})
    system_doc["traceEvents"] = kept
