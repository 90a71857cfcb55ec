"""When the device was idle, why, and what that makes the profile bound by.

Idle time is measured per device over the union of its streams (``utilization``): a gap is a time
when *no* stream of the device ran anything, between two executions. The execution that ends the
gap says why it was not running earlier. With ``submit`` the start of the host call that launched
it (``cudaLaunchKernel``, ``nrt_execute``):

* **host dispatch**: from the start of the gap until ``submit``: the device had nothing to run
  because the host had not asked yet;
* **launch latency**: from ``max(submit, gap start)`` on, up to ``LAUNCH_WINDOW_NS`` (HTA's
  ``consecutive_kernel_delay`` default, 30 us): the launch on its way to the device;
* **dependency**: the rest. The execution was queued but did not start: it waited for an event, a
  synchronisation or work on another device or stream (HTA's "other" idle time);
* **unknown**: the trace does not say who launched the execution (no flow, no correlation id).

Over a device's span (first execution start to last end) busy + the four causes = span, so their
shares add up to 100%. Before its first execution and after its last, within the profile's
activity window (``lanes.activity_extent``), the device waited on the host as well: that time is
**outside** (host-side work that launched nothing: data loading, Python, the optimizer on the CPU).

The **regime** is decided over the activity window, because a short burst of busy device work in
a long host-side run is not device bound:

* *device bound* when the devices are busy at least ``DEVICE_BOUND_SHARE`` (60%) of the window;
* otherwise the largest cause of idle time: *host-dispatch bound* (host dispatch + outside),
  *launch-latency bound*, *dependency bound* (waiting on other streams, events or syncs), or
  *idle (cause unknown)*.
"""

from __future__ import annotations

import weakref
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import caches
from ..trace import Trace
from .device_work import DeviceWork, device_work
from .lanes import activity_extent

HOST_DISPATCH = "host_dispatch"
LAUNCH = "launch_latency"
DEPENDENCY = "dependency"
UNKNOWN = "unknown"

DEVICE_BOUND = "device bound"
HOST_BOUND = "host-dispatch bound"
LAUNCH_BOUND = "launch-latency bound"
DEPENDENCY_BOUND = "dependency bound"
UNKNOWN_BOUND = "idle (cause unknown)"
NO_DEVICE = "no device work"

# HTA get_idle_time_breakdown(consecutive_kernel_delay=30): gaps up to this long between a
# launched execution and its start are launch overhead; longer waits are dependencies.
LAUNCH_WINDOW_NS = 30_000
# busy share of the activity window from which a profile is device bound
DEVICE_BOUND_SHARE = 0.6


@dataclass
class Gap:
    device: str
    track: int  # the lane of the execution after the gap
    start_ns: int
    end_ns: int
    cause: str
    host_wait_ns: int  # part of the gap spent waiting for the host to submit
    launch_ns: int  # part spent between submit and start, up to LAUNCH_WINDOW_NS
    dependency_ns: int  # the rest of the wait of an execution already submitted
    before_row: int  # the execution that ended when the gap began
    after_row: int  # the execution that ended it
    after_launcher_row: int  # the runtime call that launched ``after_row`` (-1 if unknown)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class IdleAnalysis:
    span_ns: int = 0  # first to last execution, summed over devices
    busy_ns: int = 0  # union of executions, summed over devices
    host_dispatch_ns: int = 0
    launch_ns: int = 0
    dependency_ns: int = 0
    unknown_ns: int = 0
    window_ns: int = 0  # the activity window, once per device that ran something
    outside_ns: int = 0  # device idle in the window before its first / after its last execution
    executions: int = 0
    devices: int = 0
    gap_count: int = 0
    regime: str = NO_DEVICE
    largest: list[Gap] = field(default_factory=list)

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    def share(self, part_ns: int) -> float:
        """Of the devices' spans (HTA's temporal breakdown)."""
        return part_ns / self.span_ns if self.span_ns else 0.0

    def window_share(self, part_ns: int) -> float:
        """Of the activity window."""
        return part_ns / self.window_ns if self.window_ns else 0.0

    @property
    def launch_overhead_share(self) -> float:
        """Share of the devices' spans lost between executions to dispatch and launch."""
        return self.share(self.host_dispatch_ns + self.launch_ns)

    @property
    def host_wait_ns(self) -> int:
        """Device idle waiting on the host over the window: dispatch gaps and outside time."""
        return self.host_dispatch_ns + self.outside_ns

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "largest"}
        out["idle_ns"] = self.idle_ns
        out["shares"] = {
            "busy": self.share(self.busy_ns), "host_dispatch": self.share(self.host_dispatch_ns),
            "launch_latency": self.share(self.launch_ns), "dependency": self.share(self.dependency_ns),
            "unknown": self.share(self.unknown_ns),
        }
        out["window_shares"] = {
            "busy": self.window_share(self.busy_ns), "host_dispatch": self.window_share(self.host_dispatch_ns),
            "outside": self.window_share(self.outside_ns), "launch_latency": self.window_share(self.launch_ns),
            "dependency": self.window_share(self.dependency_ns), "unknown": self.window_share(self.unknown_ns),
        }
        out["launch_overhead_share"] = self.launch_overhead_share
        out["largest"] = [{**asdict(g), "duration_ns": g.duration_ns} for g in self.largest]
        return out


_CACHE: "weakref.WeakKeyDictionary[Trace, IdleAnalysis]" = weakref.WeakKeyDictionary()
caches.register("analysis.gaps: idle analyses per trace", _CACHE.clear)


def idle_gaps(trace: Trace, keep: int = 20) -> IdleAnalysis:
    found = _CACHE.get(trace)
    if found is None or len(found.largest) < min(keep, found.gap_count):
        found = _CACHE[trace] = _analyse(trace, keep)
    return found


def _analyse(trace: Trace, keep: int) -> IdleAnalysis:
    work = device_work(trace)
    result = IdleAnalysis(executions=len(work))
    if not len(work):
        return result
    window_start, window_end = activity_extent(trace)
    found = []  # per device: (device index, execution before each gap, execution after it, gap start)
    for index in range(len(work.devices)):
        mine = np.flatnonzero(work.device == index)
        if not len(mine):
            continue
        result.devices += 1
        mine = mine[np.argsort(work.start[mine], kind="stable")]
        start, end = work.start[mine], work.end[mine]
        reach = np.maximum.accumulate(end)
        # the execution holding the running maximum end: the one the device finished last
        holder = np.maximum.accumulate(np.where(end == reach, np.arange(len(mine)), 0))
        span = int(reach[-1] - start[0])
        result.span_ns += span
        window = max(int(window_end), int(reach[-1])) - min(int(window_start), int(start[0]))
        result.window_ns += window
        result.outside_ns += window - span
        after = np.flatnonzero(start[1:] > reach[:-1]) + 1
        result.busy_ns += span - int((start[after] - reach[after - 1]).sum())
        found.append((np.full(len(after), index), mine[holder[after - 1]], mine[after], reach[after - 1]))
    if not found:
        return result
    device, before, after, free_at = (np.concatenate(parts) for parts in zip(*found))
    parts = _causes(work, after, free_at)
    host, launch, dependency, unknown = parts
    result.host_dispatch_ns = int(host.sum())
    result.launch_ns = int(launch.sum())
    result.dependency_ns = int(dependency.sum())
    result.unknown_ns = int(unknown.sum())
    result.gap_count = len(after)
    duration = work.start[after] - free_at
    top = np.argsort(-duration, kind="stable")[:keep]
    result.largest = [_gap(work, int(device[i]), int(before[i]), int(after[i]), int(free_at[i]),
                           [int(p[i]) for p in parts]) for i in top.tolist()]
    result.regime = regime(result)
    return result


_CAUSES = (HOST_DISPATCH, LAUNCH, DEPENDENCY, UNKNOWN)


def _causes(work: DeviceWork, after: np.ndarray, free_at: np.ndarray) -> tuple[np.ndarray, ...]:
    """(host dispatch, launch latency, dependency, unknown) ns of each gap, from the execution that
    ends it: submitted after the gap began (host), then up to LAUNCH_WINDOW_NS on its way, the rest
    waiting on something else; no known launch: all unknown."""
    gap = work.start[after] - free_at
    submit = work.submit[after]
    known = submit >= 0
    host = np.where(known, np.clip(submit - free_at, 0, gap), 0)
    launch = np.where(known, np.minimum(gap - host, LAUNCH_WINDOW_NS), 0)
    dependency = np.where(known, gap - host - launch, 0)
    return host, launch, dependency, np.where(known, 0, gap)


def _gap(work: DeviceWork, device: int, before: int, after: int, free_at: int, parts: list[int]) -> Gap:
    host, launch, dependency, unknown = parts
    cause = UNKNOWN if unknown else _CAUSES[int(np.argmax([host, launch, dependency]))]  # ties: the earlier
    return Gap(device=work.devices[device], track=int(work.track[after]), start_ns=free_at,
               end_ns=int(work.start[after]), cause=cause, host_wait_ns=host, launch_ns=launch,
               dependency_ns=dependency, before_row=int(work.rows[before]), after_row=int(work.rows[after]),
               after_launcher_row=int(work.launcher[after]))


def regime(idle: IdleAnalysis) -> str:
    if not idle.executions:
        return NO_DEVICE
    if not idle.window_ns or idle.window_share(idle.busy_ns) >= DEVICE_BOUND_SHARE:
        return DEVICE_BOUND
    causes = {HOST_BOUND: idle.host_wait_ns, LAUNCH_BOUND: idle.launch_ns, DEPENDENCY_BOUND: idle.dependency_ns,
              UNKNOWN_BOUND: idle.unknown_ns}
    return max(causes, key=lambda k: causes[k])
