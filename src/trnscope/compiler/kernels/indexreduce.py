"""Reductions that return positions: argmax / argmin and max.dim / min.dim (values and indices);
prod; the binary max.other / min.other.

The reduced dim goes on the free axis (rows on partitions, loaded by DMA transpose when the dim is
not the innermost); a reduction over every element of a contiguous tensor is spread over the
partitions instead, each scanning a contiguous slice, and the partitions' results are combined on one. Per tile and 4096-element piece VectorE finds the extreme value, marks where
the row equals it (NaN counts as the extreme, as in PyTorch), and picks the first marked position:
select(mark, position, INT_MAX) min-reduced, the positions coming from GpSimdE's iota. Pieces of a
long row combine with a strict comparison, so the first occurrence wins.
"""

from __future__ import annotations

from ...isa import AP, Act, Activation, Alu, DType, Iota, Memset, Select, TensorReduce, TensorScalar, TensorTensor, \
    TensorTranspose, hbm
from ..lowering import LoweringContext, lowering
from . import reduce as _reduce
from .common import F32, RowStores, free_pieces, full_strides, load, queues, reduced_strides, row_plan
from .elementwise import _binary

PIECE = 4096
INT_MAX = 2 ** 31 - 1


def _scan(kb, rows: int, pieces, x_dtype: DType, vdt: DType, largest: bool, big: AP, keep: list | None = None):
    """(best value, first position) per partition of a row tile, walking its pieces in order.

    ``pieces`` yields (elements, load(tile) that fills a [rows, elements] tile, position of the
    piece's first element, position step between partitions). Per piece VectorE finds the extreme,
    marks where the row equals it (NaN counts as the extreme, as in PyTorch) and picks the first
    marked position: select(mark, position, INT_MAX) min-reduced, positions from GpSimdE's iota.
    Pieces combine with a strict comparison, so the first occurrence wins."""
    is_float = x_dtype.is_float
    red = Alu.MAX if largest else Alu.MIN
    better = Alu.IS_GT if largest else Alu.IS_LT
    best = kb.tile(rows, (1,), vdt)
    bidx = kb.tile(rows, (1,), DType.int32)
    held: list[AP] = []
    for j, (w, fill, p0, pstep) in enumerate(pieces):
        xt = kb.tile(rows, (w,), x_dtype)
        fill(xt)
        cm = best if j == 0 else kb.tile(rows, (1,), vdt)
        kb.emit(TensorReduce(alu=red, inp=xt, out=cm))
        # 0/1 marks in BF16: exact, and VectorE's 16-bit modes make these passes cheap
        mark = kb.tile(rows, (w,), DType.bfloat16)
        kb.emit(TensorScalar(inp=xt, out=mark, alu0=Alu.IS_EQUAL, scalar0=cm))
        if is_float:
            isn = kb.tile(rows, (w,), DType.bfloat16)
            kb.emit(Activation(func=Act.IS_NAN, inp=xt, out=isn))
            kb.emit(TensorTensor(alu=Alu.MAX, in0=mark, in1=isn, out=mark))   # or, on 0/1
            kb.release(isn)
        pos_t = kb.tile(rows, (w,), DType.int32)
        kb.emit(Iota(out=pos_t, base=p0, channel_multiplier=pstep, coefs=(1,)))
        kb.emit(Select(pred=mark, on_true=pos_t, on_false=big.rows(0, rows).view(0, [(0, w)]), out=pos_t))
        ci = bidx if j == 0 else kb.tile(rows, (1,), DType.int32)
        kb.emit(TensorReduce(alu=Alu.MIN, inp=pos_t, out=ci))
        if j > 0:
            _keep_better(kb, rows, cm, ci, best, bidx, better, is_float)
            kb.release(ci, cm)
        kb.release(*held)
        held = [xt, mark, pos_t]
    if keep is not None:
        keep.extend(held)   # released by the caller a row tile later: the next tile's loads go elsewhere
    else:
        kb.release(*held)
    return best, bidx


def _keep_better(kb, rows, cm, ci, best, bidx, better, is_float) -> None:
    """(best, bidx) = (cm, ci) where cm is strictly better than best (a NaN beats a number)."""
    upd = kb.tile(rows, (1,), F32)
    kb.emit(TensorTensor(alu=better, in0=cm, in1=best, out=upd))
    if is_float:
        # a NaN piece beats a non-NaN best: (cm != cm) > (best != best)
        nc, nb = kb.tile(rows, (1,), F32), kb.tile(rows, (1,), F32)
        kb.emit(TensorTensor(alu=Alu.NOT_EQUAL, in0=cm, in1=cm, out=nc))
        kb.emit(TensorTensor(alu=Alu.NOT_EQUAL, in0=best, in1=best, out=nb))
        kb.emit(TensorTensor(alu=Alu.IS_GT, in0=nc, in1=nb, out=nc))
        kb.emit(TensorTensor(alu=Alu.LOGICAL_OR, in0=upd, in1=nc, out=upd))
        kb.release(nc, nb)
    kb.emit(Select(pred=upd, on_true=ci, on_false=bidx, out=bidx))
    kb.emit(Select(pred=upd, on_true=cm, on_false=best, out=best))
    kb.release(upd)


def _arg_reduce(ctx: LoweringContext, largest: bool, with_values: bool) -> None:
    kb = ctx.kb
    x = ctx.call.inputs[0]
    outs = ctx.call.outputs
    dim = ctx.call.attr("dim")
    if x.ndim == 0:
        shape: tuple[int, ...] = (1,)
        rdims = [0]
        xm = type(x)((1,), (1,), x.dtype, x.offset)
    else:
        shape = x.shape
        rdims = list(range(x.ndim)) if dim is None else [int(dim) % x.ndim]
        xm = x
    if not with_values and _emit_arg_all(ctx, xm, rdims, largest):
        return
    metas = [xm] + list(outs)
    strides = [full_strides(xm, shape)] + [reduced_strides(o, shape, rdims) if o.ndim else (0,) * len(shape)
                                           for o in outs]
    plan = row_plan(shape, rdims, strides, [m.offset for m in metas], parts=ctx.spec.partitions)
    pieces = free_pieces(plan, PIECE)
    starts = []  # logical (row-major) position of each piece's first element
    pos = 0
    for w, _, _ in pieces:
        starts.append(pos)
        pos += w
    qin, qout = queues(kb)
    vdt = F32 if x.dtype.is_float else x.dtype
    big = kb.tile(kb.spec.partitions, (1,), DType.int32)
    kb.emit(Memset(out=big, value=float(INT_MAX)))
    idx_out = outs[1] if with_values else outs[0]
    held: list[AP] = []
    rows_out = RowStores(kb, qout, len(plan.tiles), scalar_copies=True)
    for ti, t in enumerate(plan.tiles):
        rows = t.rows

        def fill_piece(j, dims, offs, t=t, rows=rows, ti=ti):
            return lambda xt: load(kb, qin[(ti + j) % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0],
                                   t.pstrides[0], rows, dims[0], xt)

        walk = ((w, fill_piece(j, dims, offs), p0, 0) for j, ((w, dims, offs), p0) in enumerate(zip(pieces, starts)))
        last: list[AP] = []
        best, bidx = _scan(kb, rows, walk, x.dtype, vdt, largest, big, keep=last)
        io = kb.tile(rows, (1,), idx_out.dtype)
        kb.copy(bidx, io)
        k = 2 if with_values else 1
        rows_out.store(io, ctx.outputs[k - 1], idx_out.dtype, t.offsets[k], t.pstrides[k], rows)
        extra = [io]
        if with_values:
            vo = kb.tile(rows, (1,), outs[0].dtype)
            kb.copy(best, vo)
            rows_out.store(vo, ctx.outputs[0], outs[0].dtype, t.offsets[1], t.pstrides[1], rows)
            extra.append(vo)
        kb.release(*held)
        held = [best, bidx, *extra, *last]
    rows_out.finish()
    kb.release(*held, big)


def _emit_arg_all(ctx: LoweringContext, x, rdims: list[int], largest: bool) -> bool:
    """argmax/argmin over every element of a contiguous tensor, spread over the partitions.

    Partition p scans elements [p * per, (p + 1) * per) (long contiguous rows, as the full sum
    loads them), the last n % P elements scan on one more partition; each partition's extreme and
    first position are moved onto one partition by TensorE transposes (positions as FP32, exact
    below 2^24) and the same scan picks the first partition holding the extreme. Returns False
    (the one-row kernel runs) when the call is not such a reduction of a float tensor (integer
    values would round in the FP32 transpose)."""
    kb = ctx.kb
    P = kb.spec.partitions
    n = x.numel
    if (len(rdims) != max(x.ndim, 1) or not x.is_contiguous() or not x.dtype.is_float or n < 2 * P
            or n >= 2 ** 24):
        return False
    out = ctx.call.outputs[0]
    per = n // P
    tail = n - per * P
    qin, qout = queues(kb)
    vdt = F32
    big = kb.tile(P, (1,), DType.int32)
    kb.emit(Memset(out=big, value=float(INT_MAX)))
    chunk = min(PIECE, per)

    def fill(c0, w, parts, first, stride):
        return lambda xt: kb.dma(qin[(c0 // chunk) % 2],
                                 hbm(ctx.inputs[0], parts, stride, [(1, w)], x.dtype, offset=x.offset + first + c0), xt)

    walk = ((min(chunk, per - c0), fill(c0, min(chunk, per - c0), P, 0, per), c0, per) for c0 in range(0, per, chunk))
    best, bidx = _scan(kb, P, walk, x.dtype, vdt, largest, big)
    ncols = P + (1 if tail else 0)
    # every partition's (extreme, position) on one partition: [1, P] rows through PSUM
    vals = kb.tile(1, (ncols,), F32)
    posf = kb.tile(1, (ncols,), F32)
    bidx_f = kb.tile(P, (1,), F32)
    kb.copy(bidx, bidx_f)
    for src, dst in ((best, vals), (bidx_f, posf)):
        ps = kb.psum_tile(1, (P,), F32)
        kb.emit(TensorTranspose(src=src, dst=ps))
        kb.copy(ps, dst.view(0, [(1, P)]))
        kb.release(ps)
    kb.release(best, bidx, bidx_f)
    if tail:
        tail_walk = [(tail, fill(0, tail, 1, per * P, tail), per * P, 0)]
        tb, ti = _scan(kb, 1, tail_walk, x.dtype, vdt, largest, big)
        kb.copy(tb, vals.view(P, [(1, 1)]))
        kb.copy(ti, posf.view(P, [(1, 1)]))
        kb.release(tb, ti)
    # the scan over the partitions' extremes, positions taken from their own first positions
    red = Alu.MAX if largest else Alu.MIN
    gm = kb.tile(1, (1,), F32)
    kb.emit(TensorReduce(alu=red, inp=vals, out=gm))
    mark = kb.tile(1, (ncols,), F32)
    kb.emit(TensorScalar(inp=vals, out=mark, alu0=Alu.IS_EQUAL, scalar0=gm))
    if x.dtype.is_float:
        isn = kb.tile(1, (ncols,), F32)
        kb.emit(Activation(func=Act.IS_NAN, inp=vals, out=isn))
        kb.emit(TensorTensor(alu=Alu.MAX, in0=mark, in1=isn, out=mark))
        kb.release(isn)
    bigf = kb.tile(1, (1,), F32)
    kb.emit(Memset(out=bigf, value=float(2 ** 24)))
    kb.emit(Select(pred=mark, on_true=posf, on_false=bigf.view(0, [(0, ncols)]), out=posf))
    first = kb.tile(1, (1,), F32)
    kb.emit(TensorReduce(alu=Alu.MIN, inp=posf, out=first))
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(first, res)
    kb.dma(qout, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype, offset=out.offset))
    kb.release(vals, posf, gm, mark, bigf, first, res, big)
    return True


@lowering("aten::argmax")
def _argmax(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=True, with_values=False)


@lowering("aten::argmin")
def _argmin(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=False, with_values=False)


@lowering("aten::max.dim")
def _max_dim(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=True, with_values=True)


@lowering("aten::min.dim")
def _min_dim(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=False, with_values=True)


@lowering("aten::prod", "aten::prod.dim_int")
def _prod(ctx: LoweringContext) -> None:
    _reduce.emit_reduce(ctx, Alu.MULTIPLY, mean=False)


lowering("aten::max.other")(_binary(Alu.MAX))
lowering("aten::min.other")(_binary(Alu.MIN))
