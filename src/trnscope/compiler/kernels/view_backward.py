"""Backward of views that select part of a tensor (``slice_backward``, ``select_backward``): the
gradient is zero everywhere but the selected part. One pass fills the output with zeros from
SBUF (memset) and a second copies the incoming gradient into the selected window; the builder's
HBM tracking orders the copy after the fill wherever they overlap."""

from __future__ import annotations

from ...isa import Act, Activation, Memset, hbm
from ..lowering import HbmInputs, LoweringContext, OpCall, lowering
from ..meta import TensorMeta
from ..tiling import plan_tiles
from .elementwise import MAX_COLS, emit_map


def emit_fill(ctx: LoweringContext, value: float, out_index: int = 0) -> None:
    kb = ctx.kb
    out: TensorMeta = ctx.call.outputs[out_index]
    q = kb.queue("qSyncIO2", "output")
    tiles = plan_tiles(out.shape, [out.stride], MAX_COLS)
    if not tiles:
        return
    # one zero tile serves every store: SBUF is written once, read by every DMA
    rows = max(t.rows for t in tiles)
    cols = max(t.cols for t in tiles)
    zero = kb.tile(rows, (cols,), out.dtype)
    kb.emit(Memset(out=zero, value=value))
    for t in tiles:
        o = t.operands[0]
        kb.dma(q, zero.view(0, [(1, t.cols)], partitions=t.rows),
               hbm(ctx.outputs[out_index], t.rows, o.pstride, [(o.cstride, t.cols)], out.dtype,
                   offset=out.offset + o.offset))
    kb.release(zero)


def _copy_into_window(ctx: LoweringContext, window: TensorMeta) -> None:
    sub = LoweringContext(OpCall(ctx.call.name, (ctx.call.inputs[0],), (window,), ctx.call.attrs), ctx.kb,
                          HbmInputs((ctx.inputs[0],)), [ctx.outputs[0]], ctx.label)
    emit_map(sub, [0], lambda kb, t, out: kb.emit(Activation(func=Act.COPY, inp=t[0], out=out)))


@lowering("aten::slice_backward")
def _slice_backward(ctx: LoweringContext) -> None:
    grad, full = ctx.call.inputs[0], ctx.call.outputs[0]
    dim = int(ctx.call.attr("dim")) % full.ndim
    size = full.shape[dim]
    start = int(ctx.call.attr("start") or 0)
    start = max(0, min(start + size if start < 0 else start, size))
    step = int(ctx.call.attr("step") or 1)
    emit_fill(ctx, 0.0)
    stride = list(full.stride)
    stride[dim] *= step
    window = TensorMeta(grad.shape, tuple(stride), full.dtype, full.offset + start * full.stride[dim])
    _copy_into_window(ctx, window)


@lowering("aten::select_backward")
def _select_backward(ctx: LoweringContext) -> None:
    grad, full = ctx.call.inputs[0], ctx.call.outputs[0]
    dim = int(ctx.call.attr("dim")) % full.ndim
    index = int(ctx.call.attr("index"))
    index = index + full.shape[dim] if index < 0 else index
    emit_fill(ctx, 0.0)
    stride = tuple(s for d, s in enumerate(full.stride) if d != dim)
    window = TensorMeta(grad.shape, stride, full.dtype, full.offset + index * full.stride[dim])
    _copy_into_window(ctx, window)
