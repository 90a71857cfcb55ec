"""Idle time between device executions, and why the device was idle.

On each device lane, between two consecutive executions A and B (B launched at ``submit``):

* ``submit >= A.end``: the device finished A before the host had even asked for B, so the device
  waited ``submit - A.end`` on the host (**host dispatch**) and then ``B.start - submit`` for the
  launch to reach it (**launch latency**);
* ``submit < A.end``: B was already queued; the whole gap is launch latency;
* no known launch for B (a trace without flows or correlation ids): **unknown**.

Over the device's active span (first execution start to last execution end, summed over lanes)
busy + host dispatch + launch latency + unknown = span, so the shares add up to 100%. A span that
is mostly host dispatch is *host-dispatch bound*: a faster device would not help, fewer and bigger
dispatches would.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..trace import Trace
from .device_work import device_work

HOST_DISPATCH = "host_dispatch"
LAUNCH = "launch_latency"
UNKNOWN = "unknown"

DEVICE_BOUND = "device bound"
HOST_BOUND = "host-dispatch bound"
LAUNCH_BOUND = "launch-latency bound"
NO_DEVICE = "no device work"


@dataclass
class Gap:
    track: int
    start_ns: int
    end_ns: int
    cause: str
    host_wait_ns: int  # part of the gap spent waiting for the host to submit
    launch_ns: int  # part spent between submit and start
    before_row: int  # the execution before the gap
    after_row: int  # the execution after it
    after_launcher_row: int  # the runtime call that launched ``after_row`` (-1 if unknown)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class IdleAnalysis:
    span_ns: int = 0
    busy_ns: int = 0
    host_dispatch_ns: int = 0
    launch_ns: int = 0
    unknown_ns: int = 0
    executions: int = 0
    gap_count: int = 0
    regime: str = NO_DEVICE
    largest: list[Gap] = field(default_factory=list)

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    def share(self, part_ns: int) -> float:
        return part_ns / self.span_ns if self.span_ns else 0.0

    @property
    def launch_overhead_share(self) -> float:
        """Share of the device's active span lost between executions to dispatch and launch."""
        return self.share(self.host_dispatch_ns + self.launch_ns)

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "largest"}
        out["idle_ns"] = self.idle_ns
        out["shares"] = {
            "busy": self.share(self.busy_ns), "host_dispatch": self.share(self.host_dispatch_ns),
            "launch_latency": self.share(self.launch_ns), "unknown": self.share(self.unknown_ns),
        }
        out["launch_overhead_share"] = self.launch_overhead_share
        out["largest"] = [{**asdict(g), "duration_ns": g.duration_ns} for g in self.largest]
        return out


def idle_gaps(trace: Trace, keep: int = 20) -> IdleAnalysis:
    work = device_work(trace)
    result = IdleAnalysis(executions=len(work))
    if not len(work):
        return result
    gaps: list[Gap] = []
    for track in np.unique(work.track).tolist():
        lane = np.flatnonzero(work.track == track)
        lane = lane[np.argsort(work.start[lane], kind="stable")]
        start, end = work.start[lane], work.end[lane]
        reach = np.maximum.accumulate(end)  # overlapping executions (copies beside kernels) count once
        result.span_ns += int(reach[-1] - start[0])
        gap_after = np.flatnonzero(start[1:] > reach[:-1])
        result.busy_ns += int(reach[-1] - start[0]) - int((start[1:][gap_after] - reach[:-1][gap_after]).sum())
        for i in gap_after.tolist():
            gaps.append(_classify(work, track, lane[i], lane[i + 1], int(reach[i])))
    for gap in gaps:
        result.host_dispatch_ns += gap.host_wait_ns
        result.launch_ns += gap.launch_ns
        if gap.cause == UNKNOWN:
            result.unknown_ns += gap.duration_ns
    result.gap_count = len(gaps)
    result.largest = sorted(gaps, key=lambda g: -g.duration_ns)[:keep]
    result.regime = _regime(result)
    return result


def _classify(work, track: int, before: int, after: int, free_at: int) -> Gap:
    start = int(work.start[after])
    submit = int(work.submit[after])
    common = dict(track=int(track), start_ns=free_at, end_ns=start, before_row=int(work.rows[before]),
                  after_row=int(work.rows[after]), after_launcher_row=int(work.launcher[after]))
    if submit < 0:
        return Gap(cause=UNKNOWN, host_wait_ns=0, launch_ns=0, **common)
    if submit >= free_at:
        waited = min(submit, start) - free_at
        return Gap(cause=HOST_DISPATCH, host_wait_ns=waited, launch_ns=start - free_at - waited, **common)
    return Gap(cause=LAUNCH, host_wait_ns=0, launch_ns=start - free_at, **common)


def _regime(result: IdleAnalysis) -> str:
    if not result.span_ns:
        return DEVICE_BOUND if result.executions else NO_DEVICE
    if result.share(result.busy_ns) >= 0.6:
        return DEVICE_BOUND
    if result.host_dispatch_ns >= max(result.launch_ns, result.unknown_ns):
        return HOST_BOUND
    if result.launch_ns >= result.unknown_ns:
        return LAUNCH_BOUND
    return DEVICE_BOUND if result.share(result.busy_ns) >= 0.5 else "idle (cause unknown)"
