"""Classification loss (``nll_loss`` forward and backward) and boolean reductions / tests.

nll_loss forward picks ``-log_prob[i, target[i]]`` with an indirect DMA: the row index i*C + t is
computed on VectorE from an iota and the target tile, so no log-prob row is read in full. The rows
are laid out n // 128 consecutive ones to a partition, so one target load (a contiguous run per
partition) and one indirect DMA serve all of them; the picks are 4-byte descriptors either way. The
backward builds each row of the gradient as a one-hot (iota == target) scaled by the row's weight,
so it writes the [N, C] gradient once and needs no scatter.
"""

from __future__ import annotations

from ...isa import Alu, DmaGather, Iota, Memset, PartitionReduce, ScalarTensorTensor, TensorReduce, TensorScalar, \
    TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from .elementwise import emit_map
from .reduce import emit_reduce

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def _rows_classes(ctx: LoweringContext) -> tuple[int, int]:
    logp = ctx.call.inputs[0]
    if logp.ndim == 1:
        return 1, logp.shape[0]
    return logp.shape[0], logp.shape[1]


def _valid_and_index(ctx, kb, r0, rows, classes, target_idx, q, row_stride=None, col_stride=1, *, pstep=1,
                     cols=1):
    """Tiles for a block of rows: target (as loaded), the clamped element index of (i, t) in the
    log-prob tensor, and valid (0/1, fp32). The block is [rows, cols]: element (p, c) is row
    r0 + p * pstep + c (``cols`` rows a partition when they are consecutive, one otherwise)."""
    row_stride = classes if row_stride is None else row_stride
    target = ctx.call.inputs[target_idx]
    ignore = int(ctx.call.attr("ignore_index", -100))
    tgt = kb.tile(rows, (cols,), target.dtype)
    tstride = target.stride[0] if target.ndim else 0
    kb.dma(q, hbm(ctx.inputs[target_idx], rows, pstep * tstride, [(tstride, cols)], target.dtype,
                  offset=r0 * tstride), tgt)
    valid = kb.tile(rows, (cols,), "float32")
    kb.emit(TensorScalar(inp=tgt, out=valid, alu0=Alu.NOT_EQUAL, scalar0=float(ignore)))
    safe = kb.tile(rows, (cols,), "int32")
    kb.emit(TensorScalar(inp=tgt, out=safe, alu0=Alu.MAX, scalar0=0.0, alu1=Alu.MIN, scalar1=float(classes - 1)))
    if col_stride != 1:
        kb.emit(TensorScalar(inp=safe, out=safe, alu0=Alu.MULTIPLY, scalar0=float(col_stride)))
    base = kb.tile(rows, (cols,), "int32")
    kb.emit(Iota(out=base, base=r0 * row_stride, channel_multiplier=pstep * row_stride,
                 coefs=(row_stride,) if cols > 1 else ()))
    flat = kb.tile(rows, (cols,), "int32")
    kb.emit(TensorTensor(alu=Alu.ADD, in0=base, in1=safe, out=flat))
    kb.release(safe, base)
    return tgt, flat, valid


def _row_weight(ctx, kb, rows, tgt_safe_flat, valid, weight_idx, q, cols=1):
    """valid * weight[target] per row ([rows, cols] fp32)."""
    w = ctx.call.inputs.optional(weight_idx)
    if w is None:
        return valid
    tgt, classes = tgt_safe_flat
    idx = kb.tile(rows, (cols,), "int32")
    kb.emit(TensorScalar(inp=tgt, out=idx, alu0=Alu.MAX, scalar0=0.0, alu1=Alu.MIN, scalar1=float(classes - 1)))
    picked = kb.tile(rows, (cols,), w.dtype)
    kb.emit(DmaGather(queue=q, table=hbm(ctx.inputs[weight_idx], classes, w.stride[0], [(1, 1)], w.dtype),
                      index=idx, dst=picked))
    out = kb.tile(rows, (cols,), "float32")
    kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=valid, in1=picked, out=out))
    kb.release(idx, picked)
    return out


ROWS_PER_PARTITION = 1024   # nll_loss_forward rows a partition picks per block (its tiles: ~32 KiB a partition)


def _row_blocks(n: int, parts: int) -> list[tuple[int, int, int, int]]:
    """(first row, partitions, row step between partitions, rows a partition) of nll_loss_forward's
    blocks: the rows a multiple of 128 covers are laid out ``n // 128`` consecutive rows to a
    partition (one contiguous target run per partition, one indirect DMA for all of them), the
    remainder one row a partition."""
    c = n // parts
    blocks = [(c0, parts, c, min(ROWS_PER_PARTITION, c - c0)) for c0 in range(0, c, ROWS_PER_PARTITION)]
    if n - parts * c:
        blocks.append((parts * c, n - parts * c, 1, 1))
    return blocks


@lowering("aten::nll_loss_forward")
def _nll_loss_forward(ctx: LoweringContext) -> None:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    logp = ctx.call.inputs[0]
    n, classes = _rows_classes(ctx)
    reduction = int(ctx.call.attr("reduction", REDUCTION_MEAN))
    out_meta, tw_meta = ctx.call.outputs[0], ctx.call.outputs[1]
    q_in, q_g, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncDynamicHW", "hardware_dynamic"), \
        kb.queue("qSyncIO2", "output")
    acc_loss = kb.tile(P, (1,), "float32")
    acc_w = kb.tile(P, (1,), "float32")
    kb.emit(Memset(out=acc_loss, value=0.0))
    kb.emit(Memset(out=acc_w, value=0.0))
    row_stride = logp.stride[0] if logp.ndim == 2 else classes
    col_stride = logp.stride[-1]
    span = (n - 1) * row_stride + (classes - 1) * col_stride + 1
    for r0, rows, pstep, cols in _row_blocks(n, P):
        tgt, flat, valid = _valid_and_index(ctx, kb, r0, rows, classes, 1, q_in, row_stride, col_stride, pstep=pstep,
                                            cols=cols)
        picked = kb.tile(rows, (cols,), logp.dtype)
        table = hbm(ctx.inputs[0], span, 1, [(1, 1)], logp.dtype)
        kb.emit(DmaGather(queue=q_g, table=table, index=flat, dst=picked))
        w = _row_weight(ctx, kb, rows, (tgt, classes), valid, 2, q_g, cols)
        loss = kb.tile(rows, (cols,), "float32")
        # loss_i = -log_prob[i, t_i] * w_i
        kb.emit(ScalarTensorTensor(inp=picked, scalar0=-1.0, in1=w, out=loss, alu0=Alu.MULTIPLY, alu1=Alu.MULTIPLY))
        made = [tgt, flat, valid, picked, w, loss]
        if reduction == REDUCTION_NONE:
            res = kb.tile(rows, (cols,), out_meta.dtype)
            kb.copy(loss, res)
            ostride = out_meta.stride[0] if out_meta.ndim else 0
            kb.dma(q_out, res, hbm(ctx.outputs[0], rows, pstep * ostride, [(ostride, cols)], out_meta.dtype,
                                   offset=r0 * ostride))
            made.append(res)
        else:
            for acc, t in ((acc_loss, loss), (acc_w, w)):
                part = t
                if cols > 1:
                    part = kb.tile(rows, (1,), "float32")
                    kb.emit(TensorReduce(alu=Alu.ADD, inp=t, out=part))
                    made.append(part)
                kb.emit(TensorTensor(alu=Alu.ADD, in0=acc.rows(0, rows), in1=part, out=acc.rows(0, rows)))
        kb.release(*{id(t): t for t in made}.values())
    total_w = kb.tile(1, (1,), "float32")
    kb.emit(PartitionReduce(alu=Alu.ADD, inp=acc_w, out=total_w))
    if reduction != REDUCTION_NONE:
        total = kb.tile(1, (1,), "float32")
        kb.emit(PartitionReduce(alu=Alu.ADD, inp=acc_loss, out=total))
        if reduction == REDUCTION_MEAN:
            kb.emit(TensorTensor(alu=Alu.DIVIDE, in0=total, in1=total_w, out=total))
        res = kb.tile(1, (1,), out_meta.dtype)
        kb.copy(total, res)
        kb.dma(q_out, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out_meta.dtype))
    tw = kb.tile(1, (1,), tw_meta.dtype)
    kb.copy(total_w, tw)
    kb.dma(q_out, tw, hbm(ctx.outputs[1], 1, 0, [(1, 1)], tw_meta.dtype))


CLASS_CHUNK = 8192   # classes per gradient tile of nll_loss_backward (32 KiB of FP32 per partition)


@lowering("aten::nll_loss_backward")
def _nll_loss_backward(ctx: LoweringContext) -> None:
    # inputs: grad_output, self, target, weight, total_weight (attrs: reduction, ignore_index)
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    grad_out = ctx.call.inputs[0]
    logp = ctx.call.inputs[1]
    gin = ctx.call.outputs[0]
    n = 1 if logp.ndim == 1 else logp.shape[0]
    classes = logp.shape[-1]
    reduction = int(ctx.call.attr("reduction", REDUCTION_MEAN))
    q_in, q_g, q_out = kb.queue("qSyncIO0", "input"), kb.queue("qSyncDynamicHW", "hardware_dynamic"), \
        kb.queue("qSyncIO2", "output")
    tw_index = 4
    scale = None
    if reduction != REDUCTION_NONE:
        # -grad_output (/ total_weight for mean), the same for every row
        go = kb.tile(P, (1,), grad_out.dtype)
        kb.dma(q_in, hbm(ctx.inputs[0], min(P, n), 0, [(1, 1)], grad_out.dtype), go.rows(0, min(P, n)))
        scale = kb.tile(P, (1,), "float32")
        kb.emit(TensorScalar(inp=go.rows(0, min(P, n)), out=scale.rows(0, min(P, n)), alu0=Alu.MULTIPLY,
                             scalar0=-1.0))
        if reduction == REDUCTION_MEAN:
            tw_meta = ctx.call.inputs[tw_index]
            tw = kb.tile(P, (1,), tw_meta.dtype)
            kb.dma(q_in, hbm(ctx.inputs[tw_index], min(P, n), 0, [(1, 1)], tw_meta.dtype), tw.rows(0, min(P, n)))
            kb.emit(TensorTensor(alu=Alu.DIVIDE, in0=scale.rows(0, min(P, n)), in1=tw.rows(0, min(P, n)),
                                 out=scale.rows(0, min(P, n))))
            kb.release(tw)
        kb.release(go)
    # the classes in chunks (32000 classes of FP32 would not fit a partition twice): column c of
    # chunk c0 holds c, compared with target - c0
    chunk = min(classes, CLASS_CHUNK)
    cols = kb.tile(P, (chunk,), "int32")
    kb.emit(Iota(out=cols, coefs=(1,)))
    gstride = gin.stride[0] if gin.ndim == 2 else classes
    held: list = []
    for r0 in range(0, n, P):
        rows = min(P, n - r0)
        tgt, flat, valid = _valid_and_index(ctx, kb, r0, rows, classes, 2, q_in)
        w = _row_weight(ctx, kb, rows, (tgt, classes), valid, 3, q_g)
        val = kb.tile(rows, (1,), "float32")
        if scale is not None:
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=w, in1=scale.rows(0, rows), out=val))
        else:
            go = kb.tile(rows, (1,), grad_out.dtype)
            gs = grad_out.stride[0] if grad_out.ndim else 0
            kb.dma(q_in, hbm(ctx.inputs[0], rows, gs, [(1, 1)], grad_out.dtype, offset=r0 * gs), go)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=w, in1=go, out=val))
            kb.emit(TensorScalar(inp=val, out=val, alu0=Alu.MULTIPLY, scalar0=-1.0))
            kb.release(go)
        tgt_f = kb.tile(rows, (1,), "float32")
        kb.copy(tgt, tgt_f)
        for c0 in range(0, classes, chunk):
            cw = min(chunk, classes - c0)
            rel = tgt_f
            if c0:
                rel = kb.tile(rows, (1,), "float32")
                kb.emit(TensorScalar(inp=tgt_f, out=rel, alu0=Alu.SUBTRACT, scalar0=float(c0)))
            onehot = kb.tile(rows, (cw,), gin.dtype)
            # (column == target) * value: the gradient row, written once
            kb.emit(TensorScalar(inp=cols.view(0, [(1, cw)]).rows(0, rows), out=onehot, alu0=Alu.IS_EQUAL,
                                 scalar0=rel, alu1=Alu.MULTIPLY, scalar1=val))
            kb.dma(q_out, onehot, hbm(ctx.outputs[0], rows, gstride, [(1, cw)], gin.dtype,
                                      offset=r0 * gstride + c0))
            kb.release(*held)   # the previous chunk's tiles, one chunk late (double buffering)
            held = [onehot] + ([rel] if rel is not tgt_f else [])
        kb.release(*held)
        held = []
        kb.release(*{id(t): t for t in (tgt, flat, valid, w, val, tgt_f)}.values())
    kb.release(cols)
    if scale is not None:
        kb.release(scale)


@lowering("aten::isneginf")
def _isneginf(ctx: LoweringContext) -> None:
    emit_map(ctx, [0], lambda kb, t, out: kb.emit(
        TensorScalar(inp=t[0], out=out, alu0=Alu.IS_EQUAL, scalar0=float("-inf"))))


@lowering("aten::isposinf")
def _isposinf(ctx: LoweringContext) -> None:
    emit_map(ctx, [0], lambda kb, t, out: kb.emit(
        TensorScalar(inp=t[0], out=out, alu0=Alu.IS_EQUAL, scalar0=float("inf"))))


@lowering("aten::all.dim", "aten::all.dims", "aten::all")
def _all(ctx: LoweringContext) -> None:
    _bool_reduce(ctx, Alu.MIN)


@lowering("aten::any.dim", "aten::any.dims", "aten::any")
def _any(ctx: LoweringContext) -> None:
    _bool_reduce(ctx, Alu.MAX)


def _bool_reduce(ctx: LoweringContext, alu: Alu) -> None:
    if ctx.call.inputs[0].dtype.value != "bool":
        from .reductions import reduce_nonzero   # of x != 0, compared on VectorE as the tiles arrive

        reduce_nonzero(ctx, alu)
        return
    emit_reduce(ctx, alu, mean=False)
