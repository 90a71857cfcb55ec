"""Small linear-algebra reductions: trace (the diagonal read by one strided DMA, summed on VectorE),
dot and vdot (real dtypes: the element-wise product and its sum, chunk by chunk, on VectorE), and
the matrix-vector products mv / addmv (rows of the matrix on the partitions, the vector on every
partition, VectorE's products add-reduced by ScalarE).

A dot product (or a matrix-vector product) reuses no matrix element, so TensorE would gain it nothing: each element is read once and
used once, and the kernel is HBM-bound however the products are made (docs/roofline-report.md). As
a VectorE reduction its FP32 products stay FP32 (``--auto-cast matmult`` casts TensorE matmuls).

Both produce one value; the vectors are spread over the partitions (long contiguous rows), each
chunk's partial sums kept per partition and folded once at the end (VectorE, then GpSimdE).
"""

from __future__ import annotations

from ...isa import AP, Act, Activation, Alu, Memset, PartitionReduce, TensorReduce, TensorScalar, TensorTensor, hbm
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from .common import F32, RowStores, core_shares, load, meet_and_fold, queues

CHUNK = 8192


def _sum_of(ctx: LoweringContext, n: int, operands: list[tuple[int, TensorMeta, int]]) -> None:
    """out = sum_i prod_k operand_k[i * stride_k] over i < n (operands: (tensor, meta, stride)).

    The vector is spread over the partitions (partition p holds elements p * per .. p * per + per - 1,
    long contiguous rows), each chunk's product summed into a column of a [P, chunks] partial tile;
    VectorE folds the columns and GpSimdE the partitions. The last n % P elements go on one partition."""
    kb = ctx.kb
    P = kb.spec.partitions
    out = ctx.call.outputs[0]
    qin, qout = queues(kb)
    per = n // P
    pieces = []                                   # (first element, partitions, elements per partition)
    if per:
        pieces += [(0, P, per)]
    if n - P * per:
        pieces += [(P * per, 1, n - P * per)]
    totals = []
    held: list[AP] = []
    for first, parts, m in pieces:
        chunks = list(range(0, m, CHUNK // 4 if parts > 1 else CHUNK))
        # the partitions' chunks in one share per physical core (LNC=2), met through HBM (common.core_shares)
        shares = []
        for share in core_shares(kb, len(chunks)) if parts > 1 else [range(len(chunks))]:
            acc = kb.tile(parts, (len(share),), F32)
            for j, c0 in enumerate(chunks[k] for k in share):
                w = min(chunks[1] if len(chunks) > 1 else m, m - c0)
                tiles = []
                for k, (tensor, meta, stride) in enumerate(operands):
                    t = kb.tile(parts, (w,), meta.dtype)
                    kb.dma(qin[k % 2], hbm(tensor, parts, m * stride, [(stride, w)], meta.dtype,
                                           offset=(first + c0) * stride), t)
                    tiles.append(t)
                prod_t = tiles[0]
                if len(tiles) > 1:
                    prod_t = kb.tile(parts, (w,), F32)
                    kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tiles[0], in1=tiles[1], out=prod_t))
                    tiles.append(prod_t)
                kb.emit(TensorReduce(alu=Alu.ADD, inp=prod_t, out=acc.view(j, [(1, 1)])))
                # loads released one chunk late: the next chunk's DMAs fill other bytes
                kb.release(*held)
                held = tiles
            rows = kb.tile(parts, (1,), F32)
            kb.emit(TensorReduce(alu=Alu.ADD, inp=acc, out=rows))
            if parts > 1:
                total = kb.tile(1, (1,), F32)
                kb.emit(PartitionReduce(alu=Alu.ADD, inp=rows, out=total))
                kb.release(rows)
            else:
                total = rows
            kb.release(acc)
            shares.append(total)
        totals.append(meet_and_fold(kb, shares, Alu.ADD, qout, qin[0]))
    if not totals:
        zero = kb.tile(1, (1,), F32)
        kb.emit(Memset(out=zero, value=0.0))
        totals.append(zero)
    for extra in totals[1:]:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=totals[0], in1=extra, out=totals[0]))
    res = kb.tile(1, (1,), out.dtype)
    kb.copy(totals[0], res)
    kb.dma(qout, res, hbm(ctx.outputs[0], 1, 0, [(1, 1)], out.dtype))
    kb.release(*held, *totals, res)


@lowering("aten::trace")
def _trace(ctx: LoweringContext) -> None:
    x = ctx.call.inputs[0]
    n = min(x.shape)
    _sum_of(ctx, n, [(ctx.inputs[0], x, x.stride[0] + x.stride[1])])


@lowering("aten::vdot", "aten::dot")
def _vdot(ctx: LoweringContext) -> None:
    a, b = ctx.call.inputs[0], ctx.call.inputs[1]
    _sum_of(ctx, a.shape[0], [(ctx.inputs[0], a, a.stride[0]), (ctx.inputs[1], b, b.stride[0])])


MV_PIECE = 4096       # matrix columns multiplied at a time
MV_MAX_K = 16384      # longest vector held on every partition (64 KiB of FP32)


def emit_matvec(ctx: LoweringContext, a_slot: int, v_slot: int, bias: int | None = None, alpha: float = 1.0,
                beta: float = 0.0) -> bool:
    """out[m] = alpha * sum_k A[m, k] v[k] (+ beta * bias[m]) with A's rows on the partitions (long
    contiguous rows), v loaded once onto every partition, VectorE multiplying and ScalarE add-reducing
    each row (activation with an accumulator); results leave as rows of values (RowStores). False
    (the matmul kernel runs) for a vector too long to hold on every partition."""
    kb = ctx.kb
    P = kb.spec.partitions
    a, v, out = ctx.call.inputs[a_slot], ctx.call.inputs[v_slot], ctx.call.outputs[0]
    M, K = a.shape
    if K == 0 or M == 0 or K > MV_MAX_K or out.ndim != 1:
        return False
    qin, qout = queues(kb)
    q_b = kb.queue("qSyncIO3", "input")
    vt = kb.tile(P, (K,), v.dtype)
    kb.dma(qin[1], hbm(ctx.inputs[v_slot], min(P, M), 0, [(v.stride[0], K)], v.dtype, offset=v.offset),
           vt.rows(0, min(P, M)))
    bm = ctx.call.inputs[bias] if bias is not None else None
    b_rs = (bm.stride[0] if bm.ndim == 1 and bm.shape[0] != 1 else 0) if bm is not None else 0
    pieces = [(k0, min(MV_PIECE, K - k0)) for k0 in range(0, K, MV_PIECE)]
    tiles = list(range(0, M, P))
    # beta * bias for every row tile at once: column t holds rows t*P .. t*P + P - 1 (one DMA, not a
    # 4-byte descriptor per row); a broadcast bias is one value on every partition
    bias_cols = None
    if bm is not None and bias is not None:  # one implies the other
        T = len(tiles)
        raw = kb.tile(P, (T,), bm.dtype)
        if b_rs:
            full = M // P
            if full:
                load(kb, q_b, ctx.inputs[bias], bm.dtype, bm.offset, b_rs, P, [(b_rs * P, full)], raw.view(0, [(1, full)]))
            if M % P:
                kb.dma(q_b, hbm(ctx.inputs[bias], M % P, b_rs, [(1, 1)], bm.dtype, offset=bm.offset + full * P * b_rs),
                       raw.rows(0, M % P).view(full, [(1, 1)]))
            src = raw
        else:
            kb.dma(q_b, hbm(ctx.inputs[bias], P, 0, [(1, 1)], bm.dtype, offset=bm.offset), raw.view(0, [(1, 1)]))
            src = raw.view(0, [(0, T)])
        bias_cols = kb.tile(P, (T,), F32)
        kb.emit(TensorScalar(inp=src, out=bias_cols, alu0=Alu.MULTIPLY, scalar0=float(beta)))
        kb.release(raw)
    rows_out = RowStores(kb, qout, len(tiles), scalar_copies=True)
    held: list[AP] = []
    older: list[AP] = []
    for ti, m0 in enumerate(tiles):
        rows = min(P, M - m0)
        parts = kb.tile(rows, (len(pieces),), F32)
        made = [parts]
        for j, (k0, w) in enumerate(pieces):
            at = kb.tile(rows, (w,), a.dtype)
            load(kb, qin[(ti + j) % 2], ctx.inputs[a_slot], a.dtype, a.offset + m0 * a.stride[0] + k0 * a.stride[1],
                 a.stride[0], rows, [(a.stride[1], w)], at)
            prod_t = kb.tile(rows, (w,), F32)
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=at, in1=vt.rows(0, rows).view(k0, [(1, w)]), out=prod_t))
            kb.emit(Activation(func=Act.COPY, inp=prod_t, out=prod_t, accum_out=parts.view(j, [(1, 1)])))
            made += [at, prod_t]
        acc = parts
        if len(pieces) > 1:
            acc = kb.tile(rows, (1,), F32)
            kb.emit(TensorReduce(alu=Alu.ADD, inp=parts, out=acc))
            made.append(acc)
        res = kb.tile(rows, (1,), out.dtype)
        if bias_cols is not None:
            # alpha * acc + beta * bias
            kb.emit(Activation(func=Act.COPY, inp=acc.view(0, [(1, 1)]), out=res, scale=float(alpha),
                               bias=bias_cols.rows(0, rows).view(ti, [(1, 1)])))
        else:   # on ScalarE: VectorE's stream holds only the products, never waiting for the sums
            kb.emit(Activation(func=Act.COPY, inp=acc.view(0, [(1, 1)]), out=res, scale=float(alpha)))
        rows_out.store(res, ctx.outputs[0], out.dtype, out.offset + m0 * out.stride[0], out.stride[0], rows)
        made.append(res)
        # a tile's buffers are released two tiles later: three row tiles in flight, so a load never
        # waits for the multiply of the tile before it
        kb.release(*older)
        older, held = held, made
    rows_out.finish()
    kb.release(*older, *held, vt, *([bias_cols] if bias_cols is not None else []))
    return True
