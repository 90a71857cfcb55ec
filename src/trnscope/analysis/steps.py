"""Per-step overview: where each profiler step's time went, as the TensorBoard plugin's overview
showed it: device busy, waiting for the host to dispatch, launch latency, and idle otherwise.

Steps are the host's ``ProfilerStep#N`` spans (``torch.profiler``'s ``schedule``/``step()``). The
device's timeline is labelled once, over all its executions (any device running counts as busy):
each idle gap is split as ``gaps.py`` splits it, by the execution that ends it — waiting for the
host until that execution's launch, then up to 30 us of launch latency, then *idle* (queued
behind a dependency, or no launch known). Before the first execution and after the last, the device
waits on the host (host-side work). Each step gets the parts that fall inside it, so its four
shares add up to its duration.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from ..trace import Trace
from .device_work import device_work
from .gaps import LAUNCH_WINDOW_NS

STEP_NAME = re.compile(r"ProfilerStep#(\d+)")
BUSY, HOST, LAUNCH, IDLE = 0, 1, 2, 3
PARTS = ("busy_ns", "host_dispatch_ns", "launch_ns", "idle_ns")


@dataclass
class Step:
    name: str
    number: int
    row: int  # the ProfilerStep slice
    start_ns: int
    dur_ns: int
    executions: int  # device executions starting in the step
    busy_ns: int
    host_dispatch_ns: int
    launch_ns: int
    idle_ns: int

    def to_dict(self) -> dict:
        return asdict(self)


def step_overview(trace: Trace) -> list[Step]:
    s = trace.slices
    ids = [i for i, text in enumerate(trace.strings) if text and STEP_NAME.fullmatch(text)]
    if not ids:
        return []
    rows = np.flatnonzero(np.isin(s.name, np.asarray(ids, dtype=np.int64)))
    rows = rows[np.argsort(s.ts_ns[rows], kind="stable")]
    starts, ends, kinds = _labelled(trace, int(s.ts_ns[rows].min()), int((s.ts_ns[rows] + s.dur_ns[rows]).max()))
    work = device_work(trace)
    out = []
    for row in rows.tolist():
        a, b = int(s.ts_ns[row]), int(s.ts_ns[row] + s.dur_ns[row])
        overlap = np.clip(np.minimum(ends, b) - np.maximum(starts, a), 0, None)
        parts = np.bincount(kinds, weights=overlap, minlength=4).astype(np.int64)
        # rounding never leaves the four parts off the step's duration
        parts[HOST] += (b - a) - int(parts.sum())
        name = trace.strings[int(s.name[row])]
        number = STEP_NAME.fullmatch(name)
        assert number is not None  # the rows were chosen by this pattern
        out.append(Step(name=name, number=int(number.group(1)), row=int(row), start_ns=a,
                        dur_ns=b - a, executions=int(np.count_nonzero((work.start >= a) & (work.start < b))),
                        busy_ns=int(parts[BUSY]), host_dispatch_ns=int(parts[HOST]), launch_ns=int(parts[LAUNCH]),
                        idle_ns=int(parts[IDLE])))
    return out


def _labelled(trace: Trace, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals (start, end, kind) covering [lo, hi) at least: busy stretches (the union of all
    executions) and the parts of the gaps between them."""
    work = device_work(trace)
    if not len(work):
        return np.array([lo]), np.array([hi]), np.array([HOST])
    order = np.argsort(work.start, kind="stable")
    start, end, submit = work.start[order], work.end[order], work.submit[order]
    reach = np.maximum.accumulate(end)
    new = np.concatenate(([True], start[1:] > reach[:-1]))  # an execution starting a busy stretch
    first = np.flatnonzero(new)
    busy_start = start[first]
    busy_end = np.append(reach[first[1:] - 1], reach[-1])
    # the gap before each stretch ends at its first execution, which says why the device waited
    gap_start = np.concatenate(([min(lo, int(busy_start[0]))], busy_end[:-1]))
    gap_end = busy_start
    sub = submit[first]
    known = sub >= 0
    host_end = np.where(known, np.clip(sub, gap_start, gap_end), gap_start)
    launch_end = np.where(known, np.minimum(host_end + LAUNCH_WINDOW_NS, gap_end), gap_start)
    tail_start, tail_end = int(busy_end[-1]), max(hi, int(busy_end[-1]))
    starts = np.concatenate((busy_start, gap_start, host_end, launch_end, [tail_start]))
    ends = np.concatenate((busy_end, host_end, launch_end, gap_end, [tail_end]))
    kinds = np.concatenate((np.full(len(first), BUSY), np.full(len(first), HOST), np.full(len(first), LAUNCH),
                            np.full(len(first), IDLE), [HOST]))
    return starts, ends, kinds
