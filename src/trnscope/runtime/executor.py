"""The Neuron runtime of one emulated NeuronCore: NEFF cache, execution queue and the event record.

Every device dispatch goes through :meth:`NeuronCoreRuntime.execute`: the op is lowered to a
Program (a NEFF, cached by op/shape/dtype key in memory and on disk, :mod:`.neff_cache`; a miss is
a real compile and costs host time as it does on Neuron), its device time comes from the
simulator (cached per NEFF, and on disk beside the NEFF), and its numerics are
computed by a callback (on the host: emulation work, cut from the clock). Execution is
asynchronous: the host returns after submitting; the device starts the NEFF at
max(submit + launch latency, device free) and runs for its simulated time.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..compiler import NoLowering, OpCall
from ..hw import HardwareSpec, get_spec
from ..isa import Program
from . import neff_cache
from .clock import EmulatedClock

if TYPE_CHECKING:  # the simulator (numba) is imported by the first kernel that needs a timeline
    from ..sim import DeviceTimeline

_seq = itertools.count(1)


@dataclass
class Execution:
    """One thing the runtime did for the framework, on the emulated clock (ns)."""
    seq: int
    kind: str                 # "kernel" | "fallback" | "h2d" | "d2h"
    op: str                   # framework op, e.g. aten::mul.Tensor
    device: int
    thread: int
    host_start_ns: int        # the runtime call began (after the dispatcher reached the device)
    host_end_ns: int          # the host returned to the caller
    device_start_ns: int = 0
    device_end_ns: int = 0
    neff_id: int = 0
    neff_name: str = ""
    compile_ns: int = 0       # > 0 when this call compiled the NEFF (cache miss)
    bytes: int = 0
    queue_wait_ns: int = 0    # device busy with earlier work after the launch latency
    timeline: DeviceTimeline | None = field(default=None, repr=False)
    program: Program | None = field(default=None, repr=False)


class NeuronCoreRuntime:
    def __init__(self, index: int, clock: EmulatedClock, spec: HardwareSpec | None = None):
        self.index = index
        self.clock = clock
        self.spec = spec or get_spec()
        self.device_free_ns = 0
        self.records: list[Execution] = []
        self.recording = False
        # called with each recorded Execution, on the thread that made it, outside the lock (the
        # profiler uses it to mark the framework op that dispatched the execution)
        self.on_record: Callable[[Execution], None] | None = None
        self.clear_stats()
        self._lock = threading.Lock()
        self._known: set[int] = set()
        self._launch_ns = int(self.spec.neff_launch_latency_ns)
        # dispatch plans of the device layer's fast path (see trnscope.device.runtime_bridge):
        # call signature -> what serving that call needs, per core because plans hold this
        # core's spec's Programs and timelines
        self.plans: dict = {}

    # --- kernels --------------------------------------------------------------------------------
    def execute(self, call: OpCall, compute: Callable[[], object] | None = None):
        """Dispatch ``call`` to the device. Returns what ``compute`` returns (the op's host result).

        Looking the NEFF up is emulator work (cut from the clock); a cache miss compiles it, and
        the host then spends the compile time, as with Neuron's compiler. Raises
        :class:`NoLowering` when the op has no kernel (the caller falls back to CPU).
        """
        return self.execute_call(call, compute)[0]

    def execute_call(self, call: OpCall, compute: Callable[[], object] | None = None):
        """:meth:`execute`, returning (result, Program, DeviceTimeline) so that a caller can run
        the same kernel again with :meth:`execute_program` without lowering or simulating it."""
        host_start = self.clock.now()
        with self.clock.emulation():
            lowered = neff_cache.lower(call, self.spec)
            if lowered.source == "compiled":
                self.neffs_compiled += 1
            elif lowered.source == "disk":
                self.neffs_loaded += 1
        compiled_ns = lowered.compile_ns
        if compiled_ns:
            self.clock.wait_until(self.clock.now() + compiled_ns)
        return self._run(lowered.program, call.name, compute, compiled_ns, host_start, lowered.timeline,
                         lowered if lowered.key is not None else None)

    def execute_program(self, program: Program, label: str, compute: Callable[[], object] | None = None,
                        compiled_ns: int = 0, host_start: int | None = None,
                        timeline: DeviceTimeline | None = None):
        """Run a prebuilt Program (a compiled graph's NEFF) as one device execution.

        ``timeline``: the Program's simulated timeline when the caller already has it (a cached
        dispatch plan); otherwise it is simulated here (cached per NEFF)."""
        return self._run(program, label, compute, compiled_ns, host_start, timeline)[0]

    def _run(self, program, label, compute, compiled_ns, host_start, timeline, to_keep=None):
        if host_start is None:
            host_start = self.clock.now()
        with self.clock.emulation():
            nid = program.neff_id
            if timeline is None:
                from ..sim import simulate

                timeline = simulate(program, self.spec)
            tl = timeline
            if to_keep is not None:  # a NEFF compiled for this call: on disk for the next process
                neff_cache.keep(to_keep, tl)
            result = compute() if compute is not None else None
        submit = self.clock.now()
        with self._lock:
            first = nid not in self._known
            if first:
                self._known.add(nid)
                self.neffs_executed += 1
            else:
                self.cache_hits += 1
            self.dispatches += 1
            ready = submit + self._launch_ns
            start = max(ready, self.device_free_ns)
            end = start + int(round(tl.total_ns))
            self.device_free_ns = end
            rec = None
            if self.recording:
                rec = Execution(
                    next(_seq), "kernel", label, self.index, threading.get_ident(), host_start,
                    self.clock.now(), start, end, nid, program.name, compiled_ns if first else 0,
                    queue_wait_ns=start - ready, timeline=tl, program=program)
                self.records.append(rec)
        if rec is not None and self.on_record is not None:
            self.on_record(rec)
        return result, program, tl

    def fallback(self, op: str, compute: Callable[[], object]):
        """An op with no device kernel runs on the CPU: real host time, no device time."""
        host_start = self.clock.now()
        result = compute()
        if self.recording:
            self._record(Execution(next(_seq), "fallback", op, self.index, threading.get_ident(),
                                   host_start, self.clock.now()))
        return result

    def record_fallback(self, op: str, reason: str = "") -> None:
        """An op whose kernel could not serve this call: computed on the host, marked as fallback."""
        if self.recording:
            now = self.clock.now()
            self._record(Execution(next(_seq), "fallback", op, self.index, threading.get_ident(), now, now,
                                   neff_name=reason[:200]))

    # --- copies ---------------------------------------------------------------------------------
    def copy(self, direction: str, nbytes: int, compute: Callable[[], object] | None = None, op: str = "",
             blocking: bool = True):
        """A host<->device copy: stream-ordered after earlier work. The host waits for it unless
        ``blocking`` is False (a non-blocking copy from or to pinned host memory)."""
        host_start = self.clock.now()
        with self.clock.emulation():
            result = compute() if compute is not None else None
        with self._lock:
            now = self.clock.now()
            start = max(now, self.device_free_ns)
            dur = int(self.spec.host_transfer_fixed_ns + nbytes / self.spec.host_device_bytes_per_s * 1e9)
            end = start + dur
            self.device_free_ns = end
        if blocking:
            self.clock.wait_until(end)
        if self.recording:
            self._record(Execution(next(_seq), direction, op or f"memcpy_{direction}", self.index,
                                   threading.get_ident(), host_start, self.clock.now(), start, end,
                                   bytes=nbytes))
        return result

    def order_after(self, other: "NeuronCoreRuntime") -> None:
        """Work queued on this core from now on starts after everything queued on ``other``
        (a cross-core dependency, such as a copy between two cores' HBM)."""
        if other is self:
            return
        with self._lock:
            self.device_free_ns = max(self.device_free_ns, other.device_free_ns)

    def _record(self, rec: Execution) -> None:
        self.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def synchronize(self) -> int:
        """Block the host until the device is idle; returns the emulated ns waited."""
        return self.clock.wait_until(self.device_free_ns)

    def in_flight(self) -> bool:
        return self.device_free_ns > self.clock.now()

    # --- statistics ---------------------------------------------------------------------------------
    def stats(self) -> dict:
        """``neffs_compiled``: NEFFs this core's calls compiled (lowered); ``neffs_loaded``: read from the
        persistent cache instead; ``neffs_executed``: distinct NEFFs run here; ``cache_hits``:
        executions of a NEFF run here before; ``dispatches``: kernel executions."""
        return {"neffs_compiled": self.neffs_compiled, "neffs_loaded": self.neffs_loaded,
                "neffs_executed": self.neffs_executed, "cache_hits": self.cache_hits, "dispatches": self.dispatches}

    def clear_stats(self) -> None:
        self.neffs_compiled = self.neffs_loaded = self.neffs_executed = self.cache_hits = self.dispatches = 0


__all__ = ["Execution", "NeuronCoreRuntime", "NoLowering"]
