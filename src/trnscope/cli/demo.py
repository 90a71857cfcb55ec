"""``trnscope demo``: the RMSNorm case study on the emulated NeuronCore.

Three implementations of RMSNorm run as PyTorch code on the ``neuron`` device: the naive one
(six ATen ops, six kernels, intermediates round-tripping through HBM), ``torch.rms_norm`` (one
fused kernel) and ``torch.compile(naive, backend="neuron")`` (one NEFF for the whole graph). Each is
profiled the TorchNeuron way (NeuronConfig + torch.profiler), its key_averages table printed, and a
comparison over shapes and dtypes measured from the runtime's execution records.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

SHAPES = ((256, 4096), (1024, 4096), (4096, 4096))
DTYPES = ("float32", "bfloat16")
EPS = 1e-6
CALLS = 3


def naive_rms_norm(x, w, eps: float = EPS):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def fused_rms_norm(x, w, eps: float = EPS):
    import torch

    return torch.rms_norm(x, (x.shape[-1],), w, eps)


def variants() -> dict:
    import torch

    return {"naive": naive_rms_norm, "torch.rms_norm": fused_rms_norm,
            "torch.compile": torch.compile(naive_rms_norm, backend="neuron")}


@dataclass
class Measured:
    dispatches: float
    device_ns: float      # busy time of the device per call
    span_ns: float        # first start to last end per call: includes idle gaps between executions
    host_ns: float        # emulated host time per call (dispatch + framework)
    hbm_bytes: float

    @property
    def idle_ns(self) -> float:
        return max(0.0, self.span_ns - self.device_ns)


def measure(fn, x, w, calls: int = CALLS) -> Measured:
    """Per-call figures from the runtime's records, after a warm-up call (NEFFs compiled)."""
    import torch

    from .. import runtime

    rt = runtime.core(0)
    with torch.no_grad():
        fn(x, w)
        torch.neuron.synchronize()
        rt.records.clear()
        rt.recording = True
        start = runtime.CLOCK.now()
        try:
            for _ in range(calls):
                fn(x, w)
            end_host = runtime.CLOCK.now()
            torch.neuron.synchronize()
        finally:
            rt.recording = False
    kernels = [r for r in rt.records if r.kind == "kernel"]
    rt.records.clear()
    busy = sum(r.device_end_ns - r.device_start_ns for r in kernels)
    span = max(r.device_end_ns for r in kernels) - min(r.device_start_ns for r in kernels)
    hbm = sum(r.timeline.summary["hbm_read_bytes"] + r.timeline.summary["hbm_write_bytes"] for r in kernels)
    return Measured(len(kernels) / calls, busy / calls, span / calls, (end_host - start) / calls, hbm / calls)


def profile_variant(name: str, fn, x, w, out: Path, console: Console, rows: int) -> Path | None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from ..profiling import NeuronConfig, NeuronProfiler, ProfileMode

    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=str(out / name))
    exporter = NeuronProfiler(cfg)
    with torch.no_grad():
        for _ in range(2):
            fn(x, w)
        torch.neuron.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
                     schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                     on_trace_ready=exporter.export_trace, record_shapes=True) as prof:
            for _ in range(3):
                fn(x, w)
                torch.neuron.synchronize()
                prof.step()
    console.rule(f"{name}: key_averages sorted by self_privateuse1_time_total")
    console.print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=rows), markup=False,
                  highlight=False)
    return getattr(exporter, "last_export", None)


def _fmt_us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} us"


class DemoCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--shapes", default=",".join(f"{r}x{h}" for r, h in SHAPES),
                            help="comma-separated ROWSxHIDDEN shapes for the comparison")
        parser.add_argument("--profile-shape", default="1024x4096", help="the shape profiled in detail")
        parser.add_argument("--out", type=Path, default=Path("trnscope_demo_profiles"),
                            help="where the three profiles are written")
        parser.add_argument("--rows", type=int, default=8, help="key_averages row limit")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from rich.table import Table

        shapes = [_parse_shape(s) for s in args.shapes.split(",")]
        prow, phid = _parse_shape(args.profile_shape)
        import torch

        import trnscope
        from ..hw import get_spec

        trnscope.enable_device()
        spec = get_spec()
        console.rule(f"RMSNorm on an emulated {spec.neuroncore} ({spec.instance}), torch {torch.__version__}")
        torch.manual_seed(0)
        impls = variants()
        x = torch.randn(prow, phid).to("neuron")
        w = torch.randn(phid).to("neuron")
        written = {name: profile_variant(name.replace(".", "_"), fn, x, w, args.out, console, args.rows)
                   for name, fn in impls.items()}

        table = Table(title="RMSNorm per call: dispatches, device time, host time, HBM traffic, idle gaps")
        for col in ("shape", "dtype", "variant", "dispatches", "device time", "host time", "HBM bytes",
                    "device idle", "speed-up"):
            table.add_column(col, justify="left" if col in ("dtype", "variant", "shape") else "right",
                             no_wrap=True)
        from rich.progress import Progress

        measured = {}
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("measuring shapes x dtypes x variants", total=len(shapes) * len(DTYPES))
            for rows, hidden in shapes:
                for dtype in DTYPES:
                    dt = getattr(torch, dtype)
                    xs = torch.randn(rows, hidden).to(dt).to("neuron")
                    ws = torch.randn(hidden).to(dt).to("neuron")
                    measured[(rows, hidden, dtype)] = {name: measure(fn, xs, ws) for name, fn in impls.items()}
                    # the next shape needs buffers of other sizes: give this one's cached buffers back
                    # (host memory of the emulator; as torch.cuda.empty_cache() between shapes of a sweep)
                    del xs, ws
                    torch.neuron.empty_cache()
                    progress.advance(task)
        for (rows, hidden, dtype), results in measured.items():
            base = results["naive"].device_ns
            for name, m in results.items():
                table.add_row(f"{rows}x{hidden}", dtype, name, f"{m.dispatches:.0f}", _fmt_us(m.device_ns),
                              _fmt_us(m.host_ns), f"{m.hbm_bytes / 2**20:,.1f} MiB", _fmt_us(m.idle_ns),
                              f"{base / m.device_ns:.2f}x")
        console.print(table)
        console.print("Device times come from trnscope's NeuronCore model (docs/cost-model.md): every kernel is a "
                      "real tiled Program, timed from published hardware facts.")
        for name, where in written.items():
            if where:
                console.print(f"profile of {name}: {where}")
        console.print(f"open them with:  trnscope view {args.out}")
        return 0


def _parse_shape(item: str) -> tuple[int, int]:
    try:
        r, h = (int(v) for v in item.lower().strip().split("x"))
    except ValueError:
        raise ValueError(f"bad shape {item!r}: write ROWSxHIDDEN, e.g. 4096x4096") from None
    if r < 1 or h < 1:
        raise ValueError(f"bad shape {item!r}: sizes must be positive")
    return r, h
