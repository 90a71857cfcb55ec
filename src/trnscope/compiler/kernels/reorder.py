"""Kernels that reorder elements: flip, roll, and the running scans cumsum / cumprod / logcumsumexp.

flip and roll move bytes only. A flip of outer dims is a DMA whose source rows step backwards (the
descriptors still move contiguous runs); a flip of the innermost dim would make every descriptor
one element long, so those tiles are loaded forwards and reversed on chip by one VectorE copy that
reads with a negative stride. roll is two (or 2^k for k dims) region copies: the tail of each
rolled dim goes to the front.

Scans put the scanned dim on the free axis (rows on partitions, a DMA transpose when the dim is not
innermost) and run VectorE's tensor_tensor_scan along it; long rows are scanned in 2048-column
chunks, each chunk's running value carried into the next with a per-partition tensor_scalar.
logcumsumexp is log(cumsum(exp(x - m))) + m with m the row max (one ScalarE exp pass feeding the
scan, one log pass after it).
"""

from __future__ import annotations

import itertools

from ...isa import AP, Act, Activation, Alu, TensorCopy, TensorReduce, TensorScalar, TensorScan
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from ..tiling import plan_tiles
from .common import F32, attr, full_strides, load, queues, row_plan, store
from .movement import copy_region

CHUNK = 2048


# --- flip / roll ----------------------------------------------------------------------------------------

@lowering("aten::flip")
def _flip(ctx: LoweringContext) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    if not x.ndim or not out.numel:
        copy_region(kb, ctx.inputs[0], x, ctx.outputs[0], out)
        return
    dims = {int(d) % x.ndim for d in attr(ctx, "dims", ())}
    # out[i] = x[flipped i]: x read from its last element along every flipped dim, stepping backwards
    offset = x.offset + sum((x.shape[d] - 1) * x.stride[d] for d in dims)
    strides = tuple(-s if d in dims else s for d, s in enumerate(x.stride))
    strides = tuple(0 if sz == 1 else st for sz, st in zip(x.shape, strides))
    src = TensorMeta(x.shape, strides, x.dtype, offset)
    tiles = plan_tiles(out.shape, [out.stride, strides], 2048)
    if not any(t.operands[1].cstride < 0 and t.cols > 1 for t in tiles):
        copy_region(kb, ctx.inputs[0], src, ctx.outputs[0], out, src_strides=strides)
        return
    qin, qout = queues(kb)
    held: list[AP] = []
    for t in tiles:
        o, s = t.operands
        xt = kb.tile(t.rows, (t.cols,), x.dtype)
        if s.cstride < 0:
            # forward load of the run, reversed on chip (a negative free stride on VectorE)
            first = offset + s.offset + (t.cols - 1) * s.cstride
            load(kb, qin[0], ctx.inputs[0], x.dtype, first, s.pstride, t.rows, [(-s.cstride, t.cols)], xt)
            ot = kb.tile(t.rows, (t.cols,), out.dtype)
            kb.emit(TensorCopy(inp=xt.view(t.cols - 1, [(-1, t.cols)]), out=ot))
        else:
            load(kb, qin[0], ctx.inputs[0], x.dtype, offset + s.offset, s.pstride, t.rows, [(s.cstride, t.cols)], xt)
            ot = xt
        store(kb, qout, ot, ctx.outputs[0], out.dtype, out.offset + o.offset, o.pstride, t.rows,
              [(o.cstride, t.cols)])
        kb.release(*held)
        held = [xt] + ([ot] if ot is not xt else [])
    kb.release(*held)


@lowering("aten::roll")
def _roll(ctx: LoweringContext) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    shifts = [int(s) for s in attr(ctx, "shifts", ())]
    dims = [int(d) for d in attr(ctx, "dims", ())]
    if not dims:
        # roll of the flattened tensor: a contiguous tensor is its own 1-d view
        if not (x.is_contiguous() and out.is_contiguous()):
            raise NotImplementedError("roll without dims of a non-contiguous tensor")
        x = TensorMeta((x.numel,), (1,), x.dtype, x.offset)
        out = TensorMeta((out.numel,), (1,), out.dtype, out.offset)
        dims = [0]
    if not out.numel:
        return
    shift = {d % x.ndim: 0 for d in dims}
    for d, s in zip(dims, shifts):
        shift[d % x.ndim] = (shift[d % x.ndim] + s) % x.shape[d % x.ndim]
    q = [kb.queue(f"qSyncIO{i}", "input") for i in range(2)]
    # each rolled dim splits into the part that wraps to the front and the rest
    parts = [[(0, x.shape[d] - s, s), (x.shape[d] - s, s, 0)] if s else [(0, x.shape[d], 0)]
             for d, s in shift.items()]
    for k, combo in enumerate(itertools.product(*parts)):
        shape = list(x.shape)
        x_off, o_off = x.offset, out.offset
        for d, (src0, size, dst0) in zip(shift, combo):
            shape[d] = size
            x_off += src0 * x.stride[d]
            o_off += dst0 * out.stride[d]
        if 0 in shape:
            continue
        copy_region(kb, ctx.inputs[0], TensorMeta(tuple(shape), x.stride, x.dtype, x_off), ctx.outputs[0],
                    TensorMeta(tuple(shape), out.stride, out.dtype, o_off), queue=q[k % 2])


# --- scans ---------------------------------------------------------------------------------------------

def _scan(ctx: LoweringContext, alu: Alu, log_exp: bool = False) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    shape = x.shape if x.ndim else (1,)
    xm = x if x.ndim else TensorMeta((1,), (1,), x.dtype, x.offset)
    om = out if out.ndim else TensorMeta((1,), (1,), out.dtype, out.offset)
    if not out.numel:
        return
    dim = int(attr(ctx, "dim", 0)) % len(shape)
    cols = shape[dim]
    if log_exp and cols > CHUNK:
        raise NotImplementedError("logcumsumexp over rows longer than one chunk")
    plan = row_plan(shape, [dim], [full_strides(xm, shape), full_strides(om, shape)], [xm.offset, om.offset], parts=ctx.spec.partitions)
    cx, co = (plan.free_strides[0][0], plan.free_strides[1][0]) if plan.free_shape else (1, 1)
    # integer scans stay exact in integer tiles; float scans accumulate in FP32
    wdt = F32 if out.dtype.is_float else out.dtype
    qin, qout = queues(kb)
    held: list[AP] = []
    for t in plan.tiles:
        rows = t.rows
        carry = None
        nmax = None
        for j, c0 in enumerate(range(0, cols, CHUNK)):
            w = min(CHUNK, cols - c0)
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + c0 * cx, t.pstrides[0], rows, [(cx, w)], xt)
            acc = kb.tile(rows, (w,), wdt)
            src = xt
            if log_exp:
                nmax = kb.tile(rows, (1,), F32)
                kb.emit(TensorReduce(alu=Alu.MAX, inp=xt, out=nmax, negate=True))
                # an all -inf row: keep the shift finite so exp gives 0 and the result -inf, not NaN
                kb.emit(TensorScalar(inp=nmax, out=nmax, alu0=Alu.MIN, scalar0=3.4028234663852886e38))
                kb.emit(Activation(func=Act.EXP, inp=xt, out=acc, bias=nmax))
                src = acc
            kb.emit(TensorScan(alu=alu, inp=src, out=acc))
            if carry is not None:
                kb.emit(TensorScalar(inp=acc, out=acc, alu0=alu, scalar0=carry))
            if nmax is not None:  # log_exp: the shift of this chunk
                kb.emit(Activation(func=Act.LOG, inp=acc, out=acc))
                kb.emit(TensorScalar(inp=acc, out=acc, alu0=Alu.SUBTRACT, scalar0=nmax))
            ot = kb.tile(rows, (w,), out.dtype)
            kb.copy(acc, ot)
            store(kb, qout, ot, ctx.outputs[0], out.dtype, t.offsets[1] + c0 * co, t.pstrides[1], rows, [(co, w)])
            nxt = kb.tile(rows, (1,), wdt) if c0 + CHUNK < cols else None
            if nxt is not None:
                kb.copy(acc.view(w - 1, [(1, 1)]), nxt)
            kb.release(*held)
            held = [xt, acc, ot] + ([carry] if carry is not None else []) + ([nmax] if nmax is not None else [])
            carry = nxt
    kb.release(*held)


@lowering("aten::cumsum", "aten::cumsum_")
def _cumsum(ctx: LoweringContext) -> None:
    _scan(ctx, Alu.ADD)


@lowering("aten::cumprod", "aten::cumprod_")
def _cumprod(ctx: LoweringContext) -> None:
    _scan(ctx, Alu.MULTIPLY)


@lowering("aten::_logcumsumexp")
def _logcumsumexp(ctx: LoweringContext) -> None:
    _scan(ctx, Alu.ADD, log_exp=True)
