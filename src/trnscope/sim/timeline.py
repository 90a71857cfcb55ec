"""The device timeline: one record per instruction, and the summary Neuron's profiler shows (S25)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hw import HardwareSpec
from ..isa import Program
from .encode import ENGINE_STREAMS, KIND_DMA, KIND_LS, Encoded


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by a set of intervals (merged busy time)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    gaps = np.maximum(0.0, s[1:] - reach[:-1]).sum()
    return float(reach[-1] - s[0] - gaps)


def track_name(program: Program, enc: Encoded, i: int) -> str:
    """Device-trace row of instruction i, named as Neuron Explorer names it. Under LNC=2 every engine
    appears per physical core (S25's ``pcore_idx``): physical core 1's rows are ``Vector@nc1``...
    (its DMA queues are named so by the compiler)."""
    s = int(enc.stream[i])
    if s < len(ENGINE_STREAMS):
        if s == 0:
            name = "Tensor" if enc.kind[i] == KIND_LS else "TensorMatrix"
        else:
            name = ENGINE_STREAMS[s].capitalize() if s != 3 else "GpSimd"
        core = int(enc.pcore[i])
        return f"{name}@nc{core}" if core else name
    return program.queues[s - len(ENGINE_STREAMS)].name


@dataclass
class DeviceTimeline:
    """Columns (NumPy arrays, one entry per instruction in program order) plus the summary."""
    program: Program
    spec: HardwareSpec
    encoded: Encoded
    start_ns: np.ndarray
    end_ns: np.ndarray
    data_start_ns: np.ndarray
    wait_ns: np.ndarray
    summary: dict = field(default_factory=dict)

    @property
    def total_ns(self) -> float:
        return float(self.summary.get("total_time_ns", 0.0))

    @property
    def duration_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    def track(self, i: int) -> str:
        return track_name(self.program, self.encoded, i)

    def records(self) -> list[dict]:
        """One dict per instruction, Explorer ``Instruction`` table style (for exports and tests)."""
        prog, enc = self.program, self.encoded
        out = []
        for i, ins in enumerate(prog.instructions):
            rec = {
                "id": i,
                "start_ns": float(self.start_ns[i]),
                "end_ns": float(self.end_ns[i]),
                "duration_ns": float(self.end_ns[i] - self.start_ns[i]),
                "engine": ins.engine.value,
                "pcore_idx": int(enc.pcore[i]),
                "timeline_track": self.track(i),
                "opcode": ins.OPCODE,
                "operands": ins.describe_operands(),
                "framework_op": prog.ops[ins.op] if 0 <= ins.op < len(prog.ops) else "",
                "evt_wait_time_ns": float(self.wait_ns[i]),
                "hbm_read_bytes": int(enc.hbm_read[i]),
                "hbm_write_bytes": int(enc.hbm_write[i]),
                "sbuf_read_bytes": int(enc.sbuf_read[i]),
                "sbuf_write_bytes": int(enc.sbuf_write[i]),
                "psum_read_bytes": int(enc.psum_read[i]),
                "psum_write_bytes": int(enc.psum_write[i]),
                "raw_flops": float(enc.flops_hw[i]),
                "model_flops": float(enc.flops_model[i]),
                "waits": [[prog.semaphores[s], v] for s, v in ins.waits],
                "signals": [[prog.semaphores[s], v] for s, v in ins.signals],
            }
            if enc.kind[i] == KIND_DMA:
                rec["dma_trigger_ts"] = float(self.start_ns[i])
                rec["dma_data_start_ns"] = float(self.data_start_ns[i])
                rec["transfer_bytes"] = int(max(enc.hbm_read[i] + enc.sbuf_read[i], enc.hbm_write[i] + enc.sbuf_write[i]))
            out.append(rec)
        return out


def summarize(program: Program, spec: HardwareSpec, enc: Encoded, start: np.ndarray, end: np.ndarray,
              data_start: np.ndarray, wait_ns: np.ndarray) -> dict:
    n = enc.n
    total = float(end.max()) if n else 0.0
    summary: dict = {"total_time_ns": total, "instruction_count": n, "target": spec.name,
                     "lnc": spec.lnc, "physical_cores_used": int(len(np.unique(enc.pcore))) if n else 0}
    engines: dict[str, dict] = {}
    for s, name in enumerate(ENGINE_STREAMS):
        mask = enc.stream == s
        count = int(mask.sum())
        busy = union_length(start[mask], end[mask])
        engines[name] = {
            "instruction_count": count,
            "instruction_time_ns": float((end[mask] - start[mask]).sum()),
            "active_time_ns": busy,
            "active_time_percent": 100.0 * busy / total if total else 0.0,
            "semaphore_wait_ns": float(wait_ns[mask].sum()),
        }
    dma = enc.kind == KIND_DMA
    dma_busy = union_length(data_start[dma], end[dma])
    engines["dma"] = {
        "instruction_count": int(dma.sum()),
        "instruction_time_ns": float((end[dma] - start[dma]).sum()),
        "active_time_ns": dma_busy,
        "active_time_percent": 100.0 * dma_busy / total if total else 0.0,
        "semaphore_wait_ns": float(wait_ns[dma].sum()),
    }
    summary["engines"] = engines
    hbm_r, hbm_w = int(enc.hbm_read.sum()), int(enc.hbm_write.sum())
    dma_bytes = int(np.maximum(enc.hbm_read + enc.sbuf_read, enc.hbm_write + enc.sbuf_write)[dma].sum())
    flops_model, flops_hw = float(enc.flops_model.sum()), float(enc.flops_hw.sum())
    seconds = total * 1e-9
    summary.update({
        "hbm_read_bytes": hbm_r,
        "hbm_write_bytes": hbm_w,
        "sbuf_read_bytes": int(enc.sbuf_read.sum()),
        "sbuf_write_bytes": int(enc.sbuf_write.sum()),
        "psum_read_bytes": int(enc.psum_read.sum()),
        "psum_write_bytes": int(enc.psum_write.sum()),
        "dma_transfer_count": int(dma.sum()),
        "dma_transfer_total_bytes": dma_bytes,
        "dma_transfer_average_bytes": dma_bytes / max(1, int(dma.sum())),
        "dma_throughput_bytes_per_s": dma_bytes / seconds if seconds else 0.0,
        "model_flops": flops_model,
        "hardware_flops": flops_hw,
        "mfu_estimated_percent": 100.0 * flops_model / (spec.peak_bf16_flops * seconds) if seconds else 0.0,
        "hfu_estimated_percent": 100.0 * flops_hw / (spec.peak_bf16_flops * seconds) if seconds else 0.0,
        "mbu_estimated_percent": 100.0 * (hbm_r + hbm_w) / (spec.hbm_bytes_per_s_per_core * seconds) if seconds else 0.0,
        "mm_arithmetic_intensity": flops_model / (hbm_r + hbm_w) if hbm_r + hbm_w else 0.0,
    })
    summary["bottleneck"] = bottleneck(engines)
    return summary


def bottleneck(engines: dict[str, dict]) -> str:
    """The busiest resource: the engine (or DMA) with the highest active share of the total time."""
    if not any(e["instruction_count"] for e in engines.values()):
        return "none"
    name = max(engines, key=lambda k: engines[k]["active_time_ns"])
    return "dma/hbm" if name == "dma" else name
