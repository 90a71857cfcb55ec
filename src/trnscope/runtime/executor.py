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
from typing import TYPE_CHECKING, Callable

from ..compiler import NoLowering, OpCall
from ..hw import HardwareSpec, get_spec
from ..isa import Program
from . import neff_cache, queue
from .clock import REAL, EmulatedClock
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
    too and keeps the records of its executions until :attr:`records` is read)."""

    def __init__(self, index: int, clock: EmulatedClock, spec: HardwareSpec | None = None, queue_=None):
        self.index = index
        self.clock = clock
        self.spec = spec or get_spec()
        self._launch_ns = int(self.spec.neff_launch_latency_ns)
        self.queue = queue_ if queue_ is not None else queue.KernelQueue(index, self._launch_ns)
        self._native = queue_ is not None
        self._submit_clock = getattr(clock, "native", clock)
        self._next_seq = queue.next_seq
        # device ns at which the collective engines' last queued collective ends: they run
        # beside the compute queue (trnscope.distributed), and a synchronize waits for both
        self.cc_free_ns = 0
        self._records: list[Execution] = []
        # called with each recorded Execution, on the thread that made it, outside the lock (the
        # profiler uses it to mark the framework op that dispatched the execution)
        self._on_record: Callable[[Execution], None] | None = None
        # the C++ eager path's executions, delivered when the records are read: called with
        # (execution, profiler span, allocated bytes, native thread id) (see trnscope.profiling.capture)
        self.on_native_record: Callable | None = None
        self.neffs_compiled = self.neffs_loaded = 0
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
        return self.queue.recording

    @recording.setter
    def recording(self, on: bool) -> None:
        self.queue.recording = bool(on)

    @property
    def on_record(self):
        return self._on_record

    @on_record.setter
    def on_record(self, hook) -> None:
        # a hook that wants each execution as it happens: the C++ eager path declines the core's calls
        self._on_record = hook
        if self._native:
            self.queue.hooked = hook is not None

    def observe(self, on_record, on_native_record=None, immediate: bool | None = None,
                sample_hbm: bool = False) -> None:
        """Observe the recorded executions: ``on_record(execution)`` as each is made by Python, and
        ``on_native_record(execution, span, allocated bytes, native thread id)`` for the C++ eager
        path's, when the records are next read (``sample_hbm``: with the core's allocated bytes
        then). ``immediate``: every execution as it happens (the C++ eager path leaves this core's
        calls to Python); by default when there is an ``on_record`` but no ``on_native_record``."""
        self._on_record = on_record
        self.on_native_record = on_native_record
        if immediate is None:
            immediate = on_record is not None and on_native_record is None
        if self._native:
            self.queue.hooked = immediate
            self.queue.sample_hbm = sample_hbm

    @property
    def records(self) -> list[Execution]:
        """The recorded executions, in order (the C++ eager path's delivered first)."""
        if self._native:
            self._deliver()
        return self._records

    @records.setter
    def records(self, value: list) -> None:
        if self._native:
            self._deliver()
        self._records = value

    def _deliver(self) -> None:
        """Turn the C++ eager path's records into Executions, in sequence order among the others."""
        if not self.queue.pending_records:
            return
        made = []
        hook = self.on_native_record
        for seq, plan, thread, host_start, host_end, start, end, wait, span, hbm, tid in self.queue.take_records():
            program = plan.program
            ex = Execution(seq, "kernel", plan.label, self.index, thread, host_start, host_end, start, end,
                           plan.neff_id, program.name, 0, queue_wait_ns=wait, timeline=plan.timeline,
                           program=program)
            made.append(ex)
            if hook is not None:
                hook(ex, span, hbm, tid)
        records = self._records
        if records and records[-1].seq > made[0].seq:
            records.extend(made)
            records.sort(key=lambda r: r.seq)
        else:
            records.extend(made)

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
        if self.queue.recording:
            self._record(Execution(
                self._next_seq(), "kernel", label, self.index, threading.get_ident(), host_start, submit,
                start, end, neff_id, program.name, compiled_ns,
                queue_wait_ns=start - ready, timeline=timeline, program=program))

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
        if self.recording:
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
            if self.recording:
                self._record(Execution(self._next_seq(), direction, op or f"memcpy_{direction}", self.index,
                                       threading.get_ident(), host_start, clock.now(), start, end, bytes=nbytes))
        return result

    def order_after(self, other: "NeuronCoreRuntime") -> None:
        """Work queued on this core from now on starts after everything queued on ``other``
        (a cross-core dependency, such as a copy between two cores' HBM)."""
        if other is self:
            return
        self.queue.order_after(other.device_free_ns)

    def _record(self, rec: Execution) -> None:
        self.records.append(rec)
        if self._on_record is not None:
            self._on_record(rec)

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
