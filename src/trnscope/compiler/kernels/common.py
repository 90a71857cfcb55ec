"""Shared pieces of the kernel library: row plans, DMA helpers that pick the cheap transfer, scalars.

A *row plan* lays an N-d iteration space out the way NKI kernels lay out row-wise work: some dims
are the "free" dims a kernel computes along (the softmax dim, the normalized dims, the reduced
dims), they go on the free axis of one tile; every other (kept) index is a row, 128 rows to a
tile on the partitions. Every operand keeps its own strides over the space (0 where it
broadcasts), so a kernel loads and stores non-contiguous and broadcast operands without copies.

Loading a tile picks the transfer that moves long contiguous runs (hardware.md 3.4: descriptors
under 2 KiB are overhead-bound): a direct DMA when the free axis is contiguous in HBM, a DMA
transpose when instead the *rows* are contiguous (softmax over a non-last dim), otherwise a
strided DMA (correct, slow, as on the device). An expanded operand (a free dim of stride 0) is read
once and broadcast on chip (docs/cost-model.md, "Expanded operands of other kernels").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod
from typing import Sequence

from ...isa import AP, Act, Activation, Alu, DType, Engine, Space, TensorReduce, TensorTranspose, hbm
from ..builder import KernelBuilder
from ..lowering import LoweringContext
from ..meta import TensorMeta
from ..tiling import P, coalesce, merge_dims  # noqa: F401 - P: the attention kernel (matmul family) still imports it here

F32 = DType.float32


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class RowTile:
    rows: int
    row0: int                      # flat index of the tile's first row among all rows
    offsets: tuple[int, ...]       # per operand: element offset of (first row, free index 0)
    pstrides: tuple[int, ...]      # per operand: element stride between rows


@dataclass(frozen=True)
class RowPlan:
    free_shape: tuple[int, ...]            # coalesced free dims (outermost first); () when empty
    free_strides: tuple[tuple[int, ...], ...]  # per operand: strides over free_shape
    tiles: tuple[RowTile, ...]
    nrows: int

    @property
    def cols(self) -> int:
        return prod(self.free_shape) if self.free_shape else 1

    def dims(self, k: int) -> list[tuple[int, int]]:
        """HBM free dims (stride, size) of operand k."""
        if not self.free_shape:
            return [(1, 1)]
        return [(st, sz) for st, sz in zip(self.free_strides[k], self.free_shape)]


def row_plan(shape: tuple[int, ...], free: list[int], strides: list[tuple[int, ...]],
             offsets: list[int] | None = None, *, parts: int) -> RowPlan:
    """Rows over the dims of ``shape`` not in ``free``, ``parts`` (the target's partitions) to a tile;
    ``strides[k]`` are operand k's strides."""
    nd = len(shape)
    free = sorted({d % nd for d in free}) if nd else []
    kept = [d for d in range(nd) if d not in free]
    offsets = list(offsets or [0] * len(strides))
    if free:
        fshape, fstrides = coalesce(tuple(shape[d] for d in free), [tuple(s[d] for d in free) for s in strides])
        if fshape == (1,):
            fshape, fstrides = (), [() for _ in strides]
    else:
        fshape, fstrides = (), [() for _ in strides]
    if kept:
        kshape, kstrides = coalesce(tuple(shape[d] for d in kept), [tuple(s[d] for d in kept) for s in strides])
    else:
        kshape, kstrides = (1,), [(0,) for _ in strides]
    nrows = prod(kshape)
    tiles = []
    inner, inner_st = kshape[-1], [s[-1] for s in kstrides]
    row = 0
    for idx in itertools.product(*(range(s) for s in kshape[:-1])):
        base = [o + sum(i * st for i, st in zip(idx, s[:-1])) for o, s in zip(offsets, kstrides)]
        for r0 in range(0, inner, parts):
            rows = min(parts, inner - r0)
            tiles.append(RowTile(rows, row + r0, tuple(b + r0 * st for b, st in zip(base, inner_st)),
                                 tuple(inner_st)))
        row += inner
    return RowPlan(tuple(fshape), tuple(tuple(f) for f in fstrides), tuple(tiles), nrows)


def full_strides(meta: TensorMeta, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of ``meta`` over ``shape`` (same rank or broadcastable from the right; size-1 dims 0)."""
    pad = len(shape) - meta.ndim
    out = []
    for d in range(len(shape)):
        if d < pad:
            out.append(0)
        else:
            size, st = meta.shape[d - pad], meta.stride[d - pad]
            out.append(0 if size == 1 else st)
    return tuple(out)


# --- DMA helpers ------------------------------------------------------------------------------------

def load(kb: KernelBuilder, queue: int, tensor: int, dtype: DType, offset: int, pstride: int, rows: int,
         dims: Sequence[tuple[int, int]], tile: AP, *, transpose: bool = True) -> None:
    """HBM rows (``rows`` x free ``dims``) -> SBUF ``tile`` [rows, prod(dims)] with the cheapest DMA.

    ``transpose``: a DMA transpose may move the rows when they are what is contiguous. A free dim of
    stride 0 (an expanded operand: the gradient of ``x.sum()``, ``grad.sum(0)`` of it) is not read
    once per element: see :func:`load_broadcast`."""
    if any(st == 0 and sz > 1 for st, sz in dims):
        load_broadcast(kb, queue, tensor, dtype, offset, pstride, rows, dims, tile, transpose=transpose)
        return
    if transpose:
        dims = [(st, sz) for st, sz in dims if sz > 1] or [(1, 1)]
        if len(dims) == 1 and dims[0][0] != 1 and pstride == 1 and rows > 1:
            # the rows are contiguous, the free axis is not: DMA transpose moves whole rows of HBM
            src = hbm(tensor, dims[0][1], dims[0][0], [(1, rows)], dtype, offset=offset)
            kb.dma(queue, src, tile, transpose=True)
            return
    kb.dma(queue, hbm(tensor, rows, pstride, dims, dtype, offset=offset), tile)


def load_broadcast(kb: KernelBuilder, queue: int, tensor: int, dtype: DType, offset: int, pstride: int, rows: int,
                   dims: Sequence[tuple[int, int]], tile: AP, *, transpose: bool = True) -> None:
    """:func:`load` of a source whose free ``dims`` include stride-0 ones: the distinct data (the
    view without them) is loaded once, the cheapest way for its own layout, and one engine copy
    fills ``tile`` reading it with stride 0 on those dims (engines read any free stride, 0 included:
    hardware.md 2.3). Read per element, each 4-byte descriptor would cost what a 2 KiB one does (S6):
    7 ms for a [1024, 1024] FP32 matmul operand expanded from a scalar. A partition stride of 0 stays
    in the DMA: one row read into every partition, a descriptor per partition, not per element."""
    dims = [(st, sz) for st, sz in dims if sz > 1] or [(1, 1)]
    distinct = [(st, sz) for st, sz in dims if st != 0] or [(1, 1)]
    part = kb.tile(rows, (prod(sz for _, sz in distinct),), tile.dtype)
    load(kb, queue, tensor, dtype, offset, pstride, rows, distinct, part, transpose=transpose)
    view, step = [], 1
    for st, sz in reversed(dims):
        view.append((0 if st == 0 else step, sz))
        step *= 1 if st == 0 else sz
    src = part.view(0, merge_dims(view[::-1]))
    if tile.dtype.is_float:
        # ScalarE: VectorE carries most kernels' arithmetic (reductions, matmul evacuations share it)
        kb.emit(Activation(func=Act.COPY, inp=src, out=tile))
    else:
        kb.copy(src, tile)  # exact for integers
    kb.release(part)


def store(kb: KernelBuilder, queue: int, tile: AP, tensor: int, dtype: DType, offset: int, pstride: int,
          rows: int, dims: Sequence[tuple[int, int]]) -> None:
    """SBUF ``tile`` [rows, prod(dims)] -> HBM rows, mirroring :func:`load`."""
    dims = [(st, sz) for st, sz in dims if sz > 1] or [(1, 1)]
    if len(dims) == 1 and dims[0][0] != 1 and pstride == 1 and rows > 1:
        dst = hbm(tensor, dims[0][1], dims[0][0], [(1, rows)], dtype, offset=offset)
        kb.dma(queue, tile, dst, transpose=True)
        return
    kb.dma(queue, tile, hbm(tensor, rows, pstride, dims, dtype, offset=offset))


def move(kb: KernelBuilder, queue: int, tensor: int, dtype: DType, at: int, rows: int, pstride: int,
         dims: list[tuple[int, int]], tile: AP, inbound: bool) -> None:
    """One transfer between HBM (``rows`` x ``dims`` from element ``at``) and ``tile``. When the HBM
    rows are the tile's partitions, :func:`load`/:func:`store` pick the transfer (a DMA transpose for
    contiguous rows, one read on chip for stride-0 dims); several partition dims walk the HBM side as its outer free dims, in element order."""
    if rows == tile.partitions:
        if inbound:
            load(kb, queue, tensor, dtype, at, pstride, rows, dims, tile)
        else:
            store(kb, queue, tile, tensor, dtype, at, pstride, rows, dims)
        return
    pattern = hbm(tensor, rows, pstride, dims, dtype, offset=at)
    if inbound:
        kb.dma(queue, pattern, tile)
    else:
        kb.dma(queue, tile, pattern)


class RowStores:
    """Per-row results (one value per row: a reduction's, a norm's mean and rstd) stored as rows of
    contiguous values instead of one descriptor per row.

    A row tile holds its 128 rows on the partitions, so its results leave as 128 descriptors of one
    element, each as costly as a 2 KiB one (S6's knee): 1024 rows of a [1024, 1024] var(dim=1) cost
    more DMA time than reading the input. Here each full tile's results are copied into a column of a
    [P, group] tile, and every ``group`` tiles TensorE transposes the columns into ``group`` rows of P
    values, stored as ``group`` descriptors. Groups stay small enough that an LNC=2 pair still splits
    the stores between its cores. Anything else (a partial tile, strided or 8-byte results) is
    stored as before."""

    def __init__(self, kb: KernelBuilder, queue: int, tiles: int, scalar_copies: bool = False):
        self.kb, self.q = kb, queue
        self.scalar_copies = scalar_copies   # ScalarE copies the results (when VectorE carries the rows)
        self.group = max(1, min(kb.spec.partitions, tiles // 2))
        self.state: dict[int, list] = {}   # output tensor -> [base offset, tiles collected, buffer, dtype]

    def store(self, res: AP, tensor: int, dtype: DType, offset: int, pstride: int, rows: int,
              small_ints: bool = False) -> None:
        """``small_ints``: ``res`` holds integers below 2^24 (positions), so 8-byte integer results
        travel through the FP32 transposes exactly and are widened on the way out."""
        kb, parts = self.kb, self.kb.spec.partitions
        st = self.state.get(tensor)
        via_f32 = small_ints and not dtype.is_float and dtype.itemsize == 8
        fits = rows == parts and pstride == 1 and (res.dtype == dtype or via_f32) and \
            (dtype.itemsize <= 4 or via_f32) and self.group > 1
        if st is None and fits:
            st = self.state[tensor] = [offset, 0, None, dtype]
        if st is None or not fits or offset != st[0] + st[1] * parts:
            if via_f32 and res.dtype != dtype:   # integer positions: widened on chip (a DMA does not cast)
                wide = kb.tile(rows, (1,), dtype)
                kb.copy(res, wide, on=Engine.GPSIMD)
                store(kb, self.q, wide, tensor, dtype, offset, pstride, rows, [(1, 1)])
                kb.release(wide)
            else:
                store(kb, self.q, res, tensor, dtype, offset, pstride, rows, [(1, 1)])
            return
        col = st[1] % self.group
        if col == 0:
            st[2] = kb.tile(parts, (self.group,), F32 if via_f32 else dtype)
        if via_f32:
            kb.copy(res, st[2].view(col, [(1, 1)]), on=Engine.GPSIMD)
        elif self.scalar_copies and dtype.is_float:
            kb.emit(Activation(func=Act.COPY, inp=res, out=st[2].view(col, [(1, 1)])))
        else:
            kb.copy(res, st[2].view(col, [(1, 1)]))
        st[1] += 1
        if st[1] % self.group == 0:
            self._flush(tensor)

    def _flush(self, tensor: int) -> None:
        kb, parts = self.kb, self.kb.spec.partitions
        base, n, buf, dtype = self.state[tensor]
        cols = n % self.group or self.group
        first = n - cols
        ps = kb.psum_tile(cols, (parts,), buf.dtype)
        kb.emit(TensorTranspose(src=buf.view(0, [(1, cols)]), dst=ps))
        rows_t = kb.tile(cols, (parts,), dtype)
        if (self.scalar_copies and dtype.is_float) or buf.dtype != dtype:   # ScalarE widens as it copies
            kb.emit(Activation(func=Act.COPY, inp=ps, out=rows_t))
        else:
            kb.copy(ps, rows_t)
        kb.dma(self.q, rows_t, hbm(tensor, cols, parts, [(1, parts)], dtype, offset=base + first * parts))
        kb.release(ps, rows_t, buf)
        self.state[tensor][2] = None

    def finish(self) -> None:
        for tensor, (_, n, buf, _) in self.state.items():
            if buf is not None and n % self.group:
                self._flush(tensor)


# --- work split over the physical cores of a logical core (LNC=2) ---------------------------------------

def core_shares(kb: KernelBuilder, n: int) -> list[range]:
    """``range(n)`` in contiguous shares, one per physical core of the logical core (one at LNC=1),
    as an NKI kernel at LNC=2 splits its outer loop on ``nl.program_id`` (S46).

    compiler.lnc gives each HBM store, and everything that feeds it, to one physical core; a kernel
    that writes its whole result in one store (a reduction to one value) would leave the second core
    idle. Such a kernel runs each share's loop apart, into a partial of its own, and meets the
    partials with :func:`meet_partials`."""
    k = max(1, min(kb.spec.lnc, n))
    return [range(n * i // k, n * (i + 1) // k) for i in range(k)]


def meet_partials(kb: KernelBuilder, partials: list[AP], queue_out: int, queue_in: int) -> AP:
    """One [rows, total cols] tile holding every share's partial side by side (its columns in share
    order), for the caller to fold as it folds any partial columns.

    One share: its own tile. More: each partial leaves in a store of its own to an HBM scratch
    tensor and all come back in one load - the two physical cores of an LNC=2 pair share HBM, and
    that is where NKI kernels meet their per-core results (S23, S46) - so compiler.lnc gives each
    share to its own core and the fold to one of them, which waits for the other core's store. The
    partials are released."""
    if len(partials) == 1:
        return partials[0]
    rows, dtype = partials[0].partitions, partials[0].dtype
    if any(p.partitions != rows or p.dtype != dtype for p in partials):
        raise ValueError("meet_partials: every share's partial needs the same rows and dtype")
    total = sum(p.free_size for p in partials)
    prog = kb.p
    t = prog.tensor(f"core_partials{len(prog.tensors)}", (rows, total), dtype, "scratch")
    c0 = 0
    for p in partials:
        kb.dma(queue_out, p, hbm(t, rows, total, [(1, p.free_size)], dtype, offset=c0))
        c0 += p.free_size
    met = kb.tile(rows, (total,), dtype)
    kb.dma(queue_in, hbm(t, rows, total, [(1, total)], dtype), met)
    kb.release(*partials)
    return met


def meet_and_fold(kb: KernelBuilder, partials: list[AP], alu: Alu, queue_out: int, queue_in: int) -> AP:
    """The shares' [1, 1] partials met (:func:`meet_partials`) and folded with ``alu`` into one
    [1, 1] tile (one share: its own tile, nothing emitted)."""
    met = meet_partials(kb, partials, queue_out, queue_in)
    if met.free_size == 1:
        return met
    total = kb.tile(1, (1,), F32)
    kb.emit(TensorReduce(alu=alu, inp=met, out=total))
    kb.release(met)
    return total


def attr(ctx: LoweringContext, name: str, default=None):
    v = ctx.call.attr(name)
    return default if v is None else v


def queues(kb: KernelBuilder, n: int = 2) -> tuple[list[int], int]:
    """(input queues, output queue) named as the other kernels name them."""
    return [kb.queue(f"qSyncIO{i}", "input") for i in range(n)], kb.queue("qSyncIO2", "output")


FLT_MAX = 3.4028234663852886e38


# --- per-iteration scratch tiles ---------------------------------------------------------------------

_SCRATCH: list[list[AP]] = []   # one list per streaming loop in progress (emit_map, emit_rows)


def scratch(kb: KernelBuilder, rows: int, cols: int, dtype: DType = F32, space: Space = Space.SBUF) -> AP:
    """A temporary tile for one iteration of a streaming loop, released one iteration later.

    Released at once, the next tile's temporaries would reuse its bytes and wait (WAR) for this
    tile's last reader: engines would take turns instead of working on consecutive tiles at once.
    Outside a streaming loop the caller releases it. ``space``: PSUM for a VectorE intermediate
    (see elementwise.ptemp), as many banks as it spans.
    """
    banks = -(-cols * DType.parse(dtype).itemsize // kb.spec.psum_bank_bytes) if space is Space.PSUM else 1
    t = kb.tile(rows, (cols,), dtype, space, banks=banks)
    if _SCRATCH:
        _SCRATCH[-1].append(t)
    return t


class ScratchScope:
    """Collects the scratch tiles made while one loop iteration's compute runs."""

    def __enter__(self) -> list[AP]:
        _SCRATCH.append([])
        return _SCRATCH[-1]

    def __exit__(self, *exc) -> None:
        _SCRATCH.pop()


# --- row kernels ------------------------------------------------------------------------------------

@dataclass
class Operand:
    """One tensor of a row kernel: its HBM tensor, metadata and strides over the iteration space.

    ``full``: the operand spans the free dims (a [rows, cols] tile); otherwise it holds one value per
    row (a [rows, 1] tile: LayerNorm's mean, a reduction's result).
    """
    tensor: int
    meta: TensorMeta
    strides: tuple[int, ...]
    full: bool = True
    dtype: DType | None = None  # tile dtype (defaults to the tensor's)


def emit_rows(ctx: LoweringContext, shape: tuple[int, ...], free: list[int], ins: list[Operand],
              outs: list[Operand], compute, n_queues: int = 2) -> RowPlan:
    """Stream 128-row tiles of every operand through ``compute(kb, in_tiles, out_tiles, tile)``.

    Input tiles are loaded (alternating input queues), output tiles allocated; ``compute`` fills the
    output tiles and the driver stores them. Each iteration's tiles are released one iteration late,
    so the next tile's loads go to other bytes and overlap this tile's compute (double buffering).
    """
    kb = ctx.kb
    ops = ins + outs
    plan = row_plan(shape, free, [o.strides for o in ops], [o.meta.offset for o in ops], parts=ctx.spec.partitions)
    qin, qout = queues(kb, n_queues)
    cols = plan.cols
    held: list[AP] = []
    for t in plan.tiles:
        in_tiles = []
        for k, o in enumerate(ins):
            tile = kb.tile(t.rows, (cols if o.full else 1,), o.meta.dtype)
            dims = plan.dims(k) if o.full else [(1, 1)]
            load(kb, qin[k % len(qin)], o.tensor, o.meta.dtype, t.offsets[k], t.pstrides[k], t.rows, dims, tile)
            in_tiles.append(tile)
        out_tiles = [kb.tile(t.rows, (cols if o.full else 1,), o.dtype or o.meta.dtype) for o in outs]
        with ScratchScope() as made:
            compute(kb, in_tiles, out_tiles, t)
        for j, (o, tile) in enumerate(zip(outs, out_tiles)):
            k = len(ins) + j
            dims = plan.dims(k) if o.full else [(1, 1)]
            store(kb, qout, tile, o.tensor, o.meta.dtype, t.offsets[k], t.pstrides[k], t.rows, dims)
        kb.release(*held)
        held = in_tiles + out_tiles + made
    kb.release(*held)
    return plan


def reduced_strides(meta: TensorMeta, shape: tuple[int, ...], reduced: list[int]) -> tuple[int, ...]:
    """Strides over ``shape`` of the result of reducing ``reduced`` dims (keepdim or not): 0 on them."""
    nd = len(shape)
    red = {d % nd for d in reduced} if nd else set()
    if meta.ndim == nd:
        return tuple(0 if d in red else (meta.stride[d] if meta.shape[d] != 1 else 0) for d in range(nd))
    it = iter(zip(meta.shape, meta.stride))
    out = []
    for d in range(nd):
        if d in red:
            out.append(0)
        else:
            size, st = next(it)
            out.append(st if size != 1 else 0)
    return tuple(out)


def free_pieces(plan: RowPlan, max_cols: int) -> list[tuple[int, list[list[tuple[int, int]]], list[int]]]:
    """Cover a row plan's free space in pieces of at most ``max_cols`` elements.

    Each piece is (elements, per-operand [(stride, size)] HBM free dims, per-operand element offset
    within the row): the outer free dims are walked one index at a time, the innermost is chunked.
    """
    if not plan.free_shape:
        return [(1, [[(1, 1)] for _ in plan.free_strides], [0] * len(plan.free_strides))]
    shape = plan.free_shape
    pieces: list[tuple[int, list[list[tuple[int, int]]], list[int]]] = []
    for idx in itertools.product(*(range(s) for s in shape[:-1])):
        base = [sum(i * st for i, st in zip(idx, fs[:-1])) for fs in plan.free_strides]
        for c0 in range(0, shape[-1], max_cols):
            w = min(max_cols, shape[-1] - c0)
            pieces.append((w, [[(fs[-1], w)] for fs in plan.free_strides],
                           [b + c0 * fs[-1] for b, fs in zip(base, plan.free_strides)]))
    return pieces
