"""Eager per-op cost on neuron vs CPU in the same run: wall time per op for small (1K elements)
and large (16M elements) tensors, for a few common ops, and a tiny HF Llama training step.

Targets: small <= 5x CPU eager (goal 3x); large <= 1.1x against an allocation-free CPU baseline
(the same op into a preallocated output, ``out=``: the emulator computes numbers with ATen on the
host into device memory its cache reuses, so a large op should cost what the CPU kernel costs);
the Llama step (forward, backward, AdamW) is reported against CPU. Also prints the emulated host
time per op, which is what profiles show, next to the simulated device time.

The path (the C++ core or the Python one, ``TRNSCOPE_CPP=0``) is printed first, and on the C++
path how many of the timed calls its eager path served without entering Python. Wall-clock
ratios swing with machine load; run it more than once (``--runs``), and compare paths by running
it once with ``TRNSCOPE_CPP=0``.

    .venv/bin/python benchmarks/bench_eager.py [--runs 3] [--no-llama]"""

from __future__ import annotations

import time

import torch

import trnscope  # noqa: F401
from trnscope import runtime

from trnscope.device import _core

OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "exp": lambda a, b: torch.exp(a),
    "sum": lambda a, b: a.sum(-1),
}
# the same ops into a preallocated output: CPU's cost without allocating (and faulting in) 64 MiB
OUT_OPS = {
    "add": lambda a, b, o: torch.add(a, b, out=o),
    "mul": lambda a, b, o: torch.mul(a, b, out=o),
    "exp": lambda a, b, o: torch.exp(a, out=o),
    "sum": lambda a, b, o: torch.sum(a, -1, out=o[:, 0]),
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


def llama_step_seconds(device: str, reps: int = 3) -> float:
    """Best wall time of one forward + backward + AdamW step of a tiny random-config HF Llama."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (2, 16)).to(device)
    sync = torch.neuron.synchronize if device == "neuron" else (lambda: None)

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):  # first calls compile and plan
        step()
    sync()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        step()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def _served() -> str:
    if _core.CORE is None:
        return ""
    hot, cold = _core.CORE.counters()
    return f" (C++ eager path so far: {hot} calls served in C++, {cold} entered Python)"


def main() -> None:
    import argparse
    import os
    import warnings

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1, help="repeat the whole table")
    ap.add_argument("--no-llama", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"path: {'C++ core' if _core.CORE is not None else 'Python (TRNSCOPE_CPP=0 or no build)'}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for run in range(args.runs):
        if args.runs > 1:
            print(f"--- run {run + 1} of {args.runs}")
        table()
        if not args.no_llama:
            llama()
    print(f"done{_served()}")


def table() -> None:
    torch.manual_seed(0)
    rt = runtime.core(0)
    print(f"{'op':5s} {'size':>6s} {'cpu':>10s} {'neuron':>10s} {'ratio':>7s} {'target':>7s}  "
          f"{'emulated host':>13s} {'device':>10s}")
    for size, shape, reps, target in (("1K", (32, 32), 200, 5.0), ("16M", (4096, 4096), 5, 1.1)):
        a, b = torch.randn(shape), torch.randn(shape)
        an, bn = a.to("neuron"), b.to("neuron")
        out = torch.empty(shape)
        for name, fn in OPS.items():
            if size == "16M":  # against the allocation-free CPU kernel
                cpu = per_op_seconds(lambda x, y, f=OUT_OPS[name]: f(x, y, out), a, b, lambda: None, reps)
            else:
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


def llama() -> None:
    try:
        cpu, dev = llama_step_seconds("cpu"), llama_step_seconds("neuron")
    except ImportError:
        print("tiny HF Llama step: transformers is not installed (pip install -e '.[test]')")
        return
    print(f"tiny HF Llama training step: cpu {cpu * 1e3:.1f} ms, neuron {dev * 1e3:.1f} ms, {dev / cpu:.2f}x")


if __name__ == "__main__":
    main()
