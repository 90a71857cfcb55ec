"""Seeded mutations of trace, profile, NEFF and NTFF files for the fuzz suite.

Two kinds: byte-level damage (what a bad disk, a cut download or a half-written file does) and
structural edits of the JSON (what a buggy writer or a hand edit does: values of the wrong type or
size, keys lost, events duplicated, nesting, odd Unicode). Every mutation is a pure function of
the input and a ``random.Random``, so a failing case is reproduced from its seed.
"""

from __future__ import annotations

import gzip
import random

import orjson

# Values a writer could put where a number, string or object belongs.
SPECIAL_VALUES = [
    0, -1, 1, 0.5, 0.0005, -0.25, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**16, 10**30,
    -(2**63), 1e16, 1e308, -1e308, 1e-300, True, False, None, "", "0", "1.5", "nan", "\u0000", "\ud7ff\ue000",
    "\U0001f600" * 3, [], [1], [[1]], {}, {"a": 1}, "x" * 300,
]
FIELDS = ["ts", "dur", "ph", "pid", "tid", "name", "cat", "args", "id", "bp", "s"]
PHASES = ["X", "B", "E", "i", "I", "C", "M", "s", "t", "f", "b", "e", "n", "P", "?", ""]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One byte-level damage of ``data``."""
    kind = rng.randrange(7)
    n = len(data)
    if n == 0:
        return b"\xef\xbb\xbf" if kind % 2 else b" "
    if kind == 0:  # truncation
        return data[: rng.randrange(n)]
    if kind == 1:  # a few flipped bits
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == 2:  # a run of garbage
        at = rng.randrange(n)
        return data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[at:]
    if kind == 3:  # a chunk lost
        at = rng.randrange(n)
        return data[:at] + data[at + rng.randint(1, 4096):]
    if kind == 4:  # a chunk repeated
        at = rng.randrange(n)
        return data[:at] + data[at : at + rng.randint(1, 4096)] * 2 + data[at:]
    if kind == 5:  # zeros over a stretch (a sparse or failed write)
        at = rng.randrange(n)
        size = rng.randint(1, 4096)
        return data[:at] + bytes(min(size, n - at)) + data[at + size :]
    # special bytes in text: invalid UTF-8, a BOM, a NUL, a quote
    at = rng.randrange(n)
    return data[:at] + rng.choice([b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\x00", b'"', b"\\", b"]", b"}"]) + data[at:]


def mutate_events(events: list, rng: random.Random) -> list:
    """Structural edits of a list of trace events (a copy; ``events`` is left alone)."""
    events = [dict(e) if isinstance(e, dict) else e for e in events]
    for _ in range(rng.randint(1, 4)):
        if not events:
            events.append({"ph": "X", "ts": 0, "dur": 0, "pid": 0, "tid": 0, "name": "n", "cat": "c"})
        i = rng.randrange(len(events))
        event = events[i]
        kind = rng.randrange(9)
        if not isinstance(event, dict) or kind == 0:
            events[i] = rng.choice(SPECIAL_VALUES)  # an event that is not an object
        elif kind <= 3:
            event[rng.choice(FIELDS)] = rng.choice(SPECIAL_VALUES)
        elif kind == 4:
            event.pop(rng.choice(FIELDS), None)
        elif kind == 5:
            event["ph"] = rng.choice(PHASES)
        elif kind == 6:
            events.insert(rng.randrange(len(events) + 1), dict(event))
        elif kind == 7:
            depth = rng.choice([10, 200, 254, 255, 300, 1000, 1100])
            event["args"] = _nested(depth)
        else:
            ts = event.get("ts")
            if isinstance(ts, (int, float)) and not isinstance(ts, bool):
                event["ts"] = ts + rng.choice([0.5, 0.001, 0.0005, -1e6, 1e15, 1712195495406752.5])
    return events


def _nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def dump_events(document, events: list) -> bytes:
    """A trace document with ``events`` in place of its events, as JSON text (values orjson cannot
    write, integers past 64 bits, go in as text)."""
    text = dump_json(events)
    if not isinstance(document, dict):
        return text
    head = dump_json({k: v for k, v in document.items() if k != "traceEvents"})
    return head[:-1] + (b"," if len(head) > 2 else b"") + b'"traceEvents":' + text + b"}"


def dump_json(value) -> bytes:
    """JSON text of ``value``, whatever it holds (integers past 64 bits, lone surrogates, 1000
    levels of nesting: orjson refuses those, the standard library writes them)."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        import json

        try:
            return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        except (RecursionError, ValueError):
            return b"[]"


def maybe_gzip(data: bytes, rng: random.Random) -> bytes:
    return gzip.compress(data, compresslevel=1) if rng.random() < 0.3 else data
