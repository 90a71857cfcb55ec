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

from rich.console import Console

from .format import count
from .tables import grid

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

    from ..nki.casestudy import rmsnorm_variants

    return {"naive": naive_rms_norm, "torch.rms_norm": fused_rms_norm,
            "torch.compile": torch.compile(naive_rms_norm, backend="neuron"), **rmsnorm_variants()}


# the same variant's host time per call differing by more than this between calls: noisy
NOISY_RATIO = 2.0


@dataclass
class Measured:
    dispatches: float
    device_ns: float      # busy time of the device per call
    span_ns: float        # first start to last end per call: includes idle gaps between executions
    host_ns: float        # emulated host time per call (dispatch + framework), the median of the calls
    hbm_bytes: float
    host_calls_ns: tuple[int, ...] = ()  # each call's host time

    @property
    def idle_ns(self) -> float:
        return max(0.0, self.span_ns - self.device_ns)

    @property
    def noisy(self) -> bool:
        """The calls' host times differ by more than NOISY_RATIO: the machine, not the program."""
        calls = self.host_calls_ns
        return bool(calls) and min(calls) > 0 and max(calls) / min(calls) > NOISY_RATIO


def measure(fn, x, w, calls: int = CALLS) -> Measured:
    """Per-call figures from the runtime's records, after a warm-up call (NEFFs compiled)."""
    import statistics

    import torch

    from .. import runtime

    rt = runtime.core(0)
    host: list[int] = []
    with torch.no_grad():
        fn(x, w)
        torch.neuron.synchronize()
        rt.records.clear()
        rt.recording = True
        try:
            for _ in range(calls):
                start = runtime.CLOCK.now()
                fn(x, w)
                host.append(runtime.CLOCK.now() - start)
            torch.neuron.synchronize()
        finally:
            rt.recording = False
    kernels = [r for r in rt.records if r.kind == "kernel"]
    rt.records.clear()
    busy = sum(r.device_end_ns - r.device_start_ns for r in kernels)
    span = max(r.device_end_ns for r in kernels) - min(r.device_start_ns for r in kernels)
    hbm = sum(r.timeline.summary["hbm_read_bytes"] + r.timeline.summary["hbm_write_bytes"] for r in kernels
              if r.timeline is not None)
    return Measured(len(kernels) / calls, busy / calls, span / calls, statistics.median(host), hbm / calls,
                    tuple(host))


def profile_variant(name: str, fn, x, w, out: Path, console: Console, rows: int, wide: bool = False) -> Path | None:
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
    print_key_averages(console, prof.key_averages(), name, rows, wide)
    return getattr(exporter, "last_export", None)


def print_key_averages(console: Console, averages, name: str, rows: int, wide: bool) -> None:
    """``prof.key_averages()``: PyTorch's own table with ``wide`` (about 180 columns, printed as it is,
    never wrapped), else the same rows with the columns that fit the terminal."""
    from rich.text import Text

    console.rule(Text(f"{name}: key_averages sorted by self_privateuse1_time_total"))
    if wide:
        console.print(Text(averages.table(sort_by="self_privateuse1_time_total", row_limit=rows)), soft_wrap=True,
                      highlight=False, crop=False, overflow="ignore")
        return
    events = sorted(averages, key=lambda e: (-e.self_device_time_total, -e.cpu_time_total))[:rows]
    columns = [("Name", "left"), ("Calls", "right"), ("Self CPU", "right"), ("CPU total", "right"),
               ("Self NEURON", "right"), ("NEURON total", "right")]
    table = [[e.key, count(e.count), _fmt_us(e.self_cpu_time_total * 1e3), _fmt_us(e.cpu_time_total * 1e3),
              _fmt_us(e.self_device_time_total * 1e3), _fmt_us(e.device_time_total * 1e3)] for e in events]
    grid(console, f"top {len(table)} of {len(averages)} ops (trnscope demo --wide prints PyTorch's full table)",
         columns, table, wide=False)


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
        parser.add_argument("--host-time", choices=("real", "modelled"), default=None,
                            help="how host time is timed: real (your Python and PyTorch's dispatcher as measured "
                                 "here, the backend from the model) or modelled (every host interval from the "
                                 "model: the same figures on any machine). Default: $TRNSCOPE_HOST_TIME, else real")
        parser.add_argument("--wide", action="store_true",
                            help="print PyTorch's full key_averages tables (about 180 columns) instead of the "
                                 "columns that fit the terminal")

    def run(self, args: argparse.Namespace, console: Console) -> int:

        shapes = [_parse_shape(s) for s in args.shapes.split(",")]
        prow, phid = _parse_shape(args.profile_shape)
        import torch

        import trnscope
        from ..hw import get_spec

        from .. import hosttime, runtime

        trnscope.enable_device()
        if args.host_time:
            runtime.set_host_time(args.host_time)
        spec = get_spec()
        console.rule(f"RMSNorm on an emulated {spec.neuroncore} ({spec.instance}), torch {torch.__version__}, "
                     f"host time {hosttime.describe(runtime.host_time())}")
        torch.manual_seed(0)
        impls = variants()
        x = torch.randn(prow, phid).to("neuron")
        w = torch.randn(phid).to("neuron")
        written = {name: profile_variant(name.replace(".", "_"), fn, x, w, args.out, console, args.rows, args.wide)
                   for name, fn in impls.items()}

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
        table = []
        for (rows, hidden, dtype), results in measured.items():
            base = results["naive"].device_ns
            for name, m in results.items():
                table.append([f"{rows}x{hidden}", dtype, name, f"{m.dispatches:.0f}", _fmt_us(m.device_ns),
                              _fmt_us(m.host_ns), f"{m.hbm_bytes / 2**20:,.1f} MiB", _fmt_us(m.idle_ns),
                              f"{base / m.device_ns:.2f}x"])
        columns = [("shape", "left"), ("dtype", "left"), ("variant", "left"), ("dispatches", "right"),
                   ("device time", "right"), ("host time", "right"), ("HBM bytes", "right"), ("device idle", "right"),
                   ("speed-up", "right")]
        grid(console, "RMSNorm per call: dispatches, device time, host time, HBM traffic, idle gaps", columns, table,
             wide=args.wide, names=(2,))
        console.print("Device times come from trnscope's NeuronCore model (docs/cost-model.md): every kernel is a "
                      "real tiled Program, timed from published hardware facts.")
        if runtime.host_time() == hosttime.MODELLED:
            console.print("Host times come from trnscope's host-cost model (docs/cost-model.md, \"Host costs\"): "
                          "the same on any machine.")
        else:
            console.print("Host times are your Python and PyTorch's dispatcher as measured on this machine, plus "
                          "the Neuron backend's host costs from trnscope's model.")
            noisy = [f"{r}x{h} {dt} {name} ({_fmt_us(min(m.host_calls_ns))} to {_fmt_us(max(m.host_calls_ns))})"
                     for (r, h, dt), results in measured.items() for name, m in results.items() if m.noisy]
            if noisy:
                console.print(f"[bold yellow]Host times were noisy[/]: the same variant's calls differed by more than "
                              f"{NOISY_RATIO:g}x ({'; '.join(noisy)}), so this machine was busy or slowed. For "
                              f"reproducible host figures run `trnscope demo --host-time modelled` (or set "
                              f"TRNSCOPE_HOST_TIME=modelled).", highlight=False)
        for name, where in written.items():
            if where:
                console.print(f"profile of {name}: {where}", markup=False, highlight=False)
        console.print(f"open them with:  trnscope view {args.out}", markup=False, highlight=False)
        console.print(f"or summarise them:  trnscope summary {args.out}", markup=False, highlight=False)
        return 0


def _parse_shape(item: str) -> tuple[int, int]:
    try:
        r, h = (int(v) for v in item.lower().strip().split("x"))
    except ValueError:
        raise ValueError(f"bad shape {item!r}: write ROWSxHIDDEN, e.g. 4096x4096") from None
    if r < 1 or h < 1:
        raise ValueError(f"bad shape {item!r}: sizes must be positive")
    return r, h
