"""Opening a pathological but valid trace in the explorer: N events on N threads against N events
on 10 threads, same run (issue 19 asks for at most 10x at N = 200,000). The open path is what the
explorer does for a new entry: parse, the session's analysis, the timeline layout; a full-width
LOD of every lane is timed apart (the browser asks for the lanes on screen). Also 9.8M identical
events (one slice nested in the next): peak RSS after opening, since nesting is capped at
trnscope.trace.nesting.MAX_DEPTH levels.

    python benchmarks/bench_many_threads.py [N] [--identical M]
"""

from __future__ import annotations

import resource
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
            path = Path(tmp) / "identical.pt.trace.json"
            event = orjson.dumps({"ph": "X", "name": "op", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5, "dur": 3})
            with open(path, "wb") as handle:
                handle.write(b'{"traceEvents": [')
                for i in range(count):
                    handle.write(event if i == 0 else b"," + event)
                handle.write(b"]}")
            seconds, _ = open_entry(path)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
            print(f"{count:,} identical events: open {seconds:.1f} s, peak RSS {peak:.2f} GiB")


if __name__ == "__main__":
    main()
