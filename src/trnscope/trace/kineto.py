"""Kineto / Chrome trace JSON: read into a Trace, write a Trace back out.

Reads what torch.profiler's ``export_chrome_trace`` writes (plain or gzip, ``{"traceEvents": [...]}``
or a bare list) and any Chrome trace-event JSON with the event kinds listed in kineto_events.py.
Writes Kineto-compatible JSON that Perfetto, chrome://tracing, HTA and this reader open.
"""

from __future__ import annotations

import gzip
import re
from os import PathLike
from pathlib import Path

import orjson

from ..gcpause import gc_paused
from .builder import TraceBuilder
from .errors import TraceFormatError
from .jsonchunks import ChromeSource, NeedsWholeParse
from .kineto_events import NeedsExactTimestamps, collect_chunk
from .model import Trace
from .tables import SCOPE_LETTERS
from .timeunits import EXACT_FLOAT_US_LIMIT, ns_to_us_text, rewrite_ts_and_dur_as_ns, rewrite_ts_as_ns
from .tracks import TrackKind

# A quick look at the first events decides whether to rewrite timestamps before parsing: epoch
# microseconds with a fraction (13+ integer digits) cannot keep their nanoseconds as floats.
# Files that only show it later are caught by the per-chunk check and re-read.
_FRACTIONAL_TS = re.compile(rb'"ts"\s*:\s*(-?\d{13,}\.\d+)')
_SNIFF_BYTES = 2 << 20


def read_kineto(path: str | PathLike[str]) -> Trace:
    """Read a Kineto/Chrome trace file (.json or .json.gz). Raises TraceFormatError on bad input."""
    return _read(ChromeSource.from_path(path))


def parse_kineto(data: bytes, source: str = "<trace>") -> Trace:
    """Read Kineto/Chrome trace JSON (plain or gzip) from bytes."""
    return _read(ChromeSource.from_bytes(data, source))


def _read(source: ChromeSource) -> Trace:
    exact = _needs_exact_timestamps(source.head(_SNIFF_BYTES))
    exact_dur = whole = False
    with gc_paused():  # millions of short-lived dicts, no cycles
        while True:
            try:
                return _build(source, exact, whole, exact_dur)
            except NeedsExactTimestamps as need:
                exact = True  # start over, rewriting timestamps (and durations, if they need it) as text
                exact_dur = exact_dur or need.durations
            except NeedsWholeParse:
                whole = True


def _needs_exact_timestamps(head: bytes) -> bool:
    sniff_from = max(head.find(b'"traceEvents"'), 0)
    match = _FRACTIONAL_TS.search(head, sniff_from)
    return match is not None and float(match.group(1)) >= EXACT_FLOAT_US_LIMIT


def _build(source: ChromeSource, exact: bool, whole: bool, exact_dur: bool) -> Trace:
    builder = TraceBuilder(source=source.source)
    transform = rewrite_ts_and_dur_as_ns if exact_dur else rewrite_ts_as_ns if exact else None
    chunks = [source.parse_whole(transform)] if whole else source.chunks(transform=transform)
    count = 0
    for chunk in chunks:
        collect_chunk(chunk, builder, exact, count, exact_dur)
        count += len(chunk)
    builder.metadata = source.metadata
    return builder.finish()


# --- writing ---------------------------------------------------------------------------------


def write_kineto(trace: Trace, path: str | PathLike[str], *, compresslevel: int = 3) -> Path:
    """Write ``trace`` as Kineto-style Chrome JSON; gzip when the name ends in .gz."""
    path = Path(path)
    text = dumps_kineto(trace)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text, compresslevel=compresslevel))
    else:
        path.write_bytes(text)
    return path


def dumps_kineto(trace: Trace) -> bytes:
    """The JSON text: top-level keys as read (schemaVersion, deviceProperties, ...) and
    ``traceEvents`` with process/thread metadata, slices, instants, counters and flows. Times are
    written as microseconds with exactly the nanoseconds the trace holds."""
    events: list[bytes] = []
    events.extend(_metadata_events(trace))
    events.extend(_slice_events(trace))
    events.extend(_instant_events(trace))
    events.extend(_counter_events(trace))
    events.extend(_flow_events(trace))
    top = {k: v for k, v in trace.metadata.items() if k != "traceEvents"}
    head = orjson.dumps({"schemaVersion": top.pop("schemaVersion", 1), **top})
    # Header keys first, then the events one per line: diffable, and greppable by a person.
    return head[:-1] + b',\n"traceEvents": [\n' + b",\n".join(events) + b"\n]}\n"


def _metadata_events(trace: Trace) -> list[bytes]:
    out = []
    seen_processes = set()
    ts = trace.start_ns
    for track in trace.tracks:
        pid = track.pid
        if pid not in seen_processes:
            seen_processes.add(pid)
            if track.process_name:
                out.append(_meta("process_name", ts, pid, 0, {"name": track.process_name}))
            if track.process_labels:
                out.append(_meta("process_labels", ts, pid, 0, {"labels": track.process_labels}))
            if track.process_sort_index is not None:
                out.append(_meta("process_sort_index", ts, pid, 0, {"sort_index": track.process_sort_index}))
        if track.kind is TrackKind.COUNTER:
            continue
        if track.name:
            out.append(_meta("thread_name", ts, pid, track.tid, {"name": track.name}))
        if track.thread_sort_index is not None:
            out.append(_meta("thread_sort_index", ts, pid, track.tid, {"sort_index": track.thread_sort_index}))
    return out


def _meta(name: str, ts_ns: int, pid: object, tid: object, args: dict) -> bytes:
    # Kineto stamps metadata events with the trace start; readers ignore the time.
    event = {"name": name, "ph": "M", "ts": orjson.Fragment(ns_to_us_text(ts_ns)), "pid": pid, "tid": tid}
    return orjson.dumps({**event, "args": args})


def _slice_events(trace: Trace) -> list[bytes]:
    s = trace.slices
    names, cats = trace.strings.lookup(s.name), trace.strings.lookup(s.cat)
    pids, tids = _track_columns(trace)
    fragment = orjson.Fragment
    all_args = s.args.raw_many()
    out = []
    for row, (ts, dur, track) in enumerate(zip(s.ts_ns.tolist(), s.dur_ns.tolist(), s.track.tolist())):
        event = {
            "ph": "X",
            "cat": cats[row],
            "name": names[row],
            "pid": pids[track],
            "tid": tids[track],
            "ts": fragment(ns_to_us_text(ts)),
            "dur": fragment(ns_to_us_text(dur)),
        }
        if all_args[row]:
            event["args"] = fragment(_one_line(all_args[row]))
        out.append(orjson.dumps(event))
    return out


def _one_line(args_json: bytes) -> bytes:
    # Args are kept as the source file wrote them; a pretty-printed one would break the
    # one-event-per-line layout, so it is re-encoded compactly.
    return orjson.dumps(orjson.loads(args_json)) if b"\n" in args_json else args_json


def _instant_events(trace: Trace) -> list[bytes]:
    i = trace.instants
    pids, tids = _track_columns(trace)
    all_args = i.args.raw_many()
    out = []
    for row in range(len(i)):
        track = int(i.track[row])
        event = {
            "ph": "i",
            "cat": trace.strings[int(i.cat[row])],
            "name": trace.strings[int(i.name[row])],
            "pid": pids[track],
            "tid": tids[track],
            "ts": orjson.Fragment(ns_to_us_text(int(i.ts_ns[row]))),
            "s": SCOPE_LETTERS[int(i.scope[row])],
        }
        if all_args[row]:
            event["args"] = orjson.Fragment(_one_line(all_args[row]))
        out.append(orjson.dumps(event))
    return out


def _counter_events(trace: Trace) -> list[bytes]:
    c = trace.counters
    out = []
    for sample in range(len(c)):
        series = int(c.series[sample])
        track = trace.tracks[int(c.series_track[series])]
        out.append(
            orjson.dumps(
                {
                    "ph": "C",
                    "name": track.name,
                    "pid": track.pid,
                    "ts": orjson.Fragment(ns_to_us_text(int(c.ts_ns[sample]))),
                    "args": {trace.strings[int(c.series_name[series])]: float(c.value[sample])},
                }
            )
        )
    return out


def _flow_events(trace: Trace) -> list[bytes]:
    f, s = trace.flows, trace.slices
    pids, tids = _track_columns(trace)
    out = []
    for row in range(len(f)):
        name, cat = trace.strings[int(f.name[row])], trace.strings[int(f.cat[row])]
        flow_id = int(f.flow_id[row])
        start_track = int(s.track[f.start_row[row]])
        end_track = int(s.track[f.end_row[row]])
        start = {"ph": "s", "id": flow_id, "pid": pids[start_track], "tid": tids[start_track],
                 "ts": orjson.Fragment(ns_to_us_text(int(f.start_ts_ns[row]))), "cat": cat, "name": name}
        end = {"ph": "f", "id": flow_id, "pid": pids[end_track], "tid": tids[end_track],
               "ts": orjson.Fragment(ns_to_us_text(int(f.end_ts_ns[row]))), "cat": cat, "name": name}
        if not f.end_next_slice[row]:
            end["bp"] = "e"
        out.append(orjson.dumps(start))
        out.append(orjson.dumps(end))
    return out


def _track_columns(trace: Trace) -> tuple[list, list]:
    return [t.pid for t in trace.tracks], [t.tid for t in trace.tracks]


__all__ = ["read_kineto", "parse_kineto", "write_kineto", "dumps_kineto", "TraceFormatError"]
