"""Explorer speed on a generated 1M-event Kineto trace: server load, first paint, zoom frame times.

Generates a torch.profiler-like trace (nested CPU ops, cudaLaunchKernel runtime calls, kernels on
two CUDA streams, ac2g flows; ~1M events), then measures

* server load time: a cold start (JSON parsed into columns; the disk cache is written after it) and a warm
  start (a restarted server reading the columnar cache), each up to the first level-of-detail
  answer; baseline: ``orjson.loads`` of the same file (parsing alone, no model);
* time to first paint after load: from navigating to the system trace (server already loaded) to
  the first timeline frame drawn with data, in headless Chromium, each time in a freshly started
  browser with an empty profile (median of several), and on a revisit; baseline: the page shell's
  own first contentful paint in the same navigation;
* p95 frame time while zooming: intervals between requestAnimationFrame callbacks while wheel
  events zoom in and out across the trace (data refetched as it goes); baseline: the same
  measurement on the same page left idle.

Each figure is printed against its target and as a ratio against its baseline from the same run
(these machines are noisy). Needs Chromium at /usr/bin/chromium and the playwright package.

    .venv/bin/python benchmarks/bench_explorer.py [--events 1000000] [--keep DIR [--browser-only]]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TRNSCOPE_NO_DEVICE", "1")  # the explorer never needs the device (or torch)
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGET_LOAD_S = 3.0
TARGET_FIRST_PAINT_S = 1.0
TARGET_P95_FRAME_MS = 33.0
ROUNDS = 3


# --- the trace -------------------------------------------------------------------------------


def generate_trace(path: Path, events: int, seed: int = 1) -> dict:
    """Write a Kineto-style trace of about ``events`` events; returns counts by phase."""
    rng = random.Random(seed)
    pid, tid = 7001, 7001
    streams = (7, 13)
    ops = [("aten::linear", "aten::addmm"), ("aten::gelu", None), ("aten::layer_norm", "aten::native_layer_norm"),
           ("aten::add", None), ("aten::softmax", "aten::_softmax"), ("aten::matmul", "aten::mm")]
    kernels = ["ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel<GeluCUDAKernelImpl>",
               "vectorized_layer_norm_kernel<float>", "elementwise_kernel<CUDAFunctor_add>",
               "softmax_warp_forward<float>", "ampere_sgemm_64x64_nn"]
    lines = [
        '{"ph": "M", "name": "process_name", "pid": 7001, "tid": 0, "args": {"name": "python3"}}',
        '{"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}',
        '{"ph": "M", "name": "thread_name", "pid": 7001, "tid": 7001, "args": {"name": "python3"}}',
    ]
    counts = {"X": 0, "s": 0, "f": 0}
    clock = 1_700_000_000_000_000  # µs since the epoch, as Kineto writes with baseTimeNanoseconds absent
    gpu_free = {s: clock for s in streams}
    correlation = step = 0
    while sum(counts.values()) < events:
        step_start = clock
        first = len(lines)
        lines.append(None)  # the ProfilerStep span, filled in when the step ends
        for _ in range(400):
            outer, inner = ops[rng.randrange(len(ops))]
            kernel = kernels[rng.randrange(len(kernels))]
            stream = streams[rng.randrange(len(streams))]
            correlation += 1
            op_start = clock + 2
            inner_start = op_start + 3
            launch_start = inner_start + rng.randint(4, 9)
            launch_dur = rng.randint(4, 7)
            inner_end = launch_start + launch_dur + 2
            op_end = inner_end + 2
            lines.append(f'{{"ph": "X", "cat": "cpu_op", "name": "{outer}", "pid": {pid}, "tid": {tid}, '
                         f'"ts": {op_start}, "dur": {op_end - op_start}, "args": {{"External id": {correlation}}}}}')
            if inner:
                lines.append(f'{{"ph": "X", "cat": "cpu_op", "name": "{inner}", "pid": {pid}, "tid": {tid}, '
                             f'"ts": {inner_start}, "dur": {inner_end - inner_start}, "args": {{"External id": {correlation}}}}}')
                counts["X"] += 1
            lines.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid}, '
                         f'"ts": {launch_start}, "dur": {launch_dur}, "args": {{"correlation": {correlation}}}}}')
            k_start = max(gpu_free[stream], launch_start + 5)
            k_dur = rng.randint(3, 40)
            gpu_free[stream] = k_start + k_dur
            lines.append(f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": 0, "tid": {stream}, '
                         f'"ts": {k_start}, "dur": {k_dur}, "args": {{"correlation": {correlation}, "stream": {stream}}}}}')
            lines.append(f'{{"ph": "s", "id": {correlation}, "pid": {pid}, "tid": {tid}, "ts": {launch_start}, '
                         f'"cat": "ac2g", "name": "ac2g"}}')
            lines.append(f'{{"ph": "f", "id": {correlation}, "pid": 0, "tid": {stream}, "ts": {k_start}, '
                         f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
            counts["X"] += 3
            counts["s"] += 1
            counts["f"] += 1
            clock = op_end + rng.randint(1, 6)
        clock = max(clock, *gpu_free.values()) + 50  # the step synchronises
        lines[first] = (f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, '
                        f'"tid": {tid}, "ts": {step_start}, "dur": {clock - step_start}}}')
        counts["X"] += 1
        step += 1
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(lines) + "\n]}\n")
    return counts


# --- measurements ----------------------------------------------------------------------------


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def server_load(root: Path, cache_dir: Path) -> tuple[float, object, str]:
    """Seconds from a fresh explorer to the first level-of-detail answer; (seconds, app, entry id)."""
    from trnscope.analysis import TraceCache
    from trnscope.explorer import create_app

    cache = TraceCache(cache_dir)
    start = time.perf_counter()
    app = create_app([root], cache=cache)
    explorer = app.state.explorer
    entry = explorer.catalog.entries()[0]
    view = explorer.session(entry.id).system
    layout = view.describe()
    view.lod(layout["start"], layout["end"], 1600, None)
    seconds = time.perf_counter() - start
    cache.wait()  # the cache entry is written after the first answer: the next (warm) start reads it
    return seconds, app, entry.id


def serve(app) -> tuple[object, str]:
    import uvicorn

    from trnscope.explorer.server import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}/"


RAF_PROBE = """() => {
  window.__frames = [];
  let last = performance.now();
  const tick = (now) => { window.__frames.push(now - last); last = now; if (window.__recording) requestAnimationFrame(tick); };
  window.__recording = true;
  requestAnimationFrame(tick);
}"""


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


PAINT_PROBE = """() => {
    const mark = (name) => (performance.getEntriesByName(name)[0] || {}).startTime ?? null;
    const data = performance.getEntriesByType('resource').find((e) => e.name.includes('/timeline?px='));
    return { timeline: window.__trnscope.firstPaint, shell: mark('first-contentful-paint'), main: mark('trnscope:main'),
             data_requested: data ? data.startTime : null, data_received: data ? data.responseEnd : null,
             data_bytes: data ? data.encodedBodySize : null,
             draw_ms: window.__trnscope.drawMs[0] ?? null }; }"""


def first_paint(context, url: str, entry: str) -> dict:
    page = context.new_page()
    page.goto(f"{url}#/p/{entry}/system")
    page.wait_for_function("() => window.__trnscope && window.__trnscope.firstPaint !== null", timeout=120_000)
    return page, page.evaluate(PAINT_PROBE)


def browser_figures(url: str, entry: str) -> dict:
    from playwright.sync_api import sync_playwright

    def launch(p):
        return p.chromium.launch_persistent_context(tempfile.mkdtemp(prefix="bench-chromium-"), executable_path=CHROMIUM,
                                                    headless=True, args=CHROMIUM_ARGS, viewport={"width": 1600, "height": 900})

    out = {}
    with sync_playwright() as p:
        # each cold visit is a freshly started browser with an empty profile (no cached files, no
        # JIT); this machine's load comes and goes, so the median of several is the figure
        cold = []
        for _ in range(ROUNDS):
            context = launch(p)
            _, paints = first_paint(context, url, entry)
            cold.append(paints)
            context.close()
        out["cold"] = cold
        # a revisit: the same browser coming back to the trace
        context = launch(p)
        first_page, _ = first_paint(context, url, entry)
        first_page.close()
        page, out["revisit"] = first_paint(context, url, entry)
        page.wait_for_timeout(500)
        box = page.locator("canvas.tl-canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.55, box["y"] + 120)
        draws_before = page.evaluate("() => window.__trnscope.drawMs.length")
        # rounds: this machine's load comes and goes; the median round is the figure
        idle_rounds, zoom_rounds, zoom_frames = [], [], 0
        for _ in range(ROUNDS):
            page.evaluate(RAF_PROBE)  # idle baseline: the same page, nothing happening
            page.wait_for_timeout(1500)
            idle_rounds.append(p95(page.evaluate("() => { window.__recording = false; return window.__frames.slice(1); }")))
            page.evaluate(RAF_PROBE)  # zooming: wheel in towards one point, pan, wheel back out
            for _ in range(25):
                page.mouse.wheel(0, -120)
                page.wait_for_timeout(16)
            for _ in range(10):
                page.keyboard.press("d")
                page.wait_for_timeout(16)
            for _ in range(25):
                page.mouse.wheel(0, 120)
                page.wait_for_timeout(16)
            page.wait_for_timeout(300)
            frames = page.evaluate("() => { window.__recording = false; return window.__frames.slice(1); }")
            zoom_rounds.append(p95(frames))
            zoom_frames += len(frames)
        draw_ms = page.evaluate(f"() => window.__trnscope.drawMs.slice({draws_before})")
        context.close()
    out.update({"idle_p95_ms": statistics.median(idle_rounds), "zoom_p95_ms": statistics.median(zoom_rounds),
                "zoom_p95_rounds_ms": zoom_rounds, "zoom_frames": zoom_frames,
                "draw_p95_ms": p95(draw_ms) if draw_ms else None, "draws": len(draw_ms)})
    return out


def verdict(value: float, target: float) -> str:
    return "ok  " if value <= target else "MISS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="keep the generated trace and cache in this folder")
    parser.add_argument("--browser-only", action="store_true",
                        help="with --keep and a cache from an earlier run: skip the cold load, measure the browser")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-explorer-"))
    root = work / "traces"
    root.mkdir(parents=True, exist_ok=True)
    cache = work / "cache"
    trace = root / "bench_1m.pt.trace.json"
    if not trace.exists():
        counts = generate_trace(trace, args.events)
        print(f"generated {sum(counts.values()):,} events {counts} ({trace.stat().st_size / 1e6:.0f} MB)")
    import orjson

    if args.browser_only and cache.is_dir():
        baseline_parse = cold = float("nan")
        warm, app, entry = server_load(root, cache)
        print(f"server load, warm (columnar cache)   {warm:8.2f} s   (--browser-only: cold load not measured)")
    else:
        shutil.rmtree(cache, ignore_errors=True)
        data = trace.read_bytes()
        baseline_parse = best_of(1, lambda: orjson.loads(data))
        del data
        cold, _, _ = server_load(root, cache)
        warm, app, entry = server_load(root, cache)
        print(f"orjson.loads baseline               {baseline_parse:8.2f} s")
        print(f"server load, cold (JSON -> columns)  {cold:8.2f} s   target <= {TARGET_LOAD_S:.0f} s  "
              f"{verdict(cold, TARGET_LOAD_S)}  ratio vs orjson.loads {cold / baseline_parse:6.2f}x")
        print(f"server load, warm (columnar cache)   {warm:8.2f} s   target <= {TARGET_LOAD_S:.0f} s  "
              f"{verdict(warm, TARGET_LOAD_S)}  ratio vs orjson.loads {warm / baseline_parse:6.2f}x")

    if not Path(CHROMIUM).exists():
        print(f"browser figures skipped: no Chromium at {CHROMIUM} (apt-get install chromium)")
        return 0
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("browser figures skipped: the playwright package is not installed")
        return 0
    server, url = serve(app)
    try:
        b = browser_figures(url, entry)
    finally:
        server.should_exit = True
    fresh = b["cold"]
    paint = statistics.median(c["timeline"] for c in fresh)
    shell = statistics.median(c["shell"] for c in fresh)
    ratio = statistics.median(c["timeline"] / c["shell"] for c in fresh)
    print(f"first paint after load (fresh browser){paint / 1000:7.2f} s   target <= {TARGET_FIRST_PAINT_S:.0f} s  "
          f"{verdict(paint / 1000, TARGET_FIRST_PAINT_S)}  ratio vs page shell paint {ratio:6.2f}x")
    print(f"  (median of {len(fresh)} fresh browsers: " + ", ".join(f"{c['timeline']:.0f}" for c in fresh)
          + f" ms; page shell painted at {shell:.0f} ms)")
    for c in fresh:
        print(f"    shell {c['shell']:.0f} ms, modules run {c['main']:.0f} ms, layout + first level of detail "
              f"({(c['data_bytes'] or 0) / 1024:.0f} KiB) requested {c['data_requested']:.0f} ms, received "
              f"{c['data_received']:.0f} ms, first frame drawn in {c['draw_ms']:.0f} ms, painted {c['timeline']:.0f} ms")
    r = b["revisit"]
    print(f"first paint after load (revisit)       {r['timeline'] / 1000:7.2f} s   target <= {TARGET_FIRST_PAINT_S:.0f} s  "
          f"{verdict(r['timeline'] / 1000, TARGET_FIRST_PAINT_S)}  ratio vs page shell paint "
          f"{r['timeline'] / r['shell'] if r['shell'] else float('nan'):6.2f}x")
    print(f"p95 frame while zooming              {b['zoom_p95_ms']:8.1f} ms  target <= {TARGET_P95_FRAME_MS:.0f} ms "
          f"{verdict(b['zoom_p95_ms'], TARGET_P95_FRAME_MS)}  ratio vs idle p95 ({b['idle_p95_ms']:.1f} ms) "
          f"{b['zoom_p95_ms'] / b['idle_p95_ms']:6.2f}x")
    rounds = ", ".join(f"{r:.1f}" for r in b["zoom_p95_rounds_ms"])
    print(f"  (median of {ROUNDS} rounds: {rounds} ms; {b['zoom_frames']} frames; draw p95 {b['draw_p95_ms']:.1f} ms "
          f"over {b['draws']} draws)")
    print(json.dumps({"orjson_s": baseline_parse, "cold_s": cold, "warm_s": warm, **b}))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
