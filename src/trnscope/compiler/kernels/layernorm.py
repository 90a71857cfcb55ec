"""LayerNorm forward and backward, and the moments behind them: var, std, var_mean, std_mean.

Forward (NKI LayerNorm tutorial v2, hardware.md 3.3): per 128-row tile VectorE's bn_stats /
bn_aggr give mean and variance in about N cycles, one tiny tensor_scalar turns the variance into
rstd = (var + eps)^-1/2, ScalarE normalises the row in one activation (x * rstd + (-mean * rstd),
both per-partition operands), and VectorE applies the weight and bias rows, which are loaded once
and broadcast to every partition (in the output's 16-bit type for BF16/FP16, as NKI kernels do:
VectorE's fast modes make that 4x cheaper than FP32). mean and rstd are stored per row as the
op's extra outputs.

Backward: grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = grad_out * weight,
computed per row tile with the row sums add-reduced on ScalarE. grad_weight and grad_bias are sums
over all rows, i.e. over partitions and tiles: TensorE computes them as matmuls against a ones
column (the NKI idiom for a cross-partition sum), accumulating every row tile into one PSUM tile
with the normalized dim on the partitions, stored once at the end with a DMA transpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ...isa import (
    AP, Act, Activation, Alu, BnAggr, BnStats, DType, Engine, LoadStationary, Memset, MultiplyMoving, TensorScalar,
    TensorTensor, TensorTranspose, hbm,
)
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from .common import F32, RowPlan, RowStores, RowTile, attr, ceil_div, core_shares, free_pieces, full_strides, load, meet_partials, \
    queues, reduced_strides, row_plan, store


# one PSUM bank: 2 KiB per partition (hardware.md 3.2, S10)
PSUM_BANK_BYTES = 2048
# PSUM banks the layer norm's affine step keeps in flight: two row tiles of 1024 FP32, half of the 8
PSUM_RING = 4


def _bn_moments(kb: KernelBuilder, xt: AP, rows: int, cols: int) -> AP:
    """[rows, 2] = (mean, population variance) of a [rows, cols] tile: bn_stats per 512, bn_aggr."""
    BN_MAX = kb.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    nch = ceil_div(cols, BN_MAX)
    st = kb.tile(rows, (3 * nch,), F32)
    for j in range(nch):
        c0 = j * BN_MAX
        w = min(BN_MAX, cols - c0)
        kb.emit(BnStats(inp=xt.view(c0, [(1, w)]), out=st.view(3 * j, [(1, 3)])))
    mv = kb.tile(rows, (2,), F32)
    kb.emit(BnAggr(inp=st, out=mv))
    kb.release(st)
    return mv


def _broadcast_row(kb: KernelBuilder, q: int, tensor: int, meta, rows: int, h: int, dtype=F32) -> AP:
    """A [normalized] weight/bias vector loaded once into every partition (pstride 0)."""
    P = kb.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    t = kb.tile(P, (h,), dtype)
    dims = [(st, sz) for st, sz in zip(meta.stride, meta.shape) if sz > 1] or [(1, 1)]
    kb.dma(q, hbm(tensor, rows, 0, dims, meta.dtype, offset=meta.offset), t.rows(0, rows))
    return t


def _normalized(ctx: LoweringContext, x) -> int:
    shape = attr(ctx, "normalized_shape", (x.shape[-1],))
    return len(tuple(shape))


@lowering("aten::native_layer_norm")
def _layer_norm(ctx: LoweringContext) -> None:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    x, w, bmeta = ctx.call.inputs[0], ctx.call.inputs.optional(1), ctx.call.inputs.optional(2)
    y, mean_o, rstd_o = ctx.call.outputs[:3]
    eps = float(attr(ctx, "eps", 1e-5))
    nd = _normalized(ctx, x)
    shape = x.shape
    free = list(range(x.ndim - nd, x.ndim))
    h = prod(shape[d] for d in free) if free else 1
    strides = [full_strides(x, shape), full_strides(y, shape), full_strides(mean_o, shape),
               full_strides(rstd_o, shape)]
    plan = row_plan(shape, free, strides, [x.offset, y.offset, mean_o.offset, rstd_o.offset], parts=ctx.spec.partitions)
    qin, qout = queues(kb)
    rows0 = min(P, plan.nrows)
    # 16-bit outputs: the affine part runs on 16-bit tiles, where VectorE's tensor_tensor is 4x
    # faster (fast path x NC-v3 2x mode); FP32 outputs keep FP32 intermediates
    adt = y.dtype if y.dtype.is_half else F32
    w_t = _broadcast_row(kb, qin[1], ctx.inputs[1], w, rows0, h, adt) if w is not None else None
    b_t = _broadcast_row(kb, qin[1], ctx.inputs[2], bmeta, rows0, h, adt) if bmeta is not None else None
    # per-partition bytes of one row tile's buffers; the affine temporary is double-buffered too
    # when two tiles' worth fit SBUF next to the weight rows
    io = h * (x.dtype.itemsize + y.dtype.itemsize)
    fixed = h * adt.itemsize * ((w_t is not None) + (b_t is not None))
    room = kb.spec.sbuf_bytes_per_partition - 16 * 1024 - fixed
    if io + h * adt.itemsize >= room:
        raise NotImplementedError(f"native_layer_norm: rows of {h} elements do not fit SBUF in one tile")
    double_tmp = 2 * (io + h * adt.itemsize) < room
    double_io = 2 * io + h * adt.itemsize < room
    # FP32 affine rows go through PSUM a bank (512 FP32) at a time, PSUM_RING banks in flight
    in_psum = adt == F32
    bank = PSUM_BANK_BYTES // 4
    ring: list[AP] = []
    stats = RowStores(kb, qout, len(plan.tiles), scalar_copies=True)
    depth = 1 if double_io else 0   # deeper makes the stores share the DMA engines with more loads: slower
    gens: list[list[AP]] = []
    for t in plan.tiles:
        n = t.rows
        xt = kb.tile(n, (h,), x.dtype)
        load(kb, qin[0], ctx.inputs[0], x.dtype, t.offsets[0], t.pstrides[0], n, plan.dims(0), xt)
        mv = _bn_moments(kb, xt, n, h)
        rstd = kb.tile(n, (1,), F32)
        nmr = kb.tile(n, (1,), F32)
        kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=rstd, alu0=Alu.ADD, scalar0=eps, alu1=Alu.POW,
                             scalar1=-0.5))
        kb.emit(TensorScalar(inp=mv.view(0, [(1, 1)]), out=nmr, alu0=Alu.MULTIPLY, scalar0=rstd,
                             alu1=Alu.MULTIPLY, scalar1=-1.0))
        yt = kb.tile(n, (h,), y.dtype)
        if w_t is None and b_t is None:
            kb.emit(Activation(func=Act.COPY, inp=xt, out=yt, scale=rstd, bias=nmr))
            tmp = None
        elif in_psum:
            # ScalarE writes the normalised rows into PSUM a bank at a time: each of VectorE's affine
            # steps then reads one PSUM and one SBUF input, N cycles instead of FP32's 2N (S9), the
            # weight product staying in PSUM for the bias add
            tmp = None
            for c0 in range(0, h, bank):
                cw = min(bank, h - c0)
                pt = kb.psum_tile(n, (cw,), F32)
                kb.emit(Activation(func=Act.COPY, inp=xt.view(c0, [(1, cw)]), out=pt, scale=rstd, bias=nmr))
                yc = yt.view(c0, [(1, cw)])
                if w_t is not None:
                    kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=pt, in1=w_t.rows(0, n).view(c0, [(1, cw)]),
                                         out=pt if b_t is not None else yc))
                if b_t is not None:
                    kb.emit(TensorTensor(alu=Alu.ADD, in0=pt, in1=b_t.rows(0, n).view(c0, [(1, cw)]), out=yc))
                ring.append(pt)
                if len(ring) > PSUM_RING:
                    kb.release(ring.pop(0))
        else:
            tmp = kb.tile(n, (h,), adt)
            kb.emit(Activation(func=Act.COPY, inp=xt, out=tmp, scale=rstd, bias=nmr))
            if w_t is not None and b_t is not None:
                kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tmp, in1=w_t.rows(0, n), out=tmp))
                kb.emit(TensorTensor(alu=Alu.ADD, in0=tmp, in1=b_t.rows(0, n), out=yt))
            elif w_t is not None:
                kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tmp, in1=w_t.rows(0, n), out=yt))
            else:
                assert b_t is not None  # w_t and b_t both None is the branch above
                kb.emit(TensorTensor(alu=Alu.ADD, in0=tmp, in1=b_t.rows(0, n), out=yt))
        store(kb, qout, yt, ctx.outputs[0], y.dtype, t.offsets[1], t.pstrides[1], n, plan.dims(1))
        # per-row statistics gathered into rows (RowStores, ScalarE's copies): stored one per row, their
        # 2 x 128 one-element descriptors a tile would outlast the tile's 1 MiB of rows on the queue
        cast = []
        for res, slot, meta, k in ((mv.view(0, [(1, 1)]), 1, mean_o, 2), (rstd, 2, rstd_o, 3)):
            if meta.dtype != F32:   # a DMA does not cast: the statistic in the output's dtype first
                c = kb.tile(n, (1,), meta.dtype)
                kb.copy(res, c, on=Engine.GPSIMD)
                cast.append(c)
                res = c
            stats.store(res, ctx.outputs[slot], meta.dtype, t.offsets[k], t.pstrides[k], n)
        # a tile's buffers are freed `depth` tiles later, so that many loads run ahead of the compute
        gens.append([xt, mv, rstd, nmr, yt, *cast])
        if tmp is not None:
            if double_tmp:
                gens[-1].append(tmp)
            else:
                kb.release(tmp)   # wide rows: only the loads and stores are double-buffered
        while len(gens) > depth:
            kb.release(*gens.pop(0))
    stats.finish()
    kb.release(*[a for g in gens for a in g], *ring, *[t for t in (w_t, b_t) if t is not None])


@dataclass
class _LnBackward:
    """What every row tile of LayerNorm's backward shares: the row plan, the weight row, and the
    PSUM accumulators (with their ones columns) of grad_weight and grad_bias."""

    h: int                       # elements of a row (the normalized dims)
    nch: int                     # 128-element chunks of a row: grad_weight/grad_bias columns in PSUM
    plan: RowPlan
    qin: list[int]
    qout: int
    slot: list[int | None]       # output index of grad_input, grad_weight, grad_bias (None: not wanted)
    gi_meta: TensorMeta | None
    w_t: AP | None
    ones: dict[bool, AP]         # keyed by "the summed rows are FP32"
    acc_w: AP | None
    acc_b: AP | None


def _ln_backward_setup(ctx: LoweringContext) -> _LnBackward:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    ins = ctx.call.inputs
    dy, x, mean, rstd_m, w = ins[0], ins[1], ins[2], ins[3], ins.optional(4)
    mask = tuple(attr(ctx, "output_mask", (True, True, True)))
    outs = iter(range(len(ctx.call.outputs)))
    slot: list[int | None] = [next(outs) if m else None for m in mask]
    gi_slot = slot[0]
    nd = _normalized(ctx, x)
    shape = x.shape
    free = list(range(x.ndim - nd, x.ndim))
    h = prod(shape[d] for d in free) if free else 1
    gi_meta = ctx.call.outputs[gi_slot] if gi_slot is not None else None
    metas = [dy, x, mean, rstd_m] + ([gi_meta] if gi_meta is not None else [])
    plan = row_plan(shape, free, [full_strides(m, shape) for m in metas], [m.offset for m in metas], parts=ctx.spec.partitions)
    qin, qout = queues(kb)
    rows0 = min(P, plan.nrows)
    w_t = _broadcast_row(kb, qin[1], ctx.inputs[4], w, rows0, h) if w is not None else None
    want_w, want_b = slot[1] is not None, slot[2] is not None
    nch = ceil_div(h, P)
    ones: dict[bool, AP] = {}
    acc_w = acc_b = None
    if want_w or want_b:
        # ones columns for the cross-partition sums: FP32 for FP32 rows, BF16 (exact) for 16-bit dy
        ones = {True: kb.tile(P, (1,), F32), False: kb.tile(P, (1,), DType.bfloat16)}
        for o in ones.values():
            kb.emit(Memset(out=o, value=1.0))
        for k in (slot[1], slot[2]):
            if k is not None and not ctx.call.outputs[k].is_contiguous():
                raise NotImplementedError("native_layer_norm_backward writes contiguous grad_weight/grad_bias")
        acc_w = kb.psum_tile(P, (nch,)) if want_w else None
        acc_b = kb.psum_tile(P, (nch,)) if want_b else None
    return _LnBackward(h, nch, plan, qin, qout, slot, gi_meta, w_t, ones, acc_w, acc_b)


def _grad_input_rows(ctx: LoweringContext, st: _LnBackward, t: RowTile, g: AP, dyt: AP, xhat: AP, pw: AP | None,
                     rt: AP) -> list[AP]:
    """Store one row tile's grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat)); returns the
    tiles it made (g and xhat are overwritten when they are temporaries)."""
    kb, n, h = ctx.kb, t.rows, st.h
    gi_slot, gi_meta = st.slot[0], st.gi_meta
    assert gi_slot is not None and gi_meta is not None  # one implies the other
    s1 = kb.tile(n, (1,), F32)
    s2 = kb.tile(n, (1,), F32)
    # few row-sized temporaries: gx also takes the discarded output of the sum, rstd*g - ...
    # overwrites g when g is a temporary, and the xhat term overwrites xhat
    tv = g if g is not dyt else kb.tile(n, (h,), F32)
    gx = kb.tile(n, (h,), F32)
    kb.emit(Activation(func=Act.COPY, inp=g, out=gx, accum_out=s1))          # sum(g)
    if pw is not None and g is dyt:
        kb.emit(Activation(func=Act.COPY, inp=pw, out=gx, accum_out=s2))     # no weight: g * xhat = pw
    else:
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=g, in1=xhat, out=gx))
        kb.emit(Activation(func=Act.COPY, inp=gx, out=gx, accum_out=s2))     # sum(g * xhat)
    kb.emit(TensorScalar(inp=s1, out=s1, alu0=Alu.MULTIPLY, scalar0=rt, alu1=Alu.MULTIPLY,
                         scalar1=-1.0 / h))
    kb.emit(TensorScalar(inp=s2, out=s2, alu0=Alu.MULTIPLY, scalar0=rt, alu1=Alu.MULTIPLY,
                         scalar1=-1.0 / h))
    kb.emit(Activation(func=Act.COPY, inp=g, out=tv, scale=rt, bias=s1))     # rstd*g - rstd*mean(g)
    kb.emit(Activation(func=Act.COPY, inp=xhat, out=xhat, scale=s2))         # - rstd*xhat*mean(g*xhat)
    git = kb.tile(n, (h,), gi_meta.dtype)
    kb.emit(TensorTensor(alu=Alu.ADD, in0=tv, in1=xhat, out=git))
    store(kb, st.qout, git, ctx.outputs[gi_slot], gi_meta.dtype, t.offsets[4], t.pstrides[4], n, st.plan.dims(4))
    return [s1, s2, gx, git] + ([tv] if tv is not g else [])


def _accumulate_column_sums(kb: KernelBuilder, st: _LnBackward, ti: int, n: int, pw: AP | None, dyt: AP) -> None:
    """Add one row tile's column sums of dy * xhat (grad_weight) and dy (grad_bias) into PSUM."""
    P = kb.spec.partitions
    for j in range(st.nch):
        hc = min(P, st.h - j * P)
        for acc, src in ((st.acc_w, pw), (st.acc_b, dyt if st.slot[2] is not None else None)):
            if acc is None or src is None:  # both or neither: the gradient is not wanted
                continue
            # column sums of this tile's rows: src[rows, hc].T @ ones[rows, 1] -> [hc, 1], FP32 in PSUM
            kb.emit(LoadStationary(src=src.view(j * P, [(1, hc)])))
            kb.emit(MultiplyMoving(moving=st.ones[src.dtype.itemsize == 4].rows(0, n),
                                   dst=acc.view(j, [(1, 1)], partitions=hc), accumulate=ti > 0))


def _store_column_sums(ctx: LoweringContext, st: _LnBackward) -> None:
    """grad_weight and grad_bias from PSUM (the normalized dim on the partitions), transposed by the DMA."""
    kb, h, nch = ctx.kb, st.h, st.nch
    P = ctx.spec.partitions
    for acc, k in ((st.acc_w, st.slot[1]), (st.acc_b, st.slot[2])):
        if acc is None or k is None:  # both or neither: the gradient is not wanted
            continue
        meta = ctx.call.outputs[k]
        res = kb.tile(P, (nch,), meta.dtype)
        full = h // P
        if full:
            kb.copy(acc.view(0, [(1, full)]), res.view(0, [(1, full)]))
            kb.dma(st.qout, res.view(0, [(1, full)]), hbm(ctx.outputs[k], full, P, [(1, P)], meta.dtype,
                                                          offset=meta.offset), transpose=True)
        if h % P:
            tail = h % P
            kb.copy(acc.view(full, [(1, 1)], partitions=tail), res.view(full, [(1, 1)], partitions=tail))
            kb.dma(st.qout, res.view(full, [(1, 1)], partitions=tail),
                   hbm(ctx.outputs[k], 1, 0, [(1, tail)], meta.dtype, offset=meta.offset + full * P), transpose=True)
        kb.release(res)


@lowering("aten::native_layer_norm_backward")
def _layer_norm_backward(ctx: LoweringContext) -> None:
    kb = ctx.kb
    ins = ctx.call.inputs
    dy, x, mean, rstd_m = ins[0], ins[1], ins[2], ins[3]
    st = _ln_backward_setup(ctx)
    h, plan, qin, w_t = st.h, st.plan, st.qin, st.w_t
    # per-partition bytes of one row tile: dy, x, the output and up to six FP32 temporaries
    io = h * (dy.dtype.itemsize + x.dtype.itemsize)
    temps = h * ((st.gi_meta.dtype.itemsize if st.gi_meta else 0) + 4 * 4)
    room = kb.spec.sbuf_bytes_per_partition - 16 * 1024 - 4 * h
    if io + temps >= room:
        raise NotImplementedError(f"native_layer_norm_backward: rows of {h} elements do not fit SBUF in one tile")
    double_all = 2 * (io + temps) < room
    double_io = 2 * io + temps < room
    held: list[AP] = []
    for ti, t in enumerate(plan.tiles):
        n = t.rows
        dyt = kb.tile(n, (h,), dy.dtype)
        xt = kb.tile(n, (h,), x.dtype)
        mt = kb.tile(n, (1,), F32)
        rt = kb.tile(n, (1,), F32)
        load(kb, qin[0], ctx.inputs[0], dy.dtype, t.offsets[0], t.pstrides[0], n, plan.dims(0), dyt)
        load(kb, qin[1], ctx.inputs[1], x.dtype, t.offsets[1], t.pstrides[1], n, plan.dims(1), xt)
        kb.dma(qin[0], hbm(ctx.inputs[2], n, t.pstrides[2], [(1, 1)], mean.dtype, offset=t.offsets[2]), mt)
        kb.dma(qin[1], hbm(ctx.inputs[3], n, t.pstrides[3], [(1, 1)], rstd_m.dtype, offset=t.offsets[3]), rt)
        nmr = kb.tile(n, (1,), F32)
        kb.emit(TensorScalar(inp=mt, out=nmr, alu0=Alu.MULTIPLY, scalar0=rt, alu1=Alu.MULTIPLY, scalar1=-1.0))
        xhat = kb.tile(n, (h,), F32)
        kb.emit(Activation(func=Act.COPY, inp=xt, out=xhat, scale=rt, bias=nmr))
        g = dyt
        if w_t is not None:
            g = kb.tile(n, (h,), F32)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=dyt, in1=w_t.rows(0, n), out=g))
        tiles = [dyt, xt, mt, rt, nmr, xhat] + ([g] if g is not dyt else [])
        pw = None
        if st.acc_w is not None:
            # grad_weight rows: dy * xhat (fp32), summed over rows on TensorE below
            pw = kb.tile(n, (h,), F32)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=dyt, in1=xhat, out=pw))
            tiles.append(pw)
        if st.slot[0] is not None:
            tiles += _grad_input_rows(ctx, st, t, g, dyt, xhat, pw, rt)
        _accumulate_column_sums(kb, st, ti, n, pw, dyt)
        kb.release(*held)
        if double_all:
            held = tiles
        elif double_io:
            # wide rows: temporaries go back now, only the loaded rows are double-buffered
            kb.release(*[t for t in tiles if t not in (dyt, xt, mt, rt)])
            held = [dyt, xt, mt, rt]
        else:
            kb.release(*tiles)
            held = []
    kb.release(*held)
    _store_column_sums(ctx, st)
    kb.release(*[t for t in (w_t, st.acc_w, st.acc_b) if t is not None], *st.ones.values())


# --- var / std / var_mean / std_mean -----------------------------------------------------------------

MOMENT_PIECE = 4096   # elements per partition loaded at a time
MAX_TRIPLES = 256     # bn_stats triples kept before they are folded into one


def _moment_dims(ctx: LoweringContext, ndim: int) -> list[int]:
    dims = ctx.call.attr("dim")
    if dims is None or dims == () or dims == []:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(ndim, 1) for d in dims})


def _correction(ctx: LoweringContext) -> float:
    if ctx.call.name.split(".")[-1] in ("correction", "correction_out") or ctx.call.attr("correction") is not None:
        c = ctx.call.attr("correction")
        return 1.0 if c is None else float(c)
    unbiased = ctx.call.attr("unbiased")
    return 1.0 if unbiased is None or unbiased else 0.0


def _stream_moments(kb: KernelBuilder, rows: int, pieces, keep: list | None = None) -> AP:
    """[rows, 2] = (mean, population variance) of rows streamed in pieces: bn_stats per 512 elements,
    the triples folded into one whenever MAX_TRIPLES pile up, bn_aggr at the end.

    ``pieces`` yields (elements, fill) where fill(tile) loads a [rows, elements] tile."""
    BN_MAX = kb.spec.bn_stats_fmax  # bn_stats' largest free size on the target
    pieces = list(pieces)
    npieces_bn = sum(ceil_div(w, BN_MAX) for w, _ in pieces)
    slots = min(npieces_bn, MAX_TRIPLES) + 1
    st = kb.tile(rows, (3 * slots,), F32)
    used = 0
    done = 0   # elements already folded into slot 0
    held: list[AP] = []
    for w, fill in pieces:
        xt = fill()
        for c0 in range(0, w, BN_MAX):
            if used == slots:
                # fold the triples into one: (count, mean, var * count)
                mv = kb.tile(rows, (2,), F32)
                kb.emit(BnAggr(inp=st.view(0, [(1, 3 * used)]), out=mv))
                kb.emit(Memset(out=st.view(0, [(1, 1)]), value=float(done)))
                kb.copy(mv.view(0, [(1, 1)]), st.view(1, [(1, 1)]))
                kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=st.view(2, [(1, 1)]), alu0=Alu.MULTIPLY,
                                     scalar0=float(done)))
                kb.release(mv)
                used = 1
            cw = min(BN_MAX, w - c0)
            kb.emit(BnStats(inp=xt.view(c0, [(1, cw)]), out=st.view(3 * used, [(1, 3)])))
            used += 1
            done += cw
        kb.release(*held)
        held = [xt]
    mv = kb.tile(rows, (2,), F32)
    kb.emit(BnAggr(inp=st.view(0, [(1, 3 * used)]), out=mv))
    kb.release(st)
    if keep is not None:
        keep.extend(held)   # the caller releases the last piece a row tile later: the next tile's
    else:                   # loads go to other bytes instead of waiting for this tile's bn_stats
        kb.release(*held)
    return mv


def _finish_moments(kb: KernelBuilder, ctx: LoweringContext, mv: AP, rows: int, std: bool, factor: float,
                    offsets, pstrides, q: int, rows_out: RowStores | None = None) -> list[AP]:
    """Store var (or std) and, for var_mean/std_mean, the mean of [rows, 2] moments; the tiles made."""
    outs = ctx.call.outputs
    res = kb.tile(rows, (1,), outs[0].dtype)
    if std:
        kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=res, alu0=Alu.MULTIPLY, scalar0=factor, alu1=Alu.POW,
                             scalar1=0.5))
    else:
        kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=res, alu0=Alu.MULTIPLY, scalar0=factor))
    put = rows_out.store if rows_out is not None else (
        lambda r, tensor, dt, off, ps, n: store(kb, q, r, tensor, dt, off, ps, n, [(1, 1)]))
    put(res, ctx.outputs[0], outs[0].dtype, offsets[0], pstrides[0], rows)
    made = [res]
    if len(outs) > 1:
        mo = kb.tile(rows, (1,), outs[1].dtype)
        kb.copy(mv.view(0, [(1, 1)]), mo)
        put(mo, ctx.outputs[1], outs[1].dtype, offsets[1], pstrides[1], rows)
        made.append(mo)
    return made


def _moments_over_everything(ctx: LoweringContext, x, n: int, std: bool, factor: float) -> bool:
    """var/std of every element of a contiguous tensor, spread over the partitions.

    Partition p streams elements [p * per, (p + 1) * per) through bn_stats (long contiguous rows),
    the last n % P elements stream on one more partition; each partition's (count, mean, M2) triple
    is moved onto one partition by TensorE transposes, where bn_aggr merges them (Chan's parallel
    combination, as it merges the 512-element pieces of a row). Returns False (the one-row kernel
    runs) for other calls."""
    kb = ctx.kb
    P = kb.spec.partitions
    if not x.is_contiguous() or n < 2 * P:
        return False
    per = n // P
    tail = n - per * P
    qin, qout = queues(kb)

    def pieces(rows, first, stride, m, size=MOMENT_PIECE):
        for k, c0 in enumerate(range(0, m, size)):
            w = min(size, m - c0)

            def fill(w=w, c0=c0, k=k):
                xt = kb.tile(rows, (w,), x.dtype)
                kb.dma(qin[k % 2], hbm(ctx.inputs[0], rows, stride, [(1, w)], x.dtype, offset=x.offset + first + c0),
                       xt)
                return xt
            yield w, fill

    # at LNC=2 each physical core streams a share of every partition's columns (whole bn_stats pieces,
    # in pieces as many as one core's whole row would be); the shares' (count, mean, M2) triples meet
    # through HBM (common.core_shares) and bn_aggr merges each partition's before the transposes
    unit = kb.spec.bn_stats_fmax
    bounds = [(min(per, c[0] * unit), min(per, (c[-1] + 1) * unit)) for c in core_shares(kb, -(-per // unit))]
    if len(bounds) == 1:
        mv = _stream_moments(kb, P, pieces(P, 0, per, per))
    else:
        found = []
        for a, b in bounds:
            ms = _stream_moments(kb, P, pieces(P, a, per, b - a, MOMENT_PIECE // len(bounds)))
            t3 = kb.tile(P, (3,), F32)
            kb.emit(Memset(out=t3.view(0, [(1, 1)]), value=float(b - a)))
            kb.copy(ms.view(0, [(1, 1)]), t3.view(1, [(1, 1)]))
            kb.emit(TensorScalar(inp=ms.view(1, [(1, 1)]), out=t3.view(2, [(1, 1)]), alu0=Alu.MULTIPLY,
                                 scalar0=float(b - a)))
            kb.release(ms)
            found.append(t3)
        met = meet_partials(kb, found, qout, qin[0])
        mv = kb.tile(P, (2,), F32)
        kb.emit(BnAggr(inp=met, out=mv))
        kb.release(met)
    ncols = P + (1 if tail else 0)
    trip = kb.tile(1, (3 * ncols,), F32)
    kb.emit(Memset(out=trip.view(0, [(3, P)]), value=float(per)))
    m2 = kb.tile(P, (1,), F32)
    kb.emit(TensorScalar(inp=mv.view(1, [(1, 1)]), out=m2, alu0=Alu.MULTIPLY, scalar0=float(per)))
    for k, src in ((1, mv.view(0, [(1, 1)])), (2, m2)):
        ps = kb.psum_tile(1, (P,), F32)
        kb.emit(TensorTranspose(src=src, dst=ps))
        kb.copy(ps, trip.view(k, [(3, P)]))
        kb.release(ps)
    kb.release(mv, m2)
    if tail:
        mt = _stream_moments(kb, 1, pieces(1, per * P, tail, tail))
        kb.emit(Memset(out=trip.view(3 * P, [(1, 1)]), value=float(tail)))
        kb.copy(mt.view(0, [(1, 1)]), trip.view(3 * P + 1, [(1, 1)]))
        kb.emit(TensorScalar(inp=mt.view(1, [(1, 1)]), out=trip.view(3 * P + 2, [(1, 1)]), alu0=Alu.MULTIPLY,
                             scalar0=float(tail)))
        kb.release(mt)
    total = kb.tile(1, (2,), F32)
    kb.emit(BnAggr(inp=trip, out=total))
    outs = ctx.call.outputs
    made = _finish_moments(kb, ctx, total, 1, std, factor, [o.offset for o in outs], [1] * len(outs), qout)
    kb.release(trip, total, *made)
    return True


def _moments(ctx: LoweringContext, std: bool, with_mean: bool) -> None:
    """var/std (and the mean) over any dims: bn_stats per 512 elements, bn_aggr per row."""
    kb = ctx.kb
    x = ctx.call.inputs[0]
    outs = ctx.call.outputs
    shape = x.shape if x.ndim else (1,)
    rdims = _moment_dims(ctx, x.ndim) if x.ndim else [0]
    n = prod(shape[d] for d in rdims)
    corr = _correction(ctx)
    denom = n - corr
    factor = n / denom if denom > 0 else float("inf")
    if len(rdims) == len(shape) and _moments_over_everything(ctx, x, n, std, factor):
        return
    xm = x if x.ndim else type(x)((1,), (1,), x.dtype, x.offset)
    metas = [xm] + [o if o.ndim else type(o)((1,) * len(shape), (0,) * len(shape), o.dtype, o.offset) for o in outs]
    strides = [full_strides(xm, shape)] + [reduced_strides(m, shape, rdims) for m in metas[1:]]
    plan = row_plan(shape, rdims, strides, [m.offset for m in metas], parts=ctx.spec.partitions)
    pieces = free_pieces(plan, MOMENT_PIECE)
    qin, qout = queues(kb)
    if n == 0:
        # moments of no elements are NaN (as in ATen): nothing to load, NaN rows are written
        for t in plan.tiles:
            for k, o in enumerate(outs):
                res = kb.tile(t.rows, (1,), o.dtype)
                kb.emit(Memset(out=res, value=float("nan")))
                store(kb, qout, res, ctx.outputs[k], o.dtype, t.offsets[1 + k], t.pstrides[1 + k], t.rows, [(1, 1)])
                kb.release(res)
        return
    held: list[AP] = []
    rows_out = RowStores(kb, qout, len(plan.tiles))
    for ti, t in enumerate(plan.tiles):
        rows = t.rows

        def fill_piece(j, w, dims, offs, t=t, rows=rows, ti=ti):
            def fill():
                xt = kb.tile(rows, (w,), x.dtype)
                load(kb, qin[(ti + j) % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0], t.pstrides[0], rows,
                     dims[0], xt)
                return xt
            return fill

        last: list[AP] = []
        mv = _stream_moments(kb, rows, [(w, fill_piece(j, w, dims, offs)) for j, (w, dims, offs) in enumerate(pieces)],
                             keep=last)
        made = _finish_moments(kb, ctx, mv, rows, std, factor, t.offsets[1:], t.pstrides[1:], qout, rows_out)
        kb.release(*held)
        held = [mv, *made, *last]
    rows_out.finish()
    kb.release(*held)


for _ov in ("", ".dim", ".correction"):
    lowering(f"aten::var{_ov}")(lambda ctx: _moments(ctx, std=False, with_mean=False))
    lowering(f"aten::std{_ov}")(lambda ctx: _moments(ctx, std=True, with_mean=False))
for _ov in ("", ".dim", ".correction"):
    lowering(f"aten::var_mean{_ov}")(lambda ctx: _moments(ctx, std=False, with_mean=True))
    lowering(f"aten::std_mean{_ov}")(lambda ctx: _moments(ctx, std=True, with_mean=True))
