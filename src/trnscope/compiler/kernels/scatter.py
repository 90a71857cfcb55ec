"""Scatters along a dim: scatter (src / value / reduce), scatter_add, scatter_reduce, index_add,
index_copy and index_fill.

Every one of them writes, for each position k along ``dim`` of the output, a combination of the
source values whose index equals k. The kernel puts the scattered dim on the free axis (every other
index of the iteration space is a row, 128 rows to a tile) and matches all (k, j) pairs at once
with one-hot tiles: VectorE compares the index row (broadcast over k by a zero stride) with an
iota of k (broadcast over j) into a [rows, k, j] mask, selects the source (or the reduction's
identity) with it and reduces over j. No two rows collide, so nothing is read-modify-written in HBM
and duplicate indices need no atomics; rows of ``self`` the index does not reach are copied by DMA.

- sum / prod / amax / amin / mean combine with ``self`` (``include_self``) or replace it where some
  index hit (a per-k hit count from the same mask);
- plain scatter and index_copy take the *last* matching source (as PyTorch's serial loop does): the
  largest matching j, then the value at it;
- index_add / index_copy / index_fill scatter whole slices: their 1-D index is broadcast to every row
  (a zero partition stride), negative indices wrapped by VectorE.

Chunks of at most 2048 (k, j) pairs per row bound the mask tiles; long index rows are combined
chunk by chunk with the reduction's own ALU op (the last-match rule compares positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ...isa import AP, Act, Activation, Alu, DmaScatter, DType, Iota, Memset, Select, TensorReduce, TensorScalar, \
    TensorTensor, hbm
from ..lowering import LoweringContext, NoLowering, lowering
from .common import F32, RowPlan, attr, load, queues, row_plan, store
from ..tiling import coalesce
from .movement import copy_region

PAIRS = 2048        # (k, j) pairs per row in one mask tile
JCHUNK = 1024       # index elements per row in one chunk
PRELOAD = 2048      # index rows up to this long are loaded once per tile, longer ones per k chunk

_IDENT = {"sum": 0.0, "prod": 1.0, "amax": float("-inf"), "amin": float("inf"), "mean": 0.0}
_ALU = {"sum": Alu.ADD, "prod": Alu.MULTIPLY, "amax": Alu.MAX, "amin": Alu.MIN, "mean": Alu.ADD}
_REDUCE_NAMES = {"add": "sum", "sum": "sum", "multiply": "prod", "prod": "prod", "mean": "mean", "amax": "amax",
                 "amin": "amin"}


class _Tiles:
    """Allocates [rows, cols] tiles and remembers them, so a group can be released together."""

    def __init__(self, kb, rows: int, dtype: DType) -> None:
        self.kb, self.rows, self.dtype = kb, rows, dtype
        self.made: list[AP] = []

    def __call__(self, cols: int, dt: DType | None = None) -> AP:
        a = self.kb.tile(self.rows, (cols,), dt if dt is not None else self.dtype)
        self.made.append(a)
        return a


@dataclass
class _Chunk:
    """One chunk of index elements j0 .. j0 + w - 1 of a row tile: the index as FP32 (wrapped), the
    source (None for a value fill) and, for a last-match scatter, the positions j."""
    j0: int
    w: int
    idx: AP
    src: AP | None
    jpos: AP | None


@dataclass
class _Partial:
    """What the j chunks of one k chunk have combined so far: the reduction (or the last match's
    value), the hit count and, for a last-match scatter, the last matching position."""
    acc: AP | None = None
    cnt: AP | None = None
    best: AP | None = None


@dataclass
class _OneHot:
    """The one-hot scatter kernel of one call (see the module docstring): its inputs, its row plan
    and its constants."""
    ctx: LoweringContext
    dim: int
    mode: str
    include_self: bool
    alpha: float
    wrap: bool
    src_given: bool
    plan: RowPlan
    fst: list[int]
    consts: dict[str, AP]
    need_count: bool
    J: int    # index elements per row

    @property
    def kb(self):
        return self.ctx.kb

    @property
    def vdt(self) -> DType:
        return F32 if self.ctx.call.outputs[0].dtype.is_float else DType.int32

    def load_chunk(self, t, j0: int, w: int, tile: _Tiles) -> _Chunk:
        """Index (as FP32, wrapped) and source of index elements j0 .. j0+w-1 of every row."""
        kb, ctx = self.kb, self.ctx
        idx_m = ctx.call.inputs[1]
        qin, _ = queues(kb)
        fst, rows = self.fst, t.rows
        raw = tile(w, idx_m.dtype)
        load(kb, qin[0], ctx.inputs[1], idx_m.dtype, t.offsets[0] + j0 * fst[0], t.pstrides[0], rows,
             [(fst[0], w)], raw)
        idx = tile(w, F32)
        kb.copy(raw, idx)
        if self.wrap:  # index + K where index < 0
            K = ctx.call.inputs[0].shape[self.dim] if ctx.call.inputs[0].ndim else 1
            neg = tile(w, F32)
            kb.emit(TensorScalar(inp=idx, out=neg, alu0=Alu.IS_LT, scalar0=0.0, alu1=Alu.MULTIPLY,
                                 scalar1=float(K)))
            kb.emit(TensorTensor(alu=Alu.ADD, in0=idx, in1=neg, out=idx))
        src = None
        if self.src_given:
            src_m = ctx.call.inputs[2]
            src = tile(w, src_m.dtype)
            load(kb, qin[1], ctx.inputs[2], src_m.dtype, t.offsets[1] + j0 * fst[1], t.pstrides[1], rows,
                 [(fst[1], w)], src)
        jpos = None
        if self.mode == "set" and src is not None:
            jpos = tile(w, F32)
            kb.emit(Iota(out=jpos, base=j0, coefs=(1,)))
        return _Chunk(j0, w, idx, src, jpos)

    def match(self, rows: int, n: int, kpos: AP, ch: _Chunk, mask: _Tiles, tile: _Tiles, part: _Partial) -> None:
        """Compare chunk ``ch``'s index with the k chunk's positions and fold its sources into ``part``."""
        kb, w, consts = self.kb, ch.w, self.consts
        eq = mask(n * w)
        kb.emit(TensorTensor(alu=Alu.IS_EQUAL, in0=_bcast_j(ch.idx, n, w), in1=_bcast_k(kpos, n, w),
                             out=eq.view(0, [(w, n), (1, w)])))
        grid = eq.view(0, [(w, n), (1, w)])
        if self.need_count:
            c = tile(n, F32)
            kb.emit(TensorReduce(alu=Alu.ADD, inp=grid, out=c))
            if part.cnt is None:
                part.cnt = c
            else:
                kb.emit(TensorTensor(alu=Alu.ADD, in0=part.cnt, in1=c, out=part.cnt))
        if self.mode == "set":
            if ch.src is not None and ch.jpos is not None:  # both or neither: value / value_input is the source
                self._last_match(rows, n, ch, grid, mask, tile, part)
            return
        assert ch.src is not None, "a scatter reduction has a source"
        sel = mask(n * w, self.vdt)
        kb.emit(Select(pred=grid, on_true=_bcast_j(ch.src, n, w),
                       on_false=consts["ident"].rows(0, rows).view(0, [(0, n), (0, w)]),
                       out=sel.view(0, [(w, n), (1, w)])))
        red = tile(n, self.vdt)
        kb.emit(TensorReduce(alu=_ALU[self.mode], inp=sel.view(0, [(w, n), (1, w)]), out=red))
        if part.acc is None:
            part.acc = red
        else:
            kb.emit(TensorTensor(alu=_ALU[self.mode], in0=part.acc, in1=red, out=part.acc))

    def _last_match(self, rows: int, n: int, ch: _Chunk, grid: AP, mask: _Tiles, tile: _Tiles,
                    part: _Partial) -> None:
        """The last matching j of the chunk, then the source value there, merged with the earlier
        chunks' (a later position wins)."""
        kb, w, consts = self.kb, ch.w, self.consts
        assert ch.src is not None and ch.jpos is not None
        pg = mask(n * w)
        kb.emit(Select(pred=grid, on_true=_bcast_j(ch.jpos, n, w),
                       on_false=consts["neg1"].rows(0, rows).view(0, [(0, n), (0, w)]),
                       out=pg.view(0, [(w, n), (1, w)])))
        pos = tile(n, F32)
        kb.emit(TensorReduce(alu=Alu.MAX, inp=pg.view(0, [(w, n), (1, w)]), out=pos))
        kb.emit(TensorTensor(alu=Alu.IS_EQUAL, in0=_bcast_j(ch.jpos, n, w), in1=_bcast_k(pos, n, w),
                             out=pg.view(0, [(w, n), (1, w)])))
        sel = mask(n * w, self.vdt)
        kb.emit(Select(pred=pg.view(0, [(w, n), (1, w)]), on_true=_bcast_j(ch.src, n, w),
                       on_false=consts["ninf"].rows(0, rows).view(0, [(0, n), (0, w)]),
                       out=sel.view(0, [(w, n), (1, w)])))
        val = tile(n, self.vdt)
        kb.emit(TensorReduce(alu=Alu.MAX, inp=sel.view(0, [(w, n), (1, w)]), out=val))
        if part.best is None or part.acc is None:  # both or neither: the first chunk
            part.best, part.acc = pos, val
        else:
            upd = tile(n, F32)
            kb.emit(TensorTensor(alu=Alu.IS_GT, in0=pos, in1=part.best, out=upd))
            kb.emit(TensorTensor(alu=Alu.MAX, in0=part.best, in1=pos, out=part.best))
            kb.emit(Select(pred=upd, on_true=val, on_false=part.acc, out=part.acc))

    def combine_and_store(self, t, k0: int, n: int, part: _Partial, tile: _Tiles) -> None:
        """Positions k0 .. k0+n-1 of the output rows: the partial result combined with ``self``."""
        kb, ctx, rows = self.kb, self.ctx, t.rows
        self_m, out = ctx.call.inputs[0], ctx.call.outputs[0]
        s_stride = self_m.stride if self_m.ndim else (1,)
        o_stride = out.stride if out.ndim else (1,)
        qin, qout = queues(kb)
        mode, vdt = self.mode, self.vdt
        acc, cnt = part.acc, part.cnt
        selft = tile(n, self_m.dtype)
        load(kb, qin[1], ctx.inputs[0], self_m.dtype, t.offsets[2] + k0 * s_stride[self.dim], t.pstrides[2], rows,
             [(s_stride[self.dim], n)], selft)
        res = tile(n, vdt)
        if mode == "set":
            hit = tile(n, F32)
            if not self.src_given:
                assert cnt is not None  # need_count holds
                kb.emit(TensorScalar(inp=cnt, out=hit, alu0=Alu.IS_GT, scalar0=0.0))
                acc = self.consts["value"].rows(0, rows).view(0, [(0, n)])
            else:
                assert part.best is not None and acc is not None  # J > 0: at least one j chunk
                kb.emit(TensorScalar(inp=part.best, out=hit, alu0=Alu.IS_GE, scalar0=0.0))
            kb.emit(Select(pred=hit, on_true=acc, on_false=selft, out=res))
        elif mode == "mean":
            assert acc is not None and cnt is not None  # J > 0; need_count holds
            if self.include_self:
                kb.emit(TensorTensor(alu=Alu.ADD, in0=acc, in1=selft, out=acc))
                kb.emit(TensorScalar(inp=cnt, out=cnt, alu0=Alu.ADD, scalar0=1.0))
            else:
                hit = tile(n, F32)
                kb.emit(TensorScalar(inp=cnt, out=hit, alu0=Alu.IS_GT, scalar0=0.0))
                kb.emit(TensorScalar(inp=cnt, out=cnt, alu0=Alu.MAX, scalar0=1.0))
            kb.emit(TensorTensor(alu=Alu.DIVIDE, in0=acc, in1=cnt, out=acc))
            if not out.dtype.is_float:
                kb.emit(Activation(func=Act.FLOOR, inp=acc, out=acc))
            if self.include_self:
                kb.copy(acc, res)
            else:
                kb.emit(Select(pred=hit, on_true=acc, on_false=selft, out=res))
        else:
            assert acc is not None  # J > 0: at least one j chunk
            if self.alpha != 1.0:
                kb.emit(TensorScalar(inp=acc, out=acc, alu0=Alu.MULTIPLY, scalar0=float(self.alpha)))
            if self.include_self:
                kb.emit(TensorTensor(alu=_ALU[mode], in0=selft, in1=acc, out=res))
            else:
                assert cnt is not None  # need_count holds
                hit = tile(n, F32)
                kb.emit(TensorScalar(inp=cnt, out=hit, alu0=Alu.IS_GT, scalar0=0.0))
                kb.emit(Select(pred=hit, on_true=acc, on_false=selft, out=res))
        ot = tile(n, out.dtype)
        kb.copy(res, ot)
        store(kb, qout, ot, ctx.outputs[0], out.dtype, t.offsets[3] + k0 * o_stride[self.dim], t.pstrides[3], rows,
              [(o_stride[self.dim], n)])

    def row_tile(self, t) -> list[AP]:
        """Every k chunk of one row tile; returns the tiles still to release (one tile of lag)."""
        kb, ctx = self.kb, self.ctx
        rows = t.rows
        K = (ctx.call.inputs[0].shape if ctx.call.inputs[0].ndim else (1,))[self.dim]
        J = self.J
        jc = min(J, JCHUNK)
        kc = max(1, min(K, PAIRS // jc))
        spans = [(j0, min(jc, J - j0)) for j0 in range(0, J, jc)]
        tile_tiles = _Tiles(kb, rows, self.vdt)
        preloaded = [self.load_chunk(t, j0, w, tile_tiles) for j0, w in spans] if J <= PRELOAD else None
        kheld: list[AP] = []
        for k0 in range(0, K, kc):
            tile = _Tiles(kb, rows, self.vdt)
            n = min(kc, K - k0)
            kpos = tile(n, F32)
            kb.emit(Iota(out=kpos, base=k0, coefs=(1,)))
            part = _Partial()
            prev: list[AP] = []   # the previous j chunk's temporaries, released one chunk late
            for ci, (j0, w) in enumerate(spans):
                mask = _Tiles(kb, rows, F32)   # temporaries of this j chunk
                ch = preloaded[ci] if preloaded else self.load_chunk(t, j0, w, mask)
                kb.release(*prev)
                prev = mask.made
                self.match(rows, n, kpos, ch, mask, tile, part)
            tile.made += prev
            self.combine_and_store(t, k0, n, part, tile)
            kb.release(*kheld)   # the previous k chunk's tiles (one chunk of lag: double buffering)
            kheld = tile.made
        return tile_tiles.made + kheld


def _bcast_j(t: AP, n: int, w: int) -> AP:     # [rows, w] -> [rows, n, w] (same row for every k)
    return t.view(0, [(0, n), (1, w)])


def _bcast_k(t: AP, n: int, w: int) -> AP:     # [rows, n] -> [rows, n, w]
    return t.view(0, [(1, n), (0, w)])


def _scatter_consts(ctx: LoweringContext, mode: str, src_given: bool, rows_max: int, value: float | None,
                    value_input: int | None) -> dict[str, AP]:
    """The [rows, 1] constants of the one-hot kernel: a last-match scatter's -1 position and lowest
    value (and its fill value without a source), a reduction's identity."""
    kb = ctx.kb
    out = ctx.call.outputs[0]
    is_float = out.dtype.is_float
    vdt = F32 if is_float else DType.int32

    def const(v: float) -> AP:
        c = kb.tile(rows_max, (1,), vdt)
        kb.emit(Memset(out=c, value=v))
        return c

    consts: dict[str, AP] = {}
    if mode == "set":
        consts["neg1"] = const(-1.0)
        consts["ninf"] = const(float("-inf") if is_float else -2.0 ** 31)
        if not src_given:
            qin, _ = queues(kb)
            vt = kb.tile(rows_max, (1,), vdt)
            if value_input is not None:
                vm = ctx.call.inputs[value_input]
                raw = kb.tile(rows_max, (1,), vm.dtype)
                kb.dma(qin[0], hbm(ctx.inputs[value_input], rows_max, 0, [(1, 1)], vm.dtype), raw)
                kb.copy(raw, vt)
                kb.release(raw)
            else:
                assert value is not None, "a 'set' scatter without a source takes value or value_input"
                kb.emit(Memset(out=vt, value=float(value)))
            consts["value"] = vt
    else:
        consts["ident"] = const(_IDENT[mode] if is_float or mode in ("sum", "mean", "prod") else
                                (-2.0 ** 31 if mode == "amax" else 2.0 ** 31 - 1))
    return consts


def _emit_scatter(ctx: LoweringContext, *, dim: int, shape: tuple[int, ...], idx_strides: tuple[int, ...],
                  src_strides: tuple[int, ...] | None, mode: str, include_self: bool = True, alpha: float = 1.0,
                  value: float | None = None, value_input: int | None = None, wrap: bool = False) -> None:
    """out = self with, along ``dim``, the sources at index positions combined in.

    ``shape``: the iteration space (the index's positions; ``shape[dim]`` = J index elements per row);
    ``idx_strides`` / ``src_strides``: strides of index (input 1) and source (input 2) over it; the
    other dims address self / out at the same coordinates. ``mode``: sum, prod, amax, amin, mean, or
    set (last match wins; the source is input 2, or ``value`` / the 0-dim ``value_input``).
    """
    kb = ctx.kb
    self_m, out = ctx.call.inputs[0], ctx.call.outputs[0]
    idx_m = ctx.call.inputs[1]
    nd = max(self_m.ndim, 1)
    s_shape = self_m.shape if self_m.ndim else (1,)
    s_stride = self_m.stride if self_m.ndim else (1,)
    o_stride = out.stride if out.ndim else (1,)
    K = s_shape[dim]
    J = shape[dim]
    covered = all(shape[d] == s_shape[d] for d in range(nd) if d != dim)
    if not covered or J == 0 or prod(shape) == 0:
        copy_region(kb, ctx.inputs[0], self_m, ctx.outputs[0], out)
    if J == 0 or prod(shape) == 0 or K == 0:
        return
    self_rows = tuple(0 if d == dim else s_stride[d] for d in range(nd))
    out_rows = tuple(0 if d == dim else o_stride[d] for d in range(nd))
    src_m = ctx.call.inputs[2] if src_strides is not None else None
    metas = [idx_m, src_m or idx_m, self_m, out]
    plan = row_plan(shape, [dim], [idx_strides, src_strides or idx_strides, self_rows, out_rows],
                    [m.offset for m in metas], parts=ctx.spec.partitions)
    fst = [fs[0] if plan.free_shape else 0 for fs in plan.free_strides]
    queues(kb)
    rows_max = max(t.rows for t in plan.tiles)
    src_given = src_strides is not None
    consts = _scatter_consts(ctx, mode, src_given, rows_max, value, value_input)
    need_count = mode == "mean" or (mode != "set" and not include_self) or (mode == "set" and not src_given)
    sc = _OneHot(ctx, dim, mode, include_self, alpha, wrap, src_given, plan, fst, consts, need_count, J)
    held: list[AP] = []
    for t in plan.tiles:
        made = sc.row_tile(t)
        kb.release(*held)
        held = made
    kb.release(*held, *consts.values())


def _dim(ctx: LoweringContext, ndim: int) -> int:
    d = int(attr(ctx, "dim", 0))
    return d % ndim if ndim else 0


def _elementwise(ctx: LoweringContext, mode: str, *, src: bool = True, include_self: bool = True,
                 value=None, value_input=None) -> None:
    """scatter-style: the index and the source share positions (index.shape <= self.shape)."""
    idx = ctx.call.inputs[1]
    dim = _dim(ctx, idx.ndim)
    shape = idx.shape if idx.ndim else (1,)
    ist = idx.stride if idx.ndim else (1,)
    sst = None
    if src:
        s = ctx.call.inputs[2]
        sst = s.stride if s.ndim else (1,)
    if ctx.call.outputs[0].numel == 0:
        return
    # an index that is the same across each slice (``idx.unsqueeze(-1).expand_as(src)``) scatters
    # whole slices: index_add / index_copy / index_fill's indirect DMA
    if (idx.ndim and mode in ("sum", "set") and include_self and value_input is None
            and all(ist[d] == 0 for d in range(idx.ndim) if d != dim and shape[d] > 1)
            and _slices_by_dma(ctx, mode, dim, (shape[dim], ist[dim], idx.offset), tuple(shape), source=src,
                               value=value)):
        return
    if (idx.ndim and mode in ("sum", "set") and include_self and value_input is None
            and _elements_by_dma(ctx, mode, dim, tuple(shape), tuple(ist), sst, value)):
        return
    _emit_scatter(ctx, dim=dim, shape=shape, idx_strides=ist, src_strides=sst, mode=mode, include_self=include_self,
                  value=value, value_input=value_input)


ELEMENT_COLS = 1024   # index elements per partition whose addresses are computed at a time


def _elements_by_dma(ctx: LoweringContext, mode: str, dim: int, shape: tuple[int, ...], ist: tuple[int, ...],
                     sst: tuple[int, ...] | None, value) -> bool:
    """scatter / scatter_add with an index of its own per element, by the DMA engines' indirect scatter,
    one element per descriptor: self is copied to the output, then VectorE computes every index
    element's address (its row's offset + index x stride) and each [128, w] block of addresses is one
    DmaScatter of single-element rows (written, or added by the DMA's accumulate). A row's elements go
    in index order, so a later duplicate in a row overwrites an earlier one, as PyTorch's loop does.
    Every element pays a whole descriptor (S6's 2 KiB knee), so this beats the one-hot kernel only
    when the dim is long; the estimate decides. Returns False to leave it to the one-hot kernel."""
    kb = ctx.kb
    spec = ctx.spec
    self_m, out, idx = ctx.call.inputs[0], ctx.call.outputs[0], ctx.call.inputs[1]
    if self_m.ndim == 0 or out.ndim != len(shape):
        return False
    K, J = out.shape[dim], shape[dim]
    n = prod(shape)
    if n == 0 or K == 0:
        return False
    rows = n // J
    engines = spec.dma_engines * spec.lnc
    rate = spec.dma_effective_bytes_per_ns
    isz = out.dtype.itemsize
    dma_ns = n * spec.dma_descriptor_knee_bytes / rate / engines + 3 * out.numel * isz / (rate * engines)
    onehot_ns = -(-rows // spec.partitions) * K * J * ONEHOT_PASSES / (spec.vector_clock_hz / 1e9)
    if dma_ns >= onehot_ns:
        return False
    src_m = ctx.call.inputs[2] if sst is not None else None
    copy_region(kb, ctx.inputs[0], self_m, ctx.outputs[0], out)
    o_rows = tuple(0 if d == dim else out.stride[d] for d in range(out.ndim))
    plan = row_plan(shape, [dim], [ist, sst or ist, o_rows], [idx.offset, (src_m or idx).offset, out.offset],
                    parts=spec.partitions)
    fst = [fs[0] if plan.free_shape else 0 for fs in plan.free_strides]
    qin, _ = queues(kb)
    q_sc = kb.queue("qSyncIO3", "input")
    table = hbm(ctx.outputs[0], out.offset + out.span(), 1, [(1, 1)], out.dtype)
    vt = None
    if src_m is None:
        vt = kb.tile(spec.partitions, (min(J, ELEMENT_COLS),), out.dtype)
        kb.emit(Memset(out=vt, value=float(value)))
    held: list[AP] = []
    for t in plan.tiles:
        r = t.rows
        base = kb.tile(r, (1,), DType.int64)
        kb.emit(Iota(out=base, base=t.offsets[2], channel_multiplier=t.pstrides[2]))
        for j0 in range(0, J, ELEMENT_COLS):
            w = min(ELEMENT_COLS, J - j0)
            it = kb.tile(r, (w,), idx.dtype)
            load(kb, qin[0], ctx.inputs[1], idx.dtype, t.offsets[0] + j0 * fst[0], t.pstrides[0], r, [(fst[0], w)], it)
            addr = kb.tile(r, (w,), DType.int64)
            kb.emit(TensorScalar(inp=it, out=addr, alu0=Alu.MULTIPLY, scalar0=out.stride[dim], alu1=Alu.ADD,
                                 scalar1=base))
            made = [it, addr]
            if src_m is not None:
                st = kb.tile(r, (w,), src_m.dtype)
                load(kb, qin[1], ctx.inputs[2], src_m.dtype, t.offsets[1] + j0 * fst[1], t.pstrides[1], r,
                     [(fst[1], w)], st)
                made.append(st)
            if src_m is not None:
                src_ap = st
            else:
                assert vt is not None  # made above when there is no source
                src_ap = vt.rows(0, r).view(0, [(1, w)])
            kb.emit(DmaScatter(queue=q_sc, src=src_ap, index=addr, table=table, accumulate=mode == "sum"))
            kb.release(*held)
            held = made
        held.append(base)
    kb.release(*held, *([vt] if vt is not None else []))
    return True


def _reduce_name(ctx: LoweringContext) -> str:
    r = str(attr(ctx, "reduce", "sum"))
    if r not in _REDUCE_NAMES:
        raise NoLowering(f"scatter reduce {r!r}")
    return _REDUCE_NAMES[r]


@lowering("aten::scatter.src", "aten::scatter_.src")
def _scatter_src(ctx: LoweringContext) -> None:
    _elementwise(ctx, "set")


@lowering("aten::scatter.value", "aten::scatter_.value")
def _scatter_value(ctx: LoweringContext) -> None:
    _elementwise(ctx, "set", src=False, value=attr(ctx, "value", 0))


@lowering("aten::scatter.reduce", "aten::scatter_.reduce")
def _scatter_reduce_src(ctx: LoweringContext) -> None:
    _elementwise(ctx, _reduce_name(ctx))


@lowering("aten::scatter_add", "aten::scatter_add_")
def _scatter_add(ctx: LoweringContext) -> None:
    _elementwise(ctx, "sum")


@lowering("aten::scatter_reduce.two", "aten::scatter_reduce_.two")
def _scatter_reduce(ctx: LoweringContext) -> None:
    _elementwise(ctx, _reduce_name(ctx), include_self=bool(attr(ctx, "include_self", True)))


# --- index_add / index_copy / index_fill: whole slices along dim --------------------------------------

SLICE_MAX = 8192    # elements of one slice moved per indirect DMA row (32 KiB of FP32 per partition)
ONEHOT_PASSES = 5   # VectorE passes over each (k, j) pair of the one-hot kernel: compare, select, reduce


def _slice_dims(meta, dim: int, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """(stride, size) of ``meta``'s slice of ``shape`` (the dims but ``dim``) at one position of ``dim``, coalesced."""
    dims = [(meta.stride[d], shape[d]) for d in range(meta.ndim) if d != dim and shape[d] > 1]
    if not dims:
        return [(1, 1)]
    cshape, (st,) = coalesce(tuple(sz for _, sz in dims), [tuple(st for st, _ in dims)])
    return list(zip(st, cshape))


def _dma_beats_onehot(ctx: LoweringContext, K: int, J: int, slice_dims, rows: int) -> bool:
    """The estimate that picks the kernel, from the simulator's published costs: the indirect DMA moves
    J slices, one descriptor per contiguous run (max(bytes, 2400) / rate each, over the DMA engines,
    S5/S6), plus copying ``self``; the one-hot kernel makes ONEHOT_PASSES VectorE passes over K x J
    pairs for every 128 rows (S9: about one cycle per element and pass)."""
    spec = ctx.spec
    out = ctx.call.outputs[0]
    isz = out.dtype.itemsize
    slice_elems = prod(sz for _, sz in slice_dims)
    run = slice_dims[-1][1] if slice_dims[-1][0] == 1 else 1
    engines = spec.dma_engines * spec.lnc
    rate = spec.dma_effective_bytes_per_ns
    desc = J * (slice_elems // run)
    dma_ns = desc * max(run * isz, spec.dma_descriptor_knee_bytes) / rate / engines + 3 * out.numel * isz / (rate * engines)
    onehot_ns = -(-rows // spec.partitions) * K * J * ONEHOT_PASSES / (spec.vector_clock_hz / 1e9)
    return dma_ns < onehot_ns


def _slices_by_dma(ctx: LoweringContext, mode: str, dim: int, index: tuple[int, int, int], shape: tuple[int, ...], *,
                   source: bool, alpha: float = 1.0, value=None, value_input=None) -> bool:
    """index_add / index_copy / index_fill (and scatters whose index is the same across the slice) by
    the DMA engines' indirect scatter (DGE, S7), as the Neuron compiler moves rows by index: ``self``
    is copied to the output HBM -> HBM, then each 128 indices' slices are written (copy, fill) or
    added (the DMA's accumulate, duplicates summed) at the positions the index names. Every byte
    crosses HBM once or twice instead of K x J comparisons on VectorE.

    ``index``: (elements J, stride, offset) of the 1-D index along ``dim``; ``shape``: the slices'
    extent (``shape[dim]`` = J), the source's and the output's strides walk it. Returns False (the
    one-hot kernel runs) when the estimate favours it or the call does not fit."""
    kb = ctx.kb
    P = kb.spec.partitions
    self_m, out, idx = ctx.call.inputs[0], ctx.call.outputs[0], ctx.call.inputs[1]
    J, ist, ioff = index
    if self_m.ndim == 0 or out.numel == 0 or J == 0:
        return False
    K = out.shape[dim]
    odims = _slice_dims(out, dim, shape)
    src_m = ctx.call.inputs[2] if source else None
    sdims = _slice_dims(src_m, dim, shape) if src_m is not None else None
    if len(odims) > kb.spec.ap_max_dims or (sdims is not None and len(sdims) > kb.spec.ap_max_dims):
        return False
    if sdims is not None and [sz for _, sz in sdims] != [sz for _, sz in odims]:
        return False
    # slices longer than SLICE_MAX are cut along their innermost dim
    inner = odims[-1][1]
    if prod(sz for _, sz in odims) // inner * min(inner, SLICE_MAX) > SLICE_MAX:
        return False
    if not _dma_beats_onehot(ctx, K, J, odims, prod(sz for _, sz in odims)):
        return False
    copy_region(kb, ctx.inputs[0], self_m, ctx.outputs[0], out)
    q_idx, q_in, q_sc = kb.queue("qSyncIO1", "input"), kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO3", "input")
    cuts = [(c0, min(SLICE_MAX, inner - c0)) for c0 in range(0, inner, SLICE_MAX)]
    fill = None
    if not source:
        fill = kb.tile(P, (1,), out.dtype)
        if value_input is not None:
            vm = ctx.call.inputs[value_input]
            kb.dma(q_idx, hbm(ctx.inputs[value_input], P, 0, [(1, 1)], vm.dtype, offset=vm.offset), fill)
        else:
            assert value is not None, "a 'set' without a source takes value or value_input"
            kb.emit(Memset(out=fill, value=float(value)))
    held: list[AP] = []
    lag: list[AP] = []
    for r0 in range(0, J, P):
        rows = min(P, J - r0)
        raw = kb.tile(rows, (1,), idx.dtype)
        kb.dma(q_idx, hbm(ctx.inputs[1], rows, ist, [(1, 1)], idx.dtype, offset=ioff + r0 * ist), raw)
        fi = kb.tile(rows, (1,), F32)
        kb.copy(raw, fi)
        neg = kb.tile(rows, (1,), F32)   # index + K where index < 0
        kb.emit(TensorScalar(inp=fi, out=neg, alu0=Alu.IS_LT, scalar0=0.0, alu1=Alu.MULTIPLY, scalar1=float(K)))
        kb.emit(TensorTensor(alu=Alu.ADD, in0=fi, in1=neg, out=fi))
        it = kb.tile(rows, (1,), DType.int32)
        kb.copy(fi, it)
        made = [raw, fi, neg, it]
        for c0, w in cuts:
            shape_dims = odims[:-1] + [(odims[-1][0], w)]
            n = prod(sz for _, sz in shape_dims)
            cur = []
            if src_m is not None and sdims is not None:  # source
                sd = sdims[:-1] + [(sdims[-1][0], w)]
                st = kb.tile(rows, (n,), src_m.dtype)
                kb.dma(q_in, hbm(ctx.inputs[2], rows, src_m.stride[dim], sd, src_m.dtype,
                                 offset=src_m.offset + r0 * src_m.stride[dim] + c0 * sdims[-1][0]), st)
                cur.append(st)
                if alpha != 1.0:
                    sc = kb.tile(rows, (n,), F32)
                    kb.emit(TensorScalar(inp=st, out=sc, alu0=Alu.MULTIPLY, scalar0=float(alpha)))
                    cur.append(sc)
                    st = sc
            else:
                assert fill is not None  # made above when there is no source
                st = kb.tile(rows, (n,), out.dtype)
                kb.copy(fill.rows(0, rows).view(0, [(0, n)]), st)
                cur.append(st)
            table = hbm(ctx.outputs[0], K, out.stride[dim], shape_dims, out.dtype,
                        offset=out.offset + c0 * odims[-1][0])
            kb.emit(DmaScatter(queue=q_sc, src=st, index=it, table=table, accumulate=mode == "sum"))
            kb.release(*lag)   # the previous piece's tiles, one piece late (double buffering)
            lag = cur
        kb.release(*held)
        held = made
    kb.release(*held, *lag)
    if fill is not None:
        kb.release(fill)
    return True


def _slices(ctx: LoweringContext, mode: str, *, source: bool = True, alpha: float = 1.0, value=None,
            value_input=None) -> None:
    self_m, out = ctx.call.inputs[0], ctx.call.outputs[0]
    idx = ctx.call.inputs[1]
    nd = max(self_m.ndim, 1)
    dim = _dim(ctx, self_m.ndim)
    J = idx.shape[0] if idx.ndim else 1
    s_shape = self_m.shape if self_m.ndim else (1,)
    shape = tuple(J if d == dim else s_shape[d] for d in range(nd))
    if _slices_by_dma(ctx, mode, dim, (J, idx.stride[0] if idx.ndim else 0, idx.offset), shape, source=source,
                      alpha=alpha, value=value, value_input=value_input):
        return
    ist = tuple((idx.stride[0] if idx.ndim else 0) if d == dim else 0 for d in range(nd))
    sst = None
    if source:
        s = ctx.call.inputs[2]
        sst = s.stride if s.ndim else (1,)
    if out.numel == 0:
        return
    _emit_scatter(ctx, dim=dim, shape=shape, idx_strides=ist, src_strides=sst, mode=mode, alpha=alpha, value=value,
                  value_input=value_input, wrap=True)


@lowering("aten::index_add", "aten::index_add_")
def _index_add(ctx: LoweringContext) -> None:
    _slices(ctx, "sum", alpha=float(attr(ctx, "alpha", 1)))


@lowering("aten::index_copy", "aten::index_copy_")
def _index_copy(ctx: LoweringContext) -> None:
    _slices(ctx, "set")


@lowering("aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar")
def _index_fill_scalar(ctx: LoweringContext) -> None:
    _slices(ctx, "set", source=False, value=attr(ctx, "value", 0))


@lowering("aten::index_fill.int_Tensor", "aten::index_fill_.int_Tensor")
def _index_fill_tensor(ctx: LoweringContext) -> None:
    if ctx.call.inputs.optional(2) is None:
        _slices(ctx, "set", source=False, value=attr(ctx, "value", 0))
    else:
        _slices(ctx, "set", source=False, value_input=2)

