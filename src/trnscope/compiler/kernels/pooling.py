"""Pooling over 1-3 spatial dims: avg_pool2d/3d, max_pool2d/3d_with_indices, adaptive average pooling.

Every leading index (batch x channel) is a row, 128 rows to a tile; a row's spatial plane lies on the
free axis. The plane is DMAed into the interior of a padded SBUF tile (the border memset to the
pooling's neutral value: 0 for sums, -inf for max), so every window offset (a, b, c) of the kernel
is one strided view of that tile covering all outputs at once (strides = pooling stride, start =
offset x dilation). Pooling is then one VectorE instruction per window offset:

- average: a running sum, divided at the end by the window's element count; where the count varies
  (padding excluded from the count, ceil-mode windows hanging over the edge) the same window sums
  run over a 0/1 mask of the counted cells, so the divisors come from the engines too;
- max with indices: a running max whose update mask (candidate > best, or candidate NaN, as
  PyTorch's loop does) also selects the candidate's flat input position from GpSimdE's iota. The
  positions start at each window's first in-bounds cell, so an all -inf window reports it.

Planes too large for one tile are cut along the outermost output dim. Adaptive average pooling has
windows of varying size, so it reduces one spatial dim at a time: per output position one
tensor_reduce over that position's window, scaled by 1/length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil, prod

from ...isa import AP, Act, Activation, Alu, DType, Engine, Iota, Memset, Select, TensorCopy, TensorReduce, TensorScalar, \
    TensorTensor, hbm
from ..builder import KernelBuilder
from ..lowering import LoweringContext, NoLowering, lowering
from .common import F32, attr, queues, row_plan

PLANE_BYTES = 24 * 1024   # padded input plane per row and tile (bytes of FP32)


def _tup(v, n: int, default=None) -> tuple[int, ...]:
    if v is None or (isinstance(v, (tuple, list)) and len(v) == 0):
        v = default
    if isinstance(v, (tuple, list)):
        v = tuple(int(x) for x in v)
        return v * n if len(v) == 1 else v
    return (int(v),) * n


def _rows(parts: int, nsp: int, *metas):
    """Row tiles over the leading (batch, channel) dims of every tensor (same leading shape)."""
    lead = metas[0].shape[:-nsp] or (1,)
    return row_plan(lead, [], [m.stride[:-nsp] or (0,) for m in metas], [m.offset for m in metas], parts=parts)


def _dense(shape) -> list[int]:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def _views(base: AP, offset: int, strides, sizes) -> AP:
    return base.view(offset, [(st, sz) for st, sz in zip(strides, sizes)])


@dataclass(frozen=True)
class _PoolGeometry:
    """What a window pooling's attributes and shapes fix for every tile: the window, its stride,
    padding and dilation per spatial dim, the padded extents and how many outputs of the outermost
    dim one tile holds."""

    kind: str                  # 'avg' or 'max'
    nsp: int
    k: tuple[int, ...]
    s: tuple[int, ...]
    p: tuple[int, ...]
    dil: tuple[int, ...]
    ins: tuple[int, ...]       # input spatial shape
    outs: tuple[int, ...]      # output spatial shape
    ext: list[int]             # padded extents (origin at -p); dim 0 is cut into chunks
    span0: int                 # input rows one output row's windows cover along dim 0
    chunk: int                 # outputs of dim 0 per tile
    lo_c: list[int]            # the counted region (avg): padding counts or not
    hi_c: list[int]
    varying: bool              # some window's count of counted cells differs from the kernel's size
    const_div: float
    in_flat: list[int]         # flat input positions (max_pool's indices)


def _pool_geometry(ctx: LoweringContext, nsp: int, kind: str) -> _PoolGeometry:
    x = ctx.call.inputs[0]
    out = ctx.call.outputs[0]
    k = _tup(attr(ctx, "kernel_size"), nsp)
    s = _tup(attr(ctx, "stride"), nsp, k)
    p = _tup(attr(ctx, "padding", 0), nsp)
    dil = _tup(attr(ctx, "dilation", 1), nsp) if kind == "max" else (1,) * nsp
    ins_ = x.shape[-nsp:]
    outs_ = out.shape[-nsp:]
    include_pad = bool(attr(ctx, "count_include_pad", True))
    divisor = attr(ctx, "divisor_override", None)
    ext = [max(ins_[d] + 2 * p[d], (outs_[d] - 1) * s[d] + (k[d] - 1) * dil[d] + 1) for d in range(nsp)]
    inner = prod(ext[1:])
    span0 = (k[0] - 1) * dil[0] + 1
    chunk = max(1, min(outs_[0], (PLANE_BYTES // 4 - span0 * inner) // max(1, s[0] * inner) + 1))
    if kind == "max":
        # _max_windows_psum holds two PSUM tiles of a chunk's outputs, for two chunks at a time
        psum_outs = ctx.spec.psum_bytes_per_partition // (4 * 4)
        per_row = prod(outs_[1:])
        if per_row <= psum_outs:
            chunk = max(1, min(chunk, psum_outs // per_row))
    # count of each window's counted cells (avg): constant unless some window leaves the counted region
    lo_c = [-p[d] if include_pad else 0 for d in range(nsp)]
    hi_c = [ins_[d] + p[d] if include_pad else ins_[d] for d in range(nsp)]
    varying = divisor is None and kind == "avg" and any(
        o * s[d] - p[d] < lo_c[d] or o * s[d] - p[d] + k[d] > hi_c[d] for d in range(nsp) for o in range(outs_[d]))
    const_div = float(divisor) if divisor is not None else float(prod(k))
    return _PoolGeometry(kind, nsp, k, s, p, dil, ins_, outs_, ext, span0, chunk, lo_c, hi_c, varying, const_div,
                         _dense(ins_))


@dataclass
class _PoolChunk:
    """Outputs o0..o0+m0 of dim 0 for one row tile: the padded input plane they read, in SBUF, and
    the tiles made for them (released once the next chunk's are made, so DMAs overlap)."""

    kb: KernelBuilder
    g: _PoolGeometry
    rows: int
    o0: int
    lo: int                    # input coordinate of the plane's first row along dim 0
    e0: int                    # the plane's extent along dim 0
    ext_c: list[int]
    est: list[int]             # the plane's dense strides
    origin: list[int]          # input coordinate of the plane's first cell, per dim
    osz: list[int]             # the chunk's output shape
    ost: list[int]
    n_out: int
    made: list[AP] = field(default_factory=list)
    plane: AP | None = None

    def tile(self, cols: int, dt=F32) -> AP:
        a = self.kb.tile(self.rows, (cols,), dt)
        self.made.append(a)
        return a

    def ptile(self, cols: int) -> AP:
        """An FP32 PSUM tile for VectorE alone (see _max_windows_psum)."""
        banks = -(-cols * 4 // self.kb.spec.psum_bank_bytes)
        a = self.kb.psum_tile(self.rows, (cols,), F32, banks=banks)
        self.made.append(a)
        return a

    def window(self, a: tuple[int, ...], base: AP | None = None) -> AP:
        """The strided view of ``base`` (the plane) that window offset ``a`` reads for every output."""
        g = self.g
        off = sum(ai * g.dil[d] * self.est[d] for d, ai in enumerate(a))
        return _views(base if base is not None else self.input_plane, off,
                      [g.s[d] * self.est[d] for d in range(g.nsp)], self.osz)

    def outputs(self, tile: AP) -> AP:
        return _views(tile, 0, self.ost, self.osz)

    @property
    def input_plane(self) -> AP:
        assert self.plane is not None
        return self.plane


def _pool_chunk(kb: KernelBuilder, g: _PoolGeometry, rows: int, o0: int) -> _PoolChunk:
    m0 = min(g.chunk, g.outs[0] - o0)
    lo = o0 * g.s[0] - g.p[0]
    e0 = (m0 - 1) * g.s[0] + g.span0
    ext_c = [e0] + g.ext[1:]
    osz = [m0] + list(g.outs[1:])
    return _PoolChunk(kb, g, rows, o0, lo, e0, ext_c, _dense(ext_c), [lo] + [-g.p[d] for d in range(1, g.nsp)],
                      osz, _dense(osz), prod(osz))


def _load_plane(ctx: LoweringContext, c: _PoolChunk, t, q: int) -> None:
    """The chunk's input rows into the interior of its padded plane (the border set to the pooling's
    neutral value)."""
    kb, g, x = ctx.kb, c.g, ctx.call.inputs[0]
    plane = c.plane = c.tile(prod(c.ext_c), x.dtype)
    v_lo, v_hi = max(c.lo, 0), min(c.lo + c.e0, g.ins[0])
    inside = [(v_lo, v_hi)] + [(0, g.ins[d]) for d in range(1, g.nsp)]
    full = all(a == o and b - a == e for (a, b), o, e in zip(inside, c.origin, c.ext_c))
    if not full:
        kb.emit(Memset(out=plane, value=float("-inf") if g.kind == "max" else 0.0))
    if v_hi > v_lo:
        sizes = [b - a for a, b in inside]
        xin_st = x.stride[-g.nsp:]
        dst = _views(plane, sum((a - o) * st for (a, _), o, st in zip(inside, c.origin, c.est)), c.est, sizes)
        src = hbm(ctx.inputs[0], c.rows, t.pstrides[0], [(st, sz) for st, sz in zip(xin_st, sizes)], x.dtype,
                  offset=t.offsets[0] + v_lo * xin_st[0])
        kb.dma(q, src, dst)


def _window_offsets(g: _PoolGeometry) -> list[tuple[int, ...]]:
    offsets: list[tuple[int, ...]] = [()]
    for d in range(g.nsp):
        offsets = [a + (i,) for a in offsets for i in range(g.k[d])]
    return offsets


def _avg_windows(kb: KernelBuilder, c: _PoolChunk, acc: AP, offsets) -> None:
    """acc = every window's sum over its divisor: the kernel's size (or divisor_override), else the
    count of counted cells, summed by the same windows over a 0/1 mask."""
    g = c.g
    accv = c.outputs(acc)
    kb.emit(Activation(func=Act.COPY, inp=c.window(offsets[0]), out=accv))
    for a in offsets[1:]:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=accv, in1=c.window(a), out=accv))
    if not g.varying:
        kb.emit(TensorScalar(inp=acc, out=acc, alu0=Alu.DIVIDE, scalar0=g.const_div))
        return
    mask = c.tile(prod(c.ext_c))
    kb.emit(Memset(out=mask, value=0.0))
    cin = [(max(g.lo_c[0], c.lo), min(g.hi_c[0], c.lo + c.e0))] + [(g.lo_c[d], g.hi_c[d]) for d in range(1, g.nsp)]
    sizes = [b - a for a, b in cin]
    if all(z > 0 for z in sizes):
        kb.emit(Memset(out=_views(mask, sum((a - o) * st for (a, _), o, st in zip(cin, c.origin, c.est)),
                                  c.est, sizes), value=1.0))
    cnt = c.tile(c.n_out)
    cntv = c.outputs(cnt)
    kb.emit(TensorCopy(inp=c.window(offsets[0], mask), out=cntv))
    for a in offsets[1:]:
        kb.emit(TensorTensor(alu=Alu.ADD, in0=cntv, in1=c.window(a, mask), out=cntv))
    kb.emit(TensorTensor(alu=Alu.DIVIDE, in0=acc, in1=cnt, out=acc))


def _first_positions(kb: KernelBuilder, c: _PoolChunk) -> AP:
    """An int32 tile of each window's first in-bounds flat input position: where a window's running
    max starts (so an all -inf window reports that cell, as PyTorch does)."""
    g = c.g
    nsp, ost, osz = g.nsp, c.ost, c.osz
    bidx = c.tile(c.n_out, DType.int32)
    coefs = tuple(g.s[d] * g.in_flat[d] for d in range(nsp))
    base0 = c.o0 * g.s[0] * g.in_flat[0]
    kb.emit(Iota(out=c.outputs(bidx), base=base0 - sum(g.p[d] * g.in_flat[d] for d in range(nsp)), coefs=coefs))
    # windows starting in the padding: their first in-bounds cell is further in
    for d in range(nsp):
        first = c.o0 if d == 0 else 0
        for o in range(first, first + osz[d]):
            start = o * g.s[d] - g.p[d]
            if start >= 0:
                break
            shift = g.dil[d] * ceil(-start / g.dil[d]) * g.in_flat[d]
            sl = o - first
            sub = _views(bidx, sl * ost[d], [ost[e] for e in range(nsp) if e != d],
                         [osz[e] for e in range(nsp) if e != d]) if nsp > 1 else \
                bidx.view(sl, [(1, 1)])
            kb.emit(TensorScalar(inp=sub, out=sub, alu0=Alu.ADD, scalar0=float(shift)))
    return bidx


def _max_windows(kb: KernelBuilder, c: _PoolChunk, acc: AP, offsets) -> AP:
    """acc = every window's max; returns the int32 tile of its flat input position (the first
    candidate that is greater, or NaN, wins: PyTorch's loop)."""
    g = c.g
    nsp = g.nsp
    kb.emit(Memset(out=acc, value=float("-inf")))
    accv = c.outputs(acc)
    bidx = _first_positions(kb, c)
    coefs = tuple(g.s[d] * g.in_flat[d] for d in range(nsp))
    base0 = c.o0 * g.s[0] * g.in_flat[0]
    pos = c.tile(c.n_out, DType.int32)
    posv = c.outputs(pos)
    upd = c.tile(c.n_out)
    nan = c.tile(c.n_out)
    updv, nanv = c.outputs(upd), c.outputs(nan)
    for a in offsets:
        cand = c.window(a)
        kb.emit(Iota(out=posv, base=base0 + sum((a[d] * g.dil[d] - g.p[d]) * g.in_flat[d] for d in range(nsp)),
                     coefs=coefs))
        kb.emit(TensorTensor(alu=Alu.IS_GT, in0=cand, in1=accv, out=updv))
        kb.emit(Activation(func=Act.IS_NAN, inp=cand, out=nanv))
        kb.emit(TensorTensor(alu=Alu.LOGICAL_OR, in0=upd, in1=nan, out=upd))
        kb.emit(Select(pred=updv, on_true=cand, on_false=accv, out=accv))
        kb.emit(Select(pred=upd, on_true=pos, on_false=bidx, out=bidx))
    return bidx


def _max_windows_psum(kb: KernelBuilder, c: _PoolChunk, offsets) -> tuple[AP, AP]:
    """_max_windows with VectorE's running state in PSUM: every pass reads one PSUM and one SBUF
    operand, N cycles instead of 2N (S9). Per window offset: the update mark (candidate > best, a
    PSUM read), the best as max(best, candidate) (NaN-propagating, as PyTorch's best becomes NaN and
    stays NaN), the mark or-ed with ScalarE's isnan(candidate), and the position selected by it into
    an SBUF tile (mixed spaces: N): 4 VectorE cycles per offset and output, where it took 8. Without
    padding every window's first cell is in bounds and is its first candidate: the best starts as a
    copy of it and the position as its iota, so the first offset costs one pass, not four. ScalarE
    never touches PSUM (NC-v2's rule, hardware.md 2.3); GpSimdE makes the positions.

    Returns (best in PSUM, int32 positions in SBUF)."""
    g = c.g
    nsp = g.nsp
    coefs = tuple(g.s[d] * g.in_flat[d] for d in range(nsp))
    base0 = c.o0 * g.s[0] * g.in_flat[0]
    acc = c.ptile(c.n_out)
    accv = c.outputs(acc)
    padded = any(g.p)
    if padded:
        kb.emit(Memset(out=acc, value=float("-inf")))
        bidx = _first_positions(kb, c)
        rest = offsets
    else:
        kb.emit(TensorCopy(inp=c.window(offsets[0]), out=accv))
        bidx = c.tile(c.n_out, DType.int32)
        kb.emit(Iota(out=c.outputs(bidx), base=base0, coefs=coefs))
        rest = offsets[1:]
    upd = c.ptile(c.n_out)
    updv, bidxv = c.outputs(upd), c.outputs(bidx)
    # two sets of position / NaN-mark tiles, taken in turn: GpSimdE and ScalarE make the next
    # offset's while VectorE uses this one's, in SBUF that does not grow with the window
    spare = [(c.tile(c.n_out, DType.int32), c.tile(c.n_out)) for _ in range(min(2, len(rest)))]
    for i, a in enumerate(rest):
        cand = c.window(a)
        pos, nan = spare[i % len(spare)]
        kb.emit(Iota(out=c.outputs(pos), base=base0 + sum((a[d] * g.dil[d] - g.p[d]) * g.in_flat[d]
                                                          for d in range(nsp)), coefs=coefs))
        kb.emit(Activation(func=Act.IS_NAN, inp=cand, out=c.outputs(nan)))
        kb.emit(TensorTensor(alu=Alu.IS_GT, in0=cand, in1=accv, out=updv))
        kb.emit(TensorTensor(alu=Alu.MAX, in0=accv, in1=cand, out=accv))
        kb.emit(TensorTensor(alu=Alu.LOGICAL_OR, in0=updv, in1=c.outputs(nan), out=updv))
        kb.emit(Select(pred=updv, on_true=c.outputs(pos), on_false=bidxv, out=bidxv))
    return acc, bidx


def _window_pool(ctx: LoweringContext, nsp: int, kind: str) -> None:
    """kind: 'avg' or 'max' (with indices)."""
    kb = ctx.kb
    x = ctx.call.inputs[0]
    out = ctx.call.outputs[0]
    if not x.dtype.is_float:
        raise NoLowering("integer pooling")
    g = _pool_geometry(ctx, nsp, kind)
    if out.numel == 0:
        return
    idx_out = ctx.call.outputs[1] if kind == "max" else None
    plan = _rows(ctx.spec.partitions, nsp, x, out, *([idx_out] if idx_out is not None else []))
    qin, qout = queues(kb)
    offsets = _window_offsets(g)
    held: list[AP] = []
    for t in plan.tiles:
        for o0 in range(0, g.outs[0], g.chunk):
            c = _pool_chunk(kb, g, t.rows, o0)
            _load_plane(ctx, c, t, qin[0])
            if kind == "avg":
                acc = c.tile(c.n_out)
                _avg_windows(kb, c, acc, offsets)
            else:
                assert idx_out is not None  # max pooling returns its indices
                if c.n_out * 4 * 4 <= ctx.spec.psum_bytes_per_partition:
                    acc, bidx = _max_windows_psum(kb, c, offsets)
                    io = c.tile(c.n_out, idx_out.dtype)
                    kb.copy(bidx, io, on=Engine.GPSIMD)    # SBUF to SBUF, off VectorE
                else:
                    acc = c.tile(c.n_out)
                    bidx = _max_windows(kb, c, acc, offsets)
                    io = c.tile(c.n_out, idx_out.dtype)
                    kb.copy(bidx, io)
                _store_plane(kb, qout, io, ctx.outputs[1], idx_out, t, 2, nsp, o0, c.osz)
            ot = c.tile(c.n_out, out.dtype)
            kb.copy(acc, ot)
            _store_plane(kb, qout, ot, ctx.outputs[0], out, t, 1, nsp, o0, c.osz)
            kb.release(*held)
            held = c.made
    kb.release(*held)


def _store_plane(kb, q, tile: AP, tensor: int, meta, t, k: int, nsp: int, o0: int, osz) -> None:
    """A [rows, outputs] tile to operand k's plane, from output row o0 of the outermost spatial dim."""
    st = meta.stride[-nsp:]
    kb.dma(q, _views(tile, 0, _dense(osz), osz),
           hbm(tensor, t.rows, t.pstrides[k], [(a, b) for a, b in zip(st, osz)], meta.dtype,
               offset=t.offsets[k] + o0 * st[0]))


@lowering("aten::avg_pool2d")
def _avg_pool2d(ctx: LoweringContext) -> None:
    _window_pool(ctx, 2, "avg")


@lowering("aten::avg_pool3d")
def _avg_pool3d(ctx: LoweringContext) -> None:
    _window_pool(ctx, 3, "avg")


@lowering("aten::max_pool2d_with_indices")
def _max_pool2d(ctx: LoweringContext) -> None:
    _window_pool(ctx, 2, "max")


@lowering("aten::max_pool3d_with_indices")
def _max_pool3d(ctx: LoweringContext) -> None:
    _window_pool(ctx, 3, "max")


# --- adaptive average pooling ------------------------------------------------------------------------

def _adaptive_avg(ctx: LoweringContext, nsp: int) -> None:
    kb = ctx.kb
    x, out = ctx.call.inputs[0], ctx.call.outputs[0]
    if not x.dtype.is_float:
        raise NoLowering("integer pooling")
    if out.numel == 0:
        return
    ins_ = list(x.shape[-nsp:])
    outs_ = list(out.shape[-nsp:])
    if prod(ins_) * 4 * 2 > 96 * 1024:
        raise NoLowering("adaptive pooling plane larger than one SBUF tile")
    plan = _rows(ctx.spec.partitions, nsp, x, out)
    qin, qout = queues(kb)
    held: list[AP] = []
    for t in plan.tiles:
        rows = t.rows
        made: list[AP] = []
        cur = kb.tile(rows, (prod(ins_),), x.dtype)
        made.append(cur)
        kb.dma(qin[0], hbm(ctx.inputs[0], rows, t.pstrides[0], list(zip(x.stride[-nsp:], ins_)), x.dtype,
                           offset=t.offsets[0]), _views(cur, 0, _dense(ins_), ins_))
        shape = list(ins_)
        scale = 1.0
        for d in reversed(range(nsp)):       # innermost dim first
            nshape = shape[:d] + [outs_[d]] + shape[d + 1:]
            nxt = kb.tile(rows, (prod(nshape),), F32)
            made.append(nxt)
            cst, nst = _dense(shape), _dense(nshape)
            others = [e for e in range(nsp) if e != d]
            if shape[d] % outs_[d] == 0:
                # equal windows side by side: one tensor_reduce over [others..., outputs, window] for the
                # whole dim (N cycles, one instruction's overhead), the 1/length folded into the last copy
                L = shape[d] // outs_[d]
                src = cur.view(0, [(cst[e], shape[e]) for e in others] + [(L * cst[d], outs_[d]), (cst[d], L)])
                dst = nxt.view(0, [(nst[e], nshape[e]) for e in others] + [(nst[d], outs_[d])])
                kb.emit(TensorReduce(alu=Alu.ADD, inp=src, out=dst))
                scale /= L
                cur, shape = nxt, nshape
                continue
            for o in range(outs_[d]):
                a = (o * shape[d]) // outs_[d]
                b = -(-((o + 1) * shape[d]) // outs_[d])
                src = cur.view(a * cst[d], [(cst[e], shape[e]) for e in others] + [(cst[d], b - a)])
                dst = nxt.view(o * nst[d], [(nst[e], nshape[e]) for e in others] or [(1, 1)])
                kb.emit(TensorReduce(alu=Alu.ADD, inp=src, out=dst))
                kb.emit(TensorScalar(inp=dst, out=dst, alu0=Alu.MULTIPLY, scalar0=1.0 / (b - a)))
            cur, shape = nxt, nshape
        ot = kb.tile(rows, (prod(outs_),), out.dtype)
        made.append(ot)
        kb.emit(Activation(func=Act.COPY, inp=cur, out=ot, scale=scale))   # ScalarE, beside VectorE's sums
        kb.dma(qout, _views(ot, 0, _dense(outs_), outs_),
               hbm(ctx.outputs[0], rows, t.pstrides[1], list(zip(out.stride[-nsp:], outs_)), out.dtype,
                   offset=t.offsets[1]))
        kb.release(*held)
        held = made
    kb.release(*held)


@lowering("aten::_adaptive_avg_pool2d")
def _adaptive_avg_pool2d(ctx: LoweringContext) -> None:
    _adaptive_avg(ctx, 2)


@lowering("aten::_adaptive_avg_pool3d")
def _adaptive_avg_pool3d(ctx: LoweringContext) -> None:
    _adaptive_avg(ctx, 3)
