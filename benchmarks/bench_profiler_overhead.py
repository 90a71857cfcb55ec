"""Profiler overhead: the same naive-RMSNorm loop on ``neuron``, unprofiled vs profiled.

In one process, interleaved, ``--repeats`` times:

* unprofiled: the loop (``--iters`` iterations, then ``torch.neuron.synchronize()``);
* plain torch.profiler (CPU + PrivateUse1 activities, no NeuronConfig), for reference;
* NeuronConfig(modes=[DEVICE, RUNTIME]): the loop timed inside the session (the per-iteration
  overhead: the target is <= 1.25x the unprofiled loop), the whole session (entering and leaving
  the profiler, a fixed cost), and the session plus NeuronProfiler.export_trace (trace.json,
  system_trace.json, NEFFs, NTFFs, manifest).

Wall time and the main thread's CPU time are both reported (process CPU time would add the
numerics' worker threads spinning), as medians and minima: these machines are noisy, and the
minimum is the steadier estimate for a CPU-bound loop. A third clock is the runtime's emulated
host time (wall time with the emulator's work cut out, device waits in): the time a profile
shows as CPU time, so its ratio is how much the profiler's own work inflates the profile.

"trnscope on top of torch.profiler" is the NeuronConfig loop against plain torch.profiler's: what
trnscope's own recording (dispatch spans, execution records, HBM samples) adds to PyTorch's.

The variants run in turn, in reverse order every other repeat, so that a slow stretch of a shared
machine does not always land on the same one. ``--threads`` sets torch's intra-op threads: the
emulator computes numerics with ATen on the host, and from about 32K elements (64x1024) ATen
splits an op over its OpenMP threads; on a loaded 2-CPU machine those threads wait for CPUs
that other processes hold, which swings every variant's times by 2-30x between runs and swamps
the profiler's share. ``--threads 1`` measures the profiler, the default measures the setup as
users run it.

Short samples (``--samples S``, ``--sample-iters K``): inside one session per variant and repeat,
S samples of K iterations each, main-thread CPU time per iteration, reported as low percentiles
(p0, p10, p25) with their ratios to the unprofiled loop's same percentile. On a shared machine a
50-iteration loop is often preempted or finds its caches emptied by other processes (its minimum
ratio swung from 1.5x to 6x between runs at load 5-7); the low percentiles of many short samples
estimate the uncontended cost of an iteration, which is what the profiler adds to.

    .venv/bin/python benchmarks/bench_profiler_overhead.py [--iters 50] [--repeats 9] [--shape 64x1024] [--threads N]
                                                           [--samples 100] [--sample-iters 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from trnscope import runtime
from trnscope.profiling import NeuronConfig, NeuronProfiler, ProfileMode

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
CLOCKS = {"wall": time.perf_counter, "main-thread cpu": time.thread_time,
          "emulated host": lambda: runtime.CLOCK.now() / 1e9}


def naive_rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def loop(x, w, iters):
    for _ in range(iters):
        naive_rms_norm(x, w)
    torch.neuron.synchronize()


def stamp():
    return {c: f() for c, f in CLOCKS.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--shape", default="64x1024")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    ap.add_argument("--samples", type=int, default=100, help="short samples per variant and repeat (0: none)")
    ap.add_argument("--sample-iters", type=int, default=5, help="iterations per short sample")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows, cols = (int(v) for v in args.shape.split("x"))
    x = torch.randn(rows, cols).to("neuron")
    w = torch.randn(cols).to("neuron")
    loop(x, w, 3)  # warm-up: NEFFs compiled and simulated once

    variants = ["plain", "kineto_loop", "neuron_loop", "neuron_session", "neuron_export"]
    res = {(c, v): [] for c in CLOCKS for v in variants}

    def add(v, a, b):
        for c in CLOCKS:
            res[(c, v)].append(b[c] - a[c])

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def plain():
            t0 = stamp()
            loop(x, w, args.iters)
            add("plain", t0, stamp())

        def kineto():
            with profile(activities=ACTIVITIES):
                t0 = stamp()
                loop(x, w, args.iters)
                add("kineto_loop", t0, stamp())

        def neuron():
            cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out)
            s0 = stamp()
            with profile(activities=ACTIVITIES, experimental_config=cfg) as prof:
                t0 = stamp()
                loop(x, w, args.iters)
                add("neuron_loop", t0, stamp())
            add("neuron_session", s0, stamp())
            NeuronProfiler(cfg).export_trace(prof)
            add("neuron_export", s0, stamp())

        for r in range(args.repeats):
            for run in ((plain, kineto, neuron) if r % 2 == 0 else (neuron, kineto, plain)):
                run()

        short: dict[str, list[float]] = {"plain": [], "kineto_loop": [], "neuron_loop": []}

        def sample(v):
            k = args.sample_iters
            for _ in range(args.samples):
                t0 = time.thread_time_ns()
                for _ in range(k):
                    naive_rms_norm(x, w)
                short[v].append((time.thread_time_ns() - t0) / k / 1e9)
                torch.neuron.synchronize()

        def short_plain():
            sample("plain")

        def short_kineto():
            with profile(activities=ACTIVITIES):
                sample("kineto_loop")

        def short_neuron():
            cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=out)
            with profile(activities=ACTIVITIES, experimental_config=cfg):
                sample("neuron_loop")

        for r in range(args.repeats if args.samples else 0):
            for run in ((short_plain, short_kineto, short_neuron) if r % 2 == 0
                        else (short_neuron, short_kineto, short_plain)):
                run()

    labels = {"plain": "unprofiled loop", "kineto_loop": "torch.profiler (no NeuronConfig): loop",
              "neuron_loop": "NeuronConfig(DEVICE, RUNTIME): loop", "neuron_session": "  ... whole session (enter/exit)",
              "neuron_export": "  ... session + export_trace"}
    print(f"naive RMSNorm {rows}x{cols} on neuron, {args.iters} iterations x {args.repeats} repeats, interleaved, "
          f"{torch.get_num_threads()} intra-op thread(s)")
    for c in CLOCKS:
        med0, min0 = statistics.median(res[(c, "plain")]), min(res[(c, "plain")])
        print(f" {c + ' time':42s}   median    ratio       min    ratio")
        for v, label in labels.items():
            med, mn = statistics.median(res[(c, v)]), min(res[(c, v)])
            print(f"  {label:40s} {med * 1e3:8.1f} ms {med / med0:6.3f}x {mn * 1e3:8.1f} ms {mn / min0:6.3f}x")
        kin_med, kin_min = statistics.median(res[(c, "kineto_loop")]), min(res[(c, "kineto_loop")])
        neu_med, neu_min = statistics.median(res[(c, "neuron_loop")]), min(res[(c, "neuron_loop")])
        print(f"  {'trnscope on top of torch.profiler (loop)':40s} {'':8s}    {neu_med / kin_med:6.3f}x "
              f"{'':8s}    {neu_min / kin_min:6.3f}x")
    if args.samples:
        def pct(v, p):
            v = sorted(short[v])
            return v[int(p * (len(v) - 1))]

        ps = (0.0, 0.1, 0.25)
        print(f" short samples: main-thread cpu per iteration, {args.samples} x {args.sample_iters} iterations per "
              f"variant and repeat")
        print(f" {'':42s}" + "".join(f"   p{int(p * 100):02d}     ratio" for p in ps))
        for v in short:
            print(f"  {labels[v]:40s}" + "".join(f" {pct(v, p) * 1e6:6.1f} us {pct(v, p) / pct('plain', p):6.3f}x"
                                                   for p in ps))
        print(f"  {'trnscope on top of torch.profiler (loop)':40s}"
              + "".join(f" {'':9s} {pct('neuron_loop', p) / pct('kineto_loop', p):6.3f}x" for p in ps))
    print(" target: NeuronConfig loop <= 1.25x the unprofiled loop (torch.profiler's own recording included)")


if __name__ == "__main__":
    main()
