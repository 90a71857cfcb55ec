"""Softmax, log-softmax and their backward passes, over any dim.

The softmax dim goes on the free axis, every other index is a row (128 rows per tile); a softmax
over a non-last dim loads its rows with a DMA transpose, so no separate transpose kernel runs.
Per tile (NKI's softmax recipe): VectorE finds the negated row max, ScalarE computes
exp(x - max) and add-reduces it in the same instruction (``accum_out``), VectorE divides by the
per-partition sum. Log-softmax subtracts max and log(sum) with one two-op tensor_scalar.

Rows too long for one SBUF tile (a log-softmax over a 128K vocabulary) use two passes over
2048-column chunks: an online max/sum (each chunk rescales the running sum by exp(m_old - m_new)),
then the normalisation; x is read twice instead of being held. The backward passes do the same:
the row sum over chunks, then each chunk's gradient from its inputs read again.
"""

from __future__ import annotations

from ...isa import AP, Act, Activation, Alu, TensorReduce, TensorScalar, TensorTensor
from ..lowering import LoweringContext, lowering
from .common import (
    F32, FLT_MAX, Operand, attr, emit_rows, free_pieces, full_strides, load, queues, row_plan, scratch, store,
)

# a row tile whose working set (input, fp32 intermediate, output) stays under this per partition is
# computed in one pass; the budget leaves room for the next tile's buffers (double buffering)
ONE_PASS_BYTES = 48 * 1024
CHUNK = 2048


def _dim(ctx: LoweringContext, ndim: int) -> int:
    d = attr(ctx, "dim", -1)
    return d % ndim if ndim else 0


def _softmax(ctx: LoweringContext, log: bool, safe: bool = False) -> None:
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    if x.ndim == 0:
        _scalar_softmax(ctx, log)
        return
    dim = _dim(ctx, x.ndim)
    shape = x.shape
    cols = shape[dim]
    per_row = cols * (x.dtype.itemsize + 4 + out.dtype.itemsize)
    if per_row > ONE_PASS_BYTES:
        _softmax_two_pass(ctx, dim, log, safe)
        return
    ins = [Operand(ctx.inputs[0], x, full_strides(x, shape))]
    outs = [Operand(ctx.outputs[0], out, full_strides(out, shape))]

    def compute(kb, t_in, t_out, tile):
        # temporaries are scratch tiles: released one tile later, so consecutive tiles overlap
        xt, ot = t_in[0], t_out[0]
        rows = tile.rows
        nmax = scratch(kb, rows, 1)
        total = scratch(kb, rows, 1)
        kb.emit(TensorReduce(alu=Alu.MAX, inp=xt, out=nmax, negate=True))
        if safe:
            # a row of -inf: max -> -inf; clamp so exp gives 0 (not NaN) and the row ends as zeros
            kb.emit(TensorScalar(inp=nmax, out=nmax, alu0=Alu.MIN, scalar0=FLT_MAX))
        if log:
            junk = scratch(kb, rows, cols, out.dtype)
            kb.emit(Activation(func=Act.EXP, inp=xt, out=junk, bias=nmax, accum_out=total))
            lse = scratch(kb, rows, 1)
            kb.emit(Activation(func=Act.LOG, inp=total, out=lse))
            # (x - max) - log(sum), in PyTorch's order
            kb.emit(TensorScalar(inp=xt, out=ot, alu0=Alu.ADD, scalar0=nmax, alu1=Alu.SUBTRACT, scalar1=lse))
        else:
            e = ot if out.dtype == F32 else scratch(kb, rows, cols)
            kb.emit(Activation(func=Act.EXP, inp=xt, out=e, bias=nmax, accum_out=total))
            if safe:
                kb.emit(TensorScalar(inp=total, out=total, alu0=Alu.MAX, scalar0=1.1754943508222875e-38))
            if tile.row0 // kb.spec.partitions % 3 == 2:
                # every third tile normalises on ScalarE (x * 1/sum): VectorE's max and divide are the
                # longer half of the work, this keeps both engines equally busy
                kb.emit(Activation(func=Act.RECIPROCAL, inp=total, out=total))
                kb.emit(Activation(func=Act.COPY, inp=e, out=ot, scale=total))
            else:
                kb.emit(TensorScalar(inp=e, out=ot, alu0=Alu.DIVIDE, scalar0=total))

    emit_rows(ctx, shape, [dim], ins, outs, compute)


def _softmax_two_pass(ctx: LoweringContext, dim: int, log: bool, safe: bool) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    shape = x.shape
    cols = shape[dim]
    plan = row_plan(shape, [dim], [full_strides(x, shape), full_strides(out, shape)], [x.offset, out.offset], parts=ctx.spec.partitions)
    cx, co = plan.free_strides[0][0], plan.free_strides[1][0]
    qin, qout = queues(kb)
    chunks = [(c0, min(CHUNK, cols - c0)) for c0 in range(0, cols, CHUNK)]
    for t in plan.tiles:
        rows = t.rows
        m = kb.tile(rows, (1,), F32)      # running max
        nm = kb.tile(rows, (1,), F32)     # -max
        total = kb.tile(rows, (1,), F32)  # running sum of exp(x - max)
        part = kb.tile(rows, (1,), F32)
        corr = kb.tile(rows, (1,), F32)
        held: list[AP] = []
        for j, (c0, w) in enumerate(chunks):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + c0 * cx, t.pstrides[0], rows, [(cx, w)], xt)
            junk = kb.tile(rows, (w,), x.dtype)
            if j == 0:
                kb.emit(TensorReduce(alu=Alu.MAX, inp=xt, out=m))
                # a chunk of -inf must not make the running max -inf (exp(-inf - -inf) is NaN)
                kb.emit(TensorScalar(inp=m, out=m, alu0=Alu.MAX, scalar0=-FLT_MAX))
                kb.emit(TensorScalar(inp=m, out=nm, alu0=Alu.MULTIPLY, scalar0=-1.0))
                kb.emit(Activation(func=Act.EXP, inp=xt, out=junk, bias=nm, accum_out=total))
            else:
                cm = kb.tile(rows, (1,), F32)
                kb.emit(TensorReduce(alu=Alu.MAX, inp=xt, out=cm))
                kb.emit(TensorTensor(alu=Alu.MAX, in0=m, in1=cm, out=cm))        # new max
                kb.emit(TensorScalar(inp=cm, out=nm, alu0=Alu.MULTIPLY, scalar0=-1.0))
                kb.emit(Activation(func=Act.EXP, inp=m, out=corr, bias=nm))      # exp(m_old - m_new)
                kb.emit(Activation(func=Act.EXP, inp=xt, out=junk, bias=nm, accum_out=part))
                kb.emit(TensorScalar(inp=total, out=total, alu0=Alu.MULTIPLY, scalar0=corr, alu1=Alu.ADD,
                                     scalar1=part))
                kb.copy(cm, m)
                kb.release(cm)
            kb.release(*held)
            held = [xt, junk]
        kb.release(*held)
        held = []
        lse = None
        if log:
            lse = kb.tile(rows, (1,), F32)
            kb.emit(Activation(func=Act.LOG, inp=total, out=lse))
        elif safe:
            kb.emit(TensorScalar(inp=total, out=total, alu0=Alu.MAX, scalar0=1.1754943508222875e-38))
        for j, (c0, w) in enumerate(chunks):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + c0 * cx, t.pstrides[0], rows, [(cx, w)], xt)
            ot = kb.tile(rows, (w,), out.dtype)
            if log:
                kb.emit(TensorScalar(inp=xt, out=ot, alu0=Alu.ADD, scalar0=nm, alu1=Alu.SUBTRACT, scalar1=lse))
            else:
                e = kb.tile(rows, (w,), F32)
                kb.emit(Activation(func=Act.EXP, inp=xt, out=e, bias=nm))
                kb.emit(TensorScalar(inp=e, out=ot, alu0=Alu.DIVIDE, scalar0=total))
                kb.release(e)
            store(kb, qout, ot, ctx.outputs[0], out.dtype, t.offsets[1] + c0 * co, t.pstrides[1], rows, [(co, w)])
            kb.release(*held)
            held = [xt, ot]
        kb.release(*held, m, nm, total, part, corr)
        if lse is not None:
            kb.release(lse)


def _scalar_softmax(ctx: LoweringContext, log: bool) -> None:
    """A 0-d softmax is 1 (log-softmax 0) for finite input; computed as x - x (+1) to keep NaN/inf."""
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    kb = ctx.kb
    qin, qout = queues(kb)
    xt = kb.tile(1, (1,), x.dtype)
    load(kb, qin[0], ctx.inputs[0], x.dtype, x.offset, 0, 1, [(1, 1)], xt)
    ot = kb.tile(1, (1,), out.dtype)
    kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=xt, in1=xt, out=ot))
    if not log:
        kb.emit(Activation(func=Act.EXP, inp=ot, out=ot))
    store(kb, qout, ot, ctx.outputs[0], out.dtype, out.offset, 0, 1, [(1, 1)])
    kb.release(xt, ot)


@lowering("aten::_softmax", "aten::softmax.int")
def _lower_softmax(ctx: LoweringContext) -> None:
    _softmax(ctx, log=False)


@lowering("aten::_log_softmax", "aten::log_softmax.int")
def _lower_log_softmax(ctx: LoweringContext) -> None:
    _softmax(ctx, log=True)


@lowering("aten::_safe_softmax")
def _lower_safe_softmax(ctx: LoweringContext) -> None:
    _softmax(ctx, log=False, safe=True)


# --- backward -----------------------------------------------------------------------------------------

def _apply_gradient(kb, log: bool, gt, yt, s_neg, tmp, ot) -> None:
    """The input gradient from grad and the forward output, given s_neg = -(row sum): of grad for
    log-softmax (grad - exp(y) * sum(grad)), of grad * y for softmax (y * (grad - sum(grad * y)))."""
    if log:
        kb.emit(Activation(func=Act.EXP, inp=yt, out=tmp))
        kb.emit(TensorScalar(inp=tmp, out=tmp, alu0=Alu.MULTIPLY, scalar0=s_neg))
        kb.emit(TensorTensor(alu=Alu.ADD, in0=gt, in1=tmp, out=ot))
    else:
        kb.emit(Activation(func=Act.COPY, inp=gt, out=tmp, bias=s_neg))   # ScalarE shifts
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tmp, in1=yt, out=ot))


def _softmax_backward(ctx: LoweringContext, log: bool) -> None:
    g, y, out = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.outputs[0]
    shape = out.shape
    if len(shape) == 0:
        shape = (1,)
    dim = _dim(ctx, len(shape))
    cols = shape[dim]
    ins = [Operand(ctx.inputs[0], g, full_strides(g, shape)), Operand(ctx.inputs[1], y, full_strides(y, shape))]
    outs = [Operand(ctx.outputs[0], out, full_strides(out, shape))]

    def compute(kb, t_in, t_out, tile):
        gt, yt = t_in
        ot = t_out[0]
        rows = tile.rows
        s = scratch(kb, rows, 1)
        tmp = scratch(kb, rows, cols)
        if log:
            kb.emit(TensorReduce(alu=Alu.ADD, inp=gt, out=s, negate=True))
        else:
            # VectorE multiplies, ScalarE add-reduces
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=gt, in1=yt, out=tmp))
            kb.emit(Activation(func=Act.COPY, inp=tmp, out=tmp, accum_out=s))
            kb.emit(TensorScalar(inp=s, out=s, alu0=Alu.MULTIPLY, scalar0=-1.0))
        _apply_gradient(kb, log, gt, yt, s, tmp, ot)

    if cols * (g.dtype.itemsize + y.dtype.itemsize + 4 + out.dtype.itemsize) <= ONE_PASS_BYTES:
        emit_rows(ctx, shape, [dim], ins, outs, compute)
    else:
        _softmax_backward_long(ctx, shape, dim, log)


def _softmax_backward_long(ctx: LoweringContext, shape, dim: int, log: bool) -> None:
    """Rows too long for one tile: the row sum (of grad, or of grad * y) over CHUNK-column pieces first,
    then each piece's gradient from the inputs read again."""
    kb = ctx.kb
    g, y, out = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.outputs[0]
    metas = [g, y, out]
    plan = row_plan(shape, [dim], [full_strides(m, shape) for m in metas], [m.offset for m in metas],
                    parts=ctx.spec.partitions)
    pieces = free_pieces(plan, CHUNK)
    qin, qout = queues(kb)
    held: list = []
    for t in plan.tiles:
        rows = t.rows

        def piece(j, w, dims, offs, k, t=t, rows=rows):
            tile = kb.tile(rows, (w,), metas[k].dtype)
            load(kb, qin[(j + k) % 2], ctx.inputs[k], metas[k].dtype, t.offsets[k] + offs[k], t.pstrides[k], rows,
                 dims[k], tile)
            return tile

        parts = kb.tile(rows, (len(pieces),), F32)
        lag: list = []
        for j, (w, dims, offs) in enumerate(pieces):
            gt = piece(j, w, dims, offs, 0)
            cur = [gt]
            if log:
                kb.emit(TensorReduce(alu=Alu.ADD, inp=gt, out=parts.view(j, [(1, 1)])))
            else:
                yt = piece(j, w, dims, offs, 1)
                prod_t = kb.tile(rows, (w,), F32)
                kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=gt, in1=yt, out=prod_t))
                kb.emit(Activation(func=Act.COPY, inp=prod_t, out=prod_t, accum_out=parts.view(j, [(1, 1)])))
                cur += [yt, prod_t]
            kb.release(*lag)
            lag = cur
        s_neg = kb.tile(rows, (1,), F32)
        kb.emit(TensorReduce(alu=Alu.ADD, inp=parts, out=s_neg, negate=True))
        for j, (w, dims, offs) in enumerate(pieces):
            gt, yt = piece(j, w, dims, offs, 0), piece(j, w, dims, offs, 1)
            tmp = kb.tile(rows, (w,), F32)
            ot = kb.tile(rows, (w,), out.dtype)
            _apply_gradient(kb, log, gt, yt, s_neg, tmp, ot)
            store(kb, qout, ot, ctx.outputs[0], out.dtype, t.offsets[2] + offs[2], t.pstrides[2], rows, dims[2])
            kb.release(*lag)
            lag = [gt, yt, tmp, ot]
        kb.release(*lag, parts)
        kb.release(*held)
        held = [s_neg]
    kb.release(*held)


@lowering("aten::_softmax_backward_data")
def _lower_softmax_backward(ctx: LoweringContext) -> None:
    _softmax_backward(ctx, log=False)


@lowering("aten::_log_softmax_backward_data")
def _lower_log_softmax_backward(ctx: LoweringContext) -> None:
    _softmax_backward(ctx, log=True)
