"""Spreading a kernel over the physical cores of a logical NeuronCore (LNC=2, S23).

A NEFF compiled for LNC=2 holds instructions for each of the logical core's two physical cores,
which share HBM but each have their own engines, SBUF, PSUM and DMA queues (S23, the NKI LNC guide).
The kernel emitters know nothing of this: they write a kernel for one core, and this module shards
it, generically, the way the compiler shards a graph's independent work:

1. The kernel is built once as usual. :func:`core_masks` follows its on-chip dataflow backwards:
   every instruction that writes HBM (a store of an output tile) is given to one physical core -
   contiguous halves of the stores in program order, balanced by bytes stored - and every
   instruction is needed on the cores whose stores read its result, through SBUF/PSUM and TensorE's
   loaded weights. What both halves read (a weight block, an identity matrix, a constant) is
   emitted on both cores, as each core must load or compute it into its own SBUF.
2. The kernel is built again through a :class:`PairBuilder`, which sends each emitted instruction
   to its cores: a per-core set of SBUF/PSUM regions, engine streams and DMA queues (so the
   semaphores of one core never order the other's on-chip work), and one shared record of HBM
   accesses, so a core that reads HBM the other core writes waits for it.

The result is one Program whose ``meta["pcore"]`` names each instruction's physical core; the
simulator gives each core its own engines and 16 DMA engines and the interpreter its own SBUF/PSUM.
A kernel with a single store (a full reduction) stays on core 0: spreading it needs a cross-core
combine the emitters do not write.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..hw import HardwareSpec
from ..isa import (
    AP, Dma, DmaInstruction, DmaScatter, Instruction, LoadStationary, MultiplyMoving, Program, SemaphoreSet, SemaphoreWait,
    Space,
)
from ..isa.program import LNC_META, PCORE_META
from .builder import KernelBuilder

MakeBuilder = Callable[[Program, HardwareSpec], KernelBuilder]


def _box(ap: AP, memo: dict) -> tuple[int, int, int, int, bool]:
    """(partitions [p0, p1), bytes [b0, b1) in each partition, dense) of an on-chip pattern."""
    hit = memo.get(ap)
    if hit is None:
        isz = ap.dtype.itemsize
        below = sum(min(stride, 0) * (size - 1) for stride, size in ap.dims) * isz
        above = sum(max(stride, 0) * (size - 1) for stride, size in ap.dims) * isz
        hit = memo[ap] = (ap.start, ap.start + ap.partitions, ap.offset + below, ap.offset + above + isz,
                               ap.contiguous_run() == ap.free_size)
    return hit


class _Writers:
    """The last writer of every byte range of one on-chip memory: rows (p0, p1, b0, b1, instruction)."""

    def __init__(self) -> None:
        self.rows = np.empty((0, 5), np.int64)

    def _meets(self, p0: int, p1: int, b0: int, b1: int) -> np.ndarray:
        r = self.rows
        return (r[:, 0] < p1) & (p0 < r[:, 1]) & (r[:, 2] < b1) & (b0 < r[:, 3])

    def readers_of(self, p0: int, p1: int, b0: int, b1: int) -> np.ndarray:
        return self.rows[self._meets(p0, p1, b0, b1), 4]

    def write(self, p0: int, p1: int, b0: int, b1: int, i: int, dense: bool) -> None:
        new = np.array([[p0, p1, b0, b1, i]], np.int64)
        if dense:  # it replaces the bytes it covers: what is left of an older write is kept, cut to size
            r = self.rows
            hit = self._meets(p0, p1, b0, b1)
            if hit.any():
                cut = r[hit]
                # the partitions outside the new box keep the old write's whole byte range; the ones
                # inside keep the bytes either side (without this a one-partition write into a corner
                # of a 128-partition tile would leave its reader depending on the whole old write,
                # and the work behind it would run on both cores of a pair)
                below, above = cut[cut[:, 0] < p0].copy(), cut[p1 < cut[:, 1]].copy()
                below[:, 1], above[:, 0] = p0, p1
                mid = cut.copy()
                mid[:, 0], mid[:, 1] = np.maximum(cut[:, 0], p0), np.minimum(cut[:, 1], p1)
                left, right = mid[mid[:, 2] < b0].copy(), mid[b1 < mid[:, 3]].copy()
                left[:, 3], right[:, 2] = b0, b1
                self.rows = np.concatenate([r[~hit], below, above, left, right, new])
                return
        self.rows = np.concatenate([self.rows, new])


# a strided on-chip write of at most this many contiguous runs is recorded run by run, exactly
MAX_PIECES = 256


def _pieces(ap: AP) -> list[tuple[int, int]] | None:
    """The byte ranges [b0, b1) of a strided on-chip pattern's contiguous runs (in each partition it
    covers), None when there are more than MAX_PIECES. Written run by run, a strided write (a max8
    slot, a padding memset) replaces what it overwrites; read run by run, a strided read (the
    candidates of every max8 slot) depends on the writes to its elements only, not on whatever else
    its span holds. Otherwise a tile that reuses another's bytes ties its readers to the older tile's
    writers - at LNC=2 to the other core's work, which then runs on both cores."""
    isz = ap.dtype.itemsize
    run, outer, inner = 1, [], True
    for stride, size in reversed(ap.dims):
        if size == 1:
            continue
        if inner and stride == run:
            run *= size
            continue
        inner = False
        outer.append((stride, size))
    if np.prod([size for _, size in outer], dtype=np.int64) > MAX_PIECES:
        return None
    starts = [0]
    for stride, size in outer:
        starts = [s + stride * k for s in starts for k in range(size)]
    return [(ap.offset + s * isz, ap.offset + (s + run) * isz) for s in starts]


def _accumulates(ins: Instruction) -> bool:
    """Whether the instruction adds into what it writes (so it reads it too)."""
    return bool(getattr(ins, "accumulate", False)) and isinstance(ins, (MultiplyMoving, Dma, DmaScatter))


def core_masks(program: Program, n_cores: int) -> list[int] | None:
    """Per instruction, a bit mask of the physical cores that need it; None when the kernel has fewer
    than two independent stores (nothing to spread)."""
    instrs = program.instructions
    n = len(instrs)
    producers: list[tuple[int, ...]] = [()] * n
    writers = {Space.SBUF: _Writers(), Space.PSUM: _Writers()}
    memo: dict[AP, tuple] = {}
    sink_weight: list[tuple[int, int]] = []
    last_ls = -1
    hbm_space = Space.HBM
    # per instruction, the HBM reads it depends on (bit k = the k-th load), to cut between stores
    # that share no load
    loads: list[int] = []
    feeds = [0] * n
    for i, ins in enumerate(instrs):
        deps: set[int] = set()
        reads = ins.reads()
        writes = ins.writes()
        if _accumulates(ins):
            reads = (*reads, *writes)
        for ap in reads:
            if ap.space is not hbm_space:
                p0, p1, b0, b1, dense = _box(ap, memo)
                pieces = None if dense else _pieces(ap)
                for c0, c1 in pieces or ((b0, b1),):
                    deps.update(writers[ap.space].readers_of(p0, p1, c0, c1).tolist())
        if isinstance(ins, MultiplyMoving) and last_ls >= 0:
            deps.add(last_ls)  # the weights TensorE holds
        elif isinstance(ins, LoadStationary):
            last_ls = i
        f = 0
        for d in deps:
            f |= feeds[d]
        if any(ap.space is hbm_space for ap in ins.reads()):
            f |= 1 << len(loads)
            loads.append(sum(ap.nbytes for ap in ins.reads() if ap.space is hbm_space))
        feeds[i] = f
        stored = 0
        for ap in writes:
            if ap.space is hbm_space:
                stored += ap.nbytes
            else:
                p0, p1, b0, b1, dense = _box(ap, memo)
                pieces = None if dense else _pieces(ap)
                if pieces is None:
                    writers[ap.space].write(p0, p1, b0, b1, i, dense)
                else:
                    for c0, c1 in pieces:
                        writers[ap.space].write(p0, p1, c0, c1, i, True)
        if stored:
            sink_weight.append((i, stored))
        if deps:
            producers[i] = tuple(deps)
    if len(sink_weight) < 2:
        return None
    total = sum(w for _, w in sink_weight)
    masks = [0] * n
    if n_cores == 2:
        # the stores of each HBM tensor (an op's output, or a compiled graph's scratch between ops)
        # are halved on their own: a graph's ops run one after the other, each over both cores; a
        # tensor written by one store goes to the core with fewer bytes
        by_op: dict[int, list[tuple[int, int]]] = {}
        for i, w in sink_weight:
            tensor = next(ap.tensor for ap in instrs[i].writes() if ap.space is hbm_space)
            by_op.setdefault(tensor, []).append((i, w))
        load_on = [0, 0]
        for group in (phase for g in by_op.values() for phase in _phases(g, instrs)):
            if len(group) == 1:
                core = 0 if load_on[0] <= load_on[1] else 1
                masks[group[0][0]] = 1 << core
                load_on[core] += group[0][1]
                continue
            cut = _pair_cut(group, feeds, loads, sum(w for _, w in group))
            for k, (i, w) in enumerate(group):
                masks[i] = 1 << (k >= cut)
                load_on[k >= cut] += w
    else:
        acc = 0
        for i, w in sink_weight:
            core = min(n_cores - 1, int(n_cores * (acc + w / 2) / total))
            masks[i] = 1 << core
            acc += w
    for i in range(n - 1, -1, -1):
        m = masks[i]
        if m == 0:
            continue
        for p in producers[i]:
            masks[p] |= m
    if all(m == masks[-1] for m in masks):
        return None
    return [m or 1 for m in masks]


# a store is checked for overlap against at most this many of its phase's latest stores
PHASE_LOOKBACK = 32


def _phases(group: list[tuple[int, int]], instrs: list[Instruction]) -> list[list[tuple[int, int]]]:
    """One tensor's stores (program order) in phases: a store that overwrites elements an earlier store
    of the current phase wrote (index_fill's scatter after its copy of self, a fill then the slice
    over it) must wait for it on any core, so it starts a new phase, and each phase is halved on its
    own. Cut as one, the copy went to one core and the scatter to the other, which waited for it."""
    hbm_space = Space.HBM
    memo: dict = {}
    phases: list[list[tuple[int, int]]] = [[]]
    aps: list[AP] = []
    for i, w in group:
        ap = next(a for a in instrs[i].writes() if a.space is hbm_space)
        lo, hi = ap.element_span()
        if any(b_lo <= hi and lo <= b_hi and not disjoint(ap, b, memo)
               for b, (b_lo, b_hi) in ((b, b.element_span()) for b in aps[-PHASE_LOOKBACK:])):
            phases.append([])
            aps = []
        phases[-1].append((i, w))
        aps.append(ap)
    return phases


# the stores of an LNC=2 pair's two halves may be off balance by up to this share of the bytes stored,
# when that keeps the halves from needing the same loads
CUT_SLACK = 0.125
CUT_CANDIDATES = 32   # stores either side of the balanced cut tried


def _pair_cut(sinks: list[tuple[int, int]], feeds: list[int], loads: list[int], total: int) -> int:
    """Where the stores (in program order) split between the two physical cores: near the byte-balanced
    point, at the cut after which the fewest load bytes are needed by both halves (the stores of one
    row tile - a norm's output and its statistics - share the tile's load, so cutting between them
    would load it on both cores)."""
    m = len(sinks)
    prefix, suffix = [0] * (m + 1), [0] * (m + 1)
    for k in range(m):
        prefix[k + 1] = prefix[k] | feeds[sinks[k][0]]
    for k in range(m - 1, -1, -1):
        suffix[k] = suffix[k + 1] | feeds[sinks[k][0]]
    acc = [0] * (m + 1)
    for k in range(m):
        acc[k + 1] = acc[k] + sinks[k][1]
    balanced = min(range(1, m), key=lambda k: abs(acc[k] - total / 2))
    best = None
    for k in range(max(1, balanced - CUT_CANDIDATES), min(m, balanced + CUT_CANDIDATES + 1)):
        off = abs(acc[k] - total / 2)
        if off > CUT_SLACK * total and k != balanced:
            continue
        shared = prefix[k] & suffix[k]
        dup = 0
        while shared:
            low = shared & -shared
            dup += loads[low.bit_length() - 1]
            shared ^= low
        key = (dup, off)
        if best is None or key < best[0]:
            best = (key, k)
    assert best is not None  # the balanced cut is always a candidate
    return best[1]


# an HBM pattern with more contiguous runs than this is taken to overlap whatever its span overlaps
MAX_RUNS = 1 << 16


def _runs(ap: AP, memo: dict) -> tuple[np.ndarray, int] | None:
    """(sorted start elements of the pattern's contiguous runs, run length), None when too many."""
    if ap in memo:
        return memo[ap]
    run = ap.contiguous_run()
    outer = [(ap.pstride, ap.partitions)]
    merged = 1
    for stride, size in reversed(ap.dims):
        if size == 1:
            continue
        if merged < run:  # inside the contiguous run
            merged *= size
            continue
        outer.append((stride, size))
    out = None
    if np.prod([size for _, size in outer], dtype=np.int64) <= MAX_RUNS:
        starts = np.array([ap.offset], np.int64)
        for stride, size in outer:
            starts = (starts[:, None] + stride * np.arange(size, dtype=np.int64)[None, :]).ravel()
        out = (np.sort(starts), run)
    memo[ap] = out
    return out


def disjoint(a: AP, b: AP, memo: dict | None = None) -> bool:
    """Whether two HBM patterns of one tensor touch no common element (exactly; False when unsure)."""
    memo = {} if memo is None else memo
    ra, rb = _runs(a, memo), _runs(b, memo)
    if ra is None or rb is None:
        return False
    (sa, la), (sb, lb) = ra, rb
    # for each run of b, the last run of a starting before b's end must end before b starts
    k = np.searchsorted(sa, sb + lb, side="left") - 1
    hit = k >= 0
    return not bool(np.any(sa[k[hit]] + la > sb[hit]))


class _Mismatch(RuntimeError):
    """The second build emitted other instructions than the first (a kernel that is not deterministic)."""


class PairBuilder(KernelBuilder):
    """A builder that emits each instruction on the physical cores ``masks`` gives it (see module doc)."""

    def __init__(self, program: Program, spec: HardwareSpec, masks: list[int], expected: list[type]):
        super().__init__(program, spec)
        self._masks, self._expected, self._k = masks, expected, 0
        self.n_cores = spec.lnc
        self.pcores: list[int] = []
        own = (self._regions, self._region_at)
        self._states = [own] + [({Space.SBUF: [], Space.PSUM: []}, {Space.SBUF: {}, Space.PSUM: {}})
                                for _ in range(self.n_cores - 1)]
        self._queue_on: dict[tuple[int, int], int] = {}
        # records of both cores' HBM accesses are kept longer before they fold into a floor: a folded
        # write orders every later access of its tensor after it, on both cores, and a folded read
        # every later write (KernelBuilder._track_hbm)
        self.max_hbm_records = 1024
        self._runs_memo: dict = {}

    def _use(self, core: int) -> None:
        self._regions, self._region_at = self._states[core]
        self._suffix = f"@nc{core}" if core else ""

    def _new_region(self, space: Space, start: int, end: int):
        # every physical core allocates the same tiles in its own SBUF/PSUM
        current = (self._regions, self._region_at)
        made = None
        for state in self._states:
            self._regions, self._region_at = state
            region = super()._new_region(space, start, end)
            if state[0] is current[0]:
                made = region
        self._regions, self._region_at = current
        return made

    def _hbm_deps(self, scan, lo, hi, ap, stream):
        # the other core's accesses: only where the elements really meet (tiles of one tensor often
        # have overlapping spans, and a false dependency would serialise the cores)
        mine = stream.rpartition("@")[2] if "@" in stream else ""
        out = []
        for r in scan:
            if r.lo <= hi and lo <= r.hi:
                theirs = r.stream.rpartition("@")[2] if "@" in r.stream else ""
                if theirs != mine and r.ap is not None and disjoint(ap, r.ap, self._runs_memo):
                    continue
                out.append((r.stream, r.count))
        return out

    def _queue(self, core: int, queue: int) -> int:
        key = (core, queue)
        q = self._queue_on.get(key)
        if q is None:
            decl = self.p.queues[queue]
            q = self._queue_on[key] = self.queue(f"{decl.name}@nc{core}", decl.kind)
        return q

    def emit(self, ins: Instruction) -> Instruction:
        k = self._k
        self._k += 1
        if k >= len(self._masks) or type(ins) is not self._expected[k]:
            raise _Mismatch(k)
        mask = self._masks[k]
        cores = [c for c in range(self.n_cores) if mask >> c & 1]
        copies = [ins] + [dataclasses.replace(ins) for _ in cores[1:]]  # before add() completes the first
        out = ins
        for core, one in zip(cores, copies):
            if core and isinstance(one, DmaInstruction):  # the DMA engine's instructions
                one = dataclasses.replace(one, queue=self._queue(core, one.queue))
            self._use(core)
            out = super().emit(one)
            self.pcores.append(core)
        self._use(0)
        return out


def spread(build: Callable[[MakeBuilder], Program], spec: HardwareSpec) -> Program:
    """``build(make_builder)`` builds a kernel with the builder ``make_builder(program, spec)`` gives.
    At LNC=1 it runs once; at LNC=2 twice, the second time through a :class:`PairBuilder`."""
    program = build(KernelBuilder)
    if spec.lnc <= 1:
        return program
    masks = core_masks(program, spec.lnc)
    if masks is None:
        return program
    expected = [type(ins) for ins in program.instructions]
    made: list[PairBuilder] = []

    def pair(prog: Program, sp: HardwareSpec) -> PairBuilder:
        kb = PairBuilder(prog, sp, masks, expected)
        made.append(kb)
        return kb

    try:
        shared = build(pair)
    except _Mismatch:
        return program
    kb = made[-1] if made else None
    if kb is None or kb._k != len(expected) or len(kb.pcores) != len(shared.instructions):
        return program  # something emitted past the builder: keep the one-core kernel
    shared.meta[LNC_META] = spec.lnc
    shared.meta[PCORE_META] = "".join(map(str, kb.pcores))
    return shared


def respread(program: Program, spec: HardwareSpec) -> Program:
    """A Program built for one physical core, spread over ``spec``'s (what re-timing a NEFF at another
    LNC needs): its instructions replayed through a :class:`PairBuilder`, waits and signals made anew.
    Without the emitter's allocations, on-chip regions are found from the patterns themselves, so the
    replay may order a core's work a little more than the compiled kernel would. A Program already
    spread, or holding explicit semaphore instructions, is returned as it is."""
    if spec.lnc <= 1 or program.physical_cores()[0] > 1:
        return program
    if any(isinstance(ins, (SemaphoreSet, SemaphoreWait)) for ins in program.instructions):
        return program
    masks = core_masks(program, spec.lnc)
    if masks is None:
        return program
    out = Program(program.name, target=program.target, tensors=list(program.tensors), queues=list(program.queues),
                  ops=list(program.ops), constants=dict(program.constants), meta=dict(program.meta))
    kb = PairBuilder(out, spec, masks, [type(ins) for ins in program.instructions])
    kb._queues = {q.name: i for i, q in enumerate(out.queues)}
    for ins in program.instructions:
        kb.emit(dataclasses.replace(ins, waits=(), signals=()))
    out.meta[LNC_META] = spec.lnc
    out.meta[PCORE_META] = "".join(map(str, kb.pcores))
    return out

