"""What every kernel run can tell beyond its numbers: simulated time, engine activity, MFU/MBU, cost per
kernel source line, and a profile directory (NEFF + NTFF) that ``trnscope view`` opens."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..sim.encode import ENGINE_STREAMS


class RunReport:
    """One specialised kernel and its simulated timeline (``kernel.last_run`` / ``kernel.timeline(...)``)."""

    def __init__(self, traced, timeline) -> None:
        self.traced = traced
        self.timeline = timeline

    # --- headline figures ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.traced.name

    @property
    def program(self):
        return self.traced.program

    @property
    def target(self) -> str:
        return self.traced.spec.name

    @property
    def summary(self) -> dict:
        return self.timeline.summary

    @property
    def total_ns(self) -> float:
        return self.timeline.total_ns

    @property
    def total_ms(self) -> float:
        return self.total_ns / 1e6

    @property
    def instruction_count(self) -> int:
        return len(self.program.instructions)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, percent of the target's peak BF16 TensorE rate (S25 definition)."""
        return float(self.summary.get("mfu_estimated_percent", 0.0))

    @property
    def hfu(self) -> float:
        return float(self.summary.get("hfu_estimated_percent", 0.0))

    @property
    def mbu(self) -> float:
        """HBM bandwidth utilisation, percent of the core's HBM bandwidth."""
        return float(self.summary.get("mbu_estimated_percent", 0.0))

    def engines(self) -> dict[str, float]:
        """Active (busy) ns per engine and for DMA."""
        return {k: float(v["active_time_ns"]) for k, v in self.summary["engines"].items()}

    @property
    def bottleneck(self) -> str:
        return str(self.summary.get("bottleneck", ""))

    # --- per source line ---------------------------------------------------------------------------------
    def by_source(self) -> list[dict]:
        """Per kernel source line: instruction count and summed instruction time per engine (ns), costliest
        first."""
        tl = self.timeline
        locs = self.traced.tracer.locs
        src = np.asarray(self.traced.source, np.int64)
        # a DMA's row counts its data movement, not the wait for an engine after its trigger
        dur = tl.end_ns - np.where(tl.encoded.kind == 3, np.maximum(tl.data_start_ns, tl.start_ns), tl.start_ns)
        stream = tl.encoded.stream
        names = list(ENGINE_STREAMS)
        rows = {}
        for i in np.unique(src):
            mask = src == i
            f, line, fn = locs[int(i)]
            per: dict = {}
            for s in np.unique(stream[mask]):
                sel = mask & (stream == s)
                per[names[s] if s < len(names) else "dma"] = per.get(names[s] if s < len(names) else "dma", 0.0) \
                    + float(dur[sel].sum())
            rows[int(i)] = {"location": f"{os.path.basename(f)}:{line}", "function": fn,
                            "instructions": int(mask.sum()), "time_ns": per, "total_ns": float(sum(per.values()))}
        return sorted(rows.values(), key=lambda r: -r["total_ns"])

    def describe(self, lines: int = 8) -> str:
        eng = self.engines()
        head = (f"{self.name} on {self.target}: {self.total_ns / 1000:.2f} us simulated, "
                f"{self.instruction_count} instructions, MFU {self.mfu:.1f}%, MBU {self.mbu:.1f}%, "
                f"bottleneck {self.bottleneck}")
        act = ", ".join(f"{k} {v / 1000:.1f} us" for k, v in eng.items() if v)
        out = [head, f"  active: {act}"]
        for r in self.by_source()[:lines]:
            per = ", ".join(f"{k} {v / 1000:.1f}" for k, v in sorted(r["time_ns"].items(), key=lambda kv: -kv[1]))
            out.append(f"  {r['location']:<28} {r['instructions']:>8} instr  {per} (us, summed)")
        return "\n".join(out)

    __str__ = describe

    # --- files ---------------------------------------------------------------------------------------------
    def save_neff(self, path) -> Path:
        from ..isa import neff

        path = Path(path)
        if path.is_dir():
            path = path / f"neff_{self.program.neff_id}.neff"
        neff.save(self.program, path)
        return path

    def save_profile(self, directory) -> Path:
        """A profile directory (framework trace, system trace, NEFF + NTFF, manifest) of one execution of
        this kernel on NeuronCore 0, for ``trnscope view``. Returns the directory written."""
        from .. import runtime
        from ..profiling.whole_run import profile_whole_run

        with _instance(self.traced.spec):
            with profile_whole_run(directory):
                import torch

                with torch.profiler.record_function(f"nki::{self.name}"):
                    runtime.core(0).execute_program(self.program, self.name, timeline=self.timeline)
        from ..profiling.export import NeuronProfiler  # noqa: F401 - export happened in profile_whole_run

        return _last_export(directory)


@contextmanager
def _instance(spec):
    from ..hw import get_spec, set_instance

    saved = get_spec()
    if saved is not spec:
        set_instance(spec)
    try:
        yield
    finally:
        if saved is not spec:
            set_instance(saved)


def _last_export(directory) -> Path:
    root = Path(directory)
    found = sorted(root.glob("*_pid_*/*/manifest.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else root
