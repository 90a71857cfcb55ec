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

from dataclasses import dataclass
from math import prod

from ...isa import AP, Act, Activation, Alu, BnAggr, BnStats, DmaGather, Iota, TensorScalar, TensorTensor, hbm
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
