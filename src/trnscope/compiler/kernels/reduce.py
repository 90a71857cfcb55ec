"""Reductions (sum, mean, amax, amin) over any set of dims.

Kept dims go on partitions (128 rows per tile), reduced dims on the free axis in chunks that
TensorReduce folds into a [rows, 1] accumulator. A reduction over everything first splits the
tensor over 128 partitions, reduces each partition's share on VectorE, then folds the partitions
on GpSimdE (tensor_partition_reduce).
"""

from __future__ import annotations

import itertools
from math import prod

from ...isa import Alu, PartitionReduce, TensorReduce, TensorScalar, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from ..tiling import P, coalesce
from .elementwise import MAX_COLS, scalar_arg

REDUCE_OPS = {"sum": Alu.ADD, "mean": Alu.ADD, "amax": Alu.MAX, "amin": Alu.MIN, "max": Alu.MAX, "min": Alu.MIN}


def _dims(ctx: LoweringContext, ndim: int) -> list[int]:
    dims = scalar_arg(ctx, 1, "dim")
    if dims is None or dims == () or dims == []:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(ndim, 1) for d in dims})


def emit_reduce(ctx: LoweringContext, alu: Alu, mean: bool) -> None:
    kb = ctx.kb
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
    q_in, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO2", "output")
    scale = 1.0 / count if mean else None
    nrows_total = prod(kshape)
    if nrows_total == 1 and len(rshape) == 1 and rshape[0] >= 2 * P:
        _reduce_all(ctx, alu, scale, rshape[0], rx[0], q_in, q_out)
        return
    outer_k = list(itertools.product(*(range(s) for s in kshape[:-1])))
    nrows, pstride_x, pstride_o = kshape[-1], kx[-1], ko[-1]
    inner_len, inner_stride = rshape[-1], rx[-1]
    outer_r = list(itertools.product(*(range(s) for s in rshape[:-1])))
    held: list = []
    for oidx in outer_k:
        base_x = x.offset + sum(i * s for i, s in zip(oidx, kx[:-1]))
        base_o = out.offset + sum(i * s for i, s in zip(oidx, ko[:-1]))
        for r0 in range(0, nrows, P):
            rows = min(P, nrows - r0)
            acc = kb.tile(rows, (1,), "float32")
            first = True
            for ridx in outer_r:
                rbase = base_x + r0 * pstride_x + sum(i * s for i, s in zip(ridx, rx[:-1]))
                for c0 in range(0, inner_len, MAX_COLS):
                    cols = min(MAX_COLS, inner_len - c0)
                    t = kb.tile(rows, (cols,), x.dtype)
                    kb.dma(q_in, hbm(ctx.inputs[0], rows, pstride_x, [(inner_stride, cols)], x.dtype,
                                     offset=rbase + c0 * inner_stride), t)
                    _fold(kb, alu, t, acc, first)
                    first = False
                    # release one load late so the next DMA fills other bytes (double buffering)
                    kb.release(*held)
                    held = [t]
            res = kb.tile(rows, (1,), out.dtype)
            if scale is not None:
                kb.emit(TensorScalar(inp=acc, out=res, alu0=Alu.MULTIPLY, scalar0=scale))
            else:
                kb.copy(acc, res)
            kb.dma(q_out, res, hbm(ctx.outputs[0], rows, pstride_o, [(1, 1)], out.dtype, offset=base_o + r0 * pstride_o))
            kb.release(acc, res)
    kb.release(*held)


def _fold(kb, alu: Alu, tile, acc, first: bool) -> None:
    """Reduce ``tile`` along its free axis into the [rows, 1] accumulator (the first chunk initialises it)."""
    if first:
        kb.emit(TensorReduce(alu=alu, inp=tile, out=acc))
        return
    part = kb.tile(acc.partitions, (1,), "float32")
    kb.emit(TensorReduce(alu=alu, inp=tile, out=part))
    kb.emit(TensorTensor(alu=alu, in0=acc, in1=part, out=acc))
    kb.release(part)


def _reduce_all(ctx: LoweringContext, alu: Alu, scale, n: int, stride: int, q_in, q_out) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    per = n // P
    tail = n - per * P
    acc = kb.tile(P, (1,), "float32")
    first = True
    for c0 in range(0, per, MAX_COLS):
        cols = min(MAX_COLS, per - c0)
        t = kb.tile(P, (cols,), x.dtype)
        kb.dma(q_in, hbm(ctx.inputs[0], P, per * stride, [(stride, cols)], x.dtype, offset=x.offset + c0 * stride), t)
        _fold(kb, alu, t, acc, first)
        first = False
        kb.release(t)
    total = kb.tile(1, (1,), "float32")
    kb.emit(PartitionReduce(alu=alu, inp=acc, out=total))
    if tail:
        t = kb.tile(1, (tail,), x.dtype)
        kb.dma(q_in, hbm(ctx.inputs[0], 1, 0, [(stride, tail)], x.dtype, offset=x.offset + per * P * stride), t)
        part = kb.tile(1, (1,), "float32")
        kb.emit(TensorReduce(alu=alu, inp=t, out=part))
        kb.emit(TensorTensor(alu=alu, in0=total, in1=part, out=total))
        kb.release(t, part)
    res = kb.tile(1, (1,), out.dtype)
    if scale is not None:
        kb.emit(TensorScalar(inp=total, out=res, alu0=Alu.MULTIPLY, scalar0=scale))
    else:
        kb.copy(total, res)
    kb.dma(q_out, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype, offset=out.offset))
    kb.release(acc, total, res)


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
