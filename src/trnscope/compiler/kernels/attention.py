"""Fused scaled-dot-product attention: softmax(q k^T * scale + mask) v in one kernel.

The flash-attention schedule as NKI writes it: per (batch, head) K^T [E, S], Q^T [E, L] and V
[S, Ev] are loaded into SBUF once (K^T and Q^T by DMA transpose: long contiguous HBM rows, no
transpose kernel), into one of two buffer sets so the next head's loads overlap this head's
compute. Per 128-row query tile and 512-column key block

- TensorE computes the scores block q k^T into PSUM (stationary Q^T, moving K^T);
- VectorE takes the scores out of PSUM in one tensor_scalar_reduce: scaled into SBUF, with their
  row max (negated) in the same pass, and the scores' banks go back to PSUM; ScalarE computes
  p = exp(s - m_new) from SBUF with the row sum accumulated in the same instruction, the
  correction exp(m_old - m_new) and the running sum (activation with per-partition scale and
  bias); VectorE rescales the output accumulator in place in PSUM. Only the row-max pass and the
  p^T copy read PSUM, which NC-v2's VectorE and ScalarE cannot do at the same time (S1);
- TensorE transposes p (128 columns at a time, matmul against the identity) into a PSUM bank of
  its own so the key dim is on the partitions, and accumulates p v into the accumulator.

After the last block the accumulator is divided by the row sum on its way out of PSUM. Scores
and probabilities never leave SBUF/PSUM. V is loaded per full key block with
partition r holding that block's keys r*c .. r*c + c - 1 (c chunks of 128: contiguous runs of c rows
rather than one 256-byte row per partition), the probabilities transposed in the matching order. The
log-sum-exp of every (query tile, head) is collected per batch in one [128 queries, tile x head]
tile and stored once per batch in long runs (heads adjacent: a run of H heads per query; queries
adjacent: rows of 128 queries made by TensorE transposes); other layouts store one row per head. Several query tiles are in flight ("lanes", _schedule: three
lanes of two-block spans where PSUM holds them): their blocks are emitted stage by stage in turn, so
every engine's in-order stream alternates between independent work; the lanes of consecutive heads
form one pool (a head's next lane starts when one of the previous head's ends), and query tiles are
dealt to lanes back and forth so the causal mask's growing rows balance.

``is_causal`` (top-left aligned, as PyTorch) skips key blocks above the diagonal, computes only
the key columns a diagonal block's queries can see, and adds their triangle to the scores in PSUM on
TensorE (identity^T @ a 0 / -2^100 mask tile made once per diagonal offset by GpSimdE affine_select);
without a log-sum-exp its output is regrouped on chip so each head leaves in 2 KiB runs (_Regroup).
An explicit mask (boolean or additive, broadcast by strides) is applied to the scaled scores in
SBUF. Dropout is refused (the device RNG cannot reproduce PyTorch's stream).
"""

from __future__ import annotations

import math

from ...isa import (
    AP, Act, Activation, AffineSelect, Alu, DType, Engine, LoadStationary, Memset, MultiplyMoving, Select,
    TensorCopy, TensorReduce, TensorScalar, TensorScalarReduce, TensorTensor, TensorTranspose, hbm,
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
    from ..precision import matmul_dtype, note_cast

    dt = q.dtype
    # the dtype TensorE reads: FP32 attention's two matmuls are cast to BF16 under neuronx-cc's default
    # --auto-cast matmult, as every other matmul (q, k and v cast by the DMAs that load them)
    mdt = matmul_dtype(q.dtype, k.dtype, v.dtype) or dt
    if mdt != dt:
        note_cast(kb.p, mdt)
    pdt = mdt if mdt.itemsize != 4 else F32   # probabilities feed TensorE with v: same width as v
    B = batch[0] if len(batch) == 2 else 1
    H = batch[-1] if batch else 1
    Hk = k.shape[-3] if k.ndim >= 3 else 1
    group = max(1, H // max(1, Hk))

    mask_st = full_strides(mask, (B, H, L, S)) if mask is not None else None
    q_in = [kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input")]
    q_out = kb.queue("qSyncIO2", "output")
    q_mask = kb.queue("qSyncIO3", "input")
    e_chunks = [(e0, min(P, E - e0)) for e0 in range(0, E, P)]
    s_blocks = [(s0, min(S_BLOCK, S - s0)) for s0 in range(0, S, S_BLOCK)]
    v_chunks = [(c0, min(P, S - c0)) for c0 in range(0, S, P)]
    ev_slices = [(e0, min(EV_SLICE, Ev - e0)) for e0 in range(0, Ev, EV_SLICE)]
    causal_masks: dict[tuple[int, int, int], AP] = {}
    neg_big = None
    n_qt = ceil_div(L, P)
    # the output leaves in runs of whole query groups when its rows are below the DMA knee (see
    # _Regroup), where that shortens the kernel as simulated ([1, 16, 1024, 128] BF16): under the causal
    # mask each output row carries half the compute and the 256-byte-row store sets the pace (trn1 348
    # -> 313 us, trn2 356 -> 343 us); without the mask the store hides under the softmax and the
    # regroup's two PSUM copies per 128 rows only add to VectorE/ScalarE (433 -> 443 us), as they do
    # when the log-sum-exp's instructions already load them (the fused op: 365 -> 384 us)
    regroup = causal and lse_out is None and _Regroup.fits(kb, out, L, Ev)
    # K^T, Q^T and V of a head live in one of two buffer sets allocated up front, so the next head's
    # loads overlap this head's compute without waiting for bytes its temporaries used
    per_head = len(e_chunks) * (S + L) * mdt.itemsize + len(v_chunks) * Ev * mdt.itemsize
    room = kb.spec.sbuf_bytes_per_partition - 48 * 1024   # per-block tiles and causal masks
    if per_head > room:
        raise NotImplementedError(f"attention: K^T, Q^T and V of one head ({per_head} bytes per partition) "
                                  f"do not fit SBUF; sequence too long for the resident-KV kernel")
    if regroup and per_head + _Regroup.bytes_per_partition(L, Ev, out.dtype) > room:
        regroup = False
    sets = 2 if B * H > 1 and 2 * per_head <= room else 1
    buffers = [([kb.tile(ec, (S,), mdt) for _, ec in e_chunks], [kb.tile(ec, (L,), mdt) for _, ec in e_chunks],
                _v_tiles(kb, s_blocks, v, S, Ev, mdt)) for _ in range(sets)]
    lanes, span, lookahead = _schedule(kb, len(s_blocks), len(ev_slices), regroup, pdt)
    bal = _Balance(kb)
    # the log-sum-exp is collected per batch as [128 queries, (query tile, head) columns], two
    # instructions per query tile, and stored once per batch: laid out [B, L, H] (heads inner, as
    # the CPU flash kernel returns it; columns tile-major) each partition writes runs of H values;
    # laid out [B, H, L] densely (columns head-major) TensorE transposes turn the columns into rows
    # of 128 consecutive values of the output (512-byte runs)
    lm = ctx.call.outputs[lse_out] if lse_out is not None else None
    heads_inner = lm is not None and lm.ndim >= 2 and H > 1 and lm.stride[-2] < lm.stride[-1]
    dense_rows = lm is not None and lm.stride[-1] == 1 and L % P == 0 and (lm.ndim < 2 or lm.stride[-2] == L or H == 1)
    def open_head(b: int, h: int, n_head: int, lse_all: AP | None):
        """Load head h of batch b and return its lanes (generators that emit its query tiles stage by
        stage) and the function that finishes the head once they are exhausted."""
        hk = h // group
        hk = h // group
        kt, qt, vt_buf = buffers[n_head % len(buffers)]
        vt = _load_head(ctx, q_in, kt, qt, vt_buf, e_chunks, b, h, hk, dt)
        # the (query tile, key span) work items of this head: a span is up to `span` consecutive
        # key blocks whose softmax statistics are taken at once (one row max, one exp); causal
        # leaves out the blocks entirely above the diagonal.
        items = []
        for q0 in range(0, L, P):
            lq = min(P, L - q0)
            vis = [(s0, sb) for s0, sb in s_blocks if not (causal and s0 > q0 + lq - 1)]
            items += [(q0, lq, vis[j:j + span]) for j in range(0, len(vis), span)]
        last_of = {q0: i for i, (q0, _, _) in enumerate(items)}
        state: dict[int, dict] = {}
        finished: list[list[AP]] = []
        lse_row = kb.tile(1, (L,), F32) if lse_out is not None and lse_all is None else None
        rg = _Regroup(kb, q_out, ctx.outputs[0], out, b, h, L, Ev, bal) if regroup else None

        def seen(q0: int, lq: int, s_lo: int, width: int) -> int:
            """Key columns of a span the tile's queries can see: under the causal mask the keys
            past the tile's last query are hidden from every row, so they are never computed."""
            return min(width, q0 + lq - s_lo) if causal else width

        def scores_of(i: int, *, items=items, qt=qt, kt=kt) -> AP:
            q0, lq, blocks = items[i]
            s_lo = blocks[0][0]
            se = seen(q0, lq, s_lo, sum(sb for _, sb in blocks))
            # the span's blocks in adjacent PSUM banks: one block per bank, the row statistics read
            # across them
            sc_t = kb.psum_tile(lq, (len(blocks) * S_BLOCK,), banks=len(blocks))
            for s0, sb in blocks:
                seen_b = min(sb, se - (s0 - s_lo))
                for j, (e0, ec) in enumerate(e_chunks):
                    kb.emit(LoadStationary(src=qt[j].view(q0, [(1, lq)])))
                    kb.emit(MultiplyMoving(moving=kt[j].view(s0, [(1, seen_b)]),
                                           dst=sc_t.view(s0 - s_lo, [(1, seen_b)]), accumulate=j > 0))
            if causal and s_lo + se - 1 > q0:
                _mask_causal_on_tensor(kb, sc_t, causal_masks, q0, lq, s_lo, se, scale, mdt)
            return sc_t

        def block(i: int, scores: AP, *, b=b, h=h, items=items, state=state, finished=finished,
                  last_of=last_of, vt=vt, lse_row=lse_row, lse_all=lse_all, rg=rg):
            """Emit work item i stage by stage; each ``yield`` lets the other lane emit its stage,
            so every engine's program order alternates between two independent chains."""
            nonlocal neg_big
            q0, lq, blocks = items[i]
            s_lo = blocks[0][0]
            width = sum(sb for _, sb in blocks)
            st_q = state.get(q0)
            first = st_q is None
            if first:
                st_q = state[q0] = {"acc": [kb.psum_tile(lq, (w,)) for _, w in ev_slices], "neg_m": None,
                                    "total": kb.tile(lq, (1,), F32)}
            acc, total = st_q["acc"], st_q["total"]
            # the logits the softmax reads, and the factor still to apply to them
            se = seen(q0, lq, s_lo, width)
            p = _prob_tile(kb, bal, lq, blocks, vt, se, pdt)
            logits, factor, tmp = scores.view(0, [(1, se)]), scale, None
            if mask is not None and mask_st is not None:  # one implies the other
                tmp = kb.tile(lq, (width,), F32)
                neg_big = _apply_explicit_mask(ctx, q_mask, scores.view(0, [(1, width)]), tmp, mask_st, neg_big,
                                               scale, b, h, q0, lq, s_lo, width)
                logits, factor = tmp, 1.0
            if tmp is None:
                # one VectorE pass takes the scores out of PSUM, scaled, with their row max
                # (tensor_scalar_reduce); the exp then reads SBUF, which on NC-v2 leaves PSUM to
                # the probabilities' evacuation (VectorE and ScalarE cannot share it, S1)
                tmp = kb.tile(lq, (width,), F32)
                nmb = kb.tile(lq, (1,), F32)
                bal.emit(TensorScalarReduce(inp=logits, out=tmp.view(0, [(1, se)]), alu0=Alu.MULTIPLY,
                                            scalar0=factor, reduce_alu=Alu.MAX, reduce_res=nmb, negate=True))
                logits, factor = tmp.view(0, [(1, se)]), 1.0
            else:
                nmb = _row_max(kb, bal, logits, factor, first)
            # the scores have left PSUM (into the logits in SBUF): their banks go to the next scores
            kb.release(scores)
            yield
            p, corr = _exponentiate(kb, bal, st_q, first, logits, factor, nmb, p, se)
            yield
            # p^T, 128 keys at a time, through PSUM into SBUF; the accumulator is rescaled meanwhile
            chunks, pT_ps = _transpose_probs(kb, p, blocks, vt, s_lo, se, lq, Ev, pdt)
            if corr is not None:
                for a in acc:
                    bal.emit(TensorScalar(inp=a, out=a, alu0=Alu.MULTIPLY, scalar0=corr))
                kb.release(corr)
            yield
            pT = kb.tile(P, (len(chunks) * P,), pdt)
            _evacuate_probs(kb, bal, pT_ps, pT, chunks, lq)
            kb.release(pT_ps)
            yield
            for n, (sc, vtile) in enumerate(chunks):
                kb.emit(LoadStationary(src=pT.view(n * P, [(1, lq)], partitions=sc)))
                for (e0, w), a in zip(ev_slices, acc):
                    kb.emit(MultiplyMoving(moving=vtile.view(e0, [(1, w)]), dst=a,
                                           accumulate=not (first and n == 0)))
            kb.release(p, pT, tmp)
            if last_of[q0] != i:
                return
            yield
            # the query tile is done: out = acc / sum, evacuated from PSUM
            neg_m = st_q["neg_m"]
            ot = kb.tile(lq, (Ev,), out.dtype)
            for (e0, w), a in zip(ev_slices, acc):
                bal.emit(TensorScalar(inp=a, out=ot.view(e0, [(1, w)]), alu0=Alu.DIVIDE, scalar0=total))
            extra = []
            if rg is not None:
                # TensorE takes the other lanes' work while VectorE divides
                yield
                rg.add(ot, q0)
            else:
                store(kb, q_out, ot, ctx.outputs[0], out.dtype, _head_offset(out, b, h) + q0 * out.stride[-2],
                      out.stride[-2], lq, [(out.stride[-1], Ev)])
                extra.append(ot)
            if lse_all is not None:
                # log(sum) + max straight into the batch's [query, tile x head] collection
                c = (q0 // P) * H + h if heads_inner else h * n_qt + q0 // P
                _log_sum_exp(kb, total, neg_m, lse_all.rows(0, lq).view(c, [(1, 1)]))
            elif lse_row is not None:
                # log-sum-exp of the tile's rows, turned into a row of the head's [1, L] vector
                # (TensorE transpose into the accumulator's bank, which the division has read):
                # one store of L contiguous values per head, not L 4-byte descriptors
                lt = kb.tile(lq, (1,), F32)
                _log_sum_exp(kb, total, neg_m, lt)
                row_ps = acc[0].view(0, [(1, lq)], partitions=1)
                kb.emit(TensorTranspose(src=lt, dst=row_ps))
                kb.copy(row_ps, lse_row.view(q0, [(1, lq)]))
                extra.append(lt)
            del state[q0]
            # released one finished tile late: the next tile's accumulator gets another bank, so
            # its first matmul does not wait for this tile's evacuation
            finished.append([*acc, neg_m, total, *extra])
            if len(finished) > 1:
                kb.release(*finished.pop(0))

        # lane k runs query tiles k, k + lanes, ... one span after the other; the lanes advance
        # stage by stage in turn, so two independent softmax chains share the engines
        def lane(k: int, *, items=items, lanes=lanes):
            mine = [i for i, it in enumerate(items) if _lane_of(it[0] // P, lanes) == k]
            if not mine:
                return
            upcoming = scores_of(mine[0])
            for n, i in enumerate(mine):
                gen = block(i, upcoming)
                next(gen, None)
                # with PSUM to spare, TensorE computes the lane's next scores while this softmax runs
                if lookahead and n + 1 < len(mine):
                    upcoming = scores_of(mine[n + 1])
                yield
                for _ in gen:
                    yield
                if not lookahead and n + 1 < len(mine):
                    upcoming = scores_of(mine[n + 1])

        def finish() -> list[AP]:
            """The head's output and log-sum-exp stores; returns the tiles to release once the next
            head is done (so its temporaries do not wait for these stores to read them)."""
            held_rg = rg.finish() if rg is not None else []
            if lse_row is not None and lse_out is not None:  # one implies the other
                lm = ctx.call.outputs[lse_out]
                lo = lm.offset + (b * lm.stride[0] if lm.ndim == 3 else 0) + h * lm.stride[-2]
                kb.dma(q_out, lse_row, hbm(ctx.outputs[lse_out], 1, 0, [(lm.stride[-1], L)], lm.dtype, offset=lo))
            return [t for group in finished for t in group] + ([lse_row] if lse_row is not None else []) + held_rg

        return [lane(k) for k in range(lanes)], finish

    # The lanes of consecutive heads form one pool, `lanes` of them active at a time: when a head's
    # shorter lane ends, the next head's first lane takes its place, so the engines do not drain at
    # every head boundary (at most two heads are open: the two K/Q/V buffer sets)
    order = [(b, h) for b in range(B) for h in range(H)]
    lse_of: dict[int, AP | None] = {}
    heads_left = {b: H for b in range(B)}
    waiting: list = []      # (head number, lane) not started yet
    active: list = []
    open_heads: dict[int, list] = {}   # head number -> [lanes still running or waiting, finish, b]
    held_bh: list[AP] = []
    nxt = 0
    while True:
        while len(active) < lanes:
            if not waiting and nxt < len(order) and len(open_heads) < len(buffers):
                b, h = order[nxt]
                if b not in lse_of:
                    lse_of[b] = kb.tile(P, (n_qt * H,), F32) if heads_inner or dense_rows else None
                gens, fin = open_head(b, h, nxt, lse_of[b])
                open_heads[nxt] = [len(gens), fin, b]
                waiting += [(nxt, g) for g in gens]
                nxt += 1
            if not waiting:
                break
            active.append(waiting.pop(0))
        if not active:
            break
        for item in list(active):
            n, gen = item
            try:
                next(gen)
            except StopIteration:
                active.remove(item)
                rec = open_heads[n]
                rec[0] -= 1
                if rec[0]:
                    continue
                del open_heads[n]
                held_q = rec[1]()
                kb.release(*held_bh)
                held_bh = list(held_q)
                b = rec[2]
                heads_left[b] -= 1
                lse_all = lse_of[b]
                if not heads_left[b] and lse_all is not None and lm is not None and lse_out is not None:
                    if heads_inner:
                        _store_lse_heads_inner(kb, q_out, lse_all, ctx.outputs[lse_out], lm, b, H, L)
                    else:
                        _store_lse_rows(kb, q_out, lse_all, ctx.outputs[lse_out], lm, b, H, L)
                    held_bh.append(lse_all)
    kb.release(*held_bh, *causal_masks.values())
    for kt, qt, vts in buffers:
        kb.release(*kt, *qt, *(t for *_, t in vts))
    if neg_big is not None:
        kb.release(neg_big)


def _lane_of(t: int, lanes: int) -> int:
    """The lane of query tile t: tiles dealt out back and forth (0 1 1 0 0 1 1 0 for two lanes), so under
    the causal mask, where tile t's work grows with t, each lane gets the same share."""
    r = t % (2 * lanes)
    return r if r < lanes else 2 * lanes - 1 - r


def _schedule(kb, n_blocks: int, n_acc: int, regroup: bool, pdt: DType) -> tuple[int, int, bool]:
    """(lanes, key blocks per span, lookahead). The scores leave PSUM in the row-max pass (into SBUF, with
    the scale), so a lane holds its span's banks only from its scores' matmuls to that pass, and p^T
    gets a bank of its own for the transposes and their copy out. With a one-bank accumulator and BF16
    probabilities (a two-block span's p^T in one bank) three lanes of two-block spans fit PSUM: more
    independent chains for the in-order engines and half the instructions per score of one-block spans
    ([1, 16, 1024, 128] causal BF16: trn1 383 -> 322 us, trn2 363 -> 309 us as simulated, against two
    lanes of one-block spans with lookahead; two lanes of two-block spans: 335 / 340 us). Otherwise the
    earlier two-lane rule (:func:`_span_banks`)."""
    if n_acc == 1 and pdt.itemsize == 2 and n_blocks >= 2:
        return 3, 2, False
    lanes = 2 if n_acc == 1 else 1
    return (lanes, *_span_banks(kb, n_blocks, lanes, n_acc, regroup))


def _span_banks(kb, n_blocks: int, lanes: int, n_acc: int, regroup: bool) -> tuple[int, bool]:
    """(key blocks per span, whether a lane's next scores are computed ahead) that PSUM holds: per
    lane its span's banks (twice with lookahead) and its accumulator, one finished accumulator, and
    the bank the regrouped output passes through. Lookahead comes first: in this two-lane schedule
    the softmax chain's latency, not engine time, sets the pace, and one-block spans with TensorE
    ahead beat two-block spans without it ([1, 16, 1024, 128] causal BF16 on trn1: 331 against 355
    us). A wider span is taken only where lookahead does not fit anyway; it saves the online
    rescaling between blocks (four small instructions and a pass over the accumulator each)."""
    banks = kb.spec.psum_bytes_per_partition // kb.spec.psum_bank_bytes
    fixed = n_acc + (1 if regroup else 0)
    if lanes * (2 + n_acc) + fixed <= banks:
        return 1, True
    return max(1, min(n_blocks, (banks - fixed) // lanes - n_acc)), False


class _Balance:
    """The VectorE and ScalarE time the kernel has queued so far (each instruction's published cost
    plus the dependent-instruction overhead), so a small step either engine can do (a rescale) goes
    where it ends first; ``turn`` counts the probability evacuations, which alternate by a fixed
    share (:func:`_evacuate_probs`)."""

    def __init__(self, kb):
        self.kb = kb
        self.load = {Engine.VECTOR: 0.0, Engine.SCALAR: 0.0}
        self.turn = 0

    def cost(self, ins) -> float:
        spec = self.kb.spec
        return (ins.cycles(spec) + spec.dependent_overhead_cycles) / spec.clock_hz(ins.engine.value)

    def emit(self, ins):
        if ins.engine in self.load:
            self.load[ins.engine] += self.cost(ins)
        return self.kb.emit(ins)

    def emit_either(self, on_vector, on_scalar):
        """Emit whichever of two equivalent instructions would end first."""
        a, b = self.load[Engine.VECTOR] + self.cost(on_vector), self.load[Engine.SCALAR] + self.cost(on_scalar)
        return self.emit(on_vector if a <= b else on_scalar)


def _row_max(kb, bal: _Balance, logits: AP, factor: float, guard: bool) -> AP:
    """-(row max of factor * logits), VectorE reading the scores straight from PSUM; ``guard`` keeps a
    row an explicit mask hides completely finite (exp(-inf - -inf) is NaN)."""
    nmb = kb.tile(logits.partitions, (1,), F32)
    bal.emit(TensorReduce(alu=Alu.MAX if factor > 0 else Alu.MIN, inp=logits, out=nmb, negate=True))
    if factor != 1.0:
        bal.emit_either(TensorScalar(inp=nmb, out=nmb, alu0=Alu.MULTIPLY, scalar0=factor),
                        Activation(func=Act.COPY, inp=nmb, out=nmb, scale=factor))
    if guard:
        bal.emit(TensorScalar(inp=nmb, out=nmb, alu0=Alu.MIN, scalar0=FLT_MAX))
    return nmb


def _prob_tile(kb, bal: _Balance, lq: int, blocks, vt: dict, se: int, pdt: DType) -> AP:
    """The span's probability tile, its hidden keys' columns zeroed where V's block layout mixes them
    into every chunk (made before the softmax, so the exp does not wait for the zeros)."""
    s_lo = blocks[0][0]
    p = kb.tile(lq, (sum(sb for _, sb in blocks),), pdt)
    for s0, sb in blocks:
        seen_b = se - (s0 - s_lo)
        if seen_b < sb and vt[s0][0] == "perm":
            bal.emit(Memset(out=p.view(s0 - s_lo + seen_b, [(1, sb - seen_b)]), value=0.0))
    return p


def _exponentiate(kb, bal: _Balance, st_q: dict, first: bool, logits: AP, factor: float, nmb: AP, p: AP,
                  se: int) -> tuple[AP, AP | None]:
    """p = exp(factor * logits - m) on ScalarE with the row sum in the same instruction; after the
    first span the running max and sum are updated (the correction exp(m_old - m_new) is returned for
    the accumulator). Returns (p, correction or None)."""
    lq = logits.partitions
    p_seen = p.view(0, [(1, se)])
    total = st_q["total"]
    corr = None
    if first:
        bal.emit(Activation(func=Act.EXP, inp=logits, out=p_seen, scale=factor, bias=nmb, accum_out=total))
    else:
        neg_m = st_q["neg_m"]
        corr = kb.tile(lq, (1,), F32)
        part = kb.tile(lq, (1,), F32)
        bal.emit(TensorTensor(alu=Alu.MIN, in0=neg_m, in1=nmb, out=nmb))        # -(new max)
        bal.emit(Activation(func=Act.EXP, inp=neg_m, out=corr, scale=-1.0, bias=nmb))
        bal.emit(Activation(func=Act.EXP, inp=logits, out=p_seen, scale=factor, bias=nmb, accum_out=part))
        # total = total * corr + part, on ScalarE (per-partition scale and bias)
        bal.emit(Activation(func=Act.COPY, inp=total, out=total, scale=corr, bias=part))
        kb.release(part, neg_m)
    st_q["neg_m"] = nmb   # the span's -(max) becomes the running one (no copy)
    return p, corr


def _transpose_probs(kb, p: AP, blocks, vt: dict, s_lo: int, se: int, lq: int, Ev: int,
                     pdt: DType) -> tuple[list[tuple[int, AP]], AP]:
    """p^T on TensorE, 128 keys at a time, into a PSUM tile of its own (the scores' banks were given
    back once their logits left PSUM), chunk n at column n * 128 so no transpose crosses a bank. With
    V's block layout chunk c of a block takes keys s0 + c, s0 + c + nck, ... (the keys V's partitions
    hold); the row layout needs only the chunks holding seen keys. Returns per chunk (keys, the V rows
    it multiplies), and the PSUM tile."""
    P = kb.spec.partitions
    chunks: list[tuple[AP, int, AP]] = []
    for s0, sb in blocks:
        off = s0 - s_lo
        kind, nck, t = vt[s0]
        if kind == "perm":
            chunks += [(p.view(off + c, [(nck, P)]), P, t.view(c * Ev, [(1, Ev)])) for c in range(nck)]
        else:
            seen_b = min(sb, se - off)
            for c0 in range(0, seen_b, P):
                sc = min(P, seen_b - c0)
                chunks.append((p.view(off + c0, [(1, sc)]), sc, vt[s0 + c0][2].rows(0, sc)))
    nbytes = len(chunks) * P * pdt.itemsize
    pT_ps = kb.psum_tile(P, (len(chunks) * P,), pdt, banks=ceil_div(nbytes, kb.spec.psum_bank_bytes))
    for n, (src, sc, _) in enumerate(chunks):
        kb.emit(TensorTranspose(src=src, dst=pT_ps.view(n * P, [(1, lq)], partitions=sc)))
    return [(sc, vrows) for _, sc, vrows in chunks], pT_ps


def _evacuate_probs(kb, bal: _Balance, pT_ps: AP, pT: AP, chunks, lq: int) -> None:
    """Copy the transposed chunks from PSUM to SBUF, one span per instruction, in turn two spans on
    ScalarE for one on VectorE (a PSUM copy costs N cycles on either; VectorE also carries the row
    max and the rescales, so ScalarE takes the larger share)."""
    P = kb.spec.partitions

    def span(t: AP, a: int, n: int, parts: int) -> AP:
        return t.view(a * P, [(1, n * P)] if lq == P else [(P, n), (1, lq)], partitions=parts)

    runs: list[tuple[int, int, int]] = []   # (first chunk, count, partitions)
    for n, (sc, _) in enumerate(chunks):
        if runs and runs[-1][2] == sc:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, sc)
        else:
            runs.append((n, 1, sc))
    # one engine per span: splitting it would make the p v matmuls wait for both
    for a, n, parts in runs:
        src, dst = span(pT_ps, a, n, parts), span(pT, a, n, parts)
        bal.emit(Activation(func=Act.COPY, inp=src, out=dst) if bal.turn % 3 else TensorCopy(inp=src, out=dst))
        bal.turn += 1


class _Regroup:
    """A head's output, regrouped on chip so it leaves in long runs. Its rows (Ev values) are below the
    DMA descriptor knee when stored per 128-query tile (one descriptor a row: a [1024, 128] BF16 head
    is 1,024 descriptors of 256 bytes, each charged as 2,400). Each finished tile is transposed on
    TensorE into the head's [Ev, L] collection; at the head's end, transposing its columns g apart
    (g = L / 128) gives partition p the queries g*p .. g*p + g - 1: one store of 128 runs of g*Ev values.
    Costs per 128 queries two 128-column TensorE transposes and two PSUM copies."""

    def __init__(self, kb, queue: int, tensor: int, out, b: int, h: int, L: int, Ev: int, bal: _Balance):
        self.kb, self.queue, self.tensor, self.out, self.bal = kb, queue, tensor, out, bal
        self.L, self.Ev, self.g = L, Ev, L // kb.spec.partitions
        self.offset = _head_offset(out, b, h)
        self.cols = kb.tile(Ev, (L,), out.dtype)

    @staticmethod
    def fits(kb, out, L: int, Ev: int) -> bool:
        P = kb.spec.partitions
        return (out.dtype.itemsize == 2 and L % P == 0 and L > P and Ev <= P and out.stride[-1] == 1
                and out.stride[-2] == Ev and Ev * out.dtype.itemsize < kb.spec.dma_descriptor_knee_bytes)

    @staticmethod
    def bytes_per_partition(L: int, Ev: int, dtype: DType) -> int:
        return 2 * L * dtype.itemsize   # the [Ev, L] collection and the [128, g * Ev] regrouped rows

    def add(self, ot: AP, q0: int) -> None:
        kb = self.kb
        ps = kb.psum_tile(self.Ev, (ot.partitions,), self.out.dtype)
        kb.emit(TensorTranspose(src=ot, dst=ps))
        dst = self.cols.view(q0, [(1, ot.partitions)])
        self.bal.emit_either(TensorCopy(inp=ps, out=dst), Activation(func=Act.COPY, inp=ps, out=dst))
        kb.release(ps, ot)

    def finish(self) -> list[AP]:
        """Regroup and store the head; returns the tiles to release once the next head is done (so
        its temporaries do not wait for this store to read them)."""
        kb, Ev, g = self.kb, self.Ev, self.g
        P = kb.spec.partitions
        rows = kb.tile(P, (g * Ev,), self.out.dtype)
        per_bank = max(1, kb.spec.psum_bank_bytes // (Ev * self.out.dtype.itemsize))
        for j0 in range(0, g, per_bank):
            nj = min(per_bank, g - j0)
            ps = kb.psum_tile(P, (nj * Ev,), self.out.dtype)
            for j in range(j0, j0 + nj):
                kb.emit(TensorTranspose(src=self.cols.view(j, [(g, P)]), dst=ps.view((j - j0) * Ev, [(1, Ev)])))
            dst = rows.view(j0 * Ev, [(1, nj * Ev)])
            self.bal.emit_either(TensorCopy(inp=ps, out=dst), Activation(func=Act.COPY, inp=ps, out=dst))
            kb.release(ps)
        kb.dma(self.queue, rows, hbm(self.tensor, P, g * Ev, [(1, g * Ev)], self.out.dtype, offset=self.offset))
        return [self.cols, rows]


def _head_offset(meta, b: int, h: int) -> int:
    """Element offset of batch b, head h of a [B, H, ., .] / [H, ., .] / [., .] tensor (a size-1
    batch or head dim broadcasts)."""
    st = meta.stride
    nb = meta.ndim - 2
    o = meta.offset
    if nb == 2:
        o += (b * st[0] if meta.shape[0] != 1 else 0) + (h * st[1] if meta.shape[1] != 1 else 0)
    elif nb == 1:
        o += h * st[0] if meta.shape[0] != 1 else 0
    return o


def _v_tiles(kb, s_blocks, v, S: int, Ev: int, mdt: DType) -> list:
    """V of one head: per full key block one [P, nck x Ev] tile whose partition r holds keys
    s0 + r*nck .. s0 + r*nck + nck - 1 (one contiguous run of nck rows per partition: 1 KiB
    descriptors for 128-wide BF16 heads instead of 256-byte rows); a partial block per 128 keys."""
    P = kb.spec.partitions
    tiles = []
    for s0, sb in s_blocks:
        nck = ceil_div(sb, P)
        if sb == nck * P and nck > 1 and v.stride[-1] == 1:
            tiles.append(("perm", s0, nck, kb.tile(P, (nck * Ev,), mdt)))
        else:
            tiles += [("rows", c0, 1, kb.tile(min(P, S - c0), (Ev,), mdt))
                      for c0 in range(s0, s0 + sb, P)]
    return tiles


def _load_head(ctx: LoweringContext, q_in: list[int], kt: list[AP], qt: list[AP], vt_buf: list, e_chunks, b: int,
               h: int, hk: int, dt: DType) -> dict:
    """K^T and Q^T of head h (key head hk) by DMA transpose into the buffer set's chunks of the head
    dim, V into its block tiles; returns first key of a block or 128-key chunk -> (layout, chunks, tile)."""
    kb = ctx.kb
    P = kb.spec.partitions
    q, k, v = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.inputs[2]
    S, L, Ev = k.shape[-2], q.shape[-2], v.shape[-1]
    for (e0, ec), ktile, qtile in zip(e_chunks, kt, qt):
        load(kb, q_in[0], ctx.inputs[1], dt, _head_offset(k, b, hk) + e0 * k.stride[-1], k.stride[-1], ec,
             [(k.stride[-2], S)], ktile)
        load(kb, q_in[1], ctx.inputs[0], dt, _head_offset(q, b, h) + e0 * q.stride[-1], q.stride[-1], ec,
             [(q.stride[-2], L)], qtile)
    vt = {}
    for n, (kind, c0, nck, t) in enumerate(vt_buf):
        if kind == "perm":
            kb.dma(q_in[n % 2], hbm(ctx.inputs[2], P, nck * v.stride[-2], [(v.stride[-2], nck), (1, Ev)],
                                    v.dtype, offset=_head_offset(v, b, hk) + c0 * v.stride[-2]), t)
        else:
            load(kb, q_in[n % 2], ctx.inputs[2], v.dtype, _head_offset(v, b, hk) + c0 * v.stride[-2], v.stride[-2],
                 t.partitions, [(v.stride[-1], Ev)], t)
        vt[c0] = (kind, nck, t)
    return vt


# what the causal mask adds to a hidden score: finite (the identity's zeros times it must be 0, not
# NaN) and beyond any score, so exp(scale * (s - 2^100) - m) underflows to exactly 0 as exp(-inf)
_HIDDEN = 2.0 ** 100


def _mask_causal_on_tensor(kb, scores: AP, causal_masks: dict, q0: int, lq: int, s0: int, se: int, scale: float,
                           mdt: DType) -> None:
    """Add the causal triangle to a diagonal scores span in PSUM on TensorE: identity^T @ mask
    accumulates into the columns past the first query's key (one 128-column matmul, where an add on
    VectorE would cost a PSUM pass and a step of the softmax chain). The mask tile (0 where key j <=
    query i, else -2^100 for a positive scale) and the identity are made once on GpSimdE."""
    P = kb.spec.partitions
    t0 = max(0, q0 - s0)
    key = (q0 - s0 - t0, lq, se - t0)
    if "identity" not in causal_masks:
        ident = kb.tile(P, (P,), mdt)
        kb.emit(Memset(out=ident, value=1.0))
        kb.emit(AffineSelect(inp=ident, out=ident, cmp=Alu.IS_GE, channel_multiplier=1, coefs=(-1,), fill=0.0))
        kb.emit(AffineSelect(inp=ident, out=ident, cmp=Alu.IS_GE, channel_multiplier=-1, coefs=(1,), fill=0.0))
        causal_masks["identity"] = ident
    if key not in causal_masks:
        mt = kb.tile(lq, (se - t0,), mdt)
        kb.emit(Memset(out=mt, value=0.0))
        # keep 0 where key j <= query i, i.e. (q0 + p) - (s0 + t0 + f) >= 0
        kb.emit(AffineSelect(inp=mt, out=mt, cmp=Alu.IS_GE, base=q0 - s0 - t0, channel_multiplier=1,
                             coefs=(-1,), fill=-_HIDDEN if scale > 0 else _HIDDEN))
        causal_masks[key] = mt
    kb.emit(LoadStationary(src=causal_masks["identity"].rows(0, lq).view(0, [(1, lq)])))
    kb.emit(MultiplyMoving(moving=causal_masks[key], dst=scores.view(t0, [(1, se - t0)]), accumulate=True))


def _apply_explicit_mask(ctx: LoweringContext, q_mask: int, scores: AP, tmp: AP, mask_st, neg_big: AP | None,
                         scale: float, b: int, h: int, q0: int, lq: int, s0: int, sb: int) -> AP | None:
    """tmp = scale * scores with the attention mask's block applied (a boolean mask selects -inf, an
    additive one is added); returns the [P, 1] -inf tile a boolean mask needs (made on first use)."""
    kb = ctx.kb
    mask = ctx.call.inputs[3]
    kb.emit(Activation(func=Act.COPY, inp=scores, out=tmp, scale=scale))
    mt = kb.tile(lq, (sb,), mask.dtype)
    mo = mask.offset + b * mask_st[0] + h * mask_st[1] + q0 * mask_st[2] + s0 * mask_st[3]
    load(kb, q_mask, ctx.inputs[3], mask.dtype, mo, mask_st[2], lq, [(mask_st[3], sb)], mt)
    if mask.dtype == DType.bool_:
        if neg_big is None:
            neg_big = kb.tile(kb.spec.partitions, (1,), F32)
            kb.emit(Memset(out=neg_big, value=float("-inf")))
        kb.emit(Select(pred=mt, on_true=tmp, on_false=neg_big.rows(0, lq).view(0, [(0, sb)]), out=tmp))
    else:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=tmp, in1=mt, out=tmp))
    kb.release(mt)
    return neg_big


def _log_sum_exp(kb, total: AP, neg_m: AP, out: AP) -> None:
    """out = log(row sum) - (-row max): the rows' log-sum-exp from the softmax's running state."""
    kb.emit(Activation(func=Act.LOG, inp=total, out=out))
    kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=out, in1=neg_m, out=out))


def _store_lse_heads_inner(kb, queue: int, lse_all: AP, tensor: int, lm, b: int, H: int, L: int) -> None:
    """Batch b's log-sum-exp, collected as [128 queries, query tile x head], to its [B, H, L] output
    whose heads are adjacent: partition p of full query tile t holds (t * 128 + p, every head)."""
    P = lse_all.partitions
    s_h, s_l = lm.stride[-2], lm.stride[-1]
    lo = lm.offset + (b * lm.stride[0] if lm.ndim == 3 else 0)
    full, rem = divmod(L, P)
    if full:
        kb.dma(queue, lse_all.view(0, [(1, full * H)]), hbm(tensor, P, s_l, [(P * s_l, full), (s_h, H)], lm.dtype,
                                                           offset=lo))
    if rem:
        kb.dma(queue, lse_all.rows(0, rem).view(full * H, [(1, H)]),
               hbm(tensor, rem, s_l, [(s_h, H)], lm.dtype, offset=lo + full * P * s_l))


def _store_lse_rows(kb, queue: int, lse_all: AP, tensor: int, lm, b: int, H: int, L: int) -> None:
    """Batch b's log-sum-exp, collected as [128 queries, (head, query tile) columns], to its dense
    [B, H, L] output: column i holds values i*128 .. i*128 + 127 of the batch's H x L block, so
    TensorE transposes (128 columns at a time) make rows that leave as one 512-byte run each."""
    P = lse_all.partitions
    lo = lm.offset + (b * lm.stride[0] if lm.ndim == 3 else 0)
    total = lse_all.free_size
    for c0 in range(0, total, P):
        cols = min(P, total - c0)
        ps = kb.psum_tile(cols, (P,), F32)
        kb.emit(TensorTranspose(src=lse_all.view(c0, [(1, cols)]), dst=ps))
        rows = kb.tile(cols, (P,), F32)
        kb.copy(ps, rows)
        kb.release(ps)
        kb.dma(queue, rows, hbm(tensor, cols, P, [(1, P)], lm.dtype, offset=lo + c0 * P))
        kb.release(rows)


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
