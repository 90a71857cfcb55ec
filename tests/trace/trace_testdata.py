"""Shared helpers for the trace tests (imported by module name: tests/ has no packages)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import orjson
from trnscope.trace import Trace, parse_kineto

# The repo and shared/ are siblings (here /work/main and /work/shared; in CI a fresh clone with a
# copy of shared/ beside it).
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared/data/kineto-traces"
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("*.json*")) if FIXTURES.is_dir() else []


def fixture_ids(paths):
    return [p.name.split(".")[0][:48] for p in paths]


def load_json(path: Path):
    """The naive way: the whole file through the standard library (for reference counts)."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as handle:
        return json.load(handle)


@functools.lru_cache(maxsize=None)
def naive_events(path: Path) -> list[dict]:
    """Events parsed the naive way, cached: do not modify the list."""
    document = load_json(path)
    return document["traceEvents"] if isinstance(document, dict) else document


def trace_of(events: list[dict], **top) -> Trace:
    """A Trace from a list of Chrome events (and optional top-level keys)."""
    return parse_kineto(orjson.dumps({**top, "traceEvents": events}), source="<test>")


def x(name, ts, dur, tid=1, pid=1, cat="cpu_op", args=None):
    event = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if args is not None:
        event["args"] = args
    return event
