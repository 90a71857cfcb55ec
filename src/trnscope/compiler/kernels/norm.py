"""Fused normalisation kernels: each reads its input once and writes its output once.

RMSNorm follows the NKI tutorial (hardware.md 3.1): per 128-row tile, ScalarE squares the scaled
row and add-reduces it in the same instruction (mean of squares), VectorE turns that into
(ms + eps)^-1/2 with one two-op tensor_scalar, multiplies the row by it (per-partition scalar) and
by the weight row, which is loaded once and broadcast to every partition.
"""

from __future__ import annotations

import math
from math import prod

from ...isa import AP, Act, Activation, Alu, DType, TensorScalar, TensorTensor, hbm
from ..lowering import LoweringContext, lowering

EPS_BY_DTYPE = {DType.float32: 1.1920928955078125e-07, DType.bfloat16: 0.0078125, DType.float16: 0.0009765625}


@lowering("aten::rms_norm", "aten::_fused_rms_norm")
def _rms_norm(ctx: LoweringContext) -> None:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    w = ctx.call.inputs.optional(1)
    normalized = ctx.call.attr("normalized_shape") or ctx.call.attr("arg1") or (x.shape[-1],)
    eps = ctx.call.attr("eps")
    if eps is None:
        eps = EPS_BY_DTYPE.get(x.dtype, 1.1920928955078125e-07)
    h = prod(normalized)
    rows = x.numel // h if h else 0
    if not x.is_contiguous() or not out.is_contiguous():
        raise NotImplementedError("fused rms_norm expects contiguous input and output")
    q_in, q_w, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input"), kb.queue("qSyncIO2", "output")
    w_tile = None
    if w is not None:
        w_tile = kb.tile(P, (h,), w.dtype)
        kb.dma(q_w, hbm(ctx.inputs[1], min(P, rows), 0, [(1, h)], w.dtype, offset=w.offset), w_tile.rows(0, min(P, rows)))
    inv_sqrt_h = 1.0 / math.sqrt(h)
    held: list[AP] = []
    for r0 in range(0, rows, P):
        n = min(P, rows - r0)
        xt = kb.tile(n, (h,), x.dtype)
        kb.dma(q_in, hbm(ctx.inputs[0], n, h, [(1, h)], x.dtype, offset=x.offset + r0 * h), xt)
        sq = kb.tile(n, (h,), out.dtype)
        ms = kb.tile(n, (1,), "float32")
        # square(x / sqrt(h)) add-reduced along the row = mean(x^2), in one ScalarE pass
        kb.emit(Activation(func=Act.SQUARE, inp=xt, out=sq, scale=inv_sqrt_h, accum_out=ms))
        kb.emit(TensorScalar(inp=ms, out=ms, alu0=Alu.ADD, scalar0=float(eps), alu1=Alu.POW, scalar1=-0.5))
        yt = kb.tile(n, (h,), out.dtype)
        scaled = sq if w_tile is not None else yt
        if x.dtype.is_half:
            # VectorE's 4x mode makes a BF16/FP16 tensor_scalar nearly free (S2)
            kb.emit(TensorScalar(inp=xt, out=scaled, alu0=Alu.MULTIPLY, scalar0=ms))
        else:
            # in FP32 ScalarE takes the scaling so VectorE only does the weight multiply
            kb.emit(Activation(func=Act.COPY, inp=xt, out=scaled, scale=ms))
        if w_tile is not None:
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=scaled, in1=w_tile.rows(0, n), out=yt))
        kb.dma(q_out, yt, hbm(ctx.outputs[0], n, h, [(1, h)], out.dtype, offset=out.offset + r0 * h))
        extra = []
        if len(ctx.call.outputs) > 1:  # _fused_rms_norm also returns rstd [rows, 1]
            rm = ctx.call.outputs[1]
            rt = kb.tile(n, (1,), rm.dtype)
            kb.copy(ms, rt)
            kb.dma(q_out, rt, hbm(ctx.outputs[1], n, rm.stride[-2] if rm.ndim > 1 else 1, [(1, 1)], rm.dtype,
                                  offset=rm.offset + r0 * (rm.stride[-2] if rm.ndim > 1 else 1)))
            extra.append(rt)
        kb.release(*held)
        held = [xt, sq, ms, yt, *extra]
    kb.release(*held)
    if w_tile is not None:
        kb.release(w_tile)
