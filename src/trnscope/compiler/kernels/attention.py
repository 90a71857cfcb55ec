"""Fused scaled-dot-product attention: softmax(q k^T * scale + mask) v in one kernel.

The flash-attention schedule as NKI writes it: per (batch, head) K^T [E, S], Q^T [E, L] and V
[S, Ev] are loaded into SBUF once (K^T and Q^T by DMA transpose: long contiguous HBM rows, no
transpose kernel), into one of two buffer sets so the next head's loads overlap this head's
compute. Per 128-row query tile and 512-column key block

- TensorE computes the scores block q k^T into PSUM (stationary Q^T, moving K^T);
- VectorE finds the block's row max straight from PSUM; ScalarE computes
  p = exp(scale * s - m_new) from PSUM with the row sum accumulated in the same instruction, the
  correction exp(m_old - m_new) and the running sum (activation with per-partition scale and
  bias); VectorE rescales the output accumulator in place in PSUM;
- TensorE transposes p (128 columns at a time, matmul against the identity) into the scores'
  own PSUM bank so the key dim is on the partitions, and accumulates p v into the accumulator.

After the last block the accumulator is divided by the row sum on its way out of PSUM. Scores
and probabilities never leave SBUF/PSUM. Two query tiles are in flight ("lanes"): their blocks
are emitted stage by stage in turn, and each lane's next scores block is issued before its
current softmax, so every engine's in-order stream alternates between independent work.

``is_causal`` (top-left aligned, as PyTorch) skips key blocks above the diagonal and masks the
diagonal blocks with an additive -inf tile made once per diagonal offset (GpSimdE affine_select);
an explicit mask (boolean or additive, broadcast by strides) is applied to the scaled scores in
SBUF. Dropout is refused (the device RNG cannot reproduce PyTorch's stream).
"""

from __future__ import annotations

import math

from ...isa import (
    AP, Act, Activation, AffineSelect, Alu, DType, LoadStationary, Memset, MultiplyMoving, Select, TensorReduce,
    TensorScalar, TensorTensor, TensorTranspose, hbm,
)
from ..lowering import LoweringContext, lowering
from .common import F32, FLT_MAX, attr, ceil_div, full_strides, load, store


def emit_attention(ctx: LoweringContext, lse_out: int | None) -> None:
    kb = ctx.kb
    # tile sizes from the target: query/key tiles of one partition each, key blocks and value
    # slices of one PSUM bank of FP32 (the moving free size)
    P = kb.spec.partitions
    S_BLOCK = EV_SLICE = kb.spec.gemm_moving_fmax
    q, k, v, mask = (ctx.call.inputs + (None,) * 4)[:4]
    out = ctx.call.outputs[0]
    if float(attr(ctx, "dropout_p", 0.0)) != 0.0:
        raise NotImplementedError("attention with dropout: the device RNG stream cannot match PyTorch's")
    causal = bool(attr(ctx, "is_causal", False))
    if causal and mask is not None:
        raise ValueError("scaled_dot_product_attention: explicit attn_mask and is_causal are exclusive")
    *batch, L, E = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    scale = attr(ctx, "scale")
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if scale == 0.0:
        raise NotImplementedError("attention with scale 0")
    dt = q.dtype
    pdt = dt if dt.itemsize != 4 else F32   # probabilities feed TensorE with v: same width as v
    B = batch[0] if len(batch) == 2 else 1
    H = batch[-1] if batch else 1
    Hk = k.shape[-3] if k.ndim >= 3 else 1
    group = max(1, H // max(1, Hk))

    def off(meta, b, h):
        st = meta.stride
        nb = meta.ndim - 2
        o = meta.offset
        if nb == 2:
            o += (b * st[0] if meta.shape[0] != 1 else 0) + (h * st[1] if meta.shape[1] != 1 else 0)
        elif nb == 1:
            o += h * st[0] if meta.shape[0] != 1 else 0
        return o

    mask_st = full_strides(mask, (B, H, L, S)) if mask is not None else None
    q_in = [kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input")]
    q_out = kb.queue("qSyncIO2", "output")
    q_mask = kb.queue("qSyncIO3", "input")
    e_chunks = [(e0, min(P, E - e0)) for e0 in range(0, E, P)]
    s_blocks = [(s0, min(S_BLOCK, S - s0)) for s0 in range(0, S, S_BLOCK)]
    v_chunks = [(c0, min(P, S - c0)) for c0 in range(0, S, P)]
    ev_slices = [(e0, min(EV_SLICE, Ev - e0)) for e0 in range(0, Ev, EV_SLICE)]
    fill = float("-inf") if scale > 0 else float("inf")
    causal_masks: dict[tuple[int, int, int], AP] = {}
    neg_big = None
    held_bh: list[AP] = []
    turn = 0
    # K^T, Q^T and V of a head live in one of two buffer sets allocated up front, so the next head's
    # loads overlap this head's compute without waiting for bytes its temporaries used
    per_head = len(e_chunks) * (S + L) * dt.itemsize + len(v_chunks) * Ev * v.dtype.itemsize
    room = kb.spec.sbuf_bytes_per_partition - 48 * 1024   # per-block tiles and causal masks
    if per_head > room:
        raise NotImplementedError(f"attention: K^T, Q^T and V of one head ({per_head} bytes per partition) "
                                  f"do not fit SBUF; sequence too long for the resident-KV kernel")
    sets = 2 if B * H > 1 and 2 * per_head <= room else 1
    buffers = [([kb.tile(ec, (S,), dt) for _, ec in e_chunks], [kb.tile(ec, (L,), dt) for _, ec in e_chunks],
                [kb.tile(sc, (Ev,), v.dtype) for _, sc in v_chunks]) for _ in range(sets)]
    head = 0
    for b in range(B):
        for h in range(H):
            hk = h // group
            kt, qt, vt_buf = buffers[head % len(buffers)]
            head += 1
            for (e0, ec), ktile, qtile in zip(e_chunks, kt, qt):
                load(kb, q_in[0], ctx.inputs[1], dt, off(k, b, hk) + e0 * k.stride[-1], k.stride[-1], ec,
                     [(k.stride[-2], S)], ktile)
                load(kb, q_in[1], ctx.inputs[0], dt, off(q, b, h) + e0 * q.stride[-1], q.stride[-1], ec,
                     [(q.stride[-2], L)], qtile)
            vt = vt_buf
            for (c0, sc), t in zip(v_chunks, vt):
                load(kb, q_in[c0 // P % 2], ctx.inputs[2], v.dtype, off(v, b, hk) + c0 * v.stride[-2], v.stride[-2],
                     sc, [(v.stride[-1], Ev)], t)
            # the (query tile, key block) work items of this head; causal skips the blocks entirely
            # above the diagonal. Two query tiles are in flight, their blocks alternating.
            per_tile = [[(q0, min(P, L - q0), s0, sb) for s0, sb in s_blocks
                         if not (causal and s0 > q0 + min(P, L - q0) - 1)] for q0 in range(0, L, P)]
            lanes = 2 if len(ev_slices) == 1 else 1
            items = [it for tile_items in per_tile for it in tile_items]
            last_of = {q0: i for i, (q0, _, _, _) in enumerate(items)}
            state: dict[int, dict] = {}
            finished: list[list[AP]] = []

            def scores_of(i: int, *, items=items, qt=qt, kt=kt) -> AP:
                q0, lq, s0, sb = items[i]
                sc_t = kb.psum_tile(lq, (sb,))
                for j, (e0, ec) in enumerate(e_chunks):
                    kb.emit(LoadStationary(src=qt[j].view(q0, [(1, lq)])))
                    kb.emit(MultiplyMoving(moving=kt[j].view(s0, [(1, sb)]), dst=sc_t, accumulate=j > 0))
                return sc_t

            def block(i: int, scores: AP, *, b=b, h=h, items=items, state=state, finished=finished,
                      last_of=last_of, vt=vt):
                """Emit work item i stage by stage; each ``yield`` lets the other lane emit its stage,
                so every engine's program order alternates between two independent chains."""
                nonlocal neg_big, turn
                q0, lq, s0, sb = items[i]
                st_q = state.get(q0)
                first = st_q is None
                if first:
                    st_q = state[q0] = {"acc": [kb.psum_tile(lq, (w,)) for _, w in ev_slices], "neg_m": None,
                                        "total": kb.tile(lq, (1,), F32)}
                acc, total = st_q["acc"], st_q["total"]
                # the logits the softmax reads, and the factor still to apply to them
                logits, factor, tmp = scores, scale, None
                if causal and s0 + sb - 1 > q0:
                    key = (q0 - s0, lq, sb)
                    if key not in causal_masks:
                        mt = kb.tile(lq, (sb,), F32)
                        kb.emit(Memset(out=mt, value=0.0))
                        # keep 0 where key j <= query i, i.e. (q0 + p) - (s0 + f) >= 0; else -inf
                        kb.emit(AffineSelect(inp=mt, out=mt, cmp=Alu.IS_GE, base=q0 - s0, channel_multiplier=1,
                                             coefs=(-1,), fill=fill))
                        causal_masks[key] = mt
                    tmp = kb.tile(lq, (sb,), F32)
                    kb.emit(TensorTensor(alu=Alu.ADD, in0=scores, in1=causal_masks[key], out=tmp))
                    logits = tmp
                elif mask is not None:
                    tmp = kb.tile(lq, (sb,), F32)
                    kb.emit(Activation(func=Act.COPY, inp=scores, out=tmp, scale=scale))
                    mt = kb.tile(lq, (sb,), mask.dtype)
                    mo = mask.offset + b * mask_st[0] + h * mask_st[1] + q0 * mask_st[2] + s0 * mask_st[3]
                    load(kb, q_mask, ctx.inputs[3], mask.dtype, mo, mask_st[2], lq, [(mask_st[3], sb)], mt)
                    if mask.dtype == DType.bool_:
                        if neg_big is None:
                            neg_big = kb.tile(P, (1,), F32)
                            kb.emit(Memset(out=neg_big, value=float("-inf")))
                        kb.emit(Select(pred=mt, on_true=tmp, on_false=neg_big.rows(0, lq).view(0, [(0, sb)]),
                                       out=tmp))
                    else:
                        kb.emit(TensorTensor(alu=Alu.ADD, in0=tmp, in1=mt, out=tmp))
                    kb.release(mt)
                    logits, factor = tmp, 1.0
                # row max of factor * logits, negated (VectorE, straight from PSUM)
                nmb = kb.tile(lq, (1,), F32)
                kb.emit(TensorReduce(alu=Alu.MAX if factor > 0 else Alu.MIN, inp=logits, out=nmb, negate=True))
                if factor != 1.0:
                    kb.emit(Activation(func=Act.COPY, inp=nmb, out=nmb, scale=factor))
                if mask is not None and first:
                    # a row the mask hides completely keeps a finite max (exp(-inf - -inf) is NaN)
                    kb.emit(TensorScalar(inp=nmb, out=nmb, alu0=Alu.MIN, scalar0=FLT_MAX))
                yield
                p = kb.tile(lq, (sb,), pdt)
                corr = None
                if first:
                    kb.emit(Activation(func=Act.EXP, inp=logits, out=p, scale=factor, bias=nmb, accum_out=total))
                else:
                    neg_m = st_q["neg_m"]
                    corr = kb.tile(lq, (1,), F32)
                    part = kb.tile(lq, (1,), F32)
                    kb.emit(TensorTensor(alu=Alu.MIN, in0=neg_m, in1=nmb, out=nmb))        # -(new max)
                    kb.emit(Activation(func=Act.EXP, inp=neg_m, out=corr, scale=-1.0, bias=nmb))
                    kb.emit(Activation(func=Act.EXP, inp=logits, out=p, scale=factor, bias=nmb, accum_out=part))
                    # total = total * corr + part, on ScalarE (per-partition scale and bias)
                    kb.emit(Activation(func=Act.COPY, inp=total, out=total, scale=corr, bias=part))
                    kb.release(part, neg_m)
                st_q["neg_m"] = nmb   # the block's -(max) becomes the running one (no copy)
                yield
                # p^T, 128 keys at a time, through PSUM into SBUF; the accumulator is rescaled meanwhile
                nck = ceil_div(sb, P)
                # the transposes land in the scores' own bank (the exp has read it): PSUM holds two
                # lanes x (two score blocks + accumulator) this way
                pT_ps = scores.with_dtype(pdt).view(0, [(1, nck * lq)], partitions=P)
                for c in range(nck):
                    sc = min(P, sb - c * P)
                    kb.emit(TensorTranspose(src=p.view(c * P, [(1, sc)]),
                                            dst=pT_ps.view(c * lq, [(1, lq)], partitions=sc)))
                if corr is not None:
                    for a in acc:
                        kb.emit(TensorScalar(inp=a, out=a, alu0=Alu.MULTIPLY, scalar0=corr))
                    kb.release(corr)
                yield
                pT = kb.tile(P, (nck * lq,), pdt)
                full = sb // P
                rng = [(0, full * lq, P)] if full else []
                if sb % P:
                    rng.append((full * lq, lq, sb % P))
                for start, width, parts in rng:
                    src = pT_ps.view(start, [(1, width)], partitions=parts)
                    dst = pT.view(start, [(1, width)], partitions=parts)
                    # VectorE carries the max and the rescales: ScalarE takes 2 of 3 copies
                    if turn % 3:
                        kb.emit(Activation(func=Act.COPY, inp=src, out=dst))
                    else:
                        kb.copy(src, dst)
                    turn += 1
                yield
                for c in range(nck):
                    sc = min(P, sb - c * P)
                    kb.emit(LoadStationary(src=pT.view(c * lq, [(1, lq)], partitions=sc)))
                    vtile = vt[(s0 + c * P) // P]
                    for (e0, w), a in zip(ev_slices, acc):
                        kb.emit(MultiplyMoving(moving=vtile.view(e0, [(1, w)]), dst=a,
                                               accumulate=not (first and c == 0)))
                kb.release(scores, p, pT, *([tmp] if tmp is not None else []))
                if last_of[q0] != i:
                    return
                yield
                # the query tile is done: out = acc / sum, evacuated from PSUM
                neg_m = st_q["neg_m"]
                ot = kb.tile(lq, (Ev,), out.dtype)
                for (e0, w), a in zip(ev_slices, acc):
                    kb.emit(TensorScalar(inp=a, out=ot.view(e0, [(1, w)]), alu0=Alu.DIVIDE, scalar0=total))
                store(kb, q_out, ot, ctx.outputs[0], out.dtype, off(out, b, h) + q0 * out.stride[-2],
                      out.stride[-2], lq, [(out.stride[-1], Ev)])
                extra = []
                if lse_out is not None:
                    lm = ctx.call.outputs[lse_out]
                    lt = kb.tile(lq, (1,), F32)
                    kb.emit(Activation(func=Act.LOG, inp=total, out=lt))
                    kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=lt, in1=neg_m, out=lt))
                    lo = lm.offset + (b * lm.stride[0] if lm.ndim == 3 else 0) + h * lm.stride[-2] + q0 * lm.stride[-1]
                    store(kb, q_out, lt, ctx.outputs[lse_out], lm.dtype, lo, lm.stride[-1], lq, [(1, 1)])
                    extra.append(lt)
                del state[q0]
                # released one finished tile late: the next tile's accumulator gets another bank, so
                # its first matmul does not wait for this tile's evacuation
                finished.append([*acc, neg_m, total, ot, *extra])
                if len(finished) > 1:
                    kb.release(*finished.pop(0))

            # lane k runs query tiles k, k + lanes, ... one block after the other; the lanes advance
            # stage by stage in turn, so two independent softmax chains share the engines
            def lane(k: int, *, items=items, lanes=lanes):
                mine = [i for i, it in enumerate(items) if (it[0] // P) % lanes == k]
                if not mine:
                    return
                upcoming = scores_of(mine[0])
                for n, i in enumerate(mine):
                    gen = block(i, upcoming)
                    next(gen, None)
                    # TensorE computes the lane's next scores block while this one's softmax runs
                    # (PSUM: per lane two score blocks and the accumulator, plus a finished one)
                    if n + 1 < len(mine):
                        upcoming = scores_of(mine[n + 1])
                    yield
                    for _ in gen:
                        yield

            active = [lane(k) for k in range(lanes)]
            while active:
                for gen in list(active):
                    try:
                        next(gen)
                    except StopIteration:
                        active.remove(gen)
            held_q = [t for group in finished for t in group]
            kb.release(*held_bh)
            held_bh = list(held_q)
    kb.release(*held_bh, *causal_masks.values())
    for kt, qt, vt in buffers:
        kb.release(*kt, *qt, *vt)
    if neg_big is not None:
        kb.release(neg_big)


@lowering("aten::scaled_dot_product_attention")
def _sdpa(ctx: LoweringContext) -> None:
    emit_attention(ctx, lse_out=None)


@lowering("aten::_scaled_dot_product_flash_attention_for_cpu")
def _sdpa_flash_cpu(ctx: LoweringContext) -> None:
    emit_attention(ctx, lse_out=1 if len(ctx.call.outputs) > 1 else None)


@lowering("aten::_scaled_dot_product_fused_attention_overrideable")
def _sdpa_overrideable(ctx: LoweringContext) -> None:
    """The fused-attention entry point PyTorch gives PrivateUse1 backends (``_fused_sdp_choice``
    returning the "overrideable" backend): output and logsumexp; the varlen/philox/debug outputs
    carry nothing for dense attention without dropout and are zero-filled when not empty."""
    emit_attention(ctx, lse_out=1 if len(ctx.call.outputs) > 1 else None)
    kb = ctx.kb
    for k, m in enumerate(ctx.call.outputs[2:], start=2):
        if m.numel == 0:
            continue
        zero = kb.tile(1, (m.numel,), m.dtype) if m.numel <= 4096 else None
        if zero is None:
            raise NotImplementedError("attention: unexpected large auxiliary output")
        kb.emit(Memset(out=zero, value=0.0))
        if not m.is_contiguous():
            raise NotImplementedError("attention: non-contiguous auxiliary output")
        kb.dma(kb.queue("qSyncIO2", "output"), zero, hbm(ctx.outputs[k], 1, 0, [(1, m.numel)], m.dtype,
                                                          offset=m.offset))
        kb.release(zero)
