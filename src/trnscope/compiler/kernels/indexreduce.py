"""Reductions that return positions: argmax / argmin and max.dim / min.dim (values and indices);
prod; the binary max.other / min.other.

The reduced dim goes on the free axis (rows on partitions, loaded by DMA transpose when the dim is
not the innermost); a reduction over every element of a contiguous tensor is spread over the
partitions instead, each scanning a contiguous slice, and the partitions' results are combined on one. Per tile and 4096-element piece VectorE finds the extreme value, marks where
the row equals it (NaN counts as the extreme, as in PyTorch), and picks the first marked position:
select(mark, position, INT_MAX) min-reduced, the positions coming from GpSimdE's iota. Pieces of a
long row combine with a strict comparison, so the first occurrence wins.
"""

from __future__ import annotations

from ...isa.instructions.vector_engine import MAX8_FMAX
from ...isa import AP, Act, Activation, Alu, DType, FindIndex8, Iota, Max8, Memset, ScalarTensorTensor, Select, TensorReduce, TensorScalar, TensorTensor, \
    TensorTranspose, hbm
from ..lowering import LoweringContext, lowering
from . import reduce as _reduce
from .common import F32, RowStores, core_shares, free_pieces, full_strides, load, meet_partials, queues, reduced_strides, \
    row_plan
from .elementwise import _binary

PIECE = 4096
# loads in flight ahead of the max8 scan: VectorE's two passes take about as long as the load of a
# piece (2N cycles at 1.12 GHz against 4N bytes at 272 GB/s over 128 partitions), so two loads ahead
# keep the DMA queues busy while a piece is scanned
LOOKAHEAD = 2
INT_MAX = 2 ** 31 - 1


def _scan(kb, rows: int, pieces, x_dtype: DType, vdt: DType, largest: bool, big: AP, keep: list | None = None,
          negate_back: bool = True):
    """(best value, first position) per partition of a row tile, walking its pieces in order.

    ``pieces`` yields (elements, load(tile) that fills a [rows, elements] tile, position of the
    piece's first element, position step between partitions). Float pieces of 8 elements or more
    take :func:`_scan_max8`'s two passes; the rest per piece find the extreme, mark where the row
    equals it (NaN counts as the extreme, as in PyTorch) and pick the first marked position:
    select(mark, position, INT_MAX) min-reduced, positions from GpSimdE's iota. Pieces combine with
    a strict comparison, so the first occurrence wins."""
    pieces = list(pieces)
    exact = all(p0 + w + pstep * (rows - 1) < 2 ** 24 for w, _, p0, pstep in pieces)   # positions through FP32
    if x_dtype.is_float and exact and all(8 <= w <= MAX8_FMAX for w, _, _, _ in pieces):
        best, bidx = _scan_max8(kb, rows, pieces, x_dtype, largest, keep)
        if not largest:
            if not negate_back:
                return best, bidx, -1.0
            kb.emit(Activation(func=Act.COPY, inp=best, out=best, scale=-1.0))
        return best, bidx, 1.0
    is_float = x_dtype.is_float
    red = Alu.MAX if largest else Alu.MIN
    better = Alu.IS_GT if largest else Alu.IS_LT
    best = kb.tile(rows, (1,), vdt)
    bidx = kb.tile(rows, (1,), DType.int32)
    held: list[AP] = []
    for j, (w, fill, p0, pstep) in enumerate(pieces):
        xt = kb.tile(rows, (w,), x_dtype)
        fill(xt)
        cm = best if j == 0 else kb.tile(rows, (1,), vdt)
        kb.emit(TensorReduce(alu=red, inp=xt, out=cm))
        # 0/1 marks in BF16: exact, and VectorE's 16-bit modes make these passes cheap
        mark = kb.tile(rows, (w,), DType.bfloat16)
        kb.emit(TensorScalar(inp=xt, out=mark, alu0=Alu.IS_EQUAL, scalar0=cm))
        if is_float:
            isn = kb.tile(rows, (w,), DType.bfloat16)
            kb.emit(Activation(func=Act.IS_NAN, inp=xt, out=isn))
            kb.emit(TensorTensor(alu=Alu.MAX, in0=mark, in1=isn, out=mark))   # or, on 0/1
            kb.release(isn)
        pos_t = kb.tile(rows, (w,), DType.int32)
        kb.emit(Iota(out=pos_t, base=p0, channel_multiplier=pstep, coefs=(1,)))
        kb.emit(Select(pred=mark, on_true=pos_t, on_false=big.rows(0, rows).view(0, [(0, w)]), out=pos_t))
        ci = bidx if j == 0 else kb.tile(rows, (1,), DType.int32)
        kb.emit(TensorReduce(alu=Alu.MIN, inp=pos_t, out=ci))
        if j > 0:
            _keep_better(kb, rows, cm, ci, best, bidx, better, is_float)
            kb.release(ci, cm)
        kb.release(*held)
        held = [xt, mark, pos_t]
    if keep is not None:
        keep.extend(held)   # released by the caller a row tile later: the next tile's loads go elsewhere
    else:
        kb.release(*held)
    return best, bidx, 1.0


def _scan_max8(kb, rows: int, pieces: list, x_dtype: DType, largest: bool, keep: list | None):
    """The NKI way to an argmax (hardware.md 3.1, 3.3): per piece VectorE's max8 finds the row's
    largest values (N cycles) and nc_find_index8 the first position of the largest (N cycles), two
    passes where the mark-and-select scan takes six. An argmin searches the negated row, negated on
    ScalarE beside VectorE (-x keeps ties and NaNs; the caller negates the value back).

    Every piece writes its 8 largest and their positions into its own slot of one [rows, k, 8]
    pair of tiles (no piece waits for another's scratch), its first position as its column of a
    GpSimdE iota. Several pieces end with one more max8 / nc_find_index8 over the pieces' largest
    (the first piece holding the extreme, a NaN counting as one) and its position taken through a
    one-hot mask: four short VectorE instructions per row tile instead of a compare-and-select chain
    per piece. Loads run LOOKAHEAD pieces ahead of the scan, a piece's tiles freed LOOKAHEAD pieces
    later. Returns (best [rows, 1] in the searched domain, first position [rows, 1] int32), views of
    tiles the caller releases through them."""
    k = len(pieces)
    K = max(8, k)
    vals = kb.tile(rows, (K, 8), F32)
    idx = kb.tile(rows, (K, 8), DType.int32)
    if k > 1 and K > k:
        # padding after the pieces: never before a real candidate, so never the first extreme
        kb.emit(Memset(out=vals.view(8 * k, [(8, K - k)]), value=float("-inf")))
        kb.emit(Memset(out=idx.view(8 * k, [(8, K - k)]), value=0.0))
    shifted = any(p0 or pstep for _, _, p0, pstep in pieces)
    base = kb.tile(rows, (K,), F32) if shifted or k > 1 else None
    if base is not None and k > 1 and K > k:
        kb.emit(Memset(out=base.view(k, [(1, K - k)]), value=0.0))
    loaded: list[AP] = []
    ring: list[list[AP]] = []

    def issue(upto: int) -> None:
        while len(loaded) < min(upto, k):
            t = kb.tile(rows, (pieces[len(loaded)][0],), x_dtype)
            pieces[len(loaded)][1](t)
            loaded.append(t)

    for j, (w, _, p0, pstep) in enumerate(pieces):
        issue(j + LOOKAHEAD)
        src = loaded[j]
        now = [src]
        if not largest:
            src = kb.tile(rows, (w,), x_dtype)
            kb.emit(Activation(func=Act.COPY, inp=loaded[j], out=src, scale=-1.0))
            now.append(src)
        m8 = vals.view(8 * j, [(1, 8)])
        kb.emit(Max8(inp=src, out=m8))
        kb.emit(FindIndex8(data=src, vals=m8, out=idx.view(8 * j, [(1, 8)])))
        if base is not None:
            kb.emit(Iota(out=base.view(j, [(1, 1)]), base=p0, channel_multiplier=pstep, coefs=(1,)))
        ring.append(now)
        if len(ring) > LOOKAHEAD:
            kb.release(*ring.pop(0))
    rest = [t for now in ring for t in now]
    if keep is not None:
        keep.extend(rest)
    else:
        kb.release(*rest)
    firsts = idx.view(0, [(8, K)])
    if k == 1:
        if base is not None:
            kb.emit(Activation(func=Act.COPY, inp=firsts.view(0, [(1, 1)]), out=firsts.view(0, [(1, 1)]),
                               bias=base.view(0, [(1, 1)])))
            kb.release(base)
        return vals.view(0, [(1, 1)]), idx.view(0, [(1, 1)])
    assert base is not None
    c8 = kb.tile(rows, (8,), F32)
    cand = vals.view(0, [(8, K)])
    kb.emit(Max8(inp=cand, out=c8))
    jj = kb.tile(rows, (8,), DType.int32)
    kb.emit(FindIndex8(data=cand, vals=c8, out=jj))
    # the winning piece's position: (its first position + the piece's start) through a one-hot mask
    col = kb.tile(rows, (K,), F32)
    kb.emit(Iota(out=col, coefs=(1,)))
    kb.emit(TensorTensor(alu=Alu.ADD, in0=firsts, in1=base, out=base))
    kb.emit(ScalarTensorTensor(inp=col, scalar0=jj.view(0, [(1, 1)]), in1=base, out=col, alu0=Alu.IS_EQUAL,
                               alu1=Alu.MULTIPLY))
    kb.emit(TensorReduce(alu=Alu.ADD, inp=col, out=jj.view(0, [(1, 1)])))
    kb.release(col, base, vals, idx)
    return c8.view(0, [(1, 1)]), jj.view(0, [(1, 1)])


def _keep_better(kb, rows, cm, ci, best, bidx, better, is_float) -> None:
    """(best, bidx) = (cm, ci) where cm is strictly better than best (a NaN beats a number)."""
    upd = kb.tile(rows, (1,), F32)
    kb.emit(TensorTensor(alu=better, in0=cm, in1=best, out=upd))
    if is_float:
        # a NaN piece beats a non-NaN best: (cm != cm) > (best != best)
        nc, nb = kb.tile(rows, (1,), F32), kb.tile(rows, (1,), F32)
        kb.emit(TensorTensor(alu=Alu.NOT_EQUAL, in0=cm, in1=cm, out=nc))
        kb.emit(TensorTensor(alu=Alu.NOT_EQUAL, in0=best, in1=best, out=nb))
        kb.emit(TensorTensor(alu=Alu.IS_GT, in0=nc, in1=nb, out=nc))
        kb.emit(TensorTensor(alu=Alu.LOGICAL_OR, in0=upd, in1=nc, out=upd))
        kb.release(nc, nb)
    kb.emit(Select(pred=upd, on_true=ci, on_false=bidx, out=bidx))
    kb.emit(Select(pred=upd, on_true=cm, on_false=best, out=best))
    kb.release(upd)


def _arg_reduce(ctx: LoweringContext, largest: bool, with_values: bool) -> None:
    kb = ctx.kb
    x = ctx.call.inputs[0]
    outs = ctx.call.outputs
    dim = ctx.call.attr("dim")
    if x.ndim == 0:
        shape: tuple[int, ...] = (1,)
        rdims = [0]
        xm = type(x)((1,), (1,), x.dtype, x.offset)
    else:
        shape = x.shape
        rdims = list(range(x.ndim)) if dim is None else [int(dim) % x.ndim]
        xm = x
    if not with_values and _emit_arg_all(ctx, xm, rdims, largest):
        return
    metas = [xm] + list(outs)
    strides = [full_strides(xm, shape)] + [reduced_strides(o, shape, rdims) if o.ndim else (0,) * len(shape)
                                           for o in outs]
    plan = row_plan(shape, rdims, strides, [m.offset for m in metas], parts=ctx.spec.partitions)
    pieces = free_pieces(plan, PIECE)
    starts = []  # logical (row-major) position of each piece's first element
    pos = 0
    for w, _, _ in pieces:
        starts.append(pos)
        pos += w
    qin, qout = queues(kb)
    vdt = F32 if x.dtype.is_float else x.dtype
    big = kb.tile(kb.spec.partitions, (1,), DType.int32)
    kb.emit(Memset(out=big, value=float(INT_MAX)))
    idx_out = outs[1] if with_values else outs[0]
    row_len = pos
    held: list[list[AP]] = []   # a row tile's tiles, freed LOOKAHEAD row tiles later: loads run ahead
    rows_out = RowStores(kb, qout, len(plan.tiles), scalar_copies=True)
    k = 2 if with_values else 1

    def store_results(t, rows, best, bidx, sign, last) -> None:
        # positions below 2^24 go out through FP32 row transposes (RowStores), widened on the way
        rows_out.store(bidx, ctx.outputs[k - 1], idx_out.dtype, t.offsets[k], t.pstrides[k], rows,
                       small_ints=row_len < 2 ** 24)
        extra = []
        if with_values:
            vo = kb.tile(rows, (1,), outs[0].dtype)
            kb.emit(Activation(func=Act.COPY, inp=best, out=vo, scale=sign))
            rows_out.store(vo, ctx.outputs[0], outs[0].dtype, t.offsets[1], t.pstrides[1], rows)
            extra.append(vo)
        held.append([best, bidx, *extra, *last])
        if len(held) > LOOKAHEAD:
            kb.release(*held.pop(0))

    pending = None
    for ti, t in enumerate(plan.tiles):
        rows = t.rows

        def fill_piece(j, dims, offs, t=t, rows=rows, ti=ti):
            return lambda xt: load(kb, qin[(ti + j) % 2], ctx.inputs[0], x.dtype, t.offsets[0] + offs[0],
                                   t.pstrides[0], rows, dims[0], xt)

        walk = ((w, fill_piece(j, dims, offs), p0, 0) for j, ((w, dims, offs), p0) in enumerate(zip(pieces, starts)))
        last: list[AP] = []
        best, bidx, sign = _scan(kb, rows, walk, x.dtype, vdt, largest, big, keep=last, negate_back=False)
        # a tile's results leave after the next tile's scan is issued: ScalarE's part of that scan
        # (an argmin's negation) then runs before these copies, which wait on this tile's VectorE
        if pending:
            store_results(*pending)
        pending = (t, rows, best, bidx, sign, last)
    if pending:
        store_results(*pending)
    rows_out.finish()
    kb.release(*[a for h in held for a in h], big)


def _emit_arg_all(ctx: LoweringContext, x, rdims: list[int], largest: bool) -> bool:
    """argmax/argmin over every element of a contiguous tensor, spread over the partitions.

    Partition p scans elements [p * per, (p + 1) * per) (long contiguous rows, as the full sum
    loads them), the last n % P elements scan on one more partition; each partition's extreme and
    first position are moved onto one partition by TensorE transposes (positions as FP32, exact
    below 2^24) and the same scan picks the first partition holding the extreme. Returns False
    (the one-row kernel runs) when the call is not such a reduction of a float tensor (integer
    values would round in the FP32 transpose)."""
    kb = ctx.kb
    P = kb.spec.partitions
    n = x.numel
    if (len(rdims) != max(x.ndim, 1) or not x.is_contiguous() or not x.dtype.is_float or n < 2 * P
            or n >= 2 ** 24):
        return False
    out = ctx.call.outputs[0]
    per = n // P
    tail = n - per * P
    qin, qout = queues(kb)
    vdt = F32
    big = kb.tile(P, (1,), DType.int32)
    kb.emit(Memset(out=big, value=float(INT_MAX)))
    chunk = min(1024, per)

    def fill(c0, w, parts, first, stride):
        return lambda xt: kb.dma(qin[(c0 // chunk) % 2],
                                 hbm(ctx.inputs[0], parts, stride, [(1, w)], x.dtype, offset=x.offset + first + c0), xt)

    # one share of the columns per physical core (LNC=2): each core's per-partition (extreme, first
    # position) pairs meet through HBM (common.core_shares) and all go through the final scan
    starts = list(range(0, per, chunk))
    found = []
    for share in core_shares(kb, len(starts)):
        walk = ((min(chunk, per - c0), fill(c0, min(chunk, per - c0), P, 0, per), c0, per)
                for c0 in (starts[k] for k in share))
        found.append(_scan(kb, P, walk, x.dtype, vdt, largest, big)[:2])
    nsh = len(found)
    columns: list[tuple[AP, AP]] = []    # per share: ([P, 1] extremes, [P, 1] positions as FP32)
    met = None
    if nsh == 1:
        best, bidx = found[0]
        bidx_f = kb.tile(P, (1,), F32)
        kb.copy(bidx, bidx_f)
        kb.release(bidx)
        columns.append((best, bidx_f))
    else:
        pairs = []
        for best, bidx in found:
            pair = kb.tile(P, (2,), F32)
            kb.copy(best, pair.view(0, [(1, 1)]))
            kb.copy(bidx, pair.view(1, [(1, 1)]))
            kb.release(best, bidx)
            pairs.append(pair)
        met = meet_partials(kb, pairs, qout, qin[0])
        columns = [(met.view(2 * sh, [(1, 1)]), met.view(2 * sh + 1, [(1, 1)])) for sh in range(nsh)]
    ncols = nsh * P + (1 if tail else 0)
    # every partition's (extreme, position) on one partition: [1, P] rows through PSUM
    vals = kb.tile(1, (ncols,), F32)
    posf = kb.tile(1, (ncols,), F32)
    for sh, pair_cols in enumerate(columns):
        for src, dst in zip(pair_cols, (vals, posf)):
            ps = kb.psum_tile(1, (P,), F32)
            kb.emit(TensorTranspose(src=src, dst=ps))
            kb.copy(ps, dst.view(sh * P, [(1, P)]))
            kb.release(ps)
    kb.release(*(columns[0] if nsh == 1 else [met]))
    if tail:
        tail_walk = [(tail, fill(0, tail, 1, per * P, tail), per * P, 0)]
        tb, ti, _ = _scan(kb, 1, tail_walk, x.dtype, vdt, largest, big)
        kb.copy(tb, vals.view(nsh * P, [(1, 1)]))
        kb.copy(ti, posf.view(nsh * P, [(1, 1)]))
        kb.release(tb, ti)
    # the scan over the partitions' extremes, positions taken from their own first positions
    red = Alu.MAX if largest else Alu.MIN
    gm = kb.tile(1, (1,), F32)
    kb.emit(TensorReduce(alu=red, inp=vals, out=gm))
    mark = kb.tile(1, (ncols,), F32)
    kb.emit(TensorScalar(inp=vals, out=mark, alu0=Alu.IS_EQUAL, scalar0=gm))
    if x.dtype.is_float:
        isn = kb.tile(1, (ncols,), F32)
        kb.emit(Activation(func=Act.IS_NAN, inp=vals, out=isn))
        kb.emit(TensorTensor(alu=Alu.MAX, in0=mark, in1=isn, out=mark))
        kb.release(isn)
    bigf = kb.tile(1, (1,), F32)
    kb.emit(Memset(out=bigf, value=float(2 ** 24)))
    kb.emit(Select(pred=mark, on_true=posf, on_false=bigf.view(0, [(0, ncols)]), out=posf))
    first = kb.tile(1, (1,), F32)
    kb.emit(TensorReduce(alu=Alu.MIN, inp=posf, out=first))
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(first, res)
    kb.dma(qout, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype, offset=out.offset))
    kb.release(vals, posf, gm, mark, bigf, first, res, big)
    return True


@lowering("aten::argmax")
def _argmax(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=True, with_values=False)


@lowering("aten::argmin")
def _argmin(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=False, with_values=False)


@lowering("aten::max.dim")
def _max_dim(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=True, with_values=True)


@lowering("aten::min.dim")
def _min_dim(ctx: LoweringContext) -> None:
    _arg_reduce(ctx, largest=False, with_values=True)


@lowering("aten::prod", "aten::prod.dim_int")
def _prod(ctx: LoweringContext) -> None:
    _reduce.emit_reduce(ctx, Alu.MULTIPLY, mean=False)


lowering("aten::max.other")(_binary(Alu.MAX))
lowering("aten::min.other")(_binary(Alu.MIN))
