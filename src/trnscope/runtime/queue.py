"""A NeuronCore's execution queue: when submitted work starts and ends on the device.

The core runs one NEFF at a time, in submission order, whatever the stream; a stream is an
ordering constraint on top of that queue (``stream_end``: device ns at which the stream's last
submitted work ends; ``stream_ready``: device ns before which its next work may not start,
``Stream.wait_event``). :meth:`KernelQueue.submit` is the host side of one kernel execution after
its numbers are computed: the backend's host work, the compile on a cache miss, the submit, then
the device start at max(submit + launch latency, device free, the stream's waits) plus the
per-NEFF start (docs/cost-model.md, "Launch").

:class:`KernelQueue` is the Python path's queue and the specification of the C++ core's
``Queue`` (device/csrc/runtime.cpp), which the runtime uses on the C++ path so that the C++ eager
path and Python queue work on one state; both are checked against each other
(tests/runtime/test_clock_and_queue.py).
"""

from __future__ import annotations

import itertools
import threading

from .hostcost import host_costs

_seq = itertools.count(1)


def next_seq() -> int:
    """The next execution record's sequence number (one sequence for every core)."""
    return next(_seq)


class KernelQueue:
    def __init__(self, index: int, launch_ns: int, capacity: int = 0) -> None:
        self.index = index
        self.launch_ns = launch_ns
        self.capacity = capacity
        self.device_free_ns = 0
        self.current_stream = 0
        self.stream_end: dict[int, int] = {}
        self.stream_ready: dict[int, int] = {}
        self._known: set[int] = set()
        self._lock = threading.Lock()
        self.clear_stats()

    def submit(self, clock, neff_id: int, duration: int, compiled_ns: int) -> tuple[bool, int, int, int, int, int]:
        """The host spends the backend's work and the submit (and ``compiled_ns`` of compile between
        them); the execution is queued. Returns (first run of this NEFF here, host start, submit,
        device start, device end, ready: submit + launch latency)."""
        costs = host_costs()
        clock.advance(costs.backend_op_ns)
        host_start = clock.now()
        if compiled_ns:
            clock.advance(compiled_ns)
        submit = clock.advance(costs.submit_ns)
        with self._lock:
            first = neff_id not in self._known
            if first:
                self._known.add(neff_id)
                self.neffs_executed += 1
            else:
                self.cache_hits += 1
            self.dispatches += 1
            ready = submit + self.launch_ns
            start, end = self._enqueue(submit, duration, self.launch_ns)
        return first, host_start, submit, start, end, ready

    def enqueue(self, ready: int, duration: int, overhead: int = 0) -> tuple[int, int]:
        """Queue ``duration`` ns of device work on the current stream, no earlier than ``ready``;
        returns its (start, end). ``overhead``: the per-NEFF start, paid after the device is free."""
        with self._lock:
            return self._enqueue(ready, duration, overhead)

    def _enqueue(self, ready: int, duration: int, overhead: int) -> tuple[int, int]:
        sid = self.current_stream
        start = max(ready, self.device_free_ns, self.stream_ready.get(sid, 0)) + overhead
        end = start + duration
        self.device_free_ns = end
        self.stream_end[sid] = end
        return start, end

    def stream_done(self, stream: int) -> int:
        with self._lock:
            return max(self.stream_end.get(stream, 0), self.stream_ready.get(stream, 0))

    def stream_wait(self, stream: int, device_ns: int) -> None:
        with self._lock:
            if device_ns > self.stream_ready.get(stream, 0):
                self.stream_ready[stream] = device_ns

    def order_after(self, other_free: int) -> None:
        with self._lock:
            self.device_free_ns = max(self.device_free_ns, other_free)

    def stats(self) -> tuple[int, int, int]:
        """(distinct NEFFs run, executions of a NEFF run before, kernel executions)."""
        return self.neffs_executed, self.cache_hits, self.dispatches

    def clear_stats(self) -> None:
        self.neffs_executed = self.cache_hits = self.dispatches = 0
