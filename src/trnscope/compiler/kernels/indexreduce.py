"""Reductions that return positions: argmax / argmin and max.dim / min.dim (values and indices);
prod; the binary max.other / min.other.

The reduced dim goes on the free axis (rows on partitions, loaded by DMA transpose when the dim is
not the innermost). Per tile and 4096-element piece VectorE finds the extreme value, marks where
the row equals it (NaN counts as the extreme, as in PyTorch), and picks the first marked position:
select(mark, position, INT_MAX) min-reduced, the positions coming from GpSimdE's iota. Pieces of a
long row combine with a strict comparison, so the first occurrence wins.
"""

from __future__ import annotations

from ...isa import AP, Act, Activation, Alu, DType, Iota, Memset, Select, TensorReduce, TensorScalar, TensorTensor
from ..lowering import LoweringContext, lowering
from . import reduce as _reduce
from .common import F32, free_pieces, full_strides, load, queues, reduced_strides, row_plan, store
from .elementwise import _binary

PIECE = 4096
INT_MAX = 2 ** 31 - 1


def _arg_reduce(ctx: LoweringContext, largest: bool, with_values: bool) -> None:
    kb = ctx.kb
    x = ctx.call.inputs[0]
    outs = ctx.call.outputs
    dim = ctx.call.attr("dim")
    if x.ndim == 0:
        shape, rdims = (1,), [0]
        xm = type(x)((1,), (1,), x.dtype, x.offset)
    else:
        shape = x.shape
        rdims = list(range(x.ndim)) if dim is None else [int(dim) % x.ndim]
        xm = x
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
    is_float = x.dtype.is_float
    vdt = F32 if is_float else x.dtype
    red = Alu.MAX if largest else Alu.MIN
    better = Alu.IS_GT if largest else Alu.IS_LT
    big = kb.tile(kb.spec.partitions, (1,), DType.int32)
    kb.emit(Memset(out=big, value=float(INT_MAX)))
    idx_out = outs[1] if with_values else outs[0]
    held: list[AP] = []
    for t in plan.tiles:
        rows = t.rows
        best = kb.tile(rows, (1,), vdt)
        bidx = kb.tile(rows, (1,), DType.int32)
        for j, ((w, dims, offs), p0) in enumerate(zip(pieces, starts)):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0], xt)
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
            kb.emit(Iota(out=pos_t, base=p0, coefs=(1,)))
            kb.emit(Select(pred=mark, on_true=pos_t, on_false=big.rows(0, rows).view(0, [(0, w)]), out=pos_t))
            ci = bidx if j == 0 else kb.tile(rows, (1,), DType.int32)
            kb.emit(TensorReduce(alu=Alu.MIN, inp=pos_t, out=ci))
            if j > 0:
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
                kb.release(upd, ci, cm)
            kb.release(*held)
            held = [xt, mark, pos_t]
        io = kb.tile(rows, (1,), idx_out.dtype)
        kb.copy(bidx, io)
        k = 2 if with_values else 1
        store(kb, qout, io, ctx.outputs[k - 1], idx_out.dtype, t.offsets[k], t.pstrides[k], rows, [(1, 1)])
        extra = [io]
        if with_values:
            vo = kb.tile(rows, (1,), outs[0].dtype)
            kb.copy(best, vo)
            store(kb, qout, vo, ctx.outputs[0], outs[0].dtype, t.offsets[1], t.pstrides[1], rows, [(1, 1)])
            extra.append(vo)
        kb.release(*held)
        held = [best, bidx, *extra]
    kb.release(*held, big)


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
