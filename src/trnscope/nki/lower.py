"""Lowering a trace to a Program: placement, access patterns, instructions, semaphores, source map.

Every op becomes the ISA instructions Neuron issues for it (``nc_matmul`` = LDWEIGHTS + MATMUL,
``dma_copy`` = one DMA transfer, ...), each tagged with its kernel source line. Semaphores come from
:class:`NkiEmitter`, a :class:`~trnscope.compiler.builder.KernelBuilder` (its per-stream counting
semaphores, named as Neuron names them) that tracks dependencies on the exact partitions and bytes an
access pattern touches rather than per allocation: NKI kernels fill one tile with several DMAs or
engines and read parts of it, and whole-tile tracking would serialise those. The emitter can share
a graph's builder, so an NKI kernel inside a ``torch.compile`` graph orders against the kernels
around it through the same semaphores and byte-range records.

DMA queues: one per HBM tensor and direction (loads of ``lhsT``, loads of ``rhs``, stores of the
result...), so a store waiting for compute never blocks the loads behind it; DMA engines are shared
by all queues (sim.core). Engines: what the call names, else VectorE (ScalarE for activation,
GpSimd for iota/affine_select/partition reduce), as NKI defaults them.
"""

from __future__ import annotations

import re

import numpy as np

from ..compiler.builder import KernelBuilder
from ..hw import HardwareSpec
from ..isa import (
    AP, Activation, AffineSelect, BnAggr, BnStats, Dma, DmaGather, DmaScatter, Engine, Iota, LoadStationary, Memset,
    MultiplyMoving, PartitionReduce, Program, ProgramError, ScalarTensorTensor, Select, Space, TensorCopy, TensorReduce,
    TensorScalar, TensorScan, TensorTensor, TensorTranspose, validate,
)
from .alloc import place
from .errors import NkiUnsupportedError, NkiValidationError
from .language import SBUF_ALIGN
from .tensor import PSUM, SBUF, NkiTensor, Storage
from .trace import Tracer, cover_box

GRANULE = 64       # bytes: the SBUF placement granule (PSUM banks are multiples of it)
MAX_RECORDS = 4096  # accesses remembered per HBM tensor before older ones fold into a per-stream floor
_SPACE = {SBUF: Space.SBUF, PSUM: Space.PSUM}
_ENGINES = {"vector": Engine.VECTOR, "scalar": Engine.SCALAR, "gpsimd": Engine.GPSIMD}


class NkiEmitter(KernelBuilder):
    """KernelBuilder whose dependency tracking works on exact (partition, byte) boxes per storage."""

    @classmethod
    def over(cls, kb: KernelBuilder) -> "NkiEmitter":
        """An emitter sharing ``kb``'s state (semaphores, counts, queues, byte-range history)."""
        em = cls.__new__(cls)
        em.__dict__ = kb.__dict__
        em._nki_reset()
        return em

    def __init__(self, program: Program, spec: HardwareSpec) -> None:
        super().__init__(program, spec)
        self._nki_reset()

    def _nki_reset(self) -> None:
        self.nki_entries: dict[int, list] = {}   # storage id -> [[box, writers, readers], ...]
        self.nki_readonly: set[int] = set()      # HBM storages no op writes: reads need no records
        self.nki_ro_reads: dict[int, dict] = {}  # their readers per stream (for kernels after this one)
        # on-chip history of dead tiles: per space and stream, the highest instruction count that touched
        # each 64-byte granule of a partition (tiles are placed on 64-byte boundaries)
        self.nki_hist: dict[Space, dict[str, np.ndarray]] = {Space.SBUF: {}, Space.PSUM: {}}
        for space in (Space.SBUF, Space.PSUM):
            for r in self._regions[space]:  # what kernels before this one (a graph) left on these bytes
                for d in (r.writers, r.readers):
                    for st, c in d.items():
                        self._hist_raise(space, st, r.start, r.end, c)

    def _hist_raise(self, space: Space, stream: str, lo: int, hi: int, count: int) -> None:
        arr = self.nki_hist[space].get(stream)
        if arr is None:
            cap = self.spec.sbuf_bytes_per_partition if space is Space.SBUF else self.spec.psum_bytes_per_partition
            arr = self.nki_hist[space][stream] = np.zeros(-(-cap // GRANULE), np.int64)
        seg = arr[lo // GRANULE:-(-hi // GRANULE)]
        np.maximum(seg, count, out=seg)

    # --- on-chip history across storages that reuse bytes ------------------------------------------
    def inherit(self, st: Storage, space: Space, lo: int, hi: int) -> None:
        """A storage placed on bytes [lo, hi): its accesses wait for the old users of those bytes."""
        floor: dict[str, int] = {}
        g0, g1 = lo // GRANULE, -(-hi // GRANULE)
        for stream, arr in self.nki_hist[space].items():
            c = int(arr[g0:g1].max())
            if c:
                floor[stream] = c
        self.nki_entries[st.id] = [[(0, 1 << 30, lo, hi), floor, {}]] if floor else []

    def retire(self, st: Storage, space: Space, lo: int, hi: int) -> None:
        """A storage died: its history stays with its bytes for the next tile placed there."""
        agg: dict[str, int] = {}
        for _, w, r in self.nki_entries.pop(st.id, ()):
            for d in (w, r):
                for s, c in d.items():
                    if c > agg.get(s, 0):
                        agg[s] = c
        for s, c in agg.items():
            self._hist_raise(space, s, lo, hi, c)

    def publish_chip(self) -> None:
        """Leave this kernel's on-chip history where the builder's other kernels look (``_regions``): one
        region per space over the bytes it used, waiting for its last access on every stream."""
        for space, per in self.nki_hist.items():
            agg = {s: int(a.max()) for s, a in per.items() if a.any()}
            used = [np.flatnonzero(a).max() for a in per.values() if a.any()]
            if not agg:
                continue
            region = self._new_region(space, 0, (max(used) + 1) * GRANULE)
            for s, c in agg.items():
                if c > region.writers.get(s, 0):
                    region.writers[s] = c

    # --- emission ---------------------------------------------------------------------------------------
    def emit_nki(self, ins, accesses, after=()) -> tuple[str, int]:
        """Emit ``ins``; ``accesses`` = [(write, storage id, box)], boxes from :func:`access_box`.
        ``after``: (stream, count) pairs it must also wait for (depends_on). Returns its (stream, count)."""
        stream = self._stream(ins)
        own_ok = ins.ENGINE is not Engine.DMA  # in-order engines need no semaphore on themselves
        need: dict[str, int] = {}
        count = self._counts.get(stream, 0) + 1
        entries_of = self.nki_entries
        readonly = self.nki_readonly
        for write, sid, box in accesses:
            entries = entries_of.get(sid)
            if entries is None:
                entries = entries_of[sid] = list(self._hbm_history(sid, box)) if box[0] == "h" else []
            if sid in readonly:
                for e in entries:  # the previous kernels' writes (a graph), never this kernel's
                    for s, c in e[1].items():
                        if c > need.get(s, 0) and (own_ok is False or s != stream):
                            need[s] = c
                reads = self.nki_ro_reads.setdefault(sid, {})
                reads[stream] = count
                continue
            covered = []
            same = None
            for e in entries:
                if not _overlap(e[0], box):
                    continue
                for s, c in e[1].items():
                    if c > need.get(s, 0) and (own_ok is False or s != stream):
                        need[s] = c
                if write:
                    for s, c in e[2].items():
                        if c > need.get(s, 0) and (own_ok is False or s != stream):
                            need[s] = c
                    if _inside(e[0], box):
                        covered.append(e)
                elif e[0] == box:
                    same = e
            if write:
                if covered:
                    ids = {id(e) for e in covered}
                    entries[:] = [e for e in entries if id(e) not in ids]
                entries.append([box, {stream: count}, {}])
            elif same is not None:
                same[2][stream] = count
            else:
                entries.append([box, {}, {stream: count}])
            if box[0] == "h" and len(entries) > MAX_RECORDS:
                self._fold(sid, entries)
        for s, c in after:
            if s != stream and c > need.get(s, 0):
                need[s] = c
        waits = tuple(sorted((self._sem(s), c) for s, c in need.items()))
        signals = ((self._sem(stream), 1),)
        self._counts[stream] = count
        self.p.add(ins, waits=waits, signals=signals)
        return stream, count

    def _hbm_history(self, sid: int, box) -> list:
        """The builder's own HBM records of this tensor (kernels before this one in a graph), as one entry."""
        tensor = box[1]
        floor: dict[str, int] = {}
        for r in self._hbm.get(tensor, ()):
            for d in (floor,):
                if r.count > d.get(r.stream, 0):
                    d[r.stream] = r.count
        for s, c in self._hbm_floor.get(tensor, {}).items():
            if c > floor.get(s, 0):
                floor[s] = c
        return [[("h", tensor, -1, 1 << 62, None), floor, {}]] if floor else []

    def _fold(self, sid: int, entries: list) -> None:
        keep = entries[len(entries) // 2:]
        floor: dict[str, int] = {}
        for _, w, r in entries[:len(entries) // 2]:
            for d in (w, r):
                for s, c in d.items():
                    if c > floor.get(s, 0):
                        floor[s] = c
        tensor = keep[0][0][1]
        entries[:] = [[("h", tensor, -1, 1 << 62, None), floor, {}]] + keep

    def publish_hbm(self, tensors: dict[int, int]) -> None:
        """Leave this kernel's HBM accesses where the builder's other kernels look (``_hbm`` spans)."""
        for sid, readers in self.nki_ro_reads.items():
            tensor = tensors.get(sid)
            if tensor is not None:
                for s, c in readers.items():
                    self.note_hbm_access(tensor, 0, 1 << 62, s, c, False)
        for sid, entries in self.nki_entries.items():
            tensor = tensors.get(sid)
            if tensor is None or sid in self.nki_readonly:
                continue
            for box, w, r in entries:
                lo, hi = box[2], box[3]
                for s, c in w.items():
                    self.note_hbm_access(tensor, lo, hi, s, c, True)
                for s, c in r.items():
                    self.note_hbm_access(tensor, lo, hi, s, c, False)


def _overlap(a, b) -> bool:
    if a[0] == "h":
        if a[1] != b[1] or a[3] < b[2] or b[3] < a[2]:
            return False
        ba, bb = a[4], b[4]
        if ba is None or bb is None:
            return True
        for (al, ah), (bl, bh) in zip(ba, bb):
            if ah < bl or bh < al:
                return False
        return True
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _inside(inner, outer) -> bool:
    if inner[0] == "h":
        if outer[4] is None or inner[4] is None or inner[1] != outer[1]:
            return False
        return all(bl <= al and ah <= bh for (al, ah), (bl, bh) in zip(inner[4], outer[4]))
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2] and inner[3] <= outer[3]


# --- access patterns ------------------------------------------------------------------------------------

def _merge(dims):
    """(stride, size) pairs, outermost first, with size-1 dims dropped and contiguous neighbours merged."""
    out = []
    for st, sz in dims:
        if sz == 1:
            continue
        if out and out[-1][0] == st * sz:
            out[-1] = (st, out[-1][1] * sz)
        else:
            out.append((st, sz))
    return out


class Lowering:
    def __init__(self, tracer: Tracer, program: Program, emitter: NkiEmitter, hbm_index: dict[int, int],
                 hbm_base: dict[int, int]) -> None:
        self.tr = tracer
        self.p = program
        self.em = emitter
        self.spec = tracer.spec
        self.hbm_index = hbm_index      # storage id -> Program tensor index
        self.hbm_base = hbm_base        # storage id -> element offset of the storage in its tensor
        self.offset: dict[int, int] = {}
        self.queues: dict[tuple, int] = {}
        self.source: list[int] = []
        self.op_done: dict[int, tuple[str, int]] = {}
        self.loc = -1
        self._aps: dict[tuple, AP] = {}
        self._boxes: dict[int, tuple] = {}  # id(AP) -> its access box (the AP is kept alive by _aps)

    # --- operands ---------------------------------------------------------------------------------------
    def ap(self, t: NkiTensor, split: int = 0, dims_override=None) -> AP:
        """``t`` as an access pattern. ``split``: the last ``split`` view dims stay apart from the others
        (a reduction's axes). ``dims_override``: free dims to use instead of the view's (iota patterns).
        Loops recreate the same views: patterns are memoised per (storage, view, split) while it is placed."""
        if dims_override is None and t.indirect_index is None:
            key = (t.storage.id, t.shape, t.strides, t.offset, t.dtype, split)
            hit = self._aps.get(key)
            if hit is None:
                hit = self._aps[key] = self._ap(t, split, None)
            return hit
        return self._ap(t, split, dims_override)

    def _ap(self, t: NkiTensor, split: int, dims_override) -> AP:
        st = t.storage
        dt = t.dtype.device
        if st.on_chip:
            ps = t.pstride
            isz = t.dtype.itemsize
            start = t.offset // ps + (st.address[0] if st.address is not None else 0)
            byte = self.offset[st.id] + (t.offset % ps) * isz
            if dims_override is not None:
                dims = dims_override
            else:
                free = list(zip(t.strides[1:], t.shape[1:]))
                dims = self._dims(free, split)
            return AP(_SPACE[st.buffer], dt, t.shape[0], tuple(dims), start, byte)
        if t.dtype.itemsize != st.itemsize or t.dtype.device != st.dtype.device:
            raise self._err(NkiUnsupportedError, "reinterpreting an HBM tensor's dtype (view(dtype) on HBM) is not "
                            "emulated: DMA it as stored and reinterpret the SBUF tile")
        base = self.hbm_base.get(st.id, 0)
        if t.ndim == 1:
            return AP(Space.HBM, dt, 1, tuple(self._dims([(t.strides[0], t.shape[0])], 0)), 0, base + t.offset,
                      self.hbm_index[st.id], 0)
        free = list(zip(t.strides[1:], t.shape[1:]))
        return AP(Space.HBM, dt, t.shape[0], tuple(self._dims(free, split)), 0, base + t.offset,
                  self.hbm_index[st.id], t.strides[0])

    def _dims(self, free, split: int):
        if split:
            head, tail = free[:len(free) - split], free[len(free) - split:]
            tail_m = _merge(tail) or [(1, 1)]
            dims = _merge(head) + tail_m
        else:
            dims = _merge(free) or [(1, 1)]
        if len(dims) > self.spec.ap_max_dims:
            raise self._err(NkiValidationError, f"this view needs {len(dims)} free access-pattern dims; the engines "
                            f"and DMA take at most {self.spec.ap_max_dims}: split the instruction or make the view "
                            f"more contiguous")
        return dims

    def _err(self, cls, msg):
        return cls(msg, self.tr.where(self.loc))

    def box(self, t: NkiTensor, ap: AP):
        hit = self._boxes.get(id(ap))
        if hit is not None and hit[0] is ap:
            return hit[1]
        b = self._box(t, ap)
        self._boxes[id(ap)] = (ap, b)
        return b

    def _box(self, t: NkiTensor, ap: AP):
        st = t.storage
        if st.on_chip:
            lo = hi = 0
            for s, n in ap.dims:
                step = s * (n - 1)
                if step < 0:
                    lo += step
                else:
                    hi += step
            isz = ap.dtype.itemsize
            return (ap.start, ap.start + ap.partitions, ap.offset + lo * isz, ap.offset + (hi + 1) * isz)
        if st.id in self.em.nki_readonly:  # no op writes it: no records, only the graph's history
            return ("h", ap.tensor, 0, 0, None)
        if t.indirect_index is not None:
            return ("h", ap.tensor, 0, 1 << 62, None)
        lo, hi = ap.element_span()
        return ("h", ap.tensor, lo, hi, cover_box(t))

    def queue(self, key: tuple, kind: str) -> int:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = self.em.queue(f"qSyncIO{len(self.queues)}" if kind != "hardware_dynamic"
                                                 else f"qSyncDynamicHW{len(self.queues)}", kind)
        return q

    # --- ops ------------------------------------------------------------------------------------------------
    def run(self, ops, events, placement, on_chip_space) -> None:
        em = self.em
        off = placement.offset
        self.offset = off
        needed = {i for op in ops for i in op.args.get("after", ())}
        for op in ops:
            ev = events[op.index]
            if ev is not None:
                for st in ev[0]:
                    if st.id in off:
                        em.inherit(st, _SPACE[st.buffer], off[st.id], off[st.id] + placement.size[st.id])
            self.loc = op.loc
            after = [self.op_done[i] for i in op.args.get("after", ()) if i in self.op_done]
            last = getattr(self, "_op_" + op.kind)(op, after)
            if op.index in needed and last is not None:
                self.op_done[op.index] = last
            if ev is not None:
                for st in ev[1]:
                    if st.id in off:
                        em.retire(st, _SPACE[st.buffer], off[st.id], off[st.id] + placement.size[st.id])
                if len(self._aps) > 1 << 16:  # bound the memo (views of dead tiles never come back)
                    self._aps.clear()
                    self._boxes.clear()

    def _emit(self, ins, reads, writes, after=()):
        acc = [(False, t.storage.id, self.box(t, a)) for t, a in reads]
        acc += [(True, t.storage.id, self.box(t, a)) for t, a in writes]
        last = self.em.emit_nki(ins, acc, after)
        self.source.append(self.loc)
        return last

    def _op_dma(self, op, after):
        a = op.args
        dst, src = a["dst"], a["src"]
        if src.indirect_index is not None:
            table = self._table(src)
            idx = self.ap(src.indirect_index)
            q = self.queue(("gather", src.storage.id), "hardware_dynamic")
            d = self.ap(dst)
            return self._emit(DmaGather(queue=q, table=table, index=idx, dst=d),
                              [(src, table), (src.indirect_index, idx)], [(dst, d)], after)
        if dst.indirect_index is not None:
            table = self._table(dst)
            idx = self.ap(dst.indirect_index)
            q = self.queue(("scatter", dst.storage.id), "hardware_dynamic")
            s = self.ap(src)
            return self._emit(DmaScatter(queue=q, src=s, index=idx, table=table),
                              [(src, s), (dst.indirect_index, idx)], [(dst, table)], after)
        s, d = self.ap(src), self.ap(dst)
        if src.on_chip and dst.on_chip:
            key, kind = ("sbuf", 0), "data"
        elif src.on_chip:
            key, kind = ("store", dst.storage.id), "output" if dst.storage.kind == "output" else "data"
        else:
            key, kind = ("load", src.storage.id), "input" if src.storage.kind == "input" else "data"
        return self._emit(Dma(queue=self.queue(key, kind), src=s, dst=d), [(src, s)], [(dst, d)], after)

    def _table(self, t: NkiTensor) -> AP:
        st = t.storage
        free = list(zip(t.strides[1:], t.shape[1:]))
        return AP(Space.HBM, t.dtype.device, t.indirect_rows, tuple(self._dims(free, 0)), 0,
                  self.hbm_base.get(st.id, 0) + t.offset, self.hbm_index[st.id], t.strides[0])

    def _op_dma_transpose(self, op, after):
        dst, src = op.args["dst"], op.args["src"]
        s, d = self.ap(src), self.ap(dst)
        key = ("load", src.storage.id) if not src.on_chip else ("sbuf", 0)
        q = self.queue(key, "input" if src.storage.kind == "input" else "data")
        return self._emit(Dma(queue=q, src=s, dst=d, transpose=True), [(src, s)], [(dst, d)], after)

    def _op_copy(self, op, after):
        dst, src = op.args["dst"], op.args["src"]
        s, d = self.ap(src), self.ap(dst)
        return self._emit(TensorCopy(inp=s, out=d, on=_ENGINES[op.args["engine"]]), [(src, s)], [(dst, d)], after)

    def _op_memset(self, op, after):
        dst = op.args["dst"]
        d = self.ap(dst)
        return self._emit(Memset(out=d, value=op.args["value"]), [], [(dst, d)], after)

    def _op_select(self, op, after):
        a = op.args
        dst, src, pred = a["dst"], a["src"], a["pred"]
        d, s, p = self.ap(dst), self.ap(src), self.ap(pred)
        on_true, on_false = (d, s) if a["reverse"] else (s, d)
        return self._emit(Select(pred=p, on_true=on_true, on_false=on_false, out=d),
                          [(pred, p), (src, s), (dst, d)], [(dst, d)], after)

    def _op_matmul(self, op, after):
        a = op.args
        dst, st, mv = a["dst"], a["stationary"], a["moving"]
        s = self.ap(st)
        self._emit(LoadStationary(src=s), [(st, s)], [], after)
        m, d = self.ap(mv), self.ap(dst)
        reads = [(mv, m)] + ([(dst, d)] if a["accumulate"] else [])
        return self._emit(MultiplyMoving(moving=m, dst=d, accumulate=a["accumulate"]), reads, [(dst, d)])

    def _op_transpose(self, op, after):
        dst, data = op.args["dst"], op.args["data"]
        s, d = self.ap(data), self.ap(dst)
        return self._emit(TensorTranspose(src=s, dst=d), [(data, s)], [(dst, d)], after)

    def _scalar(self, v, reads):
        if isinstance(v, NkiTensor):
            a = self.ap(v)
            reads.append((v, a))
            return a
        return v

    def _op_activation(self, op, after):
        a = op.args
        dst, data = a["dst"], a["data"]
        s, d = self.ap(data), self.ap(dst)
        reads = [(data, s)]
        scale = self._scalar(a["scale"], reads)
        bias = self._scalar(a["bias"], reads)
        writes = [(dst, d)]
        acc = None
        if a["accum"] is not None:
            acc = self.ap(a["accum"])
            writes.append((a["accum"], acc))
        return self._emit(Activation(func=a["func"], inp=s, out=d, scale=scale, bias=bias, accum_out=acc),
                          reads, writes, after)

    def _op_tensor_tensor(self, op, after):
        a = op.args
        x, y, dst = a["a"], a["b"], a["dst"]
        ax, ay, d = self.ap(x), self.ap(y), self.ap(dst)
        return self._emit(TensorTensor(alu=a["alu"], in0=ax, in1=ay, out=d), [(x, ax), (y, ay)], [(dst, d)], after)

    def _op_tensor_scalar(self, op, after):
        a = op.args
        data, dst = a["data"], a["dst"]
        s, d = self.ap(data), self.ap(dst)
        reads = [(data, s)]
        s0 = self._scalar(a["s0"], reads)
        s1 = self._scalar(a["s1"], reads) if a["s1"] is not None else None
        return self._emit(TensorScalar(inp=s, out=d, alu0=a["alu0"], scalar0=s0, alu1=a["alu1"], scalar1=s1,
                                       reverse0=a["rev0"], reverse1=a["rev1"]), reads, [(dst, d)], after)

    def _op_scalar_tensor_tensor(self, op, after):
        a = op.args
        data, other, dst = a["data"], a["other"], a["dst"]
        s, o, d = self.ap(data), self.ap(other), self.ap(dst)
        reads = [(data, s), (other, o)]
        s0 = self._scalar(a["s0"], reads)
        return self._emit(ScalarTensorTensor(inp=s, scalar0=s0, in1=o, out=d, alu0=a["alu0"], alu1=a["alu1"],
                                             reverse0=a["rev0"], reverse1=a["rev1"]), reads, [(dst, d)], after)

    def _op_tensor_reduce(self, op, after):
        a = op.args
        data, dst = a["data"], a["dst"]
        s = self.ap(data, split=a["axes"])
        kept = len(_merge(list(zip(data.strides[1:], data.shape[1:]))[:data.ndim - 1 - a["axes"]]))
        axes = len(s.dims) - kept
        d = self.ap(dst)
        return self._emit(TensorReduce(alu=a["alu"], inp=s, out=d, axes=axes, negate=a["negate"]),
                          [(data, s)], [(dst, d)], after)

    def _op_partition_reduce(self, op, after):
        a = op.args
        s, d = self.ap(a["data"]), self.ap(a["dst"])
        return self._emit(PartitionReduce(alu=a["alu"], inp=s, out=d), [(a["data"], s)], [(a["dst"], d)], after)

    def _op_scan(self, op, after):
        a = op.args
        x, y, dst = a["a"], a["b"], a["dst"]
        ax, ay, d = self.ap(x), self.ap(y), self.ap(dst)
        reads = [(x, ax), (y, ay)]
        init = self._scalar(a["initial"], reads)
        return self._emit(TensorScan(alu=a["alu1"], inp=ax, out=d, in1=ay, alu0=a["alu0"], initial=init,
                                     reverse0=a["rev0"], reverse1=a["rev1"]), reads, [(dst, d)], after)

    def _pattern_dims(self, t: NkiTensor, pattern):
        """``t``'s free elements laid out as the pattern's [num] dims (t contiguous or of that very shape)."""
        nums = [n for _, n in pattern]
        free = list(zip(t.strides[1:], t.shape[1:]))
        if [n for _, n in free] == nums:
            return [(s, n) for s, n in free]
        merged = _merge(free)
        if len(merged) <= 1:
            inner = merged[0][0] if merged else 1
            out, acc = [], inner
            for n in reversed(nums):
                out.append((acc, n))
                acc *= n
            return list(reversed(out))
        raise self._err(NkiValidationError, "the pattern's dims must match the tile's free dims, or the tile must be "
                        "contiguous")

    def _op_iota(self, op, after):
        a = op.args
        dst = a["dst"]
        d = self.ap(dst, dims_override=self._pattern_dims(dst, a["pattern"]))
        return self._emit(Iota(out=d, base=a["offset"], channel_multiplier=a["cm"],
                               coefs=tuple(s for s, _ in a["pattern"])), [], [(dst, d)], after)

    def _op_affine_select(self, op, after):
        a = op.args
        dst, src = a["dst"], a["src"]
        d = self.ap(dst, dims_override=self._pattern_dims(dst, a["pattern"]))
        s = self.ap(src, dims_override=self._pattern_dims(src, a["pattern"]))
        return self._emit(AffineSelect(inp=s, out=d, cmp=a["cmp"], base=a["offset"], channel_multiplier=a["cm"],
                                       coefs=tuple(st for st, _ in a["pattern"]), fill=a["fill"]),
                          [(src, s)], [(dst, d)], after)

    def _op_bn_stats(self, op, after):
        a = op.args
        s, d = self.ap(a["data"]), self.ap(a["dst"])
        return self._emit(BnStats(inp=s, out=d), [(a["data"], s)], [(a["dst"], d)], after)

    def _op_bn_aggr(self, op, after):
        a = op.args
        s, d = self.ap(a["data"]), self.ap(a["dst"])
        return self._emit(BnAggr(inp=s, out=d), [(a["data"], s)], [(a["dst"], d)], after)


_INSTR = re.compile(r"instruction #(\d+)")


def lower_into(tracer: Tracer, program: Program, emitter: NkiEmitter, hbm_index: dict[int, int],
               hbm_base: dict[int, int] | None = None) -> list[int]:
    """Emit the tracer's ops into ``program`` through ``emitter``; HBM storages must already be bound
    (``hbm_index``). Returns the source-location index of every instruction emitted."""
    placement, events = place(tracer.storages, len(tracer.ops), tracer.spec, SBUF_ALIGN, tracer.where)
    low = Lowering(tracer, program, emitter, hbm_index, hbm_base or {})
    written = {t.storage.id for op in tracer.ops for t in op.writes}
    emitter.nki_readonly = {st.id for st in tracer.storages if not st.on_chip and st.id not in written}
    low.run(tracer.ops, events, placement, None)
    emitter.publish_hbm(hbm_index)
    emitter.publish_chip()
    program.meta.setdefault("sbuf_peak_bytes", 0)
    program.meta["sbuf_peak_bytes"] = max(program.meta["sbuf_peak_bytes"], placement.peak[SBUF])
    program.meta["psum_peak_bytes"] = max(program.meta.get("psum_peak_bytes", 0), placement.peak[PSUM])
    return low.source


def check(program: Program, spec: HardwareSpec, tracer: Tracer, first: int, source: list[int]) -> None:
    """isa.validate, with an error moved onto the kernel line of the instruction at fault."""
    try:
        validate(program, spec)
    except ProgramError as exc:
        m = _INSTR.search(str(exc))
        where = None
        if m:
            i = int(m.group(1)) - first
            if 0 <= i < len(source):
                where = tracer.where(source[i])
        raise NkiValidationError(str(exc), where) from None
