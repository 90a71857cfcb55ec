"""torch.compile(backend="neuron") on a tiny HF Llama decoder layer: compile time, and device time
per forward call compiled vs eager (same process, same inputs). Also the RMSNorm case.

Compile time is the wall time of the first compiled call minus the wall time of a later call
(tracing, AOTAutograd, graph compilation); the backend's own share (FX graph -> NEFF) is printed
apart. Device times are simulated NeuronCore time from the runtime's execution records.
"""

from __future__ import annotations

import time

import torch

import trnscope  # noqa: F401
from trnscope import runtime
from trnscope.device.dynamo_backend import COUNTERS


def device_time_per_call(fn, *args, calls=3):
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
    span = (max(r.device_end_ns for r in recs) - min(r.device_start_ns for r in recs)) / calls if recs else 0
    busy = sum(r.device_end_ns - r.device_start_ns for r in recs) / calls
    return len(recs) / calls, busy, span, wall


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
    main()
