"""Small linear-algebra reductions: trace (the diagonal read by one strided DMA, summed on VectorE) and
vdot (real dtypes: the element-wise product and its sum, chunk by chunk, on VectorE).

Both produce one value; the vectors are laid out along the free axis of one partition in chunks of
CHUNK elements, each chunk's partial sum folded into a [1, 1] FP32 accumulator.
"""

from __future__ import annotations

from ...isa import AP, Alu, Memset, TensorReduce, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from .common import F32, queues

CHUNK = 8192


def _sum_of(ctx: LoweringContext, n: int, operands: list[tuple[int, object, int]]) -> None:
    """out = sum_i prod_k operand_k[i * stride_k] over i < n (operands: (tensor, meta, stride))."""
    kb = ctx.kb
    out = ctx.call.outputs[0]
    qin, qout = queues(kb)
    acc = kb.tile(1, (1,), F32)
    kb.emit(Memset(out=acc, value=0.0))
    held: list[AP] = []
    for c0 in range(0, n, CHUNK):
        w = min(CHUNK, n - c0)
        tiles = []
        for k, (tensor, meta, stride) in enumerate(operands):
            t = kb.tile(1, (w,), meta.dtype)
            kb.dma(qin[k % 2], hbm(tensor, 1, 0, [(stride, w)], meta.dtype, offset=c0 * stride), t)
            tiles.append(t)
        prod_t = tiles[0]
        if len(tiles) > 1:
            prod_t = kb.tile(1, (w,), F32)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tiles[0], in1=tiles[1], out=prod_t))
            tiles.append(prod_t)
        part = kb.tile(1, (1,), F32)
        kb.emit(TensorReduce(alu=Alu.ADD, inp=prod_t, out=part))
        kb.emit(TensorTensor(alu=Alu.ADD, in0=acc, in1=part, out=acc))
        kb.release(*held)
        held = tiles + [part]
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(acc, res)
    kb.dma(qout, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype))
    kb.release(*held, acc, res)


@lowering("aten::trace")
def _trace(ctx: LoweringContext) -> None:
    x = ctx.call.inputs[0]
    n = min(x.shape)
    _sum_of(ctx, n, [(ctx.inputs[0], x, x.stride[0] + x.stride[1])])


@lowering("aten::vdot")
def _vdot(ctx: LoweringContext) -> None:
    a, b = ctx.call.inputs[0], ctx.call.inputs[1]
    _sum_of(ctx, a.shape[0], [(ctx.inputs[0], a, a.stride[0]), (ctx.inputs[1], b, b.stride[0])])
