"""Reductions (sum, mean, amax, amin, max, min, prod) over any set of dims, at HBM speed.

Which axis the reduced dims go on follows the input's memory order, so every DMA moves long
contiguous runs (descriptors under ~2 KiB cost as much as 2 KiB, docs/cost-model.md):

* **rows** (the innermost dim in memory is reduced: ``x.sum(-1)``): kept dims on partitions, the
  reduced dims on the free axis, TensorReduce folding each chunk into a column of a [rows, T] result
  tile. Row ``r`` of the kept space goes to partition ``r // T``, column ``r % T``, so the results
  leave in one store of T contiguous elements per partition; short rows are loaded several to a
  partition (one contiguous run) and reduced in one instruction through a [T, len] view.
* **cols** (the innermost dim in memory is kept: ``x.sum(0)``, a bias gradient): the reduced dim on
  partitions, the kept dim on the free axis in blocks of whole contiguous rows. Sums accumulate on
  TensorE as matmuls against a ones column (``ones[rows, 1].T @ x[rows, block]`` -> [1, block] in
  PSUM, FP32); other ALUs fold tiles element-wise on VectorE and across partitions on GpSimdE
  (tensor_partition_reduce). Kept rows shorter than a DMA knee are loaded several to a partition and
  folded by one TensorReduce at the end.
* **all** (everything reduced, one contiguous dim): 128 partitions each reduce a share, GpSimdE
  folds the partitions.

Loads rotate through ``DEPTH`` buffers so the next transfers fill other bytes while the engines work.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from math import prod

from ...isa import (
    AP, Act, Activation, Alu, DType, LoadStationary, Memset, MultiplyMoving, PartitionReduce, TensorReduce,
    TensorScalar, TensorTensor, hbm,
)
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..tiling import coalesce
from .common import ceil_div, core_shares, load, meet_and_fold
from .elementwise import MAX_COLS, scalar_arg

REDUCE_OPS = {"sum": Alu.ADD, "mean": Alu.ADD, "amax": Alu.MAX, "amin": Alu.MIN, "max": Alu.MAX, "min": Alu.MIN}
F32 = DType.float32
DEPTH = 4          # load buffers in flight: one being reduced, the others arriving
RESULT_COLS = 2048  # result columns per partition held before a store (8 KiB of FP32)


def _dims(ctx: LoweringContext, ndim: int) -> list[int]:
    dims = scalar_arg(ctx, 1, "dim")
    if dims is None or dims == () or dims == []:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(ndim, 1) for d in dims})


class _Loads:
    """Load tiles released ``DEPTH`` - 1 tiles late, so DEPTH transfers overlap the engines' work."""

    def __init__(self, kb):
        self.kb, self.held = kb, deque()

    def add(self, tile: AP) -> AP:
        self.held.append(tile)
        while len(self.held) >= DEPTH:
            self.kb.release(self.held.popleft())
        return tile

    def close(self) -> None:
        self.kb.release(*self.held)
        self.held.clear()


def emit_reduce(ctx: LoweringContext, alu: Alu, mean: bool) -> None:
    x = ctx.call.inputs[0]
    out = ctx.call.outputs[0]
    nd = x.ndim
    rdims = _dims(ctx, nd) if nd else []
    kept = [d for d in range(nd) if d not in rdims]
    count = prod(x.shape[d] for d in rdims) if rdims else 1
    # output strides of the kept dims (keepdim leaves size-1 dims in place, otherwise they are gone)
    out_strides = [out.stride[d] for d in kept] if out.ndim == nd else list(out.stride)
    kshape, (kx, ko) = coalesce(tuple(x.shape[d] for d in kept), [tuple(x.stride[d] for d in kept),
                                                                   tuple(out_strides)]) if kept else ((1,), [(0,), (0,)])
    rshape, (rx,) = coalesce(tuple(x.shape[d] for d in rdims), [tuple(x.stride[d] for d in rdims)]) if rdims \
        else ((1,), [(0,)])
    scale = 1.0 / count if mean else None
    if prod(kshape) == 1 and len(rshape) == 1 and rshape[0] >= 2 * ctx.spec.partitions:
        _reduce_all(ctx, alu, scale, rshape[0], rx[0])
    elif _kept_inner(kshape, kx, rshape, rx):
        _reduce_cols(ctx, alu, scale, kshape, kx, ko, rshape, rx)
    elif len(rshape) > 1 and rx[-1] == 1 and kx[-1] == rshape[-1] and \
            rshape[-1] * x.dtype.itemsize < ctx.spec.dma_descriptor_knee_bytes:
        # a short reduced run inside each kept index, more reduced dims outside: kept x run on the free axis
        _reduce_cols(ctx, alu, scale, kshape, kx, ko, rshape[:-1], rx[:-1], unit=rshape[-1])
    else:
        _reduce_rows(ctx, alu, scale, kshape, kx, ko, rshape, rx)


def _kept_inner(kshape, kx, rshape, rx) -> bool:
    """The input's densest dim is a kept one: the reduced dims go on partitions."""
    k_min = min((abs(s) for n, s in zip(kshape, kx) if n > 1), default=None)
    r_min = min((abs(s) for n, s in zip(rshape, rx) if n > 1), default=None)
    return k_min is not None and r_min is not None and k_min < r_min


def _finish(kb, src: AP, dst: AP, scale) -> None:
    """dst = src (* scale), cast to dst's dtype: ScalarE reads PSUM or SBUF, leaving VectorE to the folds."""
    if scale is not None or src.space.value == "psum":
        kb.emit(Activation(func=Act.COPY, inp=src, out=dst, scale=1.0 if scale is None else scale))
    else:
        kb.copy(src, dst)


# --- rows: kept dims on partitions --------------------------------------------------------------------

def _reduce_rows(ctx, alu, scale, kshape, kx, ko, rshape, rx) -> None:
    kb, P = ctx.kb, ctx.spec.partitions
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    q_in, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO2", "output")
    nrows, sx, so = kshape[-1], kx[-1], ko[-1]
    rlen, rst = rshape[-1], rx[-1]
    outer_r = list(itertools.product(*(range(s) for s in rshape[:-1])))
    loads = _Loads(kb)
    # a whole short row per chunk, rows dense one after another: several rows are one contiguous run
    packable = len(rshape) == 1 and rst == 1 and sx == rlen and rlen <= MAX_COLS // 2
    for oidx in itertools.product(*(range(s) for s in kshape[:-1])):
        base_x = x.offset + sum(i * s for i, s in zip(oidx, kx[:-1]))
        base_o = out.offset + sum(i * s for i, s in zip(oidx, ko[:-1]))
        per = nrows // P
        # (first row, partitions, rows per partition): 128 partitions of `per` rows, then the tail
        segments = [(0, P, per)] if per else []
        if nrows - P * per:
            segments.append((P * per, nrows - P * per, 1))
        for r0, parts, t_rows in segments:
            chunks = [(ridx, c0) for ridx in outer_r for c0 in range(0, rlen, MAX_COLS)]
            nch = 1 if packable else len(chunks)
            step = max(2, RESULT_COLS // nch)
            if len(segments) == 1 and prod(kshape[:-1]) == 1:
                # at least one store per physical core: compiler.lnc splits a kernel by its stores
                step = min(step, max(2, ceil_div(t_rows, kb.spec.lnc)))
            for t0 in range(0, t_rows, step):
                tn = min(step, t_rows - t0)
                # one partial per (row, chunk), folded once at the end; sums of even and odd rows go to
                # VectorE and ScalarE, each engine writing its own tile (so neither waits on the other)
                split = alu is Alu.ADD and not packable and tn > 1
                halves = [(tn + 1) // 2, tn // 2] if split else [tn]
                parts_t = [kb.tile(parts, (h * nch,), F32) for h in halves]
                res = parts_t[0]
                g = max(1, min(tn, MAX_COLS // rlen)) if packable else 1
                for c in range(0, tn, g):
                    gn = min(g, tn - c)
                    row = base_x + (r0 + t0 + c) * sx
                    if packable:
                        t = loads.add(kb.tile(parts, (gn * rlen,), x.dtype))
                        load(kb, q_in, ctx.inputs[0], x.dtype, row, t_rows * sx, parts, [(1, gn * rlen)], t, transpose=False)
                        kb.emit(TensorReduce(alu=alu, inp=t.view(0, [(rlen, gn), (1, rlen)]), out=res.view(c, [(1, gn)])))
                        continue
                    side, pos = (c % 2, c // 2) if split else (0, c)
                    for j, (ridx, c0) in enumerate(chunks):
                        cols = min(MAX_COLS, rlen - c0)
                        off = row + sum(i * s for i, s in zip(ridx, rx[:-1])) + c0 * rst
                        t = loads.add(kb.tile(parts, (cols,), x.dtype))
                        load(kb, q_in, ctx.inputs[0], x.dtype, off, t_rows * sx, parts, [(rst, cols)], t, transpose=False)
                        col = parts_t[side].view(pos * nch + j, [(1, 1)])
                        if side:
                            kb.emit(Activation(func=Act.COPY, inp=t, out=t, accum_out=col))
                        else:
                            kb.emit(TensorReduce(alu=alu, inp=t, out=col))
                if nch > 1 or split:
                    folded = kb.tile(parts, (tn,), F32)
                    for side, (h, pt) in enumerate(zip(halves, parts_t)):
                        dst = folded.view(side, [(2, h)]) if split else folded
                        kb.emit(TensorReduce(alu=alu, inp=pt.view(0, [(nch, h), (1, nch)]), out=dst))
                    kb.release(*parts_t)
                    res = folded
                o = kb.tile(parts, (tn,), out.dtype)
                _finish(kb, res, o, scale)
                kb.dma(q_out, o, hbm(ctx.outputs[0], parts, t_rows * so, [(so, tn)], out.dtype,
                                     offset=base_o + (r0 + t0) * so))
                kb.release(res, o)
    loads.close()


# --- cols: reduced dims on partitions, kept rows on the free axis ----------------------------------------

BLOCK = 2048   # kept columns per block: 4 PSUM banks of FP32 sums, two blocks in flight


def _col_pieces(nred: int, P: int, g: int) -> list[tuple[int, int, int]]:
    """The reduced dim in (first reduced index, partitions, rows per partition): full tiles, then
    the tails."""
    pieces, r = [], 0
    while nred - r >= P * g:
        pieces.append((r, P, g))
        r += P * g
    if nred - r >= g > 1:
        pieces.append((r, (nred - r) // g, g))
        r += ((nred - r) // g) * g
    if nred - r:
        pieces.append((r, nred - r, 1))
    return pieces


@dataclass
class _ColFold:
    """How one block's loaded [parts, span] tiles fold into its accumulators: sums of floats as
    matmuls against a ones column into PSUM banks, other ALUs element-wise on VectorE into one SBUF
    tile. The ones columns and the rows the stationary one holds carry over from block to block."""

    kb: KernelBuilder
    alu: Alu
    dtype: DType
    on_pe: bool
    bank: int                    # FP32 columns of one PSUM bank
    moving_max: int
    ones: dict = field(default_factory=dict)
    loaded_rows: int | None = None

    def accumulators(self, first_parts: int, width: int) -> list[AP]:
        kb = self.kb
        if self.on_pe:
            return [kb.psum_tile(1, (min(self.bank, width - s0),)) for s0 in range(0, width, self.bank)]
        return [kb.tile(first_parts, (width,), F32)]

    def add(self, accs: list[AP], t: AP, parts: int, span: int, first: bool) -> None:
        kb = self.kb
        if not self.on_pe:
            region = accs[0].view(0, [(1, span)], partitions=parts)
            if first:
                kb.copy(t, region)
            else:
                kb.emit(TensorTensor(alu=self.alu, in0=region, in1=t, out=region))
            return
        if self.loaded_rows != parts:
            if self.dtype not in self.ones:
                self.ones[self.dtype] = kb.tile(kb.spec.partitions, (1,), self.dtype)
                kb.emit(Memset(out=self.ones[self.dtype], value=1.0))
            kb.emit(LoadStationary(src=self.ones[self.dtype].rows(0, parts)))
            self.loaded_rows = parts
        # a tail piece adds into the leading columns: every column is summed in the end
        for k, s0 in enumerate(range(0, span, self.bank)):
            for m0 in range(s0, min(s0 + self.bank, span), self.moving_max):
                m = min(self.moving_max, s0 + self.bank - m0, span - m0)
                kb.emit(MultiplyMoving(moving=t.view(m0, [(1, m)]),
                                       dst=accs[k].view(m0 - s0, [(1, m)]), accumulate=not first))

    def total(self, accs: list[AP], width: int) -> AP:
        """The block's [1, width] FP32 column totals (the PSUM accumulators are released)."""
        kb = self.kb
        total = kb.tile(1, (width,), F32)
        if self.on_pe:
            for k, s0 in enumerate(range(0, width, self.bank)):
                _finish(kb, accs[k], total.view(s0, [(1, accs[k].free_size)]), None)
            # PSUM goes back at once (8 banks are all there is); the next block's first matmul
            # waits for this evacuation only
            kb.release(*accs)
        else:
            kb.emit(PartitionReduce(alu=self.alu, inp=accs[0], out=total))
        return total


def _reduce_cols(ctx, alu, scale, kshape, kx, ko, rshape, rx, unit: int = 1) -> None:
    """``unit`` > 1: each kept index owns ``unit`` contiguous elements of a reduced dim left out of
    ``rshape`` (``x.mean((0, 2))`` of [N, C, 3]): the blocks load whole, the unit folds at the end."""
    kb, spec = ctx.kb, ctx.spec
    P = spec.partitions
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    q_in, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO2", "output")
    ncols, cst, cso = kshape[-1], kx[-1], ko[-1]
    # the longest reduced dim goes on partitions, the others loop
    pd = max(range(len(rshape)), key=lambda d: rshape[d])
    nred, rst = rshape[pd], rx[pd]
    others = [d for d in range(len(rshape)) if d != pd]
    outer_r = list(itertools.product(*(range(rshape[d]) for d in others)))
    # whole kept rows shorter than a DMA knee, one after another: g rows to a partition, one run
    g = 1
    if unit == 1 and cst == 1 and rst == ncols and ncols * x.dtype.itemsize < spec.dma_descriptor_knee_bytes:
        g = max(1, min(BLOCK // ncols, nred // P))
    fold = _ColFold(kb, alu, x.dtype, alu is Alu.ADD and x.dtype.is_float, spec.psum_bank_bytes // 4,
                    spec.gemm_moving_fmax)
    loads = _Loads(kb)
    held: deque = deque()
    for oidx in itertools.product(*(range(s) for s in kshape[:-1])):
        base_x = x.offset + sum(i * s for i, s in zip(oidx, kx[:-1]))
        base_o = out.offset + sum(i * s for i, s in zip(oidx, ko[:-1]))
        step = max(1, BLOCK // (g * unit))
        for b0 in range(0, ncols, step):
            w = min(step, ncols - b0)
            width = g * w * unit
            pieces = _col_pieces(nred, P, g)
            accs = fold.accumulators(pieces[0][1], width)
            first = True
            for ridx in outer_r:
                roff = base_x + b0 * cst + sum(i * rx[d] for i, d in zip(ridx, others))
                for r0, parts, gg in pieces:
                    span = gg * w * unit
                    t = loads.add(kb.tile(parts, (span,), x.dtype))
                    dims = [(1, span)] if gg > 1 or unit > 1 else [(cst, w)]
                    load(kb, q_in, ctx.inputs[0], x.dtype, roff + r0 * rst, gg * rst, parts, dims, t, transpose=False)
                    fold.add(accs, t, parts, span, first)
                    first = False
            total = fold.total(accs, width)
            res = kb.tile(1, (w,), out.dtype)
            if g > 1 or unit > 1:
                folded = kb.tile(1, (w,), F32)
                view = [(1, w), (w, g)] if g > 1 else [(unit, w), (1, unit)]
                kb.emit(TensorReduce(alu=alu, inp=total.view(0, view), out=folded))
                kb.release(total)
                total = folded
            _finish(kb, total, res, scale)
            kb.dma(q_out, res, hbm(ctx.outputs[0], 1, 0, [(cso, w)], out.dtype, offset=base_o + b0 * cso))
            # the block's accumulators go back one block late: the next block accumulates elsewhere
            kb.release(*held)
            held = deque([total, res] + ([] if fold.on_pe else accs))
    kb.release(*held, *fold.ones.values())
    loads.close()


# --- all: one contiguous dim to one value ----------------------------------------------------------------

def _reduce_all(ctx: LoweringContext, alu: Alu, scale, n: int, stride: int) -> None:
    """128 partitions each reduce a share of the vector, GpSimdE folds them; at LNC=2 each physical core
    takes half the chunks and the two totals meet through HBM (common.core_shares)."""
    kb, P = ctx.kb, ctx.spec.partitions
    q_in, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO2", "output")
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    per = n // P
    tail = n - per * P
    chunks = list(range(0, per, MAX_COLS))
    loads = _Loads(kb)
    totals = []
    for share in core_shares(kb, len(chunks)):
        acc = kb.tile(P, (len(share),), F32)
        for j, c0 in enumerate(chunks[k] for k in share):
            cols = min(MAX_COLS, per - c0)
            t = loads.add(kb.tile(P, (cols,), x.dtype))
            load(kb, q_in, ctx.inputs[0], x.dtype, x.offset + c0 * stride, per * stride, P, [(stride, cols)], t,
                 transpose=False)
            kb.emit(TensorReduce(alu=alu, inp=t, out=acc.view(j, [(1, 1)])))
        rows = kb.tile(P, (1,), F32)
        kb.emit(TensorReduce(alu=alu, inp=acc, out=rows))
        part = kb.tile(1, (1,), F32)
        kb.emit(PartitionReduce(alu=alu, inp=rows, out=part))
        kb.release(acc, rows)
        totals.append(part)
    total = meet_and_fold(kb, totals, alu, q_out, q_in)
    if tail:
        t = loads.add(kb.tile(1, (tail,), x.dtype))
        load(kb, q_in, ctx.inputs[0], x.dtype, x.offset + per * P * stride, 0, 1, [(stride, tail)], t, transpose=False)
        part = kb.tile(1, (1,), F32)
        kb.emit(TensorReduce(alu=alu, inp=t, out=part))
        kb.emit(TensorTensor(alu=alu, in0=total, in1=part, out=total))
        kb.release(part)
    res = kb.tile(1, (1,), out.dtype)
    if scale is not None:
        kb.emit(TensorScalar(inp=total, out=res, alu0=Alu.MULTIPLY, scalar0=scale))
    else:
        kb.copy(total, res)
    kb.dma(q_out, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype, offset=out.offset))
    kb.release(total, res)
    loads.close()


def _reduce(name: str):
    alu = REDUCE_OPS[name]

    def lower_reduce(ctx: LoweringContext) -> None:
        emit_reduce(ctx, alu, mean=name == "mean")
    return lower_reduce


# the ATen overloads that arrive (out= variants map to these): sum, sum.dim_IntList, mean, mean.dim,
# amax, amin (their dim argument has a default, so there is one overload)
for _name, _names in (("sum", ("aten::sum", "aten::sum.dim_IntList")), ("mean", ("aten::mean", "aten::mean.dim")),
                      ("amax", ("aten::amax",)), ("amin", ("aten::amin",))):
    lowering(*_names)(_reduce(_name))
lowering("aten::max")(_reduce("max"))
lowering("aten::min")(_reduce("min"))
