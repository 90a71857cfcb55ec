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

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..compiler import NoLowering, OpCall
from ..hw import HardwareSpec, get_spec
from ..isa import Program
from . import neff_cache, observe, queue
from .clock import REAL, EmulatedClock, NativeClock
from .hostcost import host_costs

if TYPE_CHECKING:  # the simulator (numba) is imported by the first kernel that needs a timeline
    from ..sim import DeviceTimeline


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
    """``queue``: the core's execution queue (:class:`.queue.KernelQueue`, or the C++ core's twin
    that :func:`trnscope.runtime.core` gives on the C++ path, where the C++ eager path submits to it
    too and keeps the records of its executions until they are delivered, :meth:`deliver`)."""

    def __init__(self, index: int, clock: EmulatedClock | NativeClock, spec: HardwareSpec | None = None,
                 queue_: Any = None):
        self.index = index
        self.clock = clock
        self.spec = spec or get_spec()
        self._launch_ns = int(self.spec.neff_launch_latency_ns)
        self.queue = queue_ if queue_ is not None else queue.KernelQueue(index, self._launch_ns)
        self._native = queue_ is not None
        self._cpp_queue = queue_  # the C++ twin's own API (its eager path's records and plans), or None
        self._submit_clock = getattr(clock, "native", clock)
        self._next_seq = queue.next_seq
        # device ns at which the collective engines' last queued collective ends: they run
        # beside the compute queue (trnscope.distributed), and a synchronize waits for both
        self.cc_free_ns = 0
        # the executions of this core while ``recording`` is on (observers, :mod:`.observe`, get each
        # one whether or not the core keeps them)
        self._records: list[Execution] = []
        self._recording = False
        self.neffs_compiled = self.neffs_loaded = 0
        self.sync_queue()
        # dispatch plans of the device layer's fast path (see trnscope.device.runtime_bridge):
        # call signature -> what serving that call needs, per core because plans hold this
        # core's spec's Programs and timelines
        self.plans: dict = {}

    # --- the queue's state ----------------------------------------------------------------------
    @property
    def device_free_ns(self) -> int:
        return self.queue.device_free_ns

    @device_free_ns.setter
    def device_free_ns(self, value: int) -> None:
        self.queue.device_free_ns = value

    @property
    def current_stream(self) -> int:
        return self.queue.current_stream

    @current_stream.setter
    def current_stream(self, value: int) -> None:
        self.queue.current_stream = value

    @property
    def recording(self) -> bool:
        """Whether this core keeps its executions in :attr:`records`."""
        return self._recording

    @recording.setter
    def recording(self, on: bool) -> None:
        self.deliver()  # what the C++ eager path kept goes where it was kept for
        self._recording = bool(on)
        self.sync_queue()

    def sync_queue(self) -> None:
        """Tell the queue who wants its executions: on the C++ path, the C++ eager path keeps a record
        of each execution it makes while this core records or a deferred observer watches
        (:mod:`.observe`), with the core's allocated bytes if that observer asks for them."""
        if self._native:
            self._cpp_queue.recording = self._recording or observe.deferred
            self._cpp_queue.sample_hbm = observe.sample_memory

    @property
    def records(self) -> list[Execution]:
        """The recorded executions, in order (the C++ eager path's delivered first)."""
        if self._native:
            self.deliver()
        return self._records

    @records.setter
    def records(self, value: list) -> None:
        if self._native:
            self.deliver()
        self._records = value

    def deliver(self) -> None:
        """Turn the C++ eager path's records into Executions: into :attr:`records` (in sequence order
        among the others) while the core records, to the deferred observers while they watch. Each
        change of either delivers first, so every record goes where it was kept for."""
        if not self._native or not self._cpp_queue.pending_records:
            return
        made = []
        observed = observe.deferred
        with self.clock.emulation():  # the observers' work is emulator work
            for seq, plan, thread, host_start, host_end, start, end, wait, span, hbm, tid in self._cpp_queue.take_records():
                program = plan.program
                ex = Execution(seq, "kernel", plan.label, self.index, thread, host_start, host_end, start, end,
                               plan.neff_id, program.name, 0, queue_wait_ns=wait, timeline=plan.timeline,
                               program=program)
                made.append(ex)
                if observed:
                    observe.deferred_execution(ex, span, hbm, tid)
        if not self._recording:
            return
        records = self._records
        if records and records[-1].seq > made[0].seq:
            records.extend(made)
            records.sort(key=lambda r: r.seq)
        else:
            records.extend(made)

    def clear_plans(self) -> None:
        """Forget the dispatch plans (the C++ eager path's twins of them too)."""
        self.plans.clear()
        if self._native:
            self._cpp_queue.clear_plans()

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
        with clock.emulation():
            nid = program.neff_id
            if timeline is None:
                from ..sim import simulate

                timeline = simulate(program, self.spec)
            tl = timeline
            if to_keep is not None:  # a NEFF compiled for this call: on disk for the next process
                neff_cache.keep(to_keep, tl)
            result = compute() if compute is not None else None
            self.submit_kernel(program, label, tl, nid, int(round(tl.total_ns)), compiled_ns)
        return result, program, tl

    def submit_kernel(self, program: Program, label: str, timeline, neff_id: int, duration: int,
                      compiled_ns: int = 0) -> None:
        """Submit one execution of a kernel whose NEFF id and whole-ns duration the caller knows (a
        dispatch plan keeps them): the backend's host work and the submit on the clock, the
        execution on the queue, its record. The caller holds the clock's emulation cut."""
        _, host_start, submit, start, end, ready = self.queue.submit(self._submit_clock, neff_id, duration, compiled_ns)
        if self._recording or observe.observers:
            rec = Execution(
                self._next_seq(), "kernel", label, self.index, threading.get_ident(), host_start, submit,
                start, end, neff_id, program.name, compiled_ns,
                queue_wait_ns=start - ready, timeline=timeline, program=program)
            if self._recording:
                self.records.append(rec)  # after the C++ eager path's earlier ones
            if observe.observers:  # inside the caller's cut
                observe.execution(rec)

    def _enqueue(self, ready: int, duration: int, overhead: int = 0) -> tuple[int, int]:
        """Queue ``duration`` ns of device work on the current stream (see :class:`.queue.KernelQueue`)."""
        return self.queue.enqueue(ready, duration, overhead)

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
        if self._recording or observe.observers:
            self._record(Execution(self._next_seq(), "fallback", op, self.index, threading.get_ident(),
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
            start, end = self.queue.enqueue(now, dur, 0)
            if blocking:
                clock.wait_until(end)
            if self._recording or observe.observers:
                self._record(Execution(self._next_seq(), direction, op or f"memcpy_{direction}", self.index,
                                       threading.get_ident(), host_start, clock.now(), start, end, bytes=nbytes))
        return result

    def order_after(self, other: "NeuronCoreRuntime") -> None:
        """Work queued on this core from now on starts after everything queued on ``other``
        (a cross-core dependency, such as a copy between two cores' HBM)."""
        if other is self:
            return
        self.queue.order_after(other.device_free_ns)

    @property
    def observed(self) -> bool:
        """Whether anyone wants this core's executions: its own ``records`` or an observer."""
        return self._recording or bool(observe.observers)

    def _record(self, rec: Execution) -> None:
        if self._recording:
            self.records.append(rec)  # after the C++ eager path's earlier ones
        if observe.observers:
            with self.clock.emulation():  # an observer's work is emulator work (a fallback is outside the cut)
                observe.execution(rec)

    # --- streams and events ---------------------------------------------------------------------
    def stream_done_ns(self, stream: int) -> int:
        """Device time at which everything submitted to ``stream`` so far (work and waits) is done."""
        return self.queue.stream_done(stream)

    def record_event(self, stream: int) -> int:
        """The device time at which an event recorded on ``stream`` now completes: when the queue
        reaches it (at once on an idle stream)."""
        return max(self.clock.now(), self.stream_done_ns(stream))

    def stream_wait(self, stream: int, device_ns: int) -> None:
        """Work submitted to ``stream`` from now on starts no earlier than ``device_ns``
        (``Stream.wait_event``: an event of any stream or NeuronCore)."""
        self.queue.stream_wait(stream, device_ns)

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
        executed, hits, dispatches = self.queue.stats()
        return {"neffs_compiled": self.neffs_compiled, "neffs_loaded": self.neffs_loaded,
                "neffs_executed": executed, "cache_hits": hits, "dispatches": dispatches}

    def clear_stats(self) -> None:
        self.neffs_compiled = self.neffs_loaded = 0
        self.queue.clear_stats()


__all__ = ["Execution", "NeuronCoreRuntime", "NoLowering"]
