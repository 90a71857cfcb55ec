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

from math import prod

from ...isa import AP, Act, Activation, Alu, BnAggr, BnStats, DmaGather, Iota, TensorScalar, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from .common import F32, attr, ceil_div, free_pieces, full_strides, load, queues, row_plan, store

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


def _batch_norm(ctx: LoweringContext, training: bool, w_i, b_i, rm_i, rv_i, momentum: float, eps: float) -> None:
    BN_MAX = ctx.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    kb = ctx.kb
    x = ctx.call.inputs[0]
    y, save_mean, save_rstd = ctx.call.outputs[:3]
    ins = ctx.call.inputs
    present = [i is not None and ins.optional(i) is not None for i in (w_i, b_i, rm_i, rv_i)]
    has_w, has_b, has_rm, has_rv = present
    if not training and not (has_rm and has_rv):
        raise NotImplementedError("batch norm in evaluation without running statistics")
    shape = x.shape
    free = [0] + list(range(2, x.ndim))
    plan = row_plan(shape, free, [full_strides(x, shape), full_strides(y, shape)], [x.offset, y.offset], parts=ctx.spec.partitions)
    pieces = free_pieces(plan, PIECE)
    n = prod(shape[d] for d in free)
    qin, qout = queues(kb)
    held: list[AP] = []
    for t in plan.tiles:
        rows, c0 = t.rows, t.row0
        mean = kb.tile(rows, (1,), F32)
        var = kb.tile(rows, (1,), F32)
        if training:
            nbn = sum(ceil_div(w, BN_MAX) for w, _, _ in pieces)
            st = kb.tile(rows, (3 * nbn,), F32)
            k = 0
            for j, (w, dims, offs) in enumerate(pieces):
                xt = kb.tile(rows, (w,), x.dtype)
                load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0], xt)
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
            rm = _vec_tile(kb, qin[1], ctx.inputs[rm_i], ins[rm_i], c0, rows)
            rv = _vec_tile(kb, qin[1], ctx.inputs[rv_i], ins[rv_i], c0, rows)
            kb.copy(rm, mean)
            kb.copy(rv, var)
            kb.release(rm, rv)
        rstd = kb.tile(rows, (1,), F32)
        kb.emit(TensorScalar(inp=var, out=rstd, alu0=Alu.ADD, scalar0=eps, alu1=Alu.POW, scalar1=-0.5))
        scale = kb.tile(rows, (1,), F32)
        shift = kb.tile(rows, (1,), F32)
        if has_w:
            wt = _vec_tile(kb, qin[1], ctx.inputs[w_i], ins[w_i], c0, rows)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=wt, in1=rstd, out=scale))
            kb.release(wt)
        else:
            kb.copy(rstd, scale)
        kb.emit(TensorScalar(inp=mean, out=shift, alu0=Alu.MULTIPLY, scalar0=scale, alu1=Alu.MULTIPLY, scalar1=-1.0))
        if has_b:
            bt = _vec_tile(kb, qin[1], ctx.inputs[b_i], ins[b_i], c0, rows)
            kb.emit(TensorTensor(alu=Alu.ADD, in0=shift, in1=bt, out=shift))
            kb.release(bt)
        for j, (w, dims, offs) in enumerate(pieces):
            xt = kb.tile(rows, (w,), x.dtype)
            load(kb, qin[j % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows, dims[0], xt)
            yt = kb.tile(rows, (w,), y.dtype)
            kb.emit(Activation(func=Act.COPY, inp=xt, out=yt, scale=scale, bias=shift))
            store(kb, qout, yt, ctx.outputs[0], y.dtype, t.offsets[1] + offs[1], t.pstrides[1], rows, dims[1])
            kb.release(*held)
            held = [xt, yt]
        for k, (meta, src) in enumerate(((save_mean, mean), (save_rstd, rstd))):
            if meta.numel:
                res = kb.tile(rows, (1,), meta.dtype)
                kb.copy(src, res)
                kb.dma(qout, res, hbm(ctx.outputs[1 + k], rows, meta.stride[0], [(1, 1)], meta.dtype,
                                      offset=meta.offset + c0 * meta.stride[0]))
                held.append(res)
        if training and has_rm and has_rv:
            # running = (1 - momentum) * running + momentum * batch statistic (unbiased variance)
            unbias = n / (n - 1) if n > 1 else float("inf")
            for idx, stat, factor in ((rm_i, mean, 1.0), (rv_i, var, unbias)):
                meta = ins[idx]
                run = _vec_tile(kb, qin[1], ctx.inputs[idx], meta, c0, rows)
                upd = kb.tile(rows, (1,), F32)
                kb.emit(TensorScalar(inp=stat, out=upd, alu0=Alu.MULTIPLY, scalar0=momentum * factor))
                kb.emit(TensorScalar(inp=run, out=run, alu0=Alu.MULTIPLY, scalar0=1.0 - momentum, alu1=Alu.ADD,
                                     scalar1=upd))
                res = kb.tile(rows, (1,), meta.dtype)
                kb.copy(run, res)
                st = meta.stride[0]
                kb.dma(qout, res, hbm(ctx.inputs[idx], rows, st, [(1, 1)], meta.dtype, offset=meta.offset + c0 * st))
                held += [run, upd, res]
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


@lowering("aten::native_group_norm")
def _native_group_norm(ctx: LoweringContext) -> None:
    BN_MAX = ctx.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    kb = ctx.kb
    x, w, b = ctx.call.inputs[0], ctx.call.inputs.optional(1), ctx.call.inputs.optional(2)
    y, mean_o, rstd_o = ctx.call.outputs[:3]
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
    qin, qout = queues(kb)
    pieces = _group_pieces(cg, HW, GROUP_PIECE)
    # a (sample, group) row stays in SBUF between the statistics and the normalisation when it takes
    # at most a third of a partition; longer rows (8 groups of 64 channels of 64x64) are read twice
    resident = h * x.dtype.itemsize <= ctx.spec.sbuf_bytes_per_partition // 3
    nbn = sum(ceil_div(wd, BN_MAX) for _, wd, _, _, _ in pieces)
    held: list[AP] = []
    for t in plan.tiles:
        rows, r0 = t.rows, t.row0
        tiles: list[AP] = []
        xt = kb.tile(rows, (h,), x.dtype) if resident else None
        if xt is not None:
            load(kb, qin[0], ctx.inputs[0], x.dtype, t.offsets[0], t.pstrides[0], rows, plan.dims(0), xt)
            tiles.append(xt)

        def piece_of(c0: int, w: int, q: int, xt=xt, rows=rows, t=t) -> AP:
            if xt is not None:  # resident
                return xt.view(c0, [(1, w)])
            pt = kb.tile(rows, (w,), x.dtype)
            load(kb, q, ctx.inputs[0], x.dtype, t.offsets[0] + c0, t.pstrides[0], rows, [(1, w)], pt)
            return pt

        st = kb.tile(rows, (3 * nbn,), F32)
        k = 0
        prev: list[AP] = []
        for n, (c0, wd, _, _, _) in enumerate(pieces):
            xp = piece_of(c0, wd, qin[n % 2])
            for e0 in range(0, wd, BN_MAX):
                kb.emit(BnStats(inp=xp.view(e0, [(1, min(BN_MAX, wd - e0))]), out=st.view(3 * k, [(1, 3)])))
                k += 1
            if not resident:
                kb.release(*prev)
                prev = [xp]
        kb.release(*prev)
        mv = kb.tile(rows, (2,), F32)
        kb.emit(BnAggr(inp=st, out=mv))
        rstd, nmr = kb.tile(rows, (1,), F32), kb.tile(rows, (1,), F32)
        kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=rstd, alu0=Alu.ADD, scalar0=eps, alu1=Alu.POW, scalar1=-0.5))
        kb.emit(TensorScalar(inp=mv.view(0, [(1, 1)]), out=nmr, alu0=Alu.MULTIPLY, scalar0=rstd, alu1=Alu.MULTIPLY,
                             scalar1=-1.0))
        tiles += [st, mv, rstd, nmr]
        vts = {}
        affine = w is not None or b is not None
        if affine:
            # row r is group r % G: its channels' weights, gathered by index (g * C/G + j)
            gidx = kb.tile(rows, (1,), "int32")
            kb.emit(Iota(out=gidx, base=r0, channel_multiplier=1))
            kb.emit(TensorScalar(inp=gidx, out=gidx, alu0=Alu.MOD, scalar0=G))
            tiles.append(gidx)
            for k, meta in ((1, w), (2, b)):
                if meta is None:
                    continue
                vt = kb.tile(rows, (cg,), meta.dtype)
                table = hbm(ctx.inputs[k], G, cg * meta.stride[0], [(meta.stride[0], cg)], meta.dtype,
                            offset=meta.offset)
                kb.emit(DmaGather(queue=qin[1], table=table, index=gidx, dst=vt))
                vts[k] = vt
                tiles.append(vt)
        prev = []
        for n, (c0, wd, j0, nch, per) in enumerate(pieces):
            xp = piece_of(c0, wd, qin[n % 2])
            yt = kb.tile(rows, (wd,), y.dtype)
            made = [yt] + ([] if resident else [xp])
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
            store(kb, qout, yt, ctx.outputs[0], y.dtype, t.offsets[1] + c0, t.pstrides[1], rows, [(1, wd)])
            kb.release(*prev)
            prev = made
        tiles += prev
        for meta, src, k in ((mean_o, mv.view(0, [(1, 1)]), 1), (rstd_o, rstd, 2)):
            res = kb.tile(rows, (1,), meta.dtype)
            kb.copy(src, res)
            kb.dma(qout, res, hbm(ctx.outputs[k], rows, 1, [(1, 1)], meta.dtype, offset=meta.offset + r0))
            tiles.append(res)
        kb.release(*held)
        held = tiles
    kb.release(*held)
