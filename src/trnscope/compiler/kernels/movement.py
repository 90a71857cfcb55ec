"""Data movement: copies, cat/stack, fills, arange, triu/tril, embedding, index_select, gather and
embedding's backward.

Moving bytes is the DMA engines' job, so these kernels keep the compute engines out of it where
the hardware allows: a same-dtype (or float-to-float, int-to-int) copy is one HBM->HBM DMA per
region, cast by the DMA engine; cat writes each input into its slice of the output the same way;
fills DMA one memset tile to every block of the output; an expanded (stride-0) source is read once
per tile and broadcast on chip (once in all for an expanded scalar, then stored as a fill is); a
source with no contiguous dim read with a small step is loaded as whole row spans and picked on
chip; a permuted copy with short runs on both sides is loaded in the source's order and stored in
the destination's, reordered by one engine copy per tile (docs/cost-model.md, "Copies of views"). Row lookups (embedding, index_select) use
the DMA generation engine's indirect DMA (DmaGather, one table row per partition);
embedding_dense_backward scatter-adds gradient rows into the zeroed weight gradient (DmaScatter
with accumulate). Compute engines appear only where values change: Iota for arange, AffineSelect
for the diagonal tiles of triu/tril, GpSimdE's in-partition gather for gather (integer address
arithmetic and one indirect DMA per element when a row is too long for SBUF).
"""

from __future__ import annotations

import itertools
from math import prod

from ...isa import AP, Act, Activation, AffineSelect, Alu, DType, DmaGather, DmaScatter, Engine, Gather, Iota, \
    Memset, TensorScalar, TensorTensor, hbm
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta, broadcast_strides
from ..scalars import ScalarArg
from ..tiling import CostModel, MapTile, OperandMap, coalesce, merge_dims, own_order, plan_map, plan_map_priced, \
    plan_tiles
from .common import F32, attr, load, move, queues, row_plan, store

MAX_COLS = 2048
DMA_RUN = 4096     # elements per descriptor row of a long contiguous HBM->HBM copy
ROW_PIECE = 8192   # elements of one gathered row moved per indirect DMA
SPAN_BYTES = 16 * 1024  # per partition: the widest row span a strided copy reads whole (a twelfth of SBUF's)


def _dma_castable(src: DType, dst: DType) -> bool:
    return src == dst or (src.is_float and dst.is_float) or (not src.is_float and not dst.is_float)


# --- region copies -------------------------------------------------------------------------------------

def copy_region(kb: KernelBuilder, src_t: int, src: TensorMeta, dst_t: int, dst: TensorMeta,
                src_strides: tuple[int, ...] | None = None, dst_offset: int | None = None,
                queue: int | None = None) -> None:
    """dst (its shape) = src read with ``src_strides`` (broadcast allowed), casting to dst's dtype.

    Contiguous runs on both sides and a dtype the DMA engine can cast: HBM->HBM DMAs, one per
    up-to-5-d block (partition + 4 free dims). Otherwise tiles go through SBUF: loaded (DMA
    transpose for transposed views), cast by ScalarE, stored.
    """
    shape = dst.shape if dst.ndim else (1,)
    s_st = src_strides if src_strides is not None else broadcast_strides(src, dst.shape)
    s_st = s_st if dst.ndim else (0,)
    d_st = dst.stride if dst.ndim else (1,)
    d_off = dst.offset if dst_offset is None else dst_offset
    if prod(shape) == 0:
        return
    cshape, (cs, cd) = coalesce(tuple(shape), [tuple(s_st), tuple(d_st)])
    inner_ok = cs[-1] == 1 and cd[-1] == 1 and cshape[-1] * dst.dtype.itemsize >= 512
    if not inner_ok and 0 in cs and prod(cshape) // (cshape[-1] if cs[-1] == cd[-1] == 1 else 1) > kb.spec.partitions:
        # an expanded source (the gradient of a sum, a column broadcast along rows) whose HBM->HBM
        # DMA would take more descriptors than a tile has partitions: read once, broadcast on chip
        _copy_expanded(kb, src_t, src, tuple(s_st), dst_t, dst, tuple(d_st), d_off, tuple(shape))
        return
    if _dma_castable(src.dtype, dst.dtype) and (inner_ok or prod(cshape) <= 4096):
        q = queue if queue is not None else kb.queue("qSyncIO0", "input")
        # at LNC=2 each block's rows are cut in one piece per physical core: a single DMA is one
        # store, run by one core's DMA engines at half the pair's bandwidth (compiler/lnc.py)
        pieces = kb.spec.lnc
        for so, do, blk, ks, kd in _dma_blocks(cshape, cs, cd):
            sdims = [(st, sz) for st, sz in zip(ks[1:], blk[1:])] or [(1, 1)]
            ddims = [(st, sz) for st, sz in zip(kd[1:], blk[1:])] or [(1, 1)]
            cut = -(-blk[0] // pieces)
            for r0 in range(0, blk[0], cut):
                rows = min(cut, blk[0] - r0)
                kb.dma(q, hbm(src_t, rows, ks[0], sdims, src.dtype, offset=src.offset + so + r0 * ks[0]),
                       hbm(dst_t, rows, kd[0], ddims, dst.dtype, offset=d_off + do + r0 * kd[0]))
        return
    qin, qout = queues(kb)
    held: list[AP] = []
    isz = src.dtype.itemsize
    # a source with no contiguous dim read with a small element step (x[:, ::2], the even/odd halves
    # of interleaved RoPE): one 4-byte descriptor per element costs what a knee-sized one does, so
    # each row's whole span is read with long descriptors and every step-th element picked on chip
    # (the span capped in SBUF). A source with a contiguous dim is left to the planner (DMA transpose).
    inner = min(cs)
    step = inner if 1 < inner and inner * isz < kb.spec.dma_descriptor_knee_bytes else 0
    max_cols = min(MAX_COLS, max(1, SPAN_BYTES // (step * isz))) if step else MAX_COLS
    if not step and 0 not in cs:
        planned = _reorder_plan(kb, tuple(shape), tuple(s_st), tuple(d_st), src.dtype, dst.dtype, max_cols)
        if planned is not None:
            _copy_reordered(kb, src_t, src, dst_t, dst, d_off, *planned)
            return
    for t in plan_tiles(tuple(shape), [tuple(d_st), tuple(s_st)], max_cols):
        o, s = t.operands
        if step and s.cstride == step and t.cols > 1:
            span = (t.cols - 1) * step + 1
            wide = kb.tile(t.rows, (span,), src.dtype)
            load(kb, qin[0], src_t, src.dtype, src.offset + s.offset, s.pstride, t.rows, [(1, span)], wide)
            xt = kb.tile(t.rows, (t.cols,), dst.dtype)  # the pick casts too
            kb.emit(Activation(func=Act.COPY, inp=wide.view(0, [(step, t.cols)]), out=xt))
            kb.release(wide)
        else:
            xt = kb.tile(t.rows, (t.cols,), src.dtype)
            load(kb, qin[0], src_t, src.dtype, src.offset + s.offset, s.pstride, t.rows, [(s.cstride, t.cols)], xt)
        if xt.dtype == dst.dtype:
            ot = xt
        else:
            ot = kb.tile(t.rows, (t.cols,), dst.dtype)
            kb.emit(Activation(func=Act.COPY, inp=xt, out=ot))
        store(kb, qout, ot, dst_t, dst.dtype, d_off + o.offset, o.pstride, t.rows, [(o.cstride, t.cols)])
        kb.release(*held)
        held = [xt] + ([ot] if ot is not xt else [])
    kb.release(*held)


def _reorder_engines(src: DType, dst: DType) -> list[Engine]:
    """Engines that share a reordering copy: VectorE and GpSimdE copy any dtype bit for bit; ScalarE
    joins for float-to-float copies of one dtype (its COPY goes through FP32, exact for floats only)."""
    if src != dst:
        return [Engine.SCALAR]   # the cast is ScalarE's, as the plain tile path's
    return [Engine.VECTOR, Engine.GPSIMD] + ([Engine.SCALAR] if src.is_float else [])


def _reorder_plan(kb: KernelBuilder, shape: tuple[int, ...], s_st: tuple[int, ...], d_st: tuple[int, ...],
                  sdt: DType, ddt: DType, max_cols: int):
    """(tiles, engines) of a copy that loads each tile's free dims in the source's memory order and
    stores them in the destination's, reordering on chip, when the cost model prices it below the
    plain tile path (one partition and one free dim per operand); else None. Short contiguous runs
    on both sides of a permutation (attention's head shuffle: 256 B each way) become long ones
    on both sides; the engine copy between them is spread over the engines that can do it."""
    spec = kb.spec
    sizes = (ddt.itemsize, sdt.itemsize)
    engines = _reorder_engines(sdt, ddt)
    old, _ = plan_map_priced(shape, [d_st, s_st], max_cols, CostModel(spec, sizes), max_part_dims=1,
                             max_free_dims=1)
    # a tile and its reordered twin, double-buffered: four per partition in a sixth of SBUF's each
    cols = max(1, spec.sbuf_bytes_per_partition // 6 // max(sizes))
    cols = min(cols, spec.vector_free_max_sbuf)
    cm = CostModel(spec, sizes, reorder=True, engines=len(engines))
    new, tiles = plan_map_priced(shape, [d_st, s_st], cols, cm, max_part_dims=3, max_free_dims=spec.ap_max_dims - 1)
    if new >= old:
        return None
    for t in tiles:   # every access pattern (both DMAs and the on-chip view) must fit
        for om in t.operands:
            fsz, fst = own_order(t.free, om.free)
            if len(OperandMap(om.offset, om.part, fst).hbm(fsz)[2]) > spec.ap_max_dims:
                return None
        if len(_reorder_view(t)) > spec.ap_max_dims:
            return None
    return tiles, engines


def _reorder_view(t: MapTile) -> list[tuple[int, int]]:
    """On-chip dims reading the tile loaded in the source's order (operand 1) in the destination's
    order (operand 0): per destination-ordered dim, its stride in the source-ordered dense tile."""
    d_sz, _ = own_order(t.free, t.operands[0].free)
    d_idx = sorted(range(len(t.free)), key=lambda i: -abs(t.operands[0].free[i]))
    s_idx = sorted(range(len(t.free)), key=lambda i: -abs(t.operands[1].free[i]))
    step, dense = 1, {}
    for i in reversed(s_idx):
        dense[i] = step
        step *= t.free[i]
    return merge_dims([(dense[i], t.free[i]) for i in d_idx]) if d_sz else [(1, 1)]


def _copy_reordered(kb: KernelBuilder, src_t: int, src: TensorMeta, dst_t: int, dst: TensorMeta, d_off: int,
                    tiles: list[MapTile], engines: list[Engine]) -> None:
    qin = kb.queue("qSyncIO0", "input")
    qout = [kb.queue(f"qSyncIO{i}", "output") for i in (2, 3)]
    held: list[AP] = []
    for i, t in enumerate(tiles):
        o, s = t.operands
        ssz, sst = own_order(t.free, s.free)
        rows, pstride, dims = OperandMap(s.offset, s.part, sst).hbm(ssz)
        raw = kb.tile(t.rows, (t.cols,), src.dtype)
        move(kb, qin, src_t, src.dtype, src.offset + s.offset, rows, pstride, dims, raw, inbound=True)
        view = _reorder_view(t)
        ot = kb.tile(t.rows, (t.cols,), dst.dtype)
        # the copy's outermost destination-ordered dim is cut among the engines
        n0, st0 = view[0][1], view[0][0]
        inner = t.cols // n0
        share = -(-n0 // len(engines))
        for e, a in zip(engines, range(0, n0, share)):
            n = min(share, n0 - a)
            inp = raw.view(a * st0, [(st0, n)] + view[1:])
            out = ot.view(a * inner, [(1, n * inner)])
            if e is Engine.SCALAR:
                kb.emit(Activation(func=Act.COPY, inp=inp, out=out))
            else:
                kb.copy(inp, out, on=e)
        kb.release(raw)
        dsz, dst_ = own_order(t.free, o.free)
        rows, pstride, dims = OperandMap(o.offset, o.part, dst_).hbm(dsz)
        _store_per_core(kb, qout[i % 2], dst_t, dst.dtype, d_off + o.offset, rows, pstride, dims, ot, t.rows)
        kb.release(*held)
        held = [ot]
    kb.release(*held)


def _store_per_core(kb: KernelBuilder, queue: int, dst_t: int, dtype: DType, at: int, rows: int, pstride: int,
                    dims: list[tuple[int, int]], ot: AP, tile_rows: int) -> None:
    """Store tile ``ot``'s ``rows`` HBM rows from element ``at``. At LNC=2 a whole tile's rows leave in
    one store per physical core (a single DMA is one core's), cut where a partition range may start
    (hardware.md 2.3: 0, 32, 64, 96)."""
    lnc = kb.spec.lnc
    cut = rows // lnc if rows == tile_rows and lnc > 1 and rows % (32 * lnc) == 0 else rows
    for r0 in range(0, rows, cut):
        n = min(cut, rows - r0)
        part = ot if n == rows else ot.rows(r0, n)
        move(kb, queue, dst_t, dtype, at + r0 * pstride, n, pstride, dims, part, inbound=False)


def _copy_expanded(kb: KernelBuilder, src_t: int, src: TensorMeta, s_st: tuple[int, ...], dst_t: int,
                   dst: TensorMeta, d_st: tuple[int, ...], d_off: int, shape: tuple[int, ...]) -> None:
    """dst = src read with stride 0 on some dims (an expand): tiles laid out as element-wise kernels
    lay theirs (tiling.plan_map), each loading only its distinct source data and broadcasting it
    along the stride-0 free dims in the engine copy that also casts, then stored as the output's
    rows. A tile every tile reads the same (an expanded scalar: one value everywhere) is built once
    per tile shape and stored again and again, as a fill is."""
    # one value everywhere (every source stride 0: the gradient of x.sum()): every tile reads the same
    # source tile, built once, so the layout is the destination's alone (a fill's)
    invariant = not any(s_st)
    cm = CostModel(kb.spec, (dst.dtype.itemsize,) if invariant else (dst.dtype.itemsize, src.dtype.itemsize), inputs=1)
    tiles = plan_map(shape, [d_st] if invariant else [d_st, s_st], MAX_COLS, cm, max_part_dims=3,
                     max_free_dims=kb.spec.ap_max_dims - 1)
    qin = kb.queue("qSyncIO0", "input")
    # stores alternate two queues, as fill_region's do: a queue runs its transfers in order
    qout = [kb.queue(f"qSyncIO{i}", "output") for i in (2, 3)]
    same = invariant or len({(t.operands[1].offset, tuple(st for st, _ in t.operands[1].part), t.operands[1].free)
                             for t in tiles}) == 1
    built: dict[tuple, AP] = {}
    held: list[AP] = []
    for i, t in enumerate(tiles):
        o = t.operands[0]
        s = OperandMap(0, tuple((0, n) for _, n in o.part), (0,) * len(t.free)) if invariant else t.operands[1]
        key = (tuple(n for _, n in s.part), t.free)
        ot = built.get(key) if same else None
        if ot is None:
            rows, pstride, dims = s.hbm(t.free, skip_broadcast=True)
            raw = kb.tile(t.rows, (s.loaded(t.free),), src.dtype)
            move(kb, qin, src_t, src.dtype, src.offset + s.offset, rows, pstride, dims, raw, inbound=True)
            ot = kb.tile(t.rows, (t.cols,), dst.dtype)
            view = raw.view(0, s.view(t.free))
            if src.dtype.is_float and dst.dtype.is_float:
                kb.emit(Activation(func=Act.COPY, inp=view, out=ot))
            else:
                kb.copy(view, ot)
            kb.release(raw)
            if same:
                built[key] = ot
        rows, pstride, dims = o.hbm(t.free)
        _store_per_core(kb, qout[i % 2], dst_t, dst.dtype, d_off + o.offset, rows, pstride, dims, ot, t.rows)
        if not same:
            kb.release(*held)
            held = [ot]
    kb.release(*held, *built.values())


def _dma_blocks(shape, s_st, d_st):
    """(src offset, dst offset, block shape, src strides, dst strides) blocks of at most 5 dims (the
    partition dim and 4 free dims) covering a coalesced copy; a long contiguous innermost dim is cut
    into DMA_RUN-element rows so descriptors are long but the row count is not 1."""
    shape, s_st, d_st = list(shape), list(s_st), list(d_st)
    if s_st[-1] == 1 and d_st[-1] == 1 and shape[-1] > DMA_RUN:
        n = shape[-1]
        head = n // DMA_RUN * DMA_RUN
        outer = list(itertools.product(*(range(x) for x in shape[:-1])))
        for idx in outer:
            so = sum(i * st for i, st in zip(idx, s_st))
            do = sum(i * st for i, st in zip(idx, d_st))
            yield so, do, (head // DMA_RUN, DMA_RUN), (DMA_RUN, 1), (DMA_RUN, 1)
            if n > head:
                yield so + head, do + head, (1, n - head), (0, 1), (0, 1)
        return
    if len(shape) == 1:  # one row (a single-row pattern, not one partition per element)
        yield 0, 0, (1, shape[0]), (0, s_st[0]), (0, d_st[0])
        return
    nd = len(shape)
    outer = shape[:-5] if nd > 5 else []
    k = len(outer)
    for idx in itertools.product(*(range(x) for x in outer)):
        so = sum(i * st for i, st in zip(idx, s_st))
        do = sum(i * st for i, st in zip(idx, d_st))
        yield so, do, tuple(shape[k:]), tuple(s_st[k:]), tuple(d_st[k:])


@lowering("aten::copy_", "aten::_copy_from", "aten::_to_copy", "aten::_to_copy.out", "aten::clone", "aten::contiguous",
          "aten::copy", "aten::lift_fresh_copy", "aten::alias_copy")
def _copy(ctx: LoweringContext) -> None:
    # copy_(self=dst, src) and copy(self, src) read their second tensor; _copy_from(self=src, dst) its first
    src = 1 if ctx.call.name in ("aten::copy_", "aten::copy") else 0
    copy_region(ctx.kb, ctx.inputs[src], ctx.call.inputs[src], ctx.outputs[0], ctx.call.outputs[0])


# --- cat / stack -----------------------------------------------------------------------------------------

def _cat(ctx: LoweringContext, stack: bool) -> None:
    out = ctx.call.outputs[0]
    count = attr(ctx, "tensors_count", len([m for m in ctx.call.inputs if m is not None]))
    metas = list(ctx.call.inputs[:count])
    tensors = list(ctx.inputs[:count])
    dim = int(attr(ctx, "dim", 0))
    nd = out.ndim
    dim = dim % nd if nd else 0
    pos = 0
    for k, (m, t) in enumerate(zip(metas, tensors)):
        if m is None or t is None:
            continue
        if stack:
            shape = out.shape[:dim] + (1,) + out.shape[dim + 1:]
            strides = tuple(broadcast_strides(m, out.shape[:dim] + out.shape[dim + 1:]))
            strides = strides[:dim] + (0,) + strides[dim:]
            size = 1
        else:
            if m.numel == 0:
                continue  # legacy empty inputs ([0]) take no space
            shape = out.shape[:dim] + (m.shape[dim],) + out.shape[dim + 1:]
            strides = m.stride
            size = m.shape[dim]
        region = TensorMeta(shape, out.stride, out.dtype, out.offset + pos * out.stride[dim])
        copy_region(ctx.kb, t, m, ctx.outputs[0], region, src_strides=strides,
                    queue=ctx.kb.queue(f"qSyncIO{k % 2}", "input"))
        pos += size


@lowering("aten::cat")
def _lower_cat(ctx: LoweringContext) -> None:
    _cat(ctx, stack=False)


@lowering("aten::stack")
def _lower_stack(ctx: LoweringContext) -> None:
    _cat(ctx, stack=True)


# --- fills -----------------------------------------------------------------------------------------------

def _fill(ctx: LoweringContext, value=None, value_input: int | None = None) -> None:
    out = ctx.call.outputs[0]
    if value_input is None:
        fill_region(ctx.kb, ctx.outputs[0], out, out.offset, value=value)
    else:
        fill_region(ctx.kb, ctx.outputs[0], out, out.offset, source=(ctx.inputs[value_input], ctx.call.inputs[value_input]))


def fill_region(kb: KernelBuilder, dst_t: int, dst: TensorMeta, dst_offset: int, value: ScalarArg | None = None,
                source: tuple[int, TensorMeta] | None = None) -> None:
    """dst (its shape and strides, from ``dst_offset``) = one value everywhere: a scalar argument
    (``value``) or the first element of an HBM tensor (``source``: its tensor id and meta), cast
    to dst's dtype. One SBUF tile of the value is built once (Memset, or the element loaded onto
    every partition and broadcast along the free dim by ScalarE) and DMAed to every block of dst,
    so the descriptors are rows of the output, never one per element."""
    shape = dst.shape if dst.ndim else (1,)
    strides = dst.stride if dst.ndim else (1,)
    tiles = plan_tiles(tuple(shape), [tuple(strides)], MAX_COLS)
    if not tiles:
        return
    width = max(t.cols for t in tiles)
    rows = max(t.rows for t in tiles)
    const = kb.tile(rows, (width,), dst.dtype)
    if source is not None:
        src_t, vm = source
        col = kb.tile(rows, (1,), vm.dtype)
        kb.dma(kb.queue("qSyncIO0", "input"), hbm(src_t, rows, 0, [(1, 1)], vm.dtype, offset=vm.offset), col)
        kb.emit(Activation(func=Act.COPY, inp=col.view(0, [(0, width)]), out=const))
        kb.release(col)
    elif value is None:
        raise ValueError("fill_region needs a value or a source tensor")
    elif value.runtime:  # its tile, in dst's dtype, copied out along the rows
        kb.emit(Activation(func=Act.COPY, inp=value.broadcast(const), out=const))
    else:
        kb.emit(Memset(out=const, value=float(value.known)))
    qs = [kb.queue(f"qSyncIO{i}", "output") for i in (2, 3)]
    for i, t in enumerate(tiles):
        o = t.operands[0]
        kb.dma(qs[i % 2], const.view(0, [(1, t.cols)], partitions=t.rows),
               hbm(dst_t, t.rows, o.pstride, [(o.cstride, t.cols)], dst.dtype, offset=dst_offset + o.offset))
    kb.release(const)


@lowering("aten::fill_.Scalar", "aten::fill.Scalar", scalars=("value",))
def _fill_scalar(ctx: LoweringContext) -> None:
    _fill(ctx, value=ctx.scalar("value", 0))


@lowering("aten::fill_.Tensor", "aten::fill.Tensor", scalars=("value",))
def _fill_tensor(ctx: LoweringContext) -> None:
    if ctx.call.inputs.optional(1) is None:  # a 0-dim CPU tensor: a value
        _fill(ctx, value=ctx.scalar("value", 0))
    else:
        _fill(ctx, value_input=1)


@lowering("aten::zero_", "aten::zero")
def _zero(ctx: LoweringContext) -> None:
    _fill(ctx, value=ScalarArg(ctx.kb, 0))


# --- arange --------------------------------------------------------------------------------------------------

@lowering("aten::arange", "aten::arange.start", "aten::arange.start_step", "aten::arange.out",
          "aten::arange.start_out")
def _arange(ctx: LoweringContext) -> None:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    out = ctx.call.outputs[0]
    start, step = attr(ctx, "start", 0), attr(ctx, "step", 1)
    n = out.numel
    if n == 0:
        return
    so = out.stride[0] if out.ndim else 1
    integral = all(float(v).is_integer() for v in (start, step))
    q = kb.queue("qSyncIO2", "output")
    per = n // P
    blocks = [(P, per, 0)] if per else []
    if n - per * P:
        blocks.append((1, n - per * P, per * P))
    held: list[AP] = []
    for rows, cols, first in blocks:
        for c0 in range(0, cols, MAX_COLS):
            w = min(MAX_COLS, cols - c0)
            ot = kb.tile(rows, (w,), out.dtype)
            # element first + p * cols + c0 + f
            if integral and not out.dtype.is_float:
                kb.emit(Iota(out=ot, base=int(start) + int(step) * (first + c0), channel_multiplier=int(step) * cols,
                             coefs=(int(step),)))
            else:
                idx = kb.tile(rows, (w,), DType.int32)
                kb.emit(Iota(out=idx, base=first + c0, channel_multiplier=cols, coefs=(1,)))
                kb.emit(TensorScalar(inp=idx, out=ot, alu0=Alu.MULTIPLY, scalar0=float(step), alu1=Alu.ADD,
                                     scalar1=float(start)))
                kb.release(idx)
            kb.dma(q, ot, hbm(ctx.outputs[0], rows, cols * so, [(so, w)], out.dtype,
                              offset=out.offset + (first + c0) * so))
            kb.release(*held)
            held = [ot]
    kb.release(*held)


# --- triu / tril -----------------------------------------------------------------------------------------

def _tri(ctx: LoweringContext, upper: bool) -> None:
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    diag = int(attr(ctx, "diagonal", 0))
    R, C = x.shape[-2], x.shape[-1]
    qin, qout = queues(kb)
    zero = None
    held: list[AP] = []
    for bidx in itertools.product(*(range(s) for s in x.shape[:-2])):
        xo = x.offset + sum(i * s for i, s in zip(bidx, x.stride[:-2]))
        oo = out.offset + sum(i * s for i, s in zip(bidx, out.stride[:-2]))
        for r0 in range(0, R, P):
            rows = min(P, R - r0)
            for c0 in range(0, C, MAX_COLS):
                w = min(MAX_COLS, C - c0)
                # keep (i, j) where j - i >= diag (triu) or j - i <= diag (tril)
                lo, hi = c0 - (r0 + rows - 1), c0 + w - 1 - r0   # range of j - i in the tile
                keep_all = lo >= diag if upper else hi <= diag
                drop_all = hi < diag if upper else lo > diag
                src = hbm(ctx.inputs[0], rows, x.stride[-2], [(x.stride[-1], w)], x.dtype,
                          offset=xo + r0 * x.stride[-2] + c0 * x.stride[-1])
                dst = hbm(ctx.outputs[0], rows, out.stride[-2], [(out.stride[-1], w)], out.dtype,
                          offset=oo + r0 * out.stride[-2] + c0 * out.stride[-1])
                if keep_all and x.dtype == out.dtype and x.stride[-1] == 1 and out.stride[-1] == 1:
                    kb.dma(qin[1], src, dst)     # HBM -> HBM, no engine involved
                    continue
                if drop_all:
                    if zero is None:
                        zero = kb.tile(P, (MAX_COLS,), out.dtype)
                        kb.emit(Memset(out=zero, value=0.0))
                    kb.dma(qout, zero.view(0, [(1, w)], partitions=rows), dst)
                    continue
                xt = kb.tile(rows, (w,), x.dtype)
                load(kb, qin[0], ctx.inputs[0], x.dtype, src.offset, x.stride[-2], rows, [(x.stride[-1], w)], xt)
                ot = kb.tile(rows, (w,), out.dtype)
                if upper:
                    kb.emit(AffineSelect(inp=xt, out=ot, cmp=Alu.IS_GE, base=c0 - r0 - diag, channel_multiplier=-1,
                                         coefs=(1,), fill=0.0))
                else:
                    kb.emit(AffineSelect(inp=xt, out=ot, cmp=Alu.IS_GE, base=r0 - c0 + diag, channel_multiplier=1,
                                         coefs=(-1,), fill=0.0))
                store(kb, qout, ot, ctx.outputs[0], out.dtype, dst.offset, out.stride[-2], rows, [(out.stride[-1], w)])
                kb.release(*held)
                held = [xt, ot]
    kb.release(*held)
    if zero is not None:
        kb.release(zero)


@lowering("aten::triu", "aten::triu_")
def _triu(ctx: LoweringContext) -> None:
    _tri(ctx, upper=True)


@lowering("aten::tril", "aten::tril_")
def _tril(ctx: LoweringContext) -> None:
    _tri(ctx, upper=False)


# --- row gathers: embedding / index_select ----------------------------------------------------------------

def _index_tiles(kb: KernelBuilder, idx_t: int, idx: TensorMeta, out_rs: tuple[int, ...]):
    """Yield (index [rows, 1] pattern, rows, out row offset, out row stride) covering ``idx`` in order.

    ``out_rs``: the output's element stride per index dim. A contiguous index vector is loaded as a
    [128, T] block (partition p holds indices p*T .. p*T+T-1: one DMA, contiguous rows) and each
    column feeds one gather; otherwise 128 indices per tile, one per partition.
    """
    P = kb.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    q = kb.queue("qSyncIO1", "input")
    shape = idx.shape if idx.ndim else (1,)
    ist = idx.stride if idx.ndim else (1,)
    ors = out_rs if idx.ndim else (0,)
    cshape, (ci, co) = coalesce(tuple(shape), [tuple(ist), tuple(ors)])
    n = prod(shape)
    if len(cshape) == 1 and n >= 2 * P:
        T = n // P
        si, so = ci[0], co[0]
        for t0 in range(0, T, MAX_COLS):
            w = min(MAX_COLS, T - t0)
            blk = kb.tile(P, (w,), idx.dtype)
            kb.dma(q, hbm(idx_t, P, T * si, [(si, w)], idx.dtype, offset=idx.offset + t0 * si), blk)
            for j in range(w):
                yield blk.view(j, [(1, 1)]), P, (t0 + j) * so, T * so
            kb.release(blk)
        rem = n - T * P
        if rem:
            tail = kb.tile(rem, (1,), idx.dtype)
            kb.dma(q, hbm(idx_t, rem, si, [(1, 1)], idx.dtype, offset=idx.offset + T * P * si), tail)
            yield tail, rem, T * P * so, so
            kb.release(tail)
        return
    plan = row_plan(tuple(shape), [], [tuple(ist), tuple(ors)], [idx.offset, 0], parts=kb.spec.partitions)
    for t in plan.tiles:
        it = kb.tile(t.rows, (1,), idx.dtype)
        kb.dma(q, hbm(idx_t, t.rows, t.pstrides[0], [(1, 1)], idx.dtype, offset=t.offsets[0]), it)
        yield it, t.rows, t.offsets[1], t.pstrides[1]
        kb.release(it)


def _row_pieces(row_shape, t_st, o_st):
    """Split one gathered row (coalesced) into pieces of at most ROW_PIECE elements."""
    if not row_shape:
        return [((), [(1, 1)], [(1, 1)], 0, 0, 1)]
    cshape, (ct, co) = coalesce(tuple(row_shape), [tuple(t_st), tuple(o_st)])
    if len(cshape) == 1 and cshape[0] > ROW_PIECE:
        return [((), [(ct[0], min(ROW_PIECE, cshape[0] - c0))], [(co[0], min(ROW_PIECE, cshape[0] - c0))],
                 c0 * ct[0], c0 * co[0], min(ROW_PIECE, cshape[0] - c0)) for c0 in range(0, cshape[0], ROW_PIECE)]
    return [((), list(zip(ct, cshape)), list(zip(co, cshape)), 0, 0, prod(cshape))]


def emit_take_rows(ctx: LoweringContext, table_t: int, table: TensorMeta, dim: int, idx_slot: int,
                   out_t: int, out: TensorMeta) -> None:
    """out = table.index_select(dim, idx) for any index shape: out's dims = table[:dim] + idx + table[dim+1:]."""
    kb = ctx.kb
    idx = ctx.call.inputs[idx_slot]
    ni = idx.ndim
    outer_shape, inner_shape = table.shape[:dim], table.shape[dim + 1:]
    out_outer_st = out.stride[:dim]
    out_idx_st = out.stride[dim:dim + ni]
    out_inner_st = out.stride[dim + ni:]
    pieces = _row_pieces(inner_shape, table.stride[dim + 1:], out_inner_st)
    qg = [kb.queue(f"qSyncIO{i}", "input") for i in (3, 4)]
    q_out = kb.queue("qSyncIO2", "output")
    held: list[AP] = []
    k = 0
    for it, rows, oro, ors in _index_tiles(kb, ctx.inputs[idx_slot], idx, tuple(out_idx_st)):
        for oidx in itertools.product(*(range(s) for s in outer_shape)):
            t_off = table.offset + sum(i * s for i, s in zip(oidx, table.stride[:dim]))
            o_off = out.offset + sum(i * s for i, s in zip(oidx, out_outer_st)) + oro
            for _, tdims, odims, tp, op_, size in pieces:
                g = kb.tile(rows, (size,), table.dtype)
                tab = hbm(table_t, table.shape[dim], table.stride[dim], tdims, table.dtype, offset=t_off + tp)
                kb.emit(DmaGather(queue=qg[k % 2], table=tab, index=it, dst=g))
                k += 1
                src = g
                if out.dtype != table.dtype:
                    src = kb.tile(rows, (size,), out.dtype)
                    kb.emit(Activation(func=Act.COPY, inp=g, out=src))
                kb.dma(q_out, src, hbm(out_t, rows, ors, odims, out.dtype, offset=o_off + op_))
                kb.release(*held)
                held = [g] + ([src] if src is not g else [])
    kb.release(*held)


@lowering("aten::embedding")
def _embedding(ctx: LoweringContext) -> None:
    emit_take_rows(ctx, ctx.inputs[0], ctx.call.inputs[0], 0, 1, ctx.outputs[0], ctx.call.outputs[0])


@lowering("aten::index_select")
def _index_select(ctx: LoweringContext) -> None:
    table = ctx.call.inputs[0]
    dim = int(attr(ctx, "dim", 0))
    if table.ndim == 0:
        copy_region(ctx.kb, ctx.inputs[0], table, ctx.outputs[0], ctx.call.outputs[0])
        return
    dim %= table.ndim
    idx = ctx.call.inputs[1]
    if idx.ndim == 0:  # a 0-d index keeps the dim (size 1)
        idx = TensorMeta((1,), (1,), idx.dtype, idx.offset)
        ctx.call = type(ctx.call)(ctx.call.name, (table, idx), ctx.call.outputs, ctx.call.attrs)
    emit_take_rows(ctx, ctx.inputs[0], table, dim, 1, ctx.outputs[0], ctx.call.outputs[0])


# --- element gather ----------------------------------------------------------------------------------------

GATHER_ROW_BYTES = 64 * 1024   # the longest row along the gathered dim held in SBUF per partition
GATHER_COLS = 2048             # index elements per partition gathered at a time


@lowering("aten::gather")
def _gather(ctx: LoweringContext) -> None:
    """out[i..] = self[i.. with index[i..] at dim].

    When a row of ``self`` along ``dim`` fits in SBUF (up to 64 KiB per partition), rows are loaded
    whole (long contiguous runs for the innermost dim) with the index rows, and GpSimdE gathers within
    each partition (``nki.isa.nc_n_gather``, which NKI documents as the efficient alternative to an
    indirect DMA); HBM sees each byte once. Longer rows fall back to one indirect DMA per element
    (the address computed on VectorE), 4-byte descriptors each as costly as a 2 KiB one."""
    x, idx = ctx.call.inputs[0], ctx.call.inputs[1]
    nd = max(idx.ndim, 1)
    dim = int(attr(ctx, "dim", 0)) % nd
    K = x.shape[dim] if x.ndim else 1
    if x.ndim and idx.ndim and idx.numel and K * x.dtype.itemsize <= GATHER_ROW_BYTES:
        _gather_on_chip(ctx, dim, K)
    else:
        _gather_by_dma(ctx, dim)


def _gather_on_chip(ctx: LoweringContext, dim: int, K: int) -> None:
    kb = ctx.kb
    x, idx, out = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.outputs[0]
    shape = idx.shape
    xst = tuple(0 if d == dim else x.stride[d] for d in range(x.ndim))
    plan = row_plan(tuple(shape), [dim], [tuple(idx.stride), tuple(out.stride), xst],
                    [idx.offset, out.offset, x.offset], parts=ctx.spec.partitions)
    J = shape[dim]
    qin, qout = queues(kb)
    held: list[AP] = []
    for t in plan.tiles:
        rows = t.rows
        data = kb.tile(rows, (K,), x.dtype)
        load(kb, qin[0], ctx.inputs[0], x.dtype, t.offsets[2], t.pstrides[2], rows, [(x.stride[dim], K)], data)
        made = [data]
        for j0 in range(0, J, GATHER_COLS):
            w = min(GATHER_COLS, J - j0)
            raw = kb.tile(rows, (w,), idx.dtype)
            load(kb, qin[1], ctx.inputs[1], idx.dtype, t.offsets[0] + j0 * idx.stride[dim], t.pstrides[0], rows,
                 [(idx.stride[dim], w)], raw)
            it = raw
            if idx.dtype != DType.int32:
                it = kb.tile(rows, (w,), DType.int32)
                kb.copy(raw, it)
            g = kb.tile(rows, (w,), x.dtype)
            kb.emit(Gather(data=data, index=it, out=g))
            res = g
            if out.dtype != x.dtype:
                res = kb.tile(rows, (w,), out.dtype)
                kb.copy(g, res)
            store(kb, qout, res, ctx.outputs[0], out.dtype, t.offsets[1] + j0 * out.stride[dim], t.pstrides[1], rows,
                  [(out.stride[dim], w)])
            made += [raw, g] + ([it] if it is not raw else []) + ([res] if res is not g else [])
        kb.release(*held)
        held = made
    kb.release(*held)


def _gather_by_dma(ctx: LoweringContext, dim: int) -> None:
    kb = ctx.kb
    x, idx, out = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.outputs[0]
    shape = idx.shape if idx.ndim else (1,)
    xst = tuple(x.stride) if x.ndim else (0,)
    nd = len(shape)
    base_st = tuple(0 if d == dim else xst[d] for d in range(nd))
    ist = idx.stride if idx.ndim else (1,)
    ost = out.stride if out.ndim else (1,)
    plan = row_plan(tuple(shape), [], [tuple(ist), tuple(ost), base_st], [idx.offset, out.offset, x.offset],
                    parts=ctx.spec.partitions)
    table = hbm(ctx.inputs[0], x.offset + x.span(), 1, [(1, 1)], x.dtype)
    q_idx, q_g = kb.queue("qSyncIO1", "input"), kb.queue("qSyncIO3", "input")
    q_out = kb.queue("qSyncIO2", "output")
    held: list[AP] = []
    for t in plan.tiles:
        it = kb.tile(t.rows, (1,), idx.dtype)
        kb.dma(q_idx, hbm(ctx.inputs[1], t.rows, t.pstrides[0], [(1, 1)], idx.dtype, offset=t.offsets[0]), it)
        addr = kb.tile(t.rows, (1,), DType.int64)
        base = kb.tile(t.rows, (1,), DType.int64)
        kb.emit(Iota(out=base, base=t.offsets[2], channel_multiplier=t.pstrides[2]))
        kb.emit(TensorScalar(inp=it, out=addr, alu0=Alu.MULTIPLY, scalar0=xst[dim] if x.ndim else 0))
        kb.emit(TensorTensor(alu=Alu.ADD, in0=addr, in1=base, out=addr))
        g = kb.tile(t.rows, (1,), x.dtype)
        kb.emit(DmaGather(queue=q_g, table=table, index=addr, dst=g))
        kb.dma(q_out, g, hbm(ctx.outputs[0], t.rows, t.pstrides[1], [(1, 1)], out.dtype, offset=t.offsets[1]))
        kb.release(*held)
        held = [it, addr, base, g]
    kb.release(*held)


# --- embedding backward --------------------------------------------------------------------------------------

EMB_DIM_PIECE = 8192   # elements of a gradient row scattered per indirect DMA


@lowering("aten::embedding_dense_backward")
def _embedding_backward(ctx: LoweringContext) -> None:
    """grad_weight = zeros; grad_weight[idx[i]] += grad[i] (DmaScatter accumulate: 128 rows per
    transfer, duplicates within one transfer summed in FP32), then the padding row is zeroed."""
    P = ctx.spec.partitions  # the target's partitions (128 on every NeuronCore so far)
    kb = ctx.kb
    g, idx, out = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.outputs[0]
    V = int(attr(ctx, "num_weights", out.shape[0]))
    pad = int(attr(ctx, "padding_idx", -1))
    by_freq = bool(attr(ctx, "scale_grad_by_freq", False))
    D = out.shape[1]
    if not out.is_contiguous():
        raise NotImplementedError("embedding_dense_backward writes a contiguous grad_weight")
    prog = ctx.program
    # rows accumulate in the weight's dtype, as PyTorch's CPU kernel (index_add_) accumulates them
    acc_dt, acc_t, acc_off = out.dtype, ctx.outputs[0], out.offset
    q_out = kb.queue("qSyncIO2", "output")
    q_in = kb.queue("qSyncIO0", "input")
    q_sc = kb.queue("qSyncIO3", "input")
    # the embedding dim in pieces (a 60000-wide row would not fit a partition twice)
    dch = min(D, EMB_DIM_PIECE)
    zero = kb.tile(P, (dch,), acc_dt)
    kb.emit(Memset(out=zero, value=0.0))
    for r0 in range(0, V, P):
        rows = min(P, V - r0)
        for d0 in range(0, D, dch):
            dw = min(dch, D - d0)
            kb.dma(q_out, zero.rows(0, rows).view(0, [(1, dw)]),
                   hbm(acc_t, rows, D, [(1, dw)], acc_dt, offset=acc_off + r0 * D + d0))
    # grad rows in index order: the index dims of grad, then D
    g_rs = g.stride[:-1] if g.ndim > 1 else ()
    counts_t = None
    if by_freq:
        counts_t = prog.tensor(f"emb_counts{len(prog.tensors)}", (V,), F32, "scratch")
        ones = kb.tile(P, (1,), F32)
        kb.emit(Memset(out=ones, value=1.0))
        for r0 in range(0, V, P):
            rows = min(P, V - r0)
            kb.dma(q_out, zero.rows(0, rows).view(0, [(1, 1)]), hbm(counts_t, rows, 1, [(1, 1)], F32, offset=r0))
        for it, rows, _, _ in _index_tiles(kb, ctx.inputs[1], idx, tuple(g_rs) if idx.ndim else (0,)):
            kb.emit(DmaScatter(queue=q_sc, src=ones.rows(0, rows), index=it,
                               table=hbm(counts_t, V, 1, [(1, 1)], F32), accumulate=True))
    held: list[AP] = []
    for it, rows, go, gps in _index_tiles(kb, ctx.inputs[1], idx, tuple(g_rs) if idx.ndim else (0,)):
        cnt = None
        if counts_t is not None:
            cnt = kb.tile(rows, (1,), F32)
            kb.emit(DmaGather(queue=q_in, table=hbm(counts_t, V, 1, [(1, 1)], F32), index=it, dst=cnt))
        for d0 in range(0, D, dch):
            dw = min(dch, D - d0)
            gt = kb.tile(rows, (dw,), F32)
            kb.dma(q_in, hbm(ctx.inputs[0], rows, gps, [(g.stride[-1], dw)], g.dtype,
                             offset=g.offset + go + d0 * g.stride[-1]), gt)
            if cnt is not None:
                kb.emit(TensorScalar(inp=gt, out=gt, alu0=Alu.DIVIDE, scalar0=cnt))
            table = hbm(acc_t, V, D, [(1, dw)], acc_dt, offset=acc_off + d0)
            kb.emit(DmaScatter(queue=q_sc, src=gt, index=it, table=table, accumulate=True))
            kb.release(*held)
            held = [gt]
        if cnt is not None:
            held.append(cnt)
    kb.release(*held)
    if 0 <= pad < V:
        for d0 in range(0, D, dch):
            dw = min(dch, D - d0)
            kb.dma(q_sc, zero.rows(0, 1).view(0, [(1, dw)]), hbm(acc_t, 1, D, [(1, dw)], acc_dt,
                                                                 offset=acc_off + pad * D + d0))
    if by_freq:
        kb.release(ones)
    kb.release(zero)
