"""Small linear-algebra reductions: trace (the diagonal read by one strided DMA, summed on VectorE),
dot and vdot (real dtypes: the element-wise product and its sum, chunk by chunk, on VectorE).

A dot product reuses no operand, so TensorE would gain it nothing: each element is read once and
used once, and the kernel is HBM-bound however the products are made (docs/roofline-report.md). As
a VectorE reduction its FP32 products stay FP32 (``--auto-cast matmult`` casts TensorE matmuls).

Both produce one value; the vectors are spread over the partitions (long contiguous rows), each
chunk's partial sums kept per partition and folded once at the end (VectorE, then GpSimdE).
"""

from __future__ import annotations

from ...isa import AP, Alu, Memset, PartitionReduce, TensorReduce, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from .common import F32, queues

CHUNK = 8192


def _sum_of(ctx: LoweringContext, n: int, operands: list[tuple[int, object, int]]) -> None:
    """out = sum_i prod_k operand_k[i * stride_k] over i < n (operands: (tensor, meta, stride)).

    The vector is spread over the partitions (partition p holds elements p * per .. p * per + per - 1,
    long contiguous rows), each chunk's product summed into a column of a [P, chunks] partial tile;
    VectorE folds the columns and GpSimdE the partitions. The last n % P elements go on one partition."""
    kb = ctx.kb
    P = kb.spec.partitions
    out = ctx.call.outputs[0]
    qin, qout = queues(kb)
    per = n // P
    pieces = []                                   # (first element, partitions, elements per partition)
    if per:
        pieces += [(0, P, per)]
    if n - P * per:
        pieces += [(P * per, 1, n - P * per)]
    totals = []
    held: list[AP] = []
    for first, parts, m in pieces:
        chunks = list(range(0, m, CHUNK // 4 if parts > 1 else CHUNK))
        acc = kb.tile(parts, (len(chunks),), F32)
        for j, c0 in enumerate(chunks):
            w = min(chunks[1] if len(chunks) > 1 else m, m - c0)
            tiles = []
            for k, (tensor, meta, stride) in enumerate(operands):
                t = kb.tile(parts, (w,), meta.dtype)
                kb.dma(qin[k % 2], hbm(tensor, parts, m * stride, [(stride, w)], meta.dtype,
                                       offset=(first + c0) * stride), t)
                tiles.append(t)
            prod_t = tiles[0]
            if len(tiles) > 1:
                prod_t = kb.tile(parts, (w,), F32)
                kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tiles[0], in1=tiles[1], out=prod_t))
                tiles.append(prod_t)
            kb.emit(TensorReduce(alu=Alu.ADD, inp=prod_t, out=acc.view(j, [(1, 1)])))
            # loads released one chunk late: the next chunk's DMAs fill other bytes
            kb.release(*held)
            held = tiles
        rows = kb.tile(parts, (1,), F32)
        kb.emit(TensorReduce(alu=Alu.ADD, inp=acc, out=rows))
        if parts > 1:
            total = kb.tile(1, (1,), F32)
            kb.emit(PartitionReduce(alu=Alu.ADD, inp=rows, out=total))
            kb.release(rows)
        else:
            total = rows
        kb.release(acc)
        totals.append(total)
    if not totals:
        zero = kb.tile(1, (1,), F32)
        kb.emit(Memset(out=zero, value=0.0))
        totals.append(zero)
    for extra in totals[1:]:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=totals[0], in1=extra, out=totals[0]))
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(totals[0], res)
    kb.dma(qout, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype))
    kb.release(*held, *totals, res)


@lowering("aten::trace")
def _trace(ctx: LoweringContext) -> None:
    x = ctx.call.inputs[0]
    n = min(x.shape)
    _sum_of(ctx, n, [(ctx.inputs[0], x, x.stride[0] + x.stride[1])])


@lowering("aten::vdot", "aten::dot")
def _vdot(ctx: LoweringContext) -> None:
    a, b = ctx.call.inputs[0], ctx.call.inputs[1]
    _sum_of(ctx, a.shape[0], [(ctx.inputs[0], a, a.stride[0]), (ctx.inputs[1], b, b.stride[0])])
