"""The Neuron runtime of one emulated NeuronCore: NEFF cache, execution queue and the event record.

Every device dispatch goes through :meth:`NeuronCoreRuntime.execute`: the op is lowered to a
Program (a NEFF, cached by op/shape/dtype key in memory and on disk, :mod:`.neff_cache`), its
device time comes from the simulator (cached per NEFF, and on disk beside the NEFF), and its
numerics are computed by a callback on the host. All of that is emulator work, cut from the clock;
the host instead spends what the host-cost model (:mod:`.hostcost`) says the backend costs: the
op's NEFF lookup, a neuronx-cc compile on a cache miss (a load from the persistent cache), the
submit. Execution is
asynchronous: the host returns after submitting; the device starts the NEFF at
max(submit + launch latency, device free, the stream's waits) and runs for its simulated time.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..compiler import NoLowering, OpCall
from ..hw import HardwareSpec, get_spec
from ..isa import Program
from . import neff_cache, observe
from .clock import REAL, EmulatedClock
from .hostcost import host_costs

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
        # device ns at which the collective engines' last queued collective ends: they run
        # beside the compute queue (trnscope.distributed), and a synchronize waits for both
        self.cc_free_ns = 0
        # every Execution of this core while ``recording`` is on (observers, :mod:`.observe`, get
        # each one as it is made whether or not the core keeps them)
        self.records: list[Execution] = []
        self.recording = False
        self.clear_stats()
        self._lock = threading.Lock()
        self._known: set[int] = set()
        self._launch_ns = int(self.spec.neff_launch_latency_ns)
        # streams of this NeuronCore (0: the default stream). The core runs one NEFF at a time, in
        # submission order, whatever the stream: a stream is an ordering constraint on top of that
        # queue. stream_end: device ns at which the stream's last submitted work ends;
        # stream_ready: device ns before which its next work may not start (Stream.wait_event).
        self.current_stream = 0
        self.stream_end: dict[int, int] = {}
        self.stream_ready: dict[int, int] = {}
        # dispatch plans of the device layer's fast path (see trnscope.device.runtime_bridge):
        # call signature -> what serving that call needs, per core because plans hold this
        # core's spec's Programs and timelines
        self.plans: dict = {}

    # --- kernels --------------------------------------------------------------------------------
    def execute(self, call: OpCall, compute: Callable[[], object] | None = None):
        """Dispatch ``call`` to the device. Returns what ``compute`` returns (the op's host result).

        Lowering the op is emulator work (cut from the clock); a NEFF-cache miss costs the host
        what the host-cost model says a neuronx-cc compile costs. Raises :class:`NoLowering` when
        the op has no kernel (the caller falls back to CPU).
        """
        return self.execute_call(call, compute)[0]

    def execute_call(self, call: OpCall, compute: Callable[[], object] | None = None):
        """:meth:`execute`, returning (result, Program, DeviceTimeline) so that a caller can run
        the same kernel again with :meth:`execute_program` without lowering or simulating it."""
        with self.clock.emulation():
            lowered = neff_cache.lower(call, self.spec)
            if lowered.source == "compiled":
                self.neffs_compiled += 1
            elif lowered.source == "disk":
                self.neffs_loaded += 1
        costs = host_costs()
        if lowered.source == "compiled":
            compile_ns = costs.compile_ns(len(lowered.program.instructions))
        elif lowered.source == "disk":
            compile_ns = costs.neff_load_ns
        else:
            compile_ns = 0
        return self._run(lowered.program, call.name, compute, compile_ns, lowered.timeline,
                         lowered if lowered.key is not None else None)

    def execute_program(self, program: Program, label: str, compute: Callable[[], object] | None = None,
                        compiled_ns: int = 0, timeline: DeviceTimeline | None = None):
        """Run a prebuilt Program (a compiled graph's NEFF) as one device execution.

        ``compiled_ns``: the modelled compile time to charge this call (the first call of a newly
        compiled NEFF); ``timeline``: the Program's simulated timeline when the caller already has
        it (a cached dispatch plan); otherwise it is simulated here (cached per NEFF)."""
        return self._run(program, label, compute, compiled_ns, timeline)[0]

    def _run(self, program, label, compute, compiled_ns, timeline, to_keep=None):
        clock = self.clock
        costs = host_costs()
        with clock.emulation():
            nid = program.neff_id
            if timeline is None:
                from ..sim import simulate

                timeline = simulate(program, self.spec)
            tl = timeline
            if to_keep is not None:  # a NEFF compiled for this call: on disk for the next process
                neff_cache.keep(to_keep, tl)
            result = compute() if compute is not None else None
            # the backend's host work: the op's key and NEFF lookup, then nrt_execute (which
            # compiles first on a cache miss) and its submit
            clock.advance(costs.backend_op_ns)
            host_start = clock.now()
            if compiled_ns:
                clock.advance(compiled_ns)
            submit = clock.advance(costs.submit_ns)
            with self._lock:
                first = nid not in self._known
                if first:
                    self._known.add(nid)
                    self.neffs_executed += 1
                else:
                    self.cache_hits += 1
                self.dispatches += 1
                ready = submit + self._launch_ns
                start, end = self._enqueue(submit, int(round(tl.total_ns)), self._launch_ns)
                rec = None
                if self.recording or observe.observers:
                    rec = Execution(
                        next(_seq), "kernel", label, self.index, threading.get_ident(), host_start, submit,
                        start, end, nid, program.name, compiled_ns,
                        queue_wait_ns=start - ready, timeline=tl, program=program)
                    if self.recording:
                        self.records.append(rec)
            if rec is not None and observe.observers:  # outside the lock, inside the cut
                observe.execution(rec)
        return result, program, tl

    def _enqueue(self, ready: int, duration: int, overhead: int = 0) -> tuple[int, int]:
        """Queue ``duration`` ns of device work on the current stream, no earlier than ``ready``;
        returns its (start, end). ``overhead``: the device's per-NEFF start (docs/cost-model.md,
        "Launch"), paid after the device is free and the work submitted, so executions queued back
        to back pay it too. Caller holds the lock."""
        sid = self.current_stream
        start = max(ready, self.device_free_ns, self.stream_ready.get(sid, 0)) + overhead
        end = start + duration
        self.device_free_ns = end
        self.stream_end[sid] = end
        return start, end

    def fallback(self, op: str, compute: Callable[[], object] | None = None, nbytes: int = 0,
                 reason: str = ""):
        """An op with no device kernel for this call runs on the host CPU (the caller moves its data).

        In ``real`` mode a ``compute`` given here is the real CPU work and is measured; otherwise
        (``modelled`` mode, or numbers already computed inside the emulator's cut: ``compute`` is
        None) the host spends what the host-cost model says a CPU op over ``nbytes`` costs."""
        clock = self.clock
        host_start = clock.now()
        if compute is not None and clock.mode == REAL:
            result = compute()
        else:
            with clock.emulation():
                result = compute() if compute is not None else None
                clock.advance(host_costs().fallback_ns(nbytes))
        if self.observed:
            self._record(Execution(next(_seq), "fallback", op, self.index, threading.get_ident(),
                                   host_start, clock.now(), neff_name=reason[:200]))
        return result

    # --- copies ---------------------------------------------------------------------------------
    def copy(self, direction: str, nbytes: int, compute: Callable[[], object] | None = None, op: str = "",
             blocking: bool = True):
        """A host<->device copy: stream-ordered after earlier work. The host waits for it unless
        ``blocking`` is False (a non-blocking copy from or to pinned host memory)."""
        clock = self.clock
        with clock.emulation():
            host_start = clock.now()
            result = compute() if compute is not None else None
            now = clock.advance(host_costs().copy_submit_ns)
            dur = int(self.spec.host_transfer_fixed_ns + nbytes / self.spec.host_device_bytes_per_s * 1e9)
            with self._lock:
                start, end = self._enqueue(now, dur)
            if blocking:
                clock.wait_until(end)
            if self.observed:
                self._record(Execution(next(_seq), direction, op or f"memcpy_{direction}", self.index,
                                       threading.get_ident(), host_start, clock.now(), start, end, bytes=nbytes))
        return result

    def order_after(self, other: "NeuronCoreRuntime") -> None:
        """Work queued on this core from now on starts after everything queued on ``other``
        (a cross-core dependency, such as a copy between two cores' HBM)."""
        if other is self:
            return
        with self._lock:
            self.device_free_ns = max(self.device_free_ns, other.device_free_ns)

    @property
    def observed(self) -> bool:
        """Whether anyone wants this core's executions: its own ``records`` or an observer."""
        return self.recording or bool(observe.observers)

    def _record(self, rec: Execution) -> None:
        if self.recording:
            self.records.append(rec)
        if observe.observers:
            with self.clock.emulation():  # an observer's work is emulator work (a fallback is outside the cut)
                observe.execution(rec)

    # --- streams and events ---------------------------------------------------------------------
    def stream_done_ns(self, stream: int) -> int:
        """Device time at which everything submitted to ``stream`` so far (work and waits) is done."""
        with self._lock:
            return max(self.stream_end.get(stream, 0), self.stream_ready.get(stream, 0))

    def record_event(self, stream: int) -> int:
        """The device time at which an event recorded on ``stream`` now completes: when the queue
        reaches it (at once on an idle stream)."""
        return max(self.clock.now(), self.stream_done_ns(stream))

    def stream_wait(self, stream: int, device_ns: int) -> None:
        """Work submitted to ``stream`` from now on starts no earlier than ``device_ns``
        (``Stream.wait_event``: an event of any stream or NeuronCore)."""
        with self._lock:
            if device_ns > self.stream_ready.get(stream, 0):
                self.stream_ready[stream] = device_ns

    def synchronize_stream(self, stream: int) -> int:
        """Block the host until ``stream``'s work is done; returns the emulated ns waited."""
        return self.clock.wait_until(self.stream_done_ns(stream))

    def synchronize(self) -> int:
        """Block the host until the device is idle; returns the emulated ns waited."""
        return self.clock.wait_until(max(self.device_free_ns, self.cc_free_ns))

    def in_flight(self) -> bool:
        return max(self.device_free_ns, self.cc_free_ns) > self.clock.now()

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
