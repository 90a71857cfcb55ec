"""KernelBuilder: write a Program as a straight sequence of tile operations; it allocates SBUF and PSUM
and inserts the semaphores that make the engines' parallel execution correct.

Synchronisation follows the hardware's scheme (S1, S4): every engine stream and every DMA queue has
one counting semaphore, named like Neuron's (``S[1] (Vector)``, ``qSyncIO0``), that it increments
when an instruction completes; streams complete in order, so "semaphore >= k" means "the first k
instructions of that stream are done". The builder tracks, per SBUF/PSUM allocation and per HBM
tensor, the last writer and the readers since, and makes each new instruction wait for the
producers it reads (RAW) and for the readers and writers of what it overwrites (WAR, WAW).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable
from operator import attrgetter

from .. import caches
from ..hw import HardwareSpec, get_spec
from ..isa import AP, Dma, DmaInstruction, Engine, Instruction, Program, Space, TensorCopy
from ..isa.ap import dense_dims

ENGINE_SEMAPHORES = {
    "tensor": "S[0] (Tensor)",
    "vector": "S[1] (Vector)",
    "scalar": "S[2] (Scalar)",
    "gpsimd": "S[3] (GpSimd)",
    "sync": "S[4] (Sync)",
}
# HBM access records kept per tensor before older ones are folded into a conservative per-stream floor.
MAX_HBM_RECORDS = 64


class AllocationError(MemoryError):
    pass


@dataclass
class _Region:
    """Who touched one SBUF/PSUM byte range: the last writes and the reads since, per stream."""
    start: int
    end: int
    writers: dict[str, int] = field(default_factory=dict)
    readers: dict[str, int] = field(default_factory=dict)

    def absorb(self, other: "_Region") -> None:
        for mine, theirs in ((self.writers, other.writers), (self.readers, other.readers)):
            for s, c in theirs.items():
                mine[s] = max(mine.get(s, 0), c)


@dataclass
class _HbmAccess:
    lo: int
    hi: int
    stream: str
    count: int
    write: bool
    ap: AP | None = None


class _Arena:
    """First-fit allocator of byte ranges inside every partition (the same range in each partition)."""

    def __init__(self, capacity: int, align: int, name: str):
        self.capacity, self.align, self.name = capacity, align, name
        self.blocks: dict[int, int] = {}  # offset -> size
        self.peak = 0

    def alloc(self, nbytes: int) -> int:
        nbytes = -(-nbytes // self.align) * self.align
        offset = 0
        for off in sorted(self.blocks):
            if off - offset >= nbytes:
                break
            offset = max(offset, off + self.blocks[off])
        if offset + nbytes > self.capacity:
            raise AllocationError(
                f"{self.name} overflow: {nbytes} bytes per partition requested, "
                f"{self.capacity - sum(self.blocks.values())} free of {self.capacity}; use smaller tiles")
        self.blocks[offset] = nbytes
        self.peak = max(self.peak, offset + nbytes)
        return offset

    def free(self, offset: int) -> None:
        self.blocks.pop(offset, None)

    @property
    def used(self) -> int:
        return sum(self.blocks.values())


class KernelBuilder:
    # stream-name suffix of the physical core being emitted for ("" for core 0; see compiler.lnc)
    _suffix = ""
    max_hbm_records = MAX_HBM_RECORDS

    def __init__(self, program: Program, spec: HardwareSpec | None = None):
        self.p = program
        self.spec = spec or get_spec()
        self.sbuf = _Arena(self.spec.sbuf_bytes_per_partition, 64, "SBUF")
        self.psum = _Arena(self.spec.psum_bytes_per_partition, self.spec.psum_bank_bytes, "PSUM")
        self._sems: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._regions: dict[Space, list[_Region]] = {Space.SBUF: [], Space.PSUM: []}
        self._hbm: dict[int, list[_HbmAccess]] = {}
        self._hbm_writes: dict[int, list[_HbmAccess]] = {}  # the writes among _hbm's records, in order
        # folded records per tensor: every access (what a later write waits for), and the writes alone
        # (what a later read waits for: a read never waits for another read)
        self._hbm_floor: dict[int, dict[str, int]] = {}
        self._hbm_write_floor: dict[int, dict[str, int]] = {}
        self._queues: dict[str, int] = {}
        # per space, byte offset -> the region _region() finds there (kept up to date by _new_region)
        self._region_at: dict[Space, dict[int, _Region]] = {Space.SBUF: {}, Space.PSUM: {}}

    # --- resources ----------------------------------------------------------------------------
    def queue(self, name: str, kind: str = "data") -> int:
        if name not in self._queues:
            self._queues[name] = self.p.queue(name, kind)
        return self._queues[name]

    def tile(self, partitions: int, free_shape, dtype, space: Space = Space.SBUF, banks: int = 1) -> AP:
        """Allocate a dense tile; free it with :meth:`release` when its data is dead."""
        free_shape = tuple(int(s) for s in (free_shape if isinstance(free_shape, (tuple, list)) else (free_shape,)))
        from ..isa import DType

        dt = DType.parse(dtype)
        nbytes = dt.itemsize
        for s in free_shape:
            nbytes *= s
        arena = self.sbuf if space is Space.SBUF else self.psum
        if space is Space.PSUM and nbytes > banks * self.spec.psum_bank_bytes:
            raise AllocationError(f"PSUM tile of {nbytes} bytes per partition exceeds {banks} bank(s) of "
                                  f"{self.spec.psum_bank_bytes}; tile the free dimension by 512 FP32")
        offset = arena.alloc(nbytes)
        self._new_region(space, offset, offset + -(-nbytes // arena.align) * arena.align)
        return AP(space, dt, partitions, dense_dims(free_shape), 0, offset)

    def _new_region(self, space: Space, start: int, end: int) -> _Region:
        """A fresh region inherits the history of every older region it overlaps (reuse of freed bytes)."""
        region = _Region(start, end)
        kept = []
        for r in self._regions[space]:
            if r.start < end and start < r.end:
                region.absorb(r)
                if start <= r.start and r.end <= end:
                    continue  # fully covered: the new region carries its history
            kept.append(r)  # partly covered regions stay, for later users of their other bytes
        kept.append(region)
        self._regions[space] = kept
        # the new region owns its bytes now (and every region it dropped lay inside it)
        at = self._region_at[space]
        for offset in [o for o in at if start <= o < end]:
            at[offset] = region
        return region

    def _region(self, ap: AP) -> _Region:
        at = self._region_at[ap.space]
        offset = ap.offset
        r = at.get(offset)
        if r is not None:
            return r
        for r in reversed(self._regions[ap.space]):  # the newest region owns overlapping bytes
            if r.start <= offset < r.end:
                at[offset] = r
                return r
        r = self._new_region(ap.space, offset, offset + ap.extent_bytes())
        at[offset] = r
        return r

    def psum_tile(self, partitions: int, free_shape, dtype="float32", banks: int = 1) -> AP:
        """A PSUM tile of at most ``banks`` adjacent banks: TensorE still writes one bank per
        instruction, VectorE/ScalarE may read across them (a softmax over several key blocks)."""
        return self.tile(partitions, free_shape, dtype, Space.PSUM, banks=banks)

    def release(self, *aps: AP) -> None:
        """Return tiles to their arena. Later users of the bytes still wait for the old accesses."""
        for ap in aps:
            (self.sbuf if ap.space is Space.SBUF else self.psum).free(ap.offset)

    # --- emission -------------------------------------------------------------------------------
    def _stream(self, ins: Instruction) -> str:
        """The stream ``ins`` runs on: its engine, or its DMA queue's name."""
        if isinstance(ins, DmaInstruction):
            return self.p.queues[ins.queue].name
        return ins.engine.value

    def _sem(self, stream: str) -> int:
        if stream not in self._sems:
            base, at, core = stream.partition("@")
            self._sems[stream] = self.p.semaphore(ENGINE_SEMAPHORES.get(base, base) + (at + core if at else ""))
            self._counts[stream] = 0
        return self._sems[stream]

    def emit(self, ins: Instruction) -> Instruction:
        """Append ``ins`` with the waits its reads and writes need and its stream's signal.

        The operand loop is inlined (SBUF/PSUM regions here, HBM spans in :meth:`_track_hbm`): per
        instruction it is the builder's whole cost, so it avoids a call and a closure per operand."""
        cls = type(ins)
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _plan(cls)
        stream, dma, operands, n_reads = plan
        if stream is None:
            # dma (the class's plan) means a DmaInstruction, which has a queue; an isinstance() would
            # cost a call per instruction on the builder's hottest path
            stream = self.p.queues[ins.queue].name if dma else ins.engine.value  # type: ignore[attr-defined]
        if self._suffix and not dma:
            stream += self._suffix
        need: dict[str, int] = {}
        counts = self._counts
        my_count = counts.get(stream, 0) + 1
        sbuf_at, psum_at = self._region_at[_SBUF], self._region_at[_PSUM]
        k = 0
        for ap in operands(ins):
            write = k >= n_reads
            k += 1
            if type(ap) is not AP and not isinstance(ap, AP):
                continue  # an immediate in a scalar operand, an absent optional pattern
            space = ap.space
            if space is _HBM:
                self._track_hbm(ap, stream, my_count, write, need, dma)
                continue
            region = (sbuf_at if space is _SBUF else psum_at).get(ap.offset) or self._region(ap)
            for s, c in region.writers.items():
                if c > need.get(s, 0) and (dma or s != stream):
                    need[s] = c
            if write:
                for s, c in region.readers.items():
                    if c > need.get(s, 0) and (dma or s != stream):
                        need[s] = c
                region.writers = {stream: my_count}
                region.readers = {}
            else:
                region.readers[stream] = my_count
        sems = self._sems
        if not need:
            waits: tuple = ()
        elif len(need) == 1:
            (s, c), = need.items()
            waits = (((sems[s] if s in sems else self._sem(s)), c),)
        else:
            waits = tuple(sorted([((sems[s] if s in sems else self._sem(s)), c) for s, c in need.items()]))
        signals = ((sems[stream] if stream in sems else self._sem(stream), 1),)
        counts[stream] = my_count
        return self.p.add(ins, waits=waits, signals=signals)

    def _track_hbm(self, ap: AP, stream: str, count: int, write: bool, need: dict, dma: bool) -> None:
        """RAW/WAR/WAW against earlier accesses of the same HBM tensor's overlapping elements. A read
        depends on earlier writes only, so the writes are also kept apart: reading an input tensor
        (never written) scans nothing."""
        lo, hi = ap.element_span()
        tensor = ap.tensor
        records = self._hbm.get(tensor)
        if records is None:
            records = self._hbm[tensor] = []
            self._hbm_writes[tensor] = []
        writes = self._hbm_writes[tensor]
        deps = self._hbm_deps(records if write else writes, lo, hi, ap, stream)
        floor = (self._hbm_floor if write else self._hbm_write_floor).get(tensor)
        if floor:
            deps.extend(floor.items())
        for s, c in deps:
            # in-order engines need no semaphore for their own earlier work; DMA queues complete
            # in order too but trigger ahead of completion, so they wait on themselves explicitly
            if c > need.get(s, 0) and (dma or s != stream):
                need[s] = c
        rec = _HbmAccess(lo, hi, stream, count, write, ap)
        records.append(rec)
        if write:
            writes.append(rec)
        if len(records) > self.max_hbm_records:
            old = records.pop(0)
            folds = [self._hbm_floor.setdefault(tensor, {})]
            if old.write:
                writes.pop(0)  # the oldest record, so the oldest write
                folds.append(self._hbm_write_floor.setdefault(tensor, {}))
            for fold in folds:
                fold[old.stream] = max(fold.get(old.stream, 0), old.count)

    def _hbm_deps(self, scan: list[_HbmAccess], lo: int, hi: int, ap: AP, stream: str) -> list[tuple[str, int]]:
        """(stream, count) of the accesses in ``scan`` that may touch elements [lo, hi] (spans overlap)."""
        return [(r.stream, r.count) for r in scan if r.lo <= hi and lo <= r.hi]

    def note_hbm_access(self, tensor: int, lo: int, hi: int, stream: str, count: int, write: bool) -> None:
        """Record an access that code emitting instructions on its own (an NKI kernel linked into a
        graph) made to HBM tensor ``tensor``'s elements [lo, hi], so later instructions order after it."""
        rec = _HbmAccess(lo, hi, stream, count, write)
        self._hbm.setdefault(tensor, []).append(rec)
        writes = self._hbm_writes.setdefault(tensor, [])
        if write:
            writes.append(rec)

    # --- convenience ------------------------------------------------------------------------------
    def dma(self, queue: int, src: AP, dst: AP, **kw) -> Instruction:
        return self.emit(Dma(queue=queue, src=src, dst=dst, **kw))

    def copy(self, src: AP, dst: AP, on: Engine = Engine.VECTOR) -> Instruction:
        return self.emit(TensorCopy(inp=src, out=dst, on=on))

    @property
    def sbuf_peak_bytes(self) -> int:
        return self.sbuf.peak

    @property
    def psum_peak_bytes(self) -> int:
        return self.psum.peak


_SBUF, _PSUM, _HBM = Space.SBUF, Space.PSUM, Space.HBM
# per instruction class: (its stream when the class decides it, else None; whether it is a DMA; a
# getter of its READS then WRITES fields, always a tuple; how many of them are reads)
_PLANS: dict[type, tuple] = {}
caches.register("compiler.builder: instruction plans", _PLANS.clear)


def _plan(cls: type[Instruction]) -> tuple:
    names = (*cls.READS, *cls.WRITES)
    getter: Callable[[Instruction], tuple]
    if not names:
        getter = lambda ins: ()  # noqa: E731
    elif len(names) == 1:
        one = attrgetter(names[0])
        getter = lambda ins: (one(ins),)  # noqa: E731
    else:
        getter = attrgetter(*names)
    dma = cls.ENGINE is Engine.DMA
    # the engine is the class's unless a subclass overrides the ``engine`` property (TensorCopy's ``on``)
    static = None if dma or cls.engine is not Instruction.engine else cls.ENGINE.value
    plan = _PLANS[cls] = (static, dma, getter, len(cls.READS))
    return plan
