"""Batch norm (native_batch_norm, _native_batch_norm_legit, _batch_norm_with_update) and group norm.

Batch norm normalises per channel over (N, spatial): the channels go on partitions (128 per tile)
and each channel's N x spatial elements stream along the free axis in pieces, so VectorE's
bn_stats / bn_aggr give the mean and variance in one pass (hardware.md 3.3, the LayerNorm tutorial's
v2). The affine part collapses into one per-partition scale and shift (a = weight * rstd,
b = bias - mean * a) and a second pass over the pieces is ONE ScalarE activation per piece
(x * a + b). In training the running statistics are updated in place (momentum blend, unbiased
variance); in evaluation the running statistics are loaded instead of computed.

Group norm is a LayerNorm over each (sample, group) block, which is contiguous: one block per
partition, bn_stats over it, ScalarE normalises the row, and VectorE applies the per-channel weight
and bias through a [rows, C/G] tile read with a zero stride across each channel's spatial run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from ...isa import AP, Act, Activation, Alu, BnAggr, BnStats, DmaGather, Iota, LoadStationary, MultiplyMoving, \
    ScalarTensorTensor, TensorScalar, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from .common import F32, RowPlan, RowTile, attr, ceil_div, free_pieces, full_strides, load, queues, row_plan, store

PIECE = 4096


def _vec_tile(kb, q, tensor: int, meta: TensorMeta, r0: int, rows: int) -> AP:
    """Elements r0 .. r0+rows-1 of a 1-d tensor, one per partition (FP32)."""
    t = kb.tile(rows, (1,), meta.dtype)
    st = meta.stride[0] if meta.ndim else 0
    kb.dma(q, hbm(tensor, rows, st, [(1, 1)], meta.dtype, offset=meta.offset + r0 * st), t)
    if meta.dtype == F32:
        return t
    f = kb.tile(rows, (1,), F32)
    kb.copy(t, f)
    kb.release(t)
    return f


@dataclass
class _BatchNorm:
    """One batch norm call: which optional inputs it has (their input positions), its statistics
    mode, and the channel tiles' plan with the pieces each channel's elements stream in."""

    ctx: LoweringContext
    training: bool
    w_i: int | None
    b_i: int | None
    rm_i: int | None
    rv_i: int | None
    momentum: float
    eps: float
    plan: RowPlan
    pieces: list
    n: int                       # elements per channel (N x spatial)
    qin: list[int]
    qout: int

    def has(self, i: int | None) -> bool:
        return i is not None and self.ctx.call.inputs.optional(i) is not None

    def vector(self, i: int, t: RowTile) -> AP:
        """Input ``i`` (a per-channel vector) for the tile's channels, one per partition, FP32."""
        ctx = self.ctx
        return _vec_tile(ctx.kb, self.qin[1], ctx.inputs[i], ctx.call.inputs[i], t.row0, t.rows)


def _bn_statistics(bn: _BatchNorm, t: RowTile) -> tuple[AP, AP]:
    """(mean, var) of the tile's channels: bn_stats over every piece in training, else the running
    statistics."""
    ctx, kb, rows = bn.ctx, bn.ctx.kb, t.rows
    BN_MAX = ctx.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    x = ctx.call.inputs[0]
    mean = kb.tile(rows, (1,), F32)
    var = kb.tile(rows, (1,), F32)
    if bn.training:
        nbn = sum(ceil_div(w, BN_MAX) for w, _, _ in bn.pieces)
        st = kb.tile(rows, (3 * nbn,), F32)
        k = 0
        for j, (w, dims, offs) in enumerate(bn.pieces):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, bn.qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0], xt)
            for s0 in range(0, w, BN_MAX):
                kb.emit(BnStats(inp=xt.view(s0, [(1, min(BN_MAX, w - s0))]), out=st.view(3 * k, [(1, 3)])))
                k += 1
            kb.release(xt)
        mv = kb.tile(rows, (2,), F32)
        kb.emit(BnAggr(inp=st, out=mv))
        kb.copy(mv.view(0, [(1, 1)]), mean)
        kb.copy(mv.view(1, [(1, 1)]), var)
        kb.release(st, mv)
    else:
        assert bn.rm_i is not None and bn.rv_i is not None  # evaluation requires them (checked)
        rm = bn.vector(bn.rm_i, t)
        rv = bn.vector(bn.rv_i, t)
        kb.copy(rm, mean)
        kb.copy(rv, var)
        kb.release(rm, rv)
    return mean, var


def _bn_scale_shift(bn: _BatchNorm, t: RowTile, mean: AP, rstd: AP) -> tuple[AP, AP]:
    """The affine part folded into per-channel a = weight * rstd, b = bias - mean * a."""
    kb, rows = bn.ctx.kb, t.rows
    scale = kb.tile(rows, (1,), F32)
    shift = kb.tile(rows, (1,), F32)
    if bn.has(bn.w_i):
        assert bn.w_i is not None
        wt = bn.vector(bn.w_i, t)
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=wt, in1=rstd, out=scale))
        kb.release(wt)
    else:
        kb.copy(rstd, scale)
    kb.emit(TensorScalar(inp=mean, out=shift, alu0=Alu.MULTIPLY, scalar0=scale, alu1=Alu.MULTIPLY, scalar1=-1.0))
    if bn.has(bn.b_i):
        assert bn.b_i is not None
        bt = bn.vector(bn.b_i, t)
        kb.emit(TensorTensor(alu=Alu.ADD, in0=shift, in1=bt, out=shift))
        kb.release(bt)
    return scale, shift


def _bn_store_saved(bn: _BatchNorm, t: RowTile, mean: AP, rstd: AP) -> list[AP]:
    """The saved mean and rstd outputs (when not empty); returns the tiles it made."""
    ctx, kb, rows, c0 = bn.ctx, bn.ctx.kb, t.rows, t.row0
    made = []
    for k, (meta, src) in enumerate(((ctx.call.outputs[1], mean), (ctx.call.outputs[2], rstd))):
        if meta.numel:
            res = kb.tile(rows, (1,), meta.dtype)
            kb.copy(src, res)
            kb.dma(bn.qout, res, hbm(ctx.outputs[1 + k], rows, meta.stride[0], [(1, 1)], meta.dtype,
                                     offset=meta.offset + c0 * meta.stride[0]))
            made.append(res)
    return made


def _bn_update_running(bn: _BatchNorm, t: RowTile, mean: AP, var: AP) -> list[AP]:
    """running = (1 - momentum) * running + momentum * batch statistic (unbiased variance), in
    place; returns the tiles it made."""
    ctx, kb, rows, c0 = bn.ctx, bn.ctx.kb, t.rows, t.row0
    assert bn.rm_i is not None and bn.rv_i is not None
    made: list[AP] = []
    n = bn.n
    unbias = n / (n - 1) if n > 1 else float("inf")
    for idx, stat, factor in ((bn.rm_i, mean, 1.0), (bn.rv_i, var, unbias)):
        meta = ctx.call.inputs[idx]
        run = bn.vector(idx, t)
        upd = kb.tile(rows, (1,), F32)
        kb.emit(TensorScalar(inp=stat, out=upd, alu0=Alu.MULTIPLY, scalar0=bn.momentum * factor))
        kb.emit(TensorScalar(inp=run, out=run, alu0=Alu.MULTIPLY, scalar0=1.0 - bn.momentum, alu1=Alu.ADD,
                             scalar1=upd))
        res = kb.tile(rows, (1,), meta.dtype)
        kb.copy(run, res)
        st = meta.stride[0]
        kb.dma(bn.qout, res, hbm(ctx.inputs[idx], rows, st, [(1, 1)], meta.dtype, offset=meta.offset + c0 * st))
        made += [run, upd, res]
    return made


def _batch_norm(ctx: LoweringContext, training: bool, w_i, b_i, rm_i, rv_i, momentum: float, eps: float) -> None:
    kb = ctx.kb
    x = ctx.call.inputs[0]
    y = ctx.call.outputs[0]
    shape = x.shape
    free = [0] + list(range(2, x.ndim))
    plan = row_plan(shape, free, [full_strides(x, shape), full_strides(y, shape)], [x.offset, y.offset], parts=ctx.spec.partitions)
    qin, qout = queues(kb)
    bn = _BatchNorm(ctx, training, w_i, b_i, rm_i, rv_i, momentum, eps, plan, free_pieces(plan, PIECE),
                    prod(shape[d] for d in free), qin, qout)
    if not training and not (bn.has(rm_i) and bn.has(rv_i)):
        raise NotImplementedError("batch norm in evaluation without running statistics")
    if training and _resident_batch_norm(bn):
        return
    held: list[AP] = []
    for t in plan.tiles:
        rows = t.rows
        mean, var = _bn_statistics(bn, t)
        rstd = kb.tile(rows, (1,), F32)
        kb.emit(TensorScalar(inp=var, out=rstd, alu0=Alu.ADD, scalar0=eps, alu1=Alu.POW, scalar1=-0.5))
        scale, shift = _bn_scale_shift(bn, t, mean, rstd)
        # the second pass: one ScalarE activation (x * a + b) per piece
        for j, (w, dims, offs) in enumerate(bn.pieces):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0], xt)
            yt = kb.tile(rows, (w,), y.dtype)
            kb.emit(Activation(func=Act.COPY, inp=xt, out=yt, scale=scale, bias=shift))
            store(kb, qout, yt, ctx.outputs[0], y.dtype, t.offsets[1] + offs[1], t.pstrides[1], rows, dims[1])
            kb.release(*held)
            held = [xt, yt]
        held += _bn_store_saved(bn, t, mean, rstd)
        if training and bn.has(rm_i) and bn.has(rv_i):
            held += _bn_update_running(bn, t, mean, var)
        held += [mean, var, rstd, scale, shift]
    kb.release(*held)


RESIDENT_SHARE = 2       # a resident batch norm keeps x in at most 1/2 of a partition's SBUF
SLAB = 2048             # elements of a resident batch norm's slab (8 KiB runs of FP32)
MIN_RUN_BYTES = 2048     # a resident batch norm reads (sample, channel) runs of at least 2 KiB (S6's knee)


def _groups(kb, bn: _BatchNorm) -> tuple[int, int] | None:
    """(partitions per channel g, channels per tile) of the resident layout, or None when x does not
    fit it: contiguous NC(spatial) x and y, runs of >= 2 KiB, a channel tile's share of x resident."""
    ctx = bn.ctx
    x, y = ctx.call.inputs[0], ctx.call.outputs[0]
    P = ctx.spec.partitions
    if x.ndim < 3 or not x.is_contiguous() or not y.is_contiguous() or x.dtype != y.dtype:
        return None
    N, C = x.shape[0], x.shape[1]
    HW = prod(x.shape[2:])
    if HW * x.dtype.itemsize < MIN_RUN_BYTES or N == 0:
        return None
    # a group of partitions starts at 0, 32, 64 or 96 (tiles of <= 32 partitions), 0 or 64 (<= 64):
    # the g copies of the channels sit at multiples of C, so C must be 32 or 64 itself for g > 1
    g = max([d for d in range(1, N + 1) if N % d == 0 and C * d <= P], default=1) if C in (32, 64) else 1
    if (N // g) * HW * x.dtype.itemsize > kb.spec.sbuf_bytes_per_partition // RESIDENT_SHARE:
        return None
    return g, min(C, P)


def _resident_batch_norm(bn: _BatchNorm) -> bool:
    """Training batch norm that reads x once: a channel's N x spatial elements are split over g
    partitions (g samples' share each, g the largest divisor of N with C * g <= 128, so 64 channels
    use all 128 partitions; other channel counts g = 1, their partitions' placement rules), held in SBUF between the statistics and the normalisation (the
    hardware's 1.5x of the two-pass form's traffic is what the issue measured). bn_stats / bn_aggr
    give each partition's (mean, var) as its runs arrive; a TensorE matmul against the [P, P] 0/1
    "same channel" matrix sums the g partitions' means, broadcast back to all of them, and a second
    one their variances plus the squared deviations of their means (Chan's parallel combination,
    no E[x^2] - mean^2 cancellation). The normalisation is one ScalarE activation per sample slab,
    written in place and stored as it finishes. Returns False when x does not fit the layout."""
    ctx, kb = bn.ctx, bn.ctx.kb
    layout = _groups(kb, bn)
    if layout is None:
        return False
    g, cpt = layout
    x = ctx.call.inputs[0]
    N, C = x.shape[0], x.shape[1]
    HW = prod(x.shape[2:])
    ns = N // g                        # samples a partition holds
    BN_MAX = ctx.spec.bn_stats_fmax
    same = None
    if g > 1:
        # same[k, m] = 1 where partitions k and m hold the same channel (k = m mod cpt)
        P = g * cpt
        pos = kb.tile(P, (P,), "int32")
        kb.emit(Iota(out=pos, base=P * cpt, channel_multiplier=-1, coefs=(1,)))
        same = kb.tile(P, (P,), F32)
        kb.emit(TensorScalar(inp=pos, out=same, alu0=Alu.MOD, scalar0=float(cpt), alu1=Alu.IS_EQUAL, scalar1=0.0))
        kb.release(pos)
    # the per-channel vectors off the big transfers' queues: the weight and bias on the output queue
    # (idle until the normalised slabs leave), the saved and running statistics after the last load
    early = replace(bn, qin=[bn.qout, bn.qout])
    late = replace(bn, qin=[bn.qin[0], bn.qin[0]], qout=bn.qin[0])
    # slabs of one sample's run or part of it, so the last slab's statistics and the first one's
    # normalisation (which the transfers wait for) are short
    parts = [(s, h0, min(SLAB, HW - h0)) for s in range(ns) for h0 in range(0, HW, SLAB)]
    held: list[AP] = []
    for c0 in range(0, C, cpt):
        cb = min(cpt, C - c0)
        rows = g * cb
        t = RowTile(cb, c0, (), ())
        # the weight and bias first, on the output queue (idle until the normalised slabs leave)
        wt = _group_vector(early, bn.w_i, c0, cb, g) if bn.has(bn.w_i) else None
        bt = _group_vector(early, bn.b_i, c0, cb, g) if bn.has(bn.b_i) else None
        # one tile a sample slab: the dependency tracking is per tile, so a slab's statistics, its
        # normalisation and its store wait only for its own transfers
        slabs = [kb.tile(rows, (w,), x.dtype) for _, _, w in parts]
        nbn = sum(ceil_div(w, BN_MAX) for _, _, w in parts)
        st = kb.tile(rows, (3 * nbn,), F32)
        k = 0
        for i, ((s, h0, w), xt) in enumerate(zip(parts, slabs)):
            for j in range(g):
                n = j * ns + s
                src = hbm(ctx.inputs[0], cb, HW, [(1, w)], x.dtype, offset=x.offset + (n * C + c0) * HW + h0)
                kb.dma(bn.qin[(i * g + j) % 2], src, xt.rows(j * cb, cb))
            for e0 in range(0, w, BN_MAX):
                kb.emit(BnStats(inp=xt.view(e0, [(1, min(BN_MAX, w - e0))]), out=st.view(3 * k, [(1, 3)])))
                k += 1
        mv = kb.tile(rows, (2,), F32)
        kb.emit(BnAggr(inp=st, out=mv))
        mean = kb.tile(rows, (1,), F32)
        var = kb.tile(rows, (1,), F32)
        if same is None:
            kb.copy(mv.view(0, [(1, 1)]), mean)
            kb.copy(mv.view(1, [(1, 1)]), var)
        else:
            _combine(kb, same.view(0, [(1, rows)]).rows(0, rows), mv, mean, var, g)
        kb.release(st, mv)
        rstd = kb.tile(rows, (1,), F32)
        kb.emit(TensorScalar(inp=var, out=rstd, alu0=Alu.ADD, scalar0=bn.eps, alu1=Alu.POW, scalar1=-0.5))
        scale, shift = _group_scale_shift(kb, rows, mean, rstd, wt, bt)
        outq = [bn.qout, bn.qin[1]]
        for i, ((s, h0, w), xt) in enumerate(zip(parts, slabs)):
            kb.emit(Activation(func=Act.COPY, inp=xt, out=xt, scale=scale, bias=shift))
            for j in range(g):
                n = j * ns + s
                dst = hbm(ctx.outputs[0], cb, HW, [(1, w)], x.dtype,
                          offset=ctx.call.outputs[0].offset + (n * C + c0) * HW + h0)
                kb.dma(outq[(i * g + j) % 2], xt.rows(j * cb, cb), dst)
        made = _bn_store_saved(late, t, mean.rows(0, cb), rstd.rows(0, cb))
        if bn.has(bn.rm_i) and bn.has(bn.rv_i):
            made += _bn_update_running(late, t, mean.rows(0, cb), var.rows(0, cb))
        kb.release(*held)
        held = [*slabs, mean, var, rstd, scale, shift, *made, *[v for v in (wt, bt) if v is not None]]
    kb.release(*held)
    if same is not None:
        kb.release(same)
    return True


def _combine(kb, same: AP, mv: AP, mean: AP, var: AP, g: int) -> None:
    """Each channel's mean and variance from its g partitions' (mean, var) of equally many elements,
    broadcast back to all g: mean = avg(mean_p), var = avg(var_p + (mean_p - mean)^2)."""
    rows = mv.partitions
    kb.emit(LoadStationary(src=same))
    ps = kb.psum_tile(rows, (1,), F32)
    kb.emit(MultiplyMoving(moving=mv.view(0, [(1, 1)]), dst=ps))
    kb.emit(Activation(func=Act.COPY, inp=ps, out=mean, scale=1.0 / g))
    dev = kb.tile(rows, (1,), F32)
    kb.emit(TensorScalar(inp=mv.view(0, [(1, 1)]), out=dev, alu0=Alu.SUBTRACT, scalar0=mean))
    kb.emit(ScalarTensorTensor(inp=dev, scalar0=dev, alu0=Alu.MULTIPLY, in1=mv.view(1, [(1, 1)]), alu1=Alu.ADD,
                               out=dev))
    ps2 = kb.psum_tile(rows, (1,), F32)
    kb.emit(MultiplyMoving(moving=dev, dst=ps2))
    kb.emit(Activation(func=Act.COPY, inp=ps2, out=var, scale=1.0 / g))
    kb.release(ps, ps2, dev)


def _group_vector(bn: _BatchNorm, i: int | None, c0: int, cb: int, g: int) -> AP:
    """Input ``i`` (a per-channel vector) for channels c0 .. c0+cb, repeated for each of the g
    partition groups (one small DMA a group), FP32."""
    ctx, kb = bn.ctx, bn.ctx.kb
    assert i is not None
    meta = ctx.call.inputs[i]
    t = kb.tile(g * cb, (1,), meta.dtype)
    st = meta.stride[0] if meta.ndim else 0
    for j in range(g):
        kb.dma(bn.qin[1], hbm(ctx.inputs[i], cb, st, [(1, 1)], meta.dtype, offset=meta.offset + c0 * st),
               t.rows(j * cb, cb))
    if meta.dtype == F32:
        return t
    f = kb.tile(g * cb, (1,), F32)
    kb.copy(t, f)
    kb.release(t)
    return f


def _group_scale_shift(kb, rows: int, mean: AP, rstd: AP, wt: AP | None, bt: AP | None) -> tuple[AP, AP]:
    """:func:`_bn_scale_shift` over the g partition groups, the weight and bias already loaded."""
    scale = kb.tile(rows, (1,), F32)
    shift = kb.tile(rows, (1,), F32)
    if wt is not None:
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=wt, in1=rstd, out=scale))
    else:
        kb.copy(rstd, scale)
    kb.emit(TensorScalar(inp=mean, out=shift, alu0=Alu.MULTIPLY, scalar0=scale, alu1=Alu.MULTIPLY, scalar1=-1.0))
    if bt is not None:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=shift, in1=bt, out=shift))
    return scale, shift


@lowering("aten::native_batch_norm")
def _native_batch_norm(ctx: LoweringContext) -> None:
    _batch_norm(ctx, bool(attr(ctx, "training", True)), 1, 2, 3, 4, float(attr(ctx, "momentum", 0.1)),
                float(attr(ctx, "eps", 1e-5)))


@lowering("aten::_native_batch_norm_legit")
def _native_batch_norm_legit(ctx: LoweringContext) -> None:
    _native_batch_norm(ctx)


@lowering("aten::_native_batch_norm_legit.no_stats")
def _native_batch_norm_legit_no_stats(ctx: LoweringContext) -> None:
    _batch_norm(ctx, True, 1, 2, None, None, float(attr(ctx, "momentum", 0.1)), float(attr(ctx, "eps", 1e-5)))


@lowering("aten::_batch_norm_with_update")
def _batch_norm_with_update(ctx: LoweringContext) -> None:
    _batch_norm(ctx, True, 1, 2, 3, 4, float(attr(ctx, "momentum", 0.1)), float(attr(ctx, "eps", 1e-5)))


GROUP_PIECE = 4096   # elements of a (sample, group) row normalised at a time


def _group_pieces(cg: int, HW: int, width: int) -> list[tuple[int, int, int, int, int]]:
    """A group norm row (cg channels of HW elements) in pieces of whole channels, or of one channel's
    part when a channel is longer than ``width``: (offset, elements, first channel, channels,
    elements per channel in the piece)."""
    if HW <= width:
        k = max(1, min(cg, width // max(HW, 1)))
        return [(j0 * HW, min(k, cg - j0) * HW, j0, min(k, cg - j0), HW) for j0 in range(0, cg, k)]
    return [(j * HW + e0, min(width, HW - e0), j, 1, min(width, HW - e0)) for j in range(cg)
            for e0 in range(0, HW, width)]


@dataclass
class _GroupNorm:
    """One group norm call: each (sample, group) block is a row of h = C/G x HxW contiguous
    elements, read in the pieces of :func:`_group_pieces`."""

    ctx: LoweringContext
    G: int
    cg: int                      # channels per group
    h: int
    eps: float
    plan: RowPlan
    pieces: list[tuple[int, int, int, int, int]]
    resident: bool               # a row stays in SBUF between the statistics and the normalisation
    qin: list[int]
    qout: int

    def piece(self, t: RowTile, xt: AP | None, c0: int, w: int, q: int) -> AP:
        """Elements c0 .. c0+w of the tile's rows: a view of the resident rows, else loaded now."""
        if xt is not None:  # resident
            return xt.view(c0, [(1, w)])
        ctx = self.ctx
        x = ctx.call.inputs[0]
        pt = ctx.kb.tile(t.rows, (w,), x.dtype)
        load(ctx.kb, q, ctx.inputs[0], x.dtype, t.offsets[0] + c0, t.pstrides[0], t.rows, [(1, w)], pt)
        return pt


def _group_norm_plan(ctx: LoweringContext) -> _GroupNorm:
    x, y = ctx.call.inputs[0], ctx.call.outputs[0]
    N, C, HW, G = (int(attr(ctx, k)) for k in ("N", "C", "HxW", "group"))
    eps = float(attr(ctx, "eps", 1e-5))
    if not (x.is_contiguous() and y.is_contiguous()) or N * C * HW == 0:
        raise NotImplementedError("group norm of a non-contiguous or empty input")
    cg = C // G
    h = cg * HW   # one (sample, group) block: contiguous
    rows_total = N * G
    xm = TensorMeta((rows_total, h), (h, 1), x.dtype, x.offset)
    ym = TensorMeta((rows_total, h), (h, 1), y.dtype, y.offset)
    plan = row_plan((rows_total, h), [1], [xm.stride, ym.stride], [xm.offset, ym.offset], parts=ctx.spec.partitions)
    qin, qout = queues(ctx.kb)
    pieces = _group_pieces(cg, HW, GROUP_PIECE)
    # a (sample, group) row stays in SBUF between the statistics and the normalisation when it takes
    # at most a third of a partition; longer rows (8 groups of 64 channels of 64x64) are read twice
    resident = h * x.dtype.itemsize <= ctx.spec.sbuf_bytes_per_partition // 3
    return _GroupNorm(ctx, G, cg, h, eps, plan, pieces, resident, qin, qout)


def _gn_statistics(gn: _GroupNorm, t: RowTile, xt: AP | None) -> tuple[AP, AP, AP, AP]:
    """(bn_stats tile, [mean, var], rstd, -mean * rstd) of the tile's rows."""
    kb, rows = gn.ctx.kb, t.rows
    BN_MAX = gn.ctx.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    nbn = sum(ceil_div(wd, BN_MAX) for _, wd, _, _, _ in gn.pieces)
    st = kb.tile(rows, (3 * nbn,), F32)
    k = 0
    prev: list[AP] = []
    for n, (c0, wd, _, _, _) in enumerate(gn.pieces):
        xp = gn.piece(t, xt, c0, wd, gn.qin[n % 2])
        for e0 in range(0, wd, BN_MAX):
            kb.emit(BnStats(inp=xp.view(e0, [(1, min(BN_MAX, wd - e0))]), out=st.view(3 * k, [(1, 3)])))
            k += 1
        if not gn.resident:
            kb.release(*prev)
            prev = [xp]
    kb.release(*prev)
    mv = kb.tile(rows, (2,), F32)
    kb.emit(BnAggr(inp=st, out=mv))
    rstd, nmr = kb.tile(rows, (1,), F32), kb.tile(rows, (1,), F32)
    kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=rstd, alu0=Alu.ADD, scalar0=gn.eps, alu1=Alu.POW,
                         scalar1=-0.5))
    kb.emit(TensorScalar(inp=mv.view(0, [(1, 1)]), out=nmr, alu0=Alu.MULTIPLY, scalar0=rstd, alu1=Alu.MULTIPLY,
                         scalar1=-1.0))
    return st, mv, rstd, nmr


def _gn_gather_affine(gn: _GroupNorm, t: RowTile, tiles: list[AP]) -> dict[int, AP]:
    """Input position (1: weight, 2: bias) -> a [rows, C/G] tile of each row's group's channels;
    the tiles made are added to ``tiles``."""
    ctx, kb, rows = gn.ctx, gn.ctx.kb, t.rows
    w, b = ctx.call.inputs.optional(1), ctx.call.inputs.optional(2)
    vts: dict[int, AP] = {}
    # row r is group r % G: its channels' weights, gathered by index (g * C/G + j)
    gidx = kb.tile(rows, (1,), "int32")
    kb.emit(Iota(out=gidx, base=t.row0, channel_multiplier=1))
    kb.emit(TensorScalar(inp=gidx, out=gidx, alu0=Alu.MOD, scalar0=gn.G))
    tiles.append(gidx)
    for k, meta in ((1, w), (2, b)):
        if meta is None:
            continue
        vt = kb.tile(rows, (gn.cg,), meta.dtype)
        table = hbm(ctx.inputs[k], gn.G, gn.cg * meta.stride[0], [(meta.stride[0], gn.cg)], meta.dtype,
                    offset=meta.offset)
        kb.emit(DmaGather(queue=gn.qin[1], table=table, index=gidx, dst=vt))
        vts[k] = vt
        tiles.append(vt)
    return vts


def _gn_normalize(gn: _GroupNorm, t: RowTile, xt: AP | None, rstd: AP, nmr: AP, vts: dict[int, AP],
                  affine: bool) -> list[AP]:
    """y = (x - mean) * rstd (times weight, plus bias) piece by piece; returns the last piece's
    tiles (the others are released as the next are made)."""
    ctx, kb, rows = gn.ctx, gn.ctx.kb, t.rows
    y = ctx.call.outputs[0]
    prev: list[AP] = []
    for n, (c0, wd, j0, nch, per) in enumerate(gn.pieces):
        xp = gn.piece(t, xt, c0, wd, gn.qin[n % 2])
        yt = kb.tile(rows, (wd,), y.dtype)
        made = [yt] + ([] if gn.resident else [xp])
        if not affine:
            kb.emit(Activation(func=Act.COPY, inp=xp, out=yt, scale=rstd, bias=nmr))
        else:
            xh = kb.tile(rows, (wd,), F32)
            kb.emit(Activation(func=Act.COPY, inp=xp, out=xh, scale=rstd, bias=nmr))
            per_ch = xh.view(0, [(per, nch), (1, per)])
            for k, vt in vts.items():
                kb.emit(TensorTensor(alu=Alu.MULTIPLY if k == 1 else Alu.ADD, in0=per_ch,
                                     in1=vt.view(j0, [(1, nch), (0, per)]), out=per_ch))
            kb.copy(xh, yt)
            made.append(xh)
        store(kb, gn.qout, yt, ctx.outputs[0], y.dtype, t.offsets[1] + c0, t.pstrides[1], rows, [(1, wd)])
        kb.release(*prev)
        prev = made
    return prev


@lowering("aten::native_group_norm")
def _native_group_norm(ctx: LoweringContext) -> None:
    kb = ctx.kb
    x, w, b = ctx.call.inputs[0], ctx.call.inputs.optional(1), ctx.call.inputs.optional(2)
    mean_o, rstd_o = ctx.call.outputs[1:3]
    gn = _group_norm_plan(ctx)
    held: list[AP] = []
    for t in gn.plan.tiles:
        rows, r0 = t.rows, t.row0
        tiles: list[AP] = []
        xt = kb.tile(rows, (gn.h,), x.dtype) if gn.resident else None
        if xt is not None:
            load(kb, gn.qin[0], ctx.inputs[0], x.dtype, t.offsets[0], t.pstrides[0], rows, gn.plan.dims(0), xt)
            tiles.append(xt)
        st, mv, rstd, nmr = _gn_statistics(gn, t, xt)
        tiles += [st, mv, rstd, nmr]
        affine = w is not None or b is not None
        vts = _gn_gather_affine(gn, t, tiles) if affine else {}
        tiles += _gn_normalize(gn, t, xt, rstd, nmr, vts, affine)
        for meta, src, k in ((mean_o, mv.view(0, [(1, 1)]), 1), (rstd_o, rstd, 2)):
            res = kb.tile(rows, (1,), meta.dtype)
            kb.copy(src, res)
            kb.dma(gn.qout, res, hbm(ctx.outputs[k], rows, 1, [(1, 1)], meta.dtype, offset=meta.offset + r0))
            tiles.append(res)
        kb.release(*held)
        held = tiles
    kb.release(*held)
