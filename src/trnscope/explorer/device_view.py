"""The device trace view of one NEFF on one NeuronCore: engine and DMA-queue lanes, instructions
coloured by their framework op, semaphore waits, DMA and SBUF/PSUM usage counters, and instruction
dependencies."""

from __future__ import annotations

from collections.abc import Callable

from ..analysis.device_trace import (
    DMA_THROUGHPUT, ENGINE_LANES, ENGINE_TITLES, MEMORY_COUNTERS, PENDING_DMA, WAIT_NAME, DeviceTrace,
)
from ..analysis.instructions import group_time, op_names
from ..analysis.source_lines import instruction_lines
from ..analysis.tensor_peak import flops_by_dtype, header_peak
from .layout import device_layout
from .views import TimelineView

MAX_DEPENDENCIES = 64


class DeviceView(TimelineView):
    def __init__(self, device: DeviceTrace, locate_execution: Callable[[int], dict | None] | None = None) -> None:
        """``locate_execution(seq)``: the execution's slice in the system trace (its ``ts`` and
        ``dur`` on the system view's axis), or None."""
        engines = {ENGINE_TITLES.get(name, name) for name in ENGINE_LANES}
        # device time is ns from the start of the NEFF execution: origin 0
        counters = (DMA_THROUGHPUT, PENDING_DMA, *(title for _, title in MEMORY_COUNTERS))
        super().__init__(device.trace, device_layout(device.trace, engines, counters), origin=0)
        self.device = device
        self.locate_execution = locate_execution

    def describe(self) -> dict:
        header = self.device.header
        ops = sorted({str(op) for op in list(self.device.instruction_table.get("framework_op", [])) if op})
        return {
            **super().describe(),
            "start": 0,
            "neff_id": str(header.get("neff_id", "")),
            "neff_name": header.get("neff_name", ""),
            "nc": header.get("vnc"),
            "target": header.get("target"),
            "neuroncore": header.get("neuroncore"),
            "truncated": bool(header.get("truncated")),
            "instruction_count": header.get("instruction_count"),
            "instructions_written": header.get("instructions_written"),
            "summary": header.get("summary") or {},
            # the TensorE peak for the dtype its matmuls streamed, and its MFU against it (the
            # summary's mfu_estimated_percent is against the BF16 peak)
            **self.peak(),
            "framework_ops": ops,
            # a compiled NEFF holds many ops: each one's instructions and the time they ran
            "op_table": self.op_table(),
            # compiled graphs and NKI kernels: time per line of the user's code
            "line_table": self.line_table(),
            "executions": [self._execution(e) for e in header.get("executions") or []],
            # peak SBUF/PSUM usage per space; empty for NTFFs written before the allocation table
            "memory": self.device.memory,
        }

    def peak(self) -> dict:
        header = self.device.header
        peak = header_peak(header, flops_by_dtype(self.device.instruction_table))
        mfu = float((header.get("summary") or {}).get("mfu_estimated_percent") or 0.0)
        return {"tensor_peak": peak.to_dict(), "mfu_percent": mfu * peak.slowdown, "peak_text": peak.describe()}

    def op_table(self) -> list[dict]:
        """Per originating framework op (with its source line inside a compiled graph): the
        instruction count, the time any of its instructions ran (busy) and its share of the
        NEFF's time, HBM bytes and model FLOPs, busiest first."""
        t = self.device.instruction_table
        if t.get("framework_op") is None:
            return []
        return self._groups(group_time(t, op_names(t)), "op")

    def line_table(self) -> list[dict]:
        """Per source line (an NKI kernel's line, or the line of a compiled graph's op): the same
        figures and the ops of the line; empty when no instruction has a line."""
        t = self.device.instruction_table
        if t.get("framework_op") is None:
            return []
        lines, ops, origin = instruction_lines(t)
        if not any(lines):
            return []
        keys = [(line, o) if line else ("(no source line)", "") for line, o in zip(lines, origin)]
        rows = self._groups(group_time(t, keys), "line")
        by_line: dict[str, set] = {}
        for line, op in zip(lines, ops):
            by_line.setdefault(line or "(no source line)", set()).add(op)
        for row in rows:
            row["line"], row["origin"] = row["line"]
            row["ops"] = sorted(by_line.get(row["line"], ()))
        return rows

    def _groups(self, groups, name: str) -> list[dict]:
        total = float((self.device.header.get("summary") or {}).get("total_time_ns") or 0.0)
        rows = [{name: g.key, "instructions": g.instructions, "busy_ns": g.busy_ns,
                 "share": g.busy_ns / total if total else None, "hbm_bytes": int(g.hbm_bytes),
                 "model_flops": g.model_flops} for g in groups]
        return sorted(rows, key=lambda r: -r["busy_ns"])

    def _execution(self, execution: dict) -> dict:
        """An execution with where it sits in the system trace, so the browser can jump back to
        it. Found by its sequence number, not by converting clocks: the NTFF stores epoch ns, the
        trace its own time base."""
        out = dict(execution)
        seq = execution.get("seq")
        found = self.locate_execution(seq) if self.locate_execution is not None and isinstance(seq, int) else None
        if found is not None:
            out["system_ts"], out["system_dur"], out["system_row"] = found["ts"], found["dur"], found["row"]
        for key in ("start_ns", "end_ns"):
            if key in out:
                out[key] = str(out[key])  # epoch ns do not fit a JavaScript number
        return out

    def extra_details(self, row: int, details: dict) -> dict:
        args = details.get("args") or {}
        if details["name"] == WAIT_NAME:
            waited_for = args.get("instruction")
            target = self.device.row_of_instruction(waited_for) if waited_for is not None else None
            return {"waiting_instruction": self.slice_summary(target) if target is not None else None}
        instruction = args.get("id")
        if instruction is None:
            return {}
        source = instruction_source(args)
        before, after = self.device.dependencies(int(instruction))
        predecessors = [self._dependency(d) for d in before[:MAX_DEPENDENCIES]]
        successors = [self._dependency(d) for d in after[:MAX_DEPENDENCIES]]
        # the browser draws arrows from upstream/downstream: dependencies are this view's flows
        me = self.slice_summary(row)
        return {
            "instruction": int(instruction),
            **({"source": source} if source is not None else {}),
            "predecessors": [p for p in predecessors if p],
            "successors": [s for s in successors if s],
            "upstream": [{**p, "from_row": row, "from": me, "flow": "semaphore"} for p in predecessors if p],
            "downstream": [{**s, "from_row": row, "from": me, "flow": "semaphore"} for s in successors if s],
        }

    def _dependency(self, dependency) -> dict | None:
        target = self.device.row_of_instruction(dependency.instruction)
        if target is None:
            return None  # beyond a truncated NTFF
        item = self.slice_summary(target)
        item.update({"instruction": dependency.instruction, "semaphore": dependency.semaphore,
                     "value": dependency.value, "engine": self.trace.tracks[int(self.trace.slices.track[target])].name})
        return item


def instruction_source(args: dict) -> dict | None:
    """The source line an instruction came from: its NKI kernel line, or the line in its
    compiled-graph label ({line, origin})."""
    lines, _, origin = instruction_lines({"framework_op": [args.get("framework_op") or ""],
                                          "nki_source_location": [args.get("nki_source_location") or ""]})
    return {"line": lines[0], "origin": origin[0]} if lines[0] else None
