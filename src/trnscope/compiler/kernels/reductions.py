"""Reductions with an element-wise step in front: vector norms, nansum, count_nonzero, any/all of
non-bool tensors, aminmax, and the regression / binary cross-entropy losses.

:func:`emit_reductions` reads the input once and feeds every requested :class:`Fold` from the same
tile: the reduced dims go on the free axis (pieces of up to 4096 elements; a DMA transpose when they
are not innermost), kept indices on partitions, 128 rows per tile. A fold whose element step is a
ScalarE function and whose combination is a sum runs as ONE activation with ``accum_out`` (square
and add-reduce for the 2-norm), the others as an element-wise step and a VectorE tensor_reduce.
A reduction of everything over a long vector is spread over 128 partitions and finished on GpSimdE
(tensor_partition_reduce), as reduce.py does for sum.

Losses with a reduction compute the per-element loss tile by tile (:func:`emit_map_sum`), reduce
each tile's rows on VectorE into a [128, 1] accumulator and fold the partitions once at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod
from typing import Callable

from ...isa import AP, Act, Activation, Alu, DType, Memset, PartitionReduce, ScalarTensorTensor, Select, TensorReduce, TensorScalar, \
    TensorTensor, hbm
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta, broadcast_strides
from ..tiling import plan_tiles
from .activation import _Const
from .common import F32, RowStores, ScratchScope, attr, core_shares, free_pieces, full_strides, load, meet_and_fold, meet_partials, queues, \
    reduced_strides, row_plan, scratch, store
from .elementwise import MAX_COLS, emit_map, temp

PIECE = 4096


@dataclass(frozen=True)
class Fold:
    alu: Alu                                             # how elements (and pieces) combine
    out: int = 0                                         # the output it writes
    act: Act | None = None                               # ScalarE function add-reduced in one instruction
    pre: Callable[[KernelBuilder, AP], AP] | None = None  # element step before a VectorE reduce
    post: Callable[[KernelBuilder, AP, AP], None] | None = None  # [rows, 1] FP32 total -> result tile
    empty: float = 0.0                                   # the result of reducing no elements


def _reduce_piece(kb: KernelBuilder, f: Fold, xt: AP, acc: AP, first: bool) -> None:
    part = acc if first else scratch(kb, acc.partitions, 1)
    if f.act is not None and f.pre is not None:
        # the element step on VectorE, the sum as ScalarE's accumulate (not a VectorE tensor_reduce)
        src = f.pre(kb, xt)
        kb.emit(Activation(func=f.act, inp=src, out=src, accum_out=part))
    elif f.act is not None:
        junk = scratch(kb, xt.partitions, xt.free_size)
        kb.emit(Activation(func=f.act, inp=xt, out=junk, accum_out=part))
    else:
        src = f.pre(kb, xt) if f.pre is not None else xt
        kb.emit(TensorReduce(alu=f.alu, inp=src, out=part))
    if not first:
        kb.emit(TensorTensor(alu=f.alu, in0=acc, in1=part, out=acc))


def _finish(kb: KernelBuilder, f: Fold, acc: AP, res: AP) -> None:
    if f.post is not None:
        f.post(kb, acc, res)
    else:
        kb.copy(acc, res)


def emit_reductions(ctx: LoweringContext, rdims: list[int] | None, folds: list[Fold]) -> None:
    """Reduce input 0 over ``rdims`` (None: every dim) with each fold into its output."""
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    x = ctx.call.inputs[0]
    shape = x.shape if x.ndim else (1,)
    xm = x if x.ndim else TensorMeta((1,), (1,), x.dtype, x.offset)
    rd = list(range(len(shape))) if rdims is None or not x.ndim else sorted({d % x.ndim for d in rdims})
    outs = [ctx.call.outputs[f.out] for f in folds]
    ometas = [o if o.ndim else TensorMeta((1,) * len(shape), (0,) * len(shape), o.dtype, o.offset) for o in outs]
    strides = [full_strides(xm, shape)] + [reduced_strides(m, shape, rd) for m in ometas]
    plan = row_plan(shape, rd, strides, [xm.offset] + [m.offset for m in ometas], parts=ctx.spec.partitions)
    qin, qout = queues(kb)
    n = prod(shape[d] for d in rd)
    if n == 0:
        _fill_results(ctx, plan, folds, outs, qout)
        return
    if plan.nrows == 1 and len(plan.free_shape) == 1 and plan.cols >= 2 * P:
        _reduce_long(ctx, plan, folds, outs, qin, qout)
        return
    pieces = free_pieces(plan, PIECE)
    rows_out = RowStores(kb, qout, len(plan.tiles))
    held: list[AP] = []
    last: list[AP] = []   # the previous row tile's results and its last piece: released a tile later
    for ti, t in enumerate(plan.tiles):
        rows = t.rows
        accs = [kb.tile(rows, (1,), F32) for _ in folds]
        for j, (w, dims, offs) in enumerate(pieces):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[(ti + j) % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0],
                 xt)
            with ScratchScope() as made:
                for f, acc in zip(folds, accs):
                    _reduce_piece(kb, f, xt, acc, j == 0)
            if j:
                kb.release(*held)
            held = [xt, *made]
        results = []
        for k, (f, acc, o) in enumerate(zip(folds, accs, outs)):
            res = kb.tile(rows, (1,), o.dtype)
            _finish(kb, f, acc, res)
            rows_out.store(res, ctx.outputs[f.out], o.dtype, t.offsets[1 + k], t.pstrides[1 + k], rows)
            results.append(res)
        kb.release(*last)
        last = accs + results + held
        held = []
    rows_out.finish()
    kb.release(*last)


def _reduce_long(ctx, plan, folds, outs, qin, qout) -> None:
    """One result from a long vector: 128 partitions each reduce a share, GpSimdE folds them."""
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    x = ctx.call.inputs[0]
    n, s = plan.cols, plan.free_strides[0][0]
    base = plan.tiles[0].offsets[0]
    per = n // P
    tail = n - per * P
    starts = list(range(0, per, PIECE))
    # one share of the pieces per physical core (LNC=2), their totals met through HBM (common.core_shares)
    partials: list[list[AP]] = [[] for _ in folds]
    held: list[AP] = []
    for share in core_shares(kb, len(starts)):
        accs = [kb.tile(P, (1,), F32) for _ in folds]
        for j, c0 in enumerate(starts[k] for k in share):
            w = min(PIECE, per - c0)
            xt = kb.tile(P, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, base + c0 * s, per * s, P, [(s, w)], xt, transpose=False)
            with ScratchScope() as made:
                for f, acc in zip(folds, accs):
                    _reduce_piece(kb, f, xt, acc, j == 0)
            kb.release(*held)
            held = [xt, *made]
        for f, acc, mine in zip(folds, accs, partials):
            mine.append(kb.tile(1, (1,), F32))
            kb.emit(PartitionReduce(alu=f.alu, inp=acc, out=mine[-1]))
        kb.release(*accs)
    kb.release(*held)
    totals = []
    for f, mine in zip(folds, partials):
        totals.append(meet_and_fold(kb, mine, f.alu, qout, qin[0]))
    if tail:
        xt = kb.tile(1, (tail,), x.dtype)
        load(kb, qin[0], ctx.inputs[0], x.dtype, base + per * P * s, 0, 1, [(s, tail)], xt, transpose=False)
        made = []
        with ScratchScope() as made:
            for f, total in zip(folds, totals):
                _reduce_piece(kb, f, xt, total, False)
        kb.release(xt, *made)
    for k, (f, total, o) in enumerate(zip(folds, totals, outs)):
        res = kb.tile(1, (1,), o.dtype)
        _finish(kb, f, total, res)
        t = plan.tiles[0]
        store(kb, qout, res, ctx.outputs[f.out], o.dtype, t.offsets[1 + k], 0, 1, [(1, 1)])
        kb.release(res)
    kb.release(*totals)


def _fill_results(ctx, plan, folds, outs, qout) -> None:
    kb = ctx.kb
    for k, (f, o) in enumerate(zip(folds, outs)):
        for t in plan.tiles:
            acc = kb.tile(t.rows, (1,), F32)
            kb.emit(Memset(out=acc, value=f.empty))
            res = kb.tile(t.rows, (1,), o.dtype)
            kb.copy(acc, res)
            store(kb, qout, res, ctx.outputs[f.out], o.dtype, t.offsets[1 + k], t.pstrides[1 + k], t.rows, [(1, 1)])
            kb.release(acc, res)


# --- element steps ----------------------------------------------------------------------------------------

def _abs(kb: KernelBuilder, xt: AP) -> AP:
    a = scratch(kb, xt.partitions, xt.free_size)
    kb.emit(Activation(func=Act.ABS, inp=xt, out=a))
    return a


def _nonzero(kb: KernelBuilder, xt: AP) -> AP:
    # 0/1 in BF16: exact, and VectorE's 16-bit modes make the compare and reduce cheap
    a = scratch(kb, xt.partitions, xt.free_size, DType.bfloat16)
    kb.emit(TensorScalar(inp=xt, out=a, alu0=Alu.NOT_EQUAL, scalar0=0))
    return a


def _abs_pow(p: float):
    def pre(kb: KernelBuilder, xt: AP) -> AP:
        a = _abs(kb, xt)
        kb.emit(TensorScalar(inp=a, out=a, alu0=Alu.POW, scalar0=p))
        return a
    return pre


def _act_post(func: Act):
    return lambda kb, acc, res: kb.emit(Activation(func=func, inp=acc, out=res))


def _pow_post(e: float):
    return lambda kb, acc, res: kb.emit(TensorScalar(inp=acc, out=res, alu0=Alu.POW, scalar0=e))


def norm_fold(p: float) -> Fold:
    if p == 2:
        return Fold(Alu.ADD, act=Act.SQUARE, post=_act_post(Act.SQRT))
    if p == 1:
        return Fold(Alu.ADD, act=Act.ABS)
    if p == math.inf:
        return Fold(Alu.MAX, pre=_abs)
    if p == -math.inf:
        return Fold(Alu.MIN, pre=_abs, empty=math.inf)
    if p == 0:
        return Fold(Alu.ADD, pre=_nonzero)
    return Fold(Alu.ADD, pre=_abs_pow(p), post=_pow_post(1.0 / p))


def _dims(value) -> list[int] | None:
    if value is None or value == () or value == []:
        return None
    return [value] if isinstance(value, int) else list(value)


@lowering("aten::linalg_vector_norm")
def _linalg_vector_norm(ctx: LoweringContext) -> None:
    emit_reductions(ctx, _dims(attr(ctx, "dim")), [norm_fold(float(attr(ctx, "ord", 2)))])


@lowering("aten::norm.Scalar", "aten::norm.ScalarOpt_dim", "aten::norm.ScalarOpt_dtype",
          "aten::norm.ScalarOpt_dim_dtype")
def _norm(ctx: LoweringContext) -> None:
    emit_reductions(ctx, _dims(attr(ctx, "dim")), [norm_fold(float(attr(ctx, "p", 2)))])


@lowering("aten::nansum")
def _nansum(ctx: LoweringContext) -> None:
    x = ctx.call.inputs[0]
    if not x.dtype.is_float:
        emit_reductions(ctx, _dims(attr(ctx, "dim")), [Fold(Alu.ADD)])
        return
    dims = _dims(attr(ctx, "dim"))
    if x.ndim == 0 or dims is None or len({d % x.ndim for d in dims}) == x.ndim:
        # everything into one number: a loss-like sum over row tiles (isnan on ScalarE, the select on
        # VectorE, the sum as ScalarE's accumulating copy one tile later: emit_sum_terms)
        emit_sum_terms(ctx, [0], _nansum_terms, [1.0], mean=False)
        return
    zero = _Const(ctx.kb, 0.0, F32)

    def drop_nan(kb: KernelBuilder, xt: AP) -> AP:
        isn = scratch(kb, xt.partitions, xt.free_size, DType.bfloat16)
        kept = scratch(kb, xt.partitions, xt.free_size)
        kb.emit(Activation(func=Act.IS_NAN, inp=xt, out=isn))
        kb.emit(Select(pred=isn, on_true=zero(xt), on_false=xt, out=kept))
        return kept

    # the sum as ScalarE's accumulating copy: VectorE's tensor_reduce (N) would make the select's 2N 3N
    emit_reductions(ctx, dims, [Fold(Alu.ADD, act=Act.COPY, pre=drop_nan)])
    zero.release()


def _nansum_terms(kb: KernelBuilder, t: list[AP], cols: list[AP]) -> list:
    x = t[0]
    rows, w = x.partitions, x.free_size
    isn = scratch(kb, rows, w, DType.bfloat16)
    kept = scratch(kb, rows, w)
    zero = scratch(kb, rows, 1)
    kb.emit(Memset(out=zero, value=0.0))
    kb.emit(Activation(func=Act.IS_NAN, inp=x, out=isn))
    kb.emit(Select(pred=isn, on_true=zero.view(0, [(0, w)]), on_false=x, out=kept))
    return [lambda: kb.emit(Activation(func=Act.COPY, inp=kept, out=kept, accum_out=cols[0]))]


@lowering("aten::count_nonzero", "aten::count_nonzero.dim_IntList")
def _count_nonzero(ctx: LoweringContext) -> None:
    emit_reductions(ctx, _dims(attr(ctx, "dim")), [Fold(Alu.ADD, pre=_nonzero)])


def reduce_nonzero(ctx: LoweringContext, alu: Alu) -> None:
    """any (max) / all (min) of a non-bool tensor: of x != 0 (NaN counts as true)."""
    emit_reductions(ctx, _dims(attr(ctx, "dim")), [Fold(alu, pre=_nonzero, empty=1.0 if alu is Alu.MIN else 0.0)])


@lowering("aten::aminmax")
def _aminmax(ctx: LoweringContext) -> None:
    dim = ctx.call.attr("dim")
    emit_reductions(ctx, None if dim is None else [int(dim)], [Fold(Alu.MIN, out=0), Fold(Alu.MAX, out=1)])


# --- losses -----------------------------------------------------------------------------------------------

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def emit_map_sum(ctx: LoweringContext, operands: list[int], compute, mean: bool) -> None:
    """sum (or mean) over every element of ``compute(kb, tiles, out)`` into the 0-dim output."""
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    metas = [ctx.call.inputs[k] for k in operands]
    shape = _broadcast_shape([m.shape for m in metas])
    n = prod(shape)
    q_out = kb.queue("qSyncIO2", "output")
    total = kb.tile(1, (1,), F32)
    if n == 0:
        kb.emit(Memset(out=total, value=math.nan if mean else 0.0))
    else:
        strides = [broadcast_strides(m, shape) for m in metas]
        tiles = plan_tiles(shape if shape else (1,), strides if shape else [(0,) for _ in metas], MAX_COLS)
        qs = [kb.queue(f"qSyncIO{i % 2}", "input") for i in range(max(1, len(metas)))]
        # one share of the tiles per physical core (LNC=2), their sums met through HBM (common.core_shares)
        partials = []
        held: list[AP] = []
        shares = core_shares(kb, len(tiles))
        for share in shares:
            acc = kb.tile(P, (1,), F32)
            kb.emit(Memset(out=acc, value=0.0))
            for t in (tiles[k] for k in share):
                ins = _load_operands(ctx, operands, metas, t, qs)
                val = kb.tile(t.rows, (t.cols,), F32)
                with ScratchScope() as made:
                    compute(kb, ins, val)
                    part = scratch(kb, t.rows, 1)
                    kb.emit(TensorReduce(alu=Alu.ADD, inp=val, out=part))
                    kb.emit(TensorTensor(alu=Alu.ADD, in0=acc.rows(0, t.rows), in1=part, out=acc.rows(0, t.rows)))
                kb.release(*held)
                held = ins + [val] + made
            partials.append(total if len(shares) == 1 else kb.tile(1, (1,), F32))
            kb.emit(PartitionReduce(alu=Alu.ADD, inp=acc, out=partials[-1]))
            kb.release(acc)
        kb.release(*held)
        if len(partials) > 1:
            met = meet_partials(kb, partials, q_out, qs[0])
            kb.emit(TensorReduce(alu=Alu.ADD, inp=met, out=total))
            kb.release(met)
        if mean:
            kb.emit(TensorScalar(inp=total, out=total, alu0=Alu.DIVIDE, scalar0=float(n)))
    _store_one_value(ctx, total, q_out)


TERM_GROUP = 64   # row tiles whose per-row sums collect in one stats tile before a VectorE reduce
TERM_COLS = 1024  # columns of a loss-sum tile: 8 KiB of two FP32 inputs a partition, rows of 4 KiB
TERM_DEPTH = 3    # row tiles in flight (their inputs and temporaries held)


def emit_sum_terms(ctx: LoweringContext, operands: list[int], compute, coefs: list[float], mean: bool) -> None:
    """sum (or mean) over every element of a loss written as ``sum_k coefs[k] * S_k``, each S_k the sum
    of one ScalarE activation's output.

    ``compute(kb, tiles, cols)`` emits a row tile's element-wise work and returns the instructions
    that accumulate (thunks emitting activations with ``accum_out=cols[k]``, a [rows, 1] column of a
    stats tile); those run after the NEXT tile's element-wise work, so ScalarE, in order, takes the
    next tile's functions while VectorE finishes this one (software pipelining), and three tiles are
    in flight. :func:`emit_map_sum` instead reduces each tile's loss with a VectorE tensor_reduce and
    an add, on the engine that already carries the element-wise work; here every sum is the
    accumulate of a ScalarE activation (+ MIN_II, S9) into its own column, VectorE reduces the
    columns once per ``TERM_GROUP`` tiles, GpSimdE folds the partitions once and the terms combine
    on [1, 1] tiles (docs/cost-model.md, "Loss sums")."""
    P = ctx.spec.partitions
    kb = ctx.kb
    metas = [ctx.call.inputs[k] for k in operands]
    shape = _broadcast_shape([m.shape for m in metas])
    n = prod(shape)
    K = len(coefs)
    q_out = kb.queue("qSyncIO2", "output")
    total = kb.tile(1, (1,), F32)
    if n == 0:
        kb.emit(Memset(out=total, value=math.nan if mean else 0.0))
    else:
        strides = [broadcast_strides(m, shape) for m in metas]
        tiles = plan_tiles(shape if shape else (1,), strides if shape else [(0,) for _ in metas], TERM_COLS)
        qs = [kb.queue(f"qSyncIO{i % 2}", "input") for i in range(max(1, len(metas)))]
        group = min(TERM_GROUP, len(tiles))
        acc = kb.tile(P, (K,), F32)
        stats = kb.tile(P, (K * group,), F32)   # term k of tile i at column k * group + i % group
        kb.emit(Memset(out=stats, value=0.0))   # rows a partial tile leaves alone add nothing

        def flush(i: int) -> None:
            """After tile i's sums: reduce the group's columns [P, K, group] -> [P, K] into acc."""
            if i % group != group - 1 and i != len(tiles) - 1:
                return
            dst = acc if i < group else kb.tile(P, (K,), F32)
            kb.emit(TensorReduce(alu=Alu.ADD, inp=stats.view(0, [(group, K), (1, group)]), out=dst))
            if dst is not acc:
                kb.emit(TensorTensor(alu=Alu.ADD, in0=acc, in1=dst, out=acc))
                kb.release(dst)
            if i < len(tiles) - 1:
                kb.emit(Memset(out=stats, value=0.0))

        history: list[list[AP]] = []
        backlog: list = []
        for i, t in enumerate(tiles):
            ins = _load_operands(ctx, operands, metas, t, qs)
            c = i % group
            with ScratchScope() as made:
                later = compute(kb, ins, [stats.view(k * group + c, [(1, 1)]).rows(0, t.rows) for k in range(K)])
            for emit in backlog:
                emit()
            if i:
                flush(i - 1)
            backlog = list(later or [])
            history.append(ins + made)
            if len(history) >= TERM_DEPTH:
                kb.release(*history.pop(0))
        for emit in backlog:
            emit()
        flush(len(tiles) - 1)
        for held in history:
            kb.release(*held)
        sums = kb.tile(1, (K,), F32)
        kb.emit(PartitionReduce(alu=Alu.ADD, inp=acc, out=sums))
        kb.emit(TensorScalar(inp=sums.view(0, [(1, 1)]), out=total, alu0=Alu.MULTIPLY, scalar0=float(coefs[0])))
        for k in range(1, K):
            kb.emit(ScalarTensorTensor(inp=sums.view(k, [(1, 1)]), scalar0=float(coefs[k]), in1=total, out=total,
                                       alu0=Alu.MULTIPLY, alu1=Alu.ADD))
        kb.release(acc, stats, sums)
        if mean:
            kb.emit(TensorScalar(inp=total, out=total, alu0=Alu.DIVIDE, scalar0=float(n)))
    _store_one_value(ctx, total, q_out)


def _load_operands(ctx: LoweringContext, operands: list[int], metas: list, t, qs: list[int]) -> list[AP]:
    """Tile ``t`` of each operand (call input ``operands[k]``), loaded through the queues in turn."""
    kb = ctx.kb
    ins = []
    for k, (m, opt) in enumerate(zip(metas, t.operands)):
        tile = kb.tile(t.rows, (t.cols,), m.dtype)
        load(kb, qs[k % len(qs)], ctx.inputs[operands[k]], m.dtype, m.offset + opt.offset, opt.pstride,
             t.rows, [(opt.cstride, t.cols)], tile)
        ins.append(tile)
    return ins


def _store_one_value(ctx: LoweringContext, total: AP, q_out: int) -> None:
    """The [1, 1] FP32 ``total`` in the output's dtype to the 0-dim output; ``total`` is released."""
    kb, out = ctx.kb, ctx.call.outputs[0]
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(total, res)
    kb.dma(q_out, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype, offset=out.offset))
    kb.release(total, res)


def _broadcast_shape(shapes) -> tuple[int, ...]:
    nd = max(len(s) for s in shapes)
    out = []
    for d in range(nd):
        sizes = [s[d - nd + len(s)] for s in shapes if d - nd + len(s) >= 0]
        out.append(max(sizes) if 0 not in sizes else 0)
    return tuple(out)


def _loss(ctx: LoweringContext, operands: list[int], compute) -> None:
    reduction = int(attr(ctx, "reduction", REDUCTION_MEAN))
    if reduction == REDUCTION_NONE:
        emit_map(ctx, operands, compute)
    else:
        emit_map_sum(ctx, operands, compute, mean=reduction == REDUCTION_MEAN)


def _abs_diff(kb, t, out) -> AP:
    d = temp(kb, out)
    kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=t[0], in1=t[1], out=d))
    kb.emit(Activation(func=Act.ABS, inp=d, out=d))
    return d


@lowering("aten::mse_loss")
def _mse_loss(ctx: LoweringContext) -> None:
    def compute(kb, t, out):
        d = temp(kb, out)
        kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=t[0], in1=t[1], out=d))
        kb.emit(Activation(func=Act.SQUARE, inp=d, out=out))

    _loss(ctx, [0, 1], compute)


def _piecewise_quadratic(quad_scale: float, lin_scale: float, lin_bias: float, knee: float):
    """|d| < knee ? quad_scale * d^2 : lin_scale * |d| + lin_bias (smooth L1 and Huber)."""
    def compute(kb, t, out):
        z = _abs_diff(kb, t, out)
        q, lin, small = temp(kb, out), temp(kb, out), temp(kb, out)
        # both scalings are ScalarE's scale and bias (the same FP32 multiply, then add), which has
        # room beside VectorE's difference, compare and select
        kb.emit(Activation(func=Act.SQUARE, inp=z, out=q))
        kb.emit(Activation(func=Act.COPY, inp=q, out=q, scale=quad_scale))
        kb.emit(Activation(func=Act.COPY, inp=z, out=lin, scale=lin_scale, bias=lin_bias))
        kb.emit(TensorScalar(inp=z, out=small, alu0=Alu.IS_LT, scalar0=knee))
        kb.emit(Select(pred=small, on_true=q, on_false=lin, out=out))
    return compute


def _piecewise_terms(knee: float):
    """The sum of a piecewise quadratic loss as three activation sums (docs/cost-model.md, "Loss
    sums"): with m = min(|d|, knee), 0.5 m^2 + knee * relu(|d| - knee) is smooth L1's loss times
    knee and Huber's loss, and relu(|d| - knee) = relu(d - knee) + relu(-d - knee) (at most one is
    positive). VectorE does the difference (2N) and m (N, abs_max then min in one tensor_scalar);
    ScalarE squares and rectifies with the sums accumulated (3N) instead of VectorE's compare,
    select and reduce."""
    def compute(kb, t, cols):
        rows, w = t[0].partitions, t[0].free_size
        d, m, junk = scratch(kb, rows, w), scratch(kb, rows, w), scratch(kb, rows, w)
        kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=t[0], in1=t[1], out=d))
        kb.emit(TensorScalar(inp=d, out=m, alu0=Alu.ABS_MAX, scalar0=0.0, alu1=Alu.MIN, scalar1=knee))
        return [lambda: kb.emit(Activation(func=Act.RELU, inp=d, out=junk, bias=-knee, accum_out=cols[1])),
                lambda: kb.emit(Activation(func=Act.RELU, inp=d, out=junk, scale=-1.0, bias=-knee,
                                           accum_out=cols[2])),
                lambda: kb.emit(Activation(func=Act.SQUARE, inp=m, out=junk, accum_out=cols[0]))]
    return compute


def _l1_terms(kb, t, cols):
    rows, w = t[0].partitions, t[0].free_size
    d = scratch(kb, rows, w)
    kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=t[0], in1=t[1], out=d))
    return [lambda: kb.emit(Activation(func=Act.ABS, inp=d, out=d, accum_out=cols[0]))]


def _reduced(ctx: LoweringContext) -> bool:
    return int(attr(ctx, "reduction", REDUCTION_MEAN)) != REDUCTION_NONE


def _mean(ctx: LoweringContext) -> bool:
    return int(attr(ctx, "reduction", REDUCTION_MEAN)) == REDUCTION_MEAN


@lowering("aten::smooth_l1_loss")
def _smooth_l1_loss(ctx: LoweringContext) -> None:
    beta = float(attr(ctx, "beta", 1.0))
    if _reduced(ctx):
        if beta == 0.0:
            emit_sum_terms(ctx, [0, 1], _l1_terms, [1.0], _mean(ctx))
        else:
            emit_sum_terms(ctx, [0, 1], _piecewise_terms(beta), [0.5 / beta, 1.0, 1.0], _mean(ctx))
        return
    if beta == 0.0:
        _loss(ctx, [0, 1], lambda kb, t, out: kb.copy(_abs_diff(kb, t, out), out))
        return
    _loss(ctx, [0, 1], _piecewise_quadratic(0.5 / beta, 1.0, -0.5 * beta, beta))


@lowering("aten::huber_loss")
def _huber_loss(ctx: LoweringContext) -> None:
    delta = float(attr(ctx, "delta", 1.0))
    if _reduced(ctx) and delta > 0.0:
        emit_sum_terms(ctx, [0, 1], _piecewise_terms(delta), [0.5, delta, delta], _mean(ctx))
        return
    _loss(ctx, [0, 1], _piecewise_quadratic(0.5, delta, -0.5 * delta * delta, delta))


def _bce_terms(kb, t, cols):
    """-(y * lb + (1 - y) * la), la = max(log1p(-x), -100), lb = max(log(x), -100) (ATen's clamps),
    as two sums: ScalarE takes both logs, 1 - y (its scale and bias) and the two accumulating
    copies (5N), VectorE each clamp-and-multiply in one scalar_tensor_tensor (2 x 2N): 4N on VectorE
    against 9N for the per-element loss and its reduce."""
    x, y = t[0], t[1]
    rows, w = x.partitions, x.free_size
    la, lb, om = scratch(kb, rows, w), scratch(kb, rows, w), scratch(kb, rows, w)
    kb.emit(Activation(func=Act.LOG1P, inp=x, out=la, scale=-1.0))
    kb.emit(Activation(func=Act.LOG, inp=x, out=lb))
    kb.emit(Activation(func=Act.COPY, inp=y, out=om, scale=-1.0, bias=1.0))
    kb.emit(ScalarTensorTensor(inp=lb, scalar0=-100.0, alu0=Alu.MAX, in1=y, alu1=Alu.MULTIPLY, out=lb))
    kb.emit(ScalarTensorTensor(inp=la, scalar0=-100.0, alu0=Alu.MAX, in1=om, alu1=Alu.MULTIPLY, out=la))
    return [lambda: kb.emit(Activation(func=Act.COPY, inp=la, out=om, accum_out=cols[0])),
            lambda: kb.emit(Activation(func=Act.COPY, inp=lb, out=om, accum_out=cols[1]))]


@lowering("aten::binary_cross_entropy")
def _binary_cross_entropy(ctx: LoweringContext) -> None:
    # ATen: (y - 1) * max(log1p(-x), -100) - y * max(log(x), -100), times the weight
    weighted = ctx.call.inputs.optional(2) is not None
    if _reduced(ctx) and not weighted:
        emit_sum_terms(ctx, [0, 1], _bce_terms, [-1.0, -1.0], _mean(ctx))
        return

    def compute(kb, t, out):
        x, y = t[0], t[1]
        a, b = temp(kb, out), temp(kb, out)
        kb.emit(Activation(func=Act.LOG1P, inp=x, out=a, scale=-1.0))
        kb.emit(TensorScalar(inp=a, out=a, alu0=Alu.MAX, scalar0=-100.0))
        # (y - 1) * a in one scalar_tensor_tensor pass
        kb.emit(ScalarTensorTensor(inp=y, scalar0=1.0, alu0=Alu.SUBTRACT, in1=a, alu1=Alu.MULTIPLY, out=a))
        kb.emit(Activation(func=Act.LOG, inp=x, out=b))
        kb.emit(TensorScalar(inp=b, out=b, alu0=Alu.MAX, scalar0=-100.0))
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=y, in1=b, out=b))
        if weighted:
            kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=a, in1=b, out=a))
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=a, in1=t[2], out=out))
        else:
            kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=a, in1=b, out=out))

    _loss(ctx, [0, 1, 2] if weighted else [0, 1], compute)
