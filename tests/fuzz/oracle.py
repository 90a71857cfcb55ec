"""The fuzz suite's oracle: a lenient reference parse of a Chrome trace, the checks every loaded
result must pass, and the tally of outcomes.

The reference is written independently of trnscope's reader: the standard library's json with
exact decimals, no streaming, no schema. It says how many slices a trace has (complete events,
plus begin events) and the exact nanosecond range of its complete events. A loader that returns
a result must agree with it; one that refuses must raise its library error naming the file.
"""

from __future__ import annotations

import gzip
import json
import signal
import zlib
from collections import Counter
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

import numpy as np

TIME_LIMIT_NS = 2**62  # what trnscope.trace.timeunits documents; restated: the oracle is independent


@dataclass
class Reference:
    slices: int
    ns_range: tuple[int, int] | None  # (first start, last end) of complete events, when there are no B/E
    inexact: bool  # some time has sub-nanosecond digits: +-1 ns per value is allowed


def reference_parse(data: bytes) -> Reference | None:
    """What a lenient reader finds in ``data``; None when it is not a readable trace."""
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None
    text = text.lstrip(" \t\r\n").removeprefix("\ufeff")
    try:
        document = json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError):
        if not text.startswith("["):
            return None
        try:  # Chrome's JSON Array Format may lack its closing bracket
            document = json.loads(text.rstrip(" \t\r\n").rstrip(",") + "]", parse_float=Decimal)
        except (ValueError, RecursionError):
            return None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        return None
    slices, begin_end, inexact = 0, False, False
    first, last = None, None
    for event in events:
        if not isinstance(event, dict):
            return None
        ph = event.get("ph")
        if ph == "X":
            ts, dur = _ns(event.get("ts")), _ns(event.get("dur", 0))
            if ts is None or dur is None:
                return None
            inexact |= ts[1] or dur[1]
            start, end = ts[0], ts[0] + max(dur[0], 0)
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
            slices += 1
        elif ph in ("B", "E"):
            begin_end = True
            slices += ph == "B"
    return Reference(slices, None if begin_end or first is None else (first, last), inexact)


def _ns(value) -> tuple[int, bool] | None:
    """(nanoseconds, whether digits below a nanosecond were dropped) of a JSON number of us."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return None
    try:
        exact = Decimal(value) * 1000
        ns = int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
    except (InvalidOperation, OverflowError, ValueError):
        return None
    if abs(ns) >= TIME_LIMIT_NS:
        return None
    return ns, exact != ns


def check_trace(trace, ref: Reference | None) -> str | None:
    """Why a loaded trace is wrong ("" / None when it is right)."""
    s = trace.slices
    if len(s) and int(s.dur_ns.min()) < 0:
        return "negative duration"
    if len(s) and (np.abs(s.ts_ns).max() >= TIME_LIMIT_NS):
        return "timestamp out of range"
    if ref is None:
        return "loaded a file the reference parse cannot read"
    if len(s) != ref.slices:
        return f"{len(s)} slices, the reference finds {ref.slices}"
    if ref.ns_range is not None and len(s):
        got = (int(s.ts_ns.min()), int((s.ts_ns + s.dur_ns).max()))
        slack = 2 if ref.inexact else 0
        if abs(got[0] - ref.ns_range[0]) > slack or abs(got[1] - ref.ns_range[1]) > slack:
            return f"time range {got}, the reference finds {ref.ns_range}"
    return None


def check_figures(data, path: str = "") -> str | None:
    """Figures in an analysis' output that are out of their range: shares outside [0, 1],
    negative durations or sizes, NaN."""
    if isinstance(data, dict):
        for key, value in data.items():
            problem = _check_figure(str(key), value, path) or check_figures(value, f"{path}.{key}")
            if problem:
                return problem
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            problem = check_figures(value, f"{path}[{i}]")
            if problem:
                return problem
    return None


_NON_NEGATIVE = ("busy_ns", "idle_ns", "wall_ns", "span_ns", "duration_ns", "dur_ns", "total_ns", "self_ns",
                 "_bytes", "calls", "count", "executions", "dispatches")


def _check_figure(key: str, value, path: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value:
        return f"{path}.{key} is NaN"
    if key.endswith("_share") and not -1e-9 <= value <= 1 + 1e-9:
        return f"{path}.{key} = {value} is not a share"
    if key.endswith(_NON_NEGATIVE) and value < 0:
        return f"{path}.{key} = {value} is negative"
    return None


class Hang(Exception):
    pass


class deadline:
    """Fail a case that runs longer than ``seconds`` (SIGALRM; the test runs in the main thread)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self):
        def alarm(signum, frame):
            raise Hang(f"no answer within {self.seconds} s")

        self.previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        return False


class Tally:
    """Outcomes by kind: ``inputs`` tried, ``loads`` (loader calls), ``ok``, ``clean_errors``,
    ``crashes`` (anything but the library's error), ``silent_wrong``, ``hangs``, and the first
    few failures with their seeds."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.failures: list[str] = []

    def add(self, kind: str, detail: str = "") -> None:
        self.counts[kind] += 1
        if kind in ("crashes", "silent_wrong", "hangs") and len(self.failures) < 20:
            self.failures.append(detail)

    def merge(self, other: "Tally") -> None:
        self.counts.update(other.counts)
        self.failures.extend(other.failures[: 20 - len(self.failures)])
