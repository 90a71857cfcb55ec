"""Profiling RMSNorm on a (emulated) Trainium NeuronCore, the TorchNeuron way.

Three implementations of the same RMSNorm, each profiled with torch.profiler + NeuronConfig
exactly as on Trainium (only the import line differs: ``torch_neuronx.profiling`` there):

1. naive: ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`` -- six ATen ops, so six
   small NEFFs, six device executions, six round trips through the runtime;
2. fused: ``torch.rms_norm`` -- one ATen op that TorchNeuron (and trnscope) runs as ONE kernel;
3. compiled: ``torch.compile(naive, backend="neuron")`` -- the whole graph becomes one NEFF.

Run:  .venv/bin/python examples/rmsnorm_tutorial.py [--shape 256x4096] [--out ./profile_output]

Each variant is warmed up first (NEFFs compile and are cached), then profiled over a schedule
with one warm-up step and two active steps; ``torch.neuron.synchronize()`` inside the loop makes
each step's device work complete inside its step. The tables are sorted by device time
(``self_privateuse1_time_total``); the profile directories open in ``trnscope view``.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from trnscope.profiling import NeuronConfig, NeuronProfiler, ProfileMode

EPS = 1e-6


def naive_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def fused_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), w, eps)


def compile_available() -> bool:
    import torch._dynamo

    return "neuron" in torch._dynamo.list_backends()


def variants() -> dict:
    out = {"naive": naive_rms_norm, "fused (torch.rms_norm)": fused_rms_norm}
    if compile_available():
        out["compiled (torch.compile, backend=neuron)"] = torch.compile(naive_rms_norm, backend="neuron",
                                                                        fullgraph=True)
    return out


def profile_variant(fn, x, w, out_dir, warmup_iters: int = 3, active: int = 2):
    """Warm up, then profile ``active`` steps (after one schedule warm-up step). Returns (prof, export dir)."""
    cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out_dir)
    exporter = NeuronProfiler(cfg)
    with torch.no_grad():
        for _ in range(warmup_iters):  # compile / NEFF-cache happens here, outside the profile
            fn(x, w)
        torch.neuron.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                     experimental_config=cfg,
                     schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
                     on_trace_ready=exporter.export_trace,
                     record_shapes=True) as prof:
            for _ in range(1 + active):
                fn(x, w)
                torch.neuron.synchronize()  # Neuron is asynchronous: finish the step's device work
                prof.step()
    return prof, exporter.last_export


def device_time_us(prof) -> float:
    """Total device time of the last profiled window (sum over the device rows), in µs."""
    return sum(e.self_device_time_total for e in prof.key_averages()
               if e.device_type == torch.autograd.DeviceType.PrivateUse1)


ACTIVE_STEPS = 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="256x4096", help="rows x hidden size (default 256x4096)")
    ap.add_argument("--out", default="./profile_output", help="profile_output_dir")
    ap.add_argument("--rows", type=int, default=12, help="table row limit")
    args = ap.parse_args()
    rows, hidden = (int(v) for v in args.shape.split("x"))
    x = torch.randn(rows, hidden).to("neuron")
    w = torch.randn(hidden).to("neuron")
    if not compile_available():  # pragma: no cover
        print("note: torch.compile(backend='neuron') is not available in this build; skipping that variant")

    totals = {}
    for name, fn in variants().items():
        prof, where = profile_variant(fn, x, w, args.out, active=ACTIVE_STEPS)
        totals[name] = device_time_us(prof) / ACTIVE_STEPS
        print(f"\n=== {name}: {ACTIVE_STEPS} active steps, profile in {where}")
        print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=args.rows))

    base = totals["naive"]
    print("device time per step:")
    for name, t in totals.items():
        print(f"  {name:45s} {t:9.3f} us   ({base / t:.2f}x vs naive)" if t else f"  {name:45s} {t:9.3f} us")


if __name__ == "__main__":
    main()
