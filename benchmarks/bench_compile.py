"""torch.compile(backend="neuron") on a tiny HF Llama decoder layer: compile time, and device time
per forward call compiled vs eager (same process, same inputs). Also the RMSNorm case, and
Llama-7B-shaped work in bf16 at 512 tokens (hidden 4096, intermediate 11008, 32 heads): the MLP
and a whole decoder layer, eager and compiled, with device time, MFU and HBM traffic per call.

    python benchmarks/bench_compile.py                 # the target in TRNSCOPE_INSTANCE (default trn2)
    python benchmarks/bench_compile.py --llama7b-only --targets trn1,trn2   # each in its own process

Compile time is the wall time of the first compiled call minus the wall time of a later call
(tracing, AOTAutograd, graph compilation); the backend's own share (FX graph -> NEFF) is printed
apart. Device times are simulated NeuronCore time from the runtime's execution records.

The layer's forward graph is also compiled twice by ``compile_graph``, with and without matmul
epilogues, and both Programs simulated: device time, HBM bytes, scratch tensors, and how much of
the DMA time overlaps compute on the device timeline (union of DMA data-movement intervals
intersected with the union of compute-instruction intervals).
"""

from __future__ import annotations

import time

import torch

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.device.dynamo_backend import COUNTERS


def recorded_calls(fn, *args, calls=3):
    """(kernel execution records, host wall seconds) per ``calls`` warm calls of ``fn``."""
    rt = runtime.core(0)
    fn(*args)
    torch.neuron.synchronize()
    rt.recording = True
    rt.records.clear()
    t = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    torch.neuron.synchronize()
    wall = (time.perf_counter() - t) / calls
    recs = [r for r in rt.records if r.kind == "kernel"]
    rt.recording = False
    rt.records.clear()
    return recs, wall


def device_metrics(fn, *args, calls=1):
    """(dispatches, device busy ns, model FLOPs, HBM bytes) per call, from the execution records."""
    recs, _ = recorded_calls(fn, *args, calls=calls)
    busy = sum(r.device_end_ns - r.device_start_ns for r in recs) / calls
    flops = sum(r.timeline.summary["model_flops"] for r in recs) / calls
    hbm = sum(r.timeline.summary["hbm_read_bytes"] + r.timeline.summary["hbm_write_bytes"] for r in recs) / calls
    return len(recs) / calls, busy, flops, hbm


def llama7b_mlp():
    """Llama-7B's MLP (LlamaMLP: down(silu(gate(x)) * up(x))), bf16, 512 tokens."""
    import transformers
    from transformers.models.llama.modeling_llama import LlamaMLP

    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008)
    mlp = LlamaMLP(cfg).to(torch.bfloat16).to("neuron").eval()
    x = torch.randn(1, 512, 4096, dtype=torch.bfloat16, device="neuron")
    return mlp, (x,)


def llama7b_layer():
    """A Llama-7B-shaped decoder layer (32 heads of 128), bf16, 512 tokens."""
    import transformers
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                                   num_key_value_heads=32, max_position_embeddings=512, vocab_size=128)
    cfg._attn_implementation = "eager"
    layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16).to("neuron").eval()
    x = torch.randn(1, 512, 4096, dtype=torch.bfloat16, device="neuron")
    # the rotary tables are computed once, as a model's forward shares them across its layers
    cos, sin = (t.to(torch.bfloat16).to("neuron") for t in LlamaRotaryEmbedding(cfg)(x.cpu(), torch.arange(512)[None]))

    def run(x, cos, sin):
        out = layer(x, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out

    return run, (x, cos, sin)


def llama7b_report(cases: str = "mlp,layer") -> None:
    from trnscope import hw

    spec = hw.get_spec()
    peak = spec.peak_bf16_flops
    torch.manual_seed(0)
    chosen = [c for c in (("mlp", "Llama-7B MLP", llama7b_mlp), ("layer", "Llama-7B decoder layer", llama7b_layer))
              if c[0] in cases.split(",")]
    with torch.no_grad():
        for _, label, make in chosen:
            fn, args = make()
            compiled = torch.compile(fn, backend="neuron")
            for mode, f in (("eager", fn), ("compiled", compiled)):
                try:
                    n, busy, flops, hbm = device_metrics(f, *args)
                except RuntimeError as exc:  # reported, so the other cases still run
                    print(f"{spec.name} {label:23s} {mode:8s} failed: {str(exc).splitlines()[0][:160]}", flush=True)
                    continue
                mfu = 100 * flops / (peak * busy * 1e-9) if busy else 0.0
                print(f"{spec.name} {label:23s} {mode:8s} {n:5.0f} dispatches  device {busy / 1e6:8.3f} ms  "
                      f"MFU {mfu:5.1f}%  HBM {hbm / 2**20:8.1f} MiB", flush=True)
            torch._dynamo.reset()


def device_time_per_call(fn, *args, calls=3):
    recs, wall = recorded_calls(fn, *args, calls=calls)
    span = (max(r.device_end_ns for r in recs) - min(r.device_start_ns for r in recs)) / calls if recs else 0
    busy = sum(r.device_end_ns - r.device_start_ns for r in recs) / calls
    return len(recs) / calls, busy, span, wall


def _union(intervals):
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def dma_compute_overlap(tl) -> tuple[float, float]:
    """(DMA busy ns, ns of it during which some compute engine is busy) on a device timeline."""
    from trnscope.sim.encode import KIND_DMA

    dma = tl.encoded.kind == KIND_DMA
    d = _union(zip(tl.data_start_ns[dma], tl.end_ns[dma]))
    c = _union(zip(tl.start_ns[~dma], tl.end_ns[~dma]))
    i = j = 0
    overlap = 0.0
    while i < len(d) and j < len(c):
        lo, hi = max(d[i][0], c[j][0]), min(d[i][1], c[j][1])
        overlap += max(0.0, hi - lo)
        if d[i][1] < c[j][1]:
            i += 1
        else:
            j += 1
    return sum(e - s for s, e in d), overlap


def epilogue_comparison(run, args) -> None:
    from torch._functorch.aot_autograd import aot_module_simplified

    from trnscope import hw
    from trnscope.compiler.graph import compile_graph
    from trnscope.sim import simulate

    graphs = []

    def fw(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(run, backend=lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=fw))(*args)
    spec = hw.get_spec()
    rows = {}
    for label, fuse in (("no epilogues", False), ("epilogues", True)):
        t0 = time.perf_counter()
        compiled = compile_graph(graphs[0], spec, "graph", epilogues=fuse)
        ms = (time.perf_counter() - t0) * 1e3
        tl = simulate(compiled.program, spec)
        s = tl.summary
        dma, overlap = dma_compute_overlap(tl)
        scratch = sum(1 for t in compiled.program.tensors if t.kind == "scratch")
        rows[label] = s["total_time_ns"], s["hbm_read_bytes"] + s["hbm_write_bytes"]
        print(f"  {label:13s} device {s['total_time_ns'] / 1e3:7.1f} us  HBM {(rows[label][1]) / 1e6:6.2f} MB  "
              f"{scratch:3d} scratch tensors  {compiled.kernels:3d} kernels  DMA busy {dma / 1e3:6.1f} us, "
              f"{100 * overlap / dma:3.0f}% of it overlapping compute  (compile_graph {ms:.0f} ms)")
    (t_u, b_u), (t_f, b_f) = rows["no epilogues"], rows["epilogues"]
    print(f"  epilogues: {t_u / t_f:.2f}x less device time, {b_u / b_f:.2f}x less HBM traffic")


def llama_layer():
    import transformers
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                                   num_key_value_heads=8, max_position_embeddings=512, vocab_size=128)
    cfg._attn_implementation = "eager"
    layer = LlamaDecoderLayer(cfg, 0).to("neuron").eval()
    rope = LlamaRotaryEmbedding(cfg).to("neuron")

    def run(x, pos):
        out = layer(x, position_embeddings=rope(x, pos))
        return out[0] if isinstance(out, tuple) else out

    x = torch.randn(1, 256, 512, device="neuron")
    pos = torch.arange(256, device="neuron")[None]
    return run, (x, pos)


def main() -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        run, args = llama_layer()
        COUNTERS.reset()
        compiled = torch.compile(run, backend="neuron")
        t0 = time.perf_counter()
        compiled(*args)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled(*args)
        later = time.perf_counter() - t0
        print(f"Llama decoder layer (hidden 512, seq 256): first compiled call {first:.2f} s, later call "
              f"{later * 1e3:.1f} ms -> compile time {first - later:.2f} s "
              f"(of which FX graph -> NEFF {COUNTERS.compile_ns / 1e9:.2f} s, {COUNTERS.neffs_compiled} NEFFs)")
        for label, fn in (("eager", run), ("compiled", compiled)):
            n, busy, span, wall = device_time_per_call(fn, *args)
            print(f"  {label:9s} {n:6.1f} dispatches/call  device busy {busy / 1e3:9.1f} us  "
                  f"device span {span / 1e3:9.1f} us  host wall {wall * 1e3:8.1f} ms")
        n_e, busy_e, span_e, _ = device_time_per_call(run, *args)
        n_c, busy_c, span_c, _ = device_time_per_call(compiled, *args)
        print(f"  compiled vs eager: {busy_e / busy_c:.2f}x less device time, {n_e / n_c:.0f}x fewer dispatches")
        print("Llama layer forward graph, compile_graph with and without matmul epilogues (simulated):")
        epilogue_comparison(run, args)

        x = torch.randn(4096, 4096, device="neuron")
        w = torch.randn(4096, device="neuron")

        def naive(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        fused = lambda x, w: torch.rms_norm(x, (4096,), w, 1e-6)  # noqa: E731
        results = {}
        for label, fn in (("eager naive", naive), ("torch.rms_norm", fused),
                          ("compiled naive", torch.compile(naive, backend="neuron"))):
            results[label] = device_time_per_call(fn, x, w)
        base = results["torch.rms_norm"][1]
        print("RMSNorm 4096x4096 fp32:")
        for label, (n, busy, span, wall) in results.items():
            print(f"  {label:15s} {n:3.0f} dispatches  device {busy / 1e3:8.1f} us  ({busy / base:.2f}x the fused kernel)")


if __name__ == "__main__":
    import argparse
    import os
    import subprocess
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--llama7b-only", action="store_true", help="only the Llama-7B-shaped MLP and layer")
    ap.add_argument("--targets", default="", help="comma-separated targets, each run in its own process")
    ap.add_argument("--cases", default="mlp,layer", help="which Llama-7B-shaped cases: mlp, layer")
    opts = ap.parse_args()
    if opts.targets:
        for target in opts.targets.split(","):
            argv = [sys.executable, __file__, "--cases", opts.cases] + (["--llama7b-only"] if opts.llama7b_only else [])
            subprocess.run(argv, env={**os.environ, "TRNSCOPE_INSTANCE": target}, check=True)
    else:
        if not opts.llama7b_only:
            main()
        llama7b_report(opts.cases)
