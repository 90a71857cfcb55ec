"""Opening a pathological but valid trace in the explorer: N events on N threads against N events
on 10 threads, same run (issue 19 asks for at most 10x at N = 200,000). The open path is what the
explorer does for a new entry: parse, the session's analysis, the timeline layout; a full-width
LOD of every lane is timed apart (the browser asks for the lanes on screen). ``--identical M``:
M identical events (each nested in the previous; 9.8M are a 2 MB gzip) opened in a fresh process
as the explorer opens them (session, layout, first level of detail, the card, summary and ops
payloads, a selection of the whole trace): time and peak RSS, the memory the event limit
(trnscope.trace.builder.MAX_EVENTS, BYTES_PER_EVENT) is sized by.

    python benchmarks/bench_many_threads.py [N] [--identical M]
"""

from __future__ import annotations

import gzip
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from trnscope.explorer.app import Explorer


def write_trace(path: Path, events: int, threads: int) -> None:
    rows = [{"ph": "X", "name": f"op{i % 50}", "cat": "cpu_op", "pid": 1, "tid": i % threads, "ts": i, "dur": 1}
            for i in range(events)]
    path.write_bytes(orjson.dumps({"traceEvents": rows}))


def open_entry(path: Path) -> tuple[float, float]:
    """(seconds to open: parse + session + layout, seconds for one full-width LOD of every lane)."""
    start = time.perf_counter()
    explorer = Explorer([path], cache=None)
    session = explorer.sessions.get(explorer.catalog.entries()[0])
    layout = session.system.describe()
    opened = time.perf_counter()
    session.system.lod(layout["start"], max(layout["end"], layout["start"] + 1), 1600, None)
    return opened - start, time.perf_counter() - opened


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--open-identical":
        open_identical(Path(args[1]))
        return
    n = int(args[0]) if args and not args[0].startswith("-") else 200_000
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for threads in (10, n):
            path = Path(tmp) / f"threads{threads}.pt.trace.json"
            write_trace(path, n, threads)
            results[threads] = open_entry(path)
            print(f"{n:,} events on {threads:,} threads: open {results[threads][0]:.2f} s, "
                  f"full-width LOD {results[threads][1]:.2f} s")
        ratio = results[n][0] / results[10][0]
        print(f"open ratio {ratio:.1f}x ({'meets' if ratio <= 10 else 'misses'} the 10x target)")
        if "--identical" in args:
            count = int(args[args.index("--identical") + 1])
            path = Path(tmp) / "identical.pt.trace.json.gz"
            write_identical(path, count)
            out = subprocess.run([sys.executable, __file__, "--open-identical", str(path)], check=True,
                                 capture_output=True, text=True).stdout.split()
            print(f"{count:,} identical events ({path.stat().st_size / 1e6:.1f} MB gzip): open {float(out[0]):.1f} s, "
                  f"peak RSS {float(out[1]):.2f} GiB ({float(out[1]) * 2**30 / count:.0f} bytes an event)")


def write_identical(path: Path, count: int) -> None:
    event = orjson.dumps({"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5, "dur": 3})
    block = b",".join([event] * 10_000)
    with gzip.open(path, "wb") as handle:
        handle.write(b'{"traceEvents": [')
        for done in range(0, count, 10_000):
            k = min(10_000, count - done)
            handle.write((b"," if done else b"") + (block if k == 10_000 else b",".join([event] * k)))
        handle.write(b"]}")


def open_identical(path: Path) -> None:
    """In a fresh process: what the explorer does when the trace is opened and looked at."""
    from trnscope.explorer import payloads

    start = time.perf_counter()
    explorer = Explorer([path], cache=None)
    session = explorer.sessions.get(explorer.catalog.entries()[0])
    layout = session.system.describe()
    session.system.initial_lod(1600)
    for payload in (payloads.card, payloads.summary, payloads.ops):
        orjson.dumps(payload(session), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    session.system.select(layout["start"], layout["end"], None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    print(time.perf_counter() - start, peak)


if __name__ == "__main__":
    main()
