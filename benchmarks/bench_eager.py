"""Eager per-op cost on neuron vs CPU in the same run: wall time per op for small (1K elements)
and large (16M elements) tensors, for a few common ops. Targets: small <= 5x CPU eager, large
<= 1.3x (the emulator computes numbers with ATen on the host, so large ops should cost about what
CPU costs; small ops pay the dispatch path). Also prints the emulated host time per op, which is
what profiles show, next to the simulated device time (0 us: everything trnscope does to serve an
op is emulator work, cut from the clock; the host time a profile shows is PyTorch's own).

Wall-clock ratios swing with machine load; run it more than once."""

from __future__ import annotations

import time

import torch

import trnscope  # noqa: F401
from trnscope import runtime

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "exp": lambda a, b: torch.exp(a),
    "sum": lambda a, b: a.sum(-1),
}


def per_op_seconds(fn, a, b, sync, reps):
    fn(a, b)
    sync()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            fn(a, b)
        sync()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def main() -> None:
    torch.manual_seed(0)
    rt = runtime.core(0)
    print(f"{'op':5s} {'size':>6s} {'cpu':>10s} {'neuron':>10s} {'ratio':>7s} {'target':>7s}  "
          f"{'emulated host':>13s} {'device':>10s}")
    for size, shape, reps, target in (("1K", (32, 32), 200, 5.0), ("16M", (4096, 4096), 5, 1.3)):
        a, b = torch.randn(shape), torch.randn(shape)
        an, bn = a.to("neuron"), b.to("neuron")
        for name, fn in OPS.items():
            cpu = per_op_seconds(fn, a, b, lambda: None, reps)
            dev = per_op_seconds(fn, an, bn, torch.neuron.synchronize, reps)
            rt.recording = True
            rt.records.clear()
            fn(an, bn)
            torch.neuron.synchronize()
            recs = [r for r in rt.records if r.kind == "kernel"]
            rt.recording = False
            host = sum(r.host_end_ns - r.host_start_ns for r in recs) / 1e3
            device = sum(r.device_end_ns - r.device_start_ns for r in recs) / 1e3
            ratio = dev / cpu
            print(f"{name:5s} {size:>6s} {cpu * 1e6:8.1f}us {dev * 1e6:8.1f}us {ratio:6.2f}x {target:5.1f}x"
                  f"{' MISS' if ratio > target else '     '} {host:10.1f}us {device:8.1f}us")


if __name__ == "__main__":
    main()
