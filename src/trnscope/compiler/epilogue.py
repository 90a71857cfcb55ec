"""Matmul epilogues: the element-wise ops, row reductions, softmax and layout copies that follow a
matmul in an FX graph, applied while its output tiles leave PSUM, so the product and every
intermediate stay on chip and only values read outside the epilogue are stored.

The graph compiler claims, for each mm/addmm/bmm, the nodes that consume its output (through views
that keep its [rows x N] layout) and whose other operands are ready before the matmul runs (graph
inputs, or values computed earlier). ``emit_gemm`` then hands every finished [128 x block] output
tile to :class:`GraphEpilogue`, which:

- evacuates PSUM with the first op itself (ScalarE ACTIVATE reading PSUM for a unary op, VectorE
  tensor_tensor reading PSUM and an SBUF tile for a binary one: the cheap mixed-space form, S9),
  one instruction per 512-column bank, when nothing needs the raw product;
- loads each outside operand once per tile, laid out like the output tile: a full tensor as the
  same [128 x block] window, a per-row value as a [128 x 1] column, a bias row or a weight
  broadcast to the partitions once per column block, a scalar once;
- computes the rest on whole [128 x block] SBUF tiles, reductions over whole rows (the block then
  spans the row: N <= 4 PSUM banks);
- stores only the values used outside, each with one DMA per tile; a contiguous copy of a permuted
  view (``transpose(1, 2).contiguous()`` after attention) is stored straight into its layout.

Tiles of one output tile are released one tile later, so the next tile's loads and evacuation
overlap this tile's compute.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
import torch.fx as fx

from ..isa import AP, Act, Activation, Alu, DType, TensorReduce, TensorScalar
from .builder import AllocationError
from .kernels.common import F32, load, store
from .kernels.matmul import (
    MOVING_MAX, PSUM_BANKS_PER_BLOCK, Bias, Mat, _bias_mat, _mat, batch_buffers, emit_gemm, gemm_blocking,
)
from .fxvalues import required_tensor as _tensor
from .fxvalues import tensor_of as _val
from .meta import TensorMeta
from .opcall import device_dtype, meta_of
from .tiling import P

if TYPE_CHECKING:
    from ..hw import HardwareSpec
    from ..isa import Program
    from .builder import KernelBuilder
    from .graph import Value


class EpilogueHost(Protocol):
    """What an epilogue needs of the graph compiler it runs in (``graph.GraphCompiler``): the
    builder and Program it emits into, the values already in HBM, the graph's outputs, and the
    fused group's member emission that epilogue members share."""

    spec: HardwareSpec
    program: Program
    kb: KernelBuilder
    values: dict[fx.Node, Value]
    graph_outputs: set[fx.Node]
    kernels: int
    fused: int

    def materialized(self, node: fx.Node) -> Value:
        """The HBM value of ``node`` (an error when it is not computed yet)."""
        ...

    def square_feeding_reduce(self, nodes) -> set[fx.Node]:
        """Squares whose only user is a row sum/mean among ``nodes`` (one ACTIVATE does both)."""
        ...

    def emit_member(self, n: fx.Node, h: int, rows: int, cols: int, tiles: dict, squares: set,
                    out: AP | None = None, temps: list | None = None) -> AP:
        """One member of a fused group on a [rows x cols] tile."""
        ...

aten = torch.ops.aten

GEMM_OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default}
# views that may keep a value's [rows x N] layout (checked per node)
ROW_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
             aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.alias.default, aten.detach.default}
SOFTMAX = {aten._softmax.default: False, aten._log_softmax.default: True}
# a layout copy is planned from an index map of the copied value; beyond this many elements the
# planning costs more host memory than it is worth
MAX_LAYOUT_ELEMENTS = 1 << 23
FULL_ROW_MAX = MOVING_MAX * PSUM_BANKS_PER_BLOCK


def _stripped(shape) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    i = 0
    while i < len(shape) - 1 and shape[i] == 1:
        i += 1
    return shape[i:]


def partition_start_ok(start: int, count: int) -> bool:
    """hardware.md 2.3: a tile of >64 partitions starts at 0, 33-64 at 0/64, <=32 at 0/32/64/96."""
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start in (0, 32, 64, 96)


def row_runs(rowoff: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Split a tile's row offsets into (first row, rows, offset, row stride) runs of one stride."""
    runs = []
    i, n = 0, len(rowoff)
    while i < n:
        if i == n - 1:
            runs.append((i, 1, int(rowoff[i]), 0))
            break
        stride = int(rowoff[i + 1] - rowoff[i])
        j = i + 1
        while j + 1 < n and int(rowoff[j + 1] - rowoff[j]) == stride:
            j += 1
        runs.append((i, j - i + 1, int(rowoff[i]), stride))
        i = j + 1
    return runs


@dataclass
class Placement:
    """Where group element (row r, column c) lives in an HBM tensor: ``rowoff[r] + c * cs``."""
    rowoff: np.ndarray
    cs: int

    @property
    def uniform(self) -> bool:
        """Every row at the same place: a bias row, a weight or a scalar (loaded once, broadcast)."""
        return bool((self.rowoff == self.rowoff[0]).all())


def broadcast_placement(meta: TensorMeta, out_shape: tuple[int, ...]) -> Placement | None:
    """An operand of shape ``meta.shape`` broadcast to a member's ``out_shape``, over its flat rows."""
    nd = len(out_shape)
    if meta.ndim > nd:
        return None
    shape = (1,) * (nd - meta.ndim) + tuple(meta.shape)
    stride = (0,) * (nd - meta.ndim) + tuple(meta.stride)
    strides = []
    for s, st, o in zip(shape, stride, out_shape):
        if s not in (1, o):
            return None
        strides.append(0 if s == 1 else st)
    if nd == 0:
        return Placement(np.array([meta.offset], dtype=np.int64), 0)
    lead = out_shape[:-1]
    rowoff = np.full(lead, meta.offset, dtype=np.int64) if lead else np.array(meta.offset, dtype=np.int64)
    for d, (size, st) in enumerate(zip(lead, strides[:-1])):
        if st:
            shape_d = [1] * len(lead)
            shape_d[d] = size
            rowoff = rowoff + np.arange(size, dtype=np.int64).reshape(shape_d) * st
    return Placement(rowoff.reshape(-1), strides[-1] if out_shape[-1] > 1 else 0)


def layout_placement(src: torch.Tensor, base: torch.Tensor, R: int, N: int) -> Placement | None:
    """Where a contiguous copy of view ``src`` (of the contiguous [R x N] value ``base``) puts each
    element of ``base``: inverts the view's index map. None if it is not a row-affine permutation."""
    numel = R * N
    if src.numel() != numel or numel > MAX_LAYOUT_ELEMENTS:
        return None
    ids = np.lib.stride_tricks.as_strided(
        np.arange(numel, dtype=np.int64)[src.storage_offset() - base.storage_offset():],
        tuple(src.shape), tuple(8 * s for s in src.stride()), writeable=False).reshape(-1)
    if ids.min() < 0 or ids.max() >= numel or np.bincount(ids, minlength=numel).max() != 1:
        return None
    pos = np.empty(numel, dtype=np.int64)
    pos[ids] = np.arange(numel, dtype=np.int64)
    grid = pos.reshape(R, N)
    cs = int(grid[0, 1] - grid[0, 0]) if N > 1 else 1
    if N > 1 and not (grid == grid[:, :1] + cs * np.arange(N, dtype=np.int64)).all():
        return None
    return Placement(grid[:, 0].copy(), cs)


@dataclass
class EpiloguePlan:
    mm: fx.Node
    batches: int
    M: int
    N: int
    K: int
    nodes: list[fx.Node] = field(default_factory=list)        # everything claimed, graph order
    tile_src: dict = field(default_factory=dict)               # node -> node whose tile holds its elements
    value_of: dict = field(default_factory=dict)               # node -> node whose HBM tensor holds it
    width: dict = field(default_factory=dict)                  # tile node -> N (full rows) or 1 (per-row value)
    members: list[fx.Node] = field(default_factory=list)       # nodes that compute, graph order
    layouts: dict = field(default_factory=dict)                # layout copy -> (Placement, copied value node)
    externals: list[fx.Node] = field(default_factory=list)
    needed: list[fx.Node] = field(default_factory=list)        # values stored to HBM (members, copies, mm)
    full_rows: bool = False
    psum_direct: bool = True
    bytes_per_col: int = 0

    @property
    def R(self) -> int:
        return self.batches * self.M

    def tiles(self):
        """(first group row, rows) of every output tile emit_gemm produces."""
        for i in range(self.batches):
            for m0 in range(0, self.M, P):
                yield i * self.M + m0, min(P, self.M - m0)


def _runs_ok(pl: Placement, plan: EpiloguePlan) -> bool:
    for r0, rows in plan.tiles():
        for i0, n, _, _ in row_runs(pl.rowoff[r0:r0 + rows]):
            if not partition_start_ok(i0, n):
                return False
    return True


# --- matching --------------------------------------------------------------------------------------

@dataclass
class _Matcher:
    """The growing epilogue of one matmul: the group of nodes claimed so far (the matmul, its
    views, copies and members) and the frontier of their users, visited in graph order."""

    plan: EpiloguePlan
    pos: dict                    # node -> position in the graph
    eff: dict                    # node -> position from which its value is ready
    claimed: set                 # nodes other epilogues hold
    group: set = field(default_factory=set)
    heap: list = field(default_factory=list)

    @property
    def N(self) -> int:
        return self.plan.N

    def width_of(self, t: torch.Tensor) -> int | None:
        """N for a value with the output's [rows x N] elements, 1 for a per-row value, else None."""
        N, R = self.N, self.plan.R
        if t.dim() and t.shape[-1] == N and t.numel() == R * N:
            return N
        if N > 1 and t.dim() and t.shape[-1] == 1 and t.numel() == R:
            return 1
        return None

    def operand_fits(self, x: fx.Node, out_shape) -> bool:
        """A group value read by a member of shape ``out_shape``: the same elements per (row, col)."""
        plan = self.plan
        src = plan.tile_src.get(x)
        if src is None:
            return False
        sx = _stripped(_tensor(x).shape)
        if plan.width[src] == self.N:
            return sx == _stripped(out_shape)
        return out_shape[-1] in (self.N, 1) and sx == _stripped(tuple(out_shape[:-1]) + (1,))

    def external_ok(self, x: fx.Node, out_shape) -> bool:
        """An operand from outside the group: ready before the matmul runs, and loadable per tile."""
        t = _val(x)
        if t is None or self.eff.get(x, -1) >= self.pos[self.plan.mm]:
            return False
        pl = broadcast_placement(meta_of(t), tuple(out_shape))
        return pl is not None and (pl.uniform or _runs_ok(pl, self.plan))

    def _row_reduce_fits(self, n: fx.Node, t: torch.Tensor, w: int) -> bool:
        """A keepdim reduction over the last dim of a full-width group value, rows short enough to
        fit the block."""
        plan, N = self.plan, self.N
        src = n.args[0]
        dims = n.args[1] if len(n.args) > 1 else None
        keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        st = _val(src)
        return bool(isinstance(src, fx.Node) and src in self.group and st is not None and dims and len(dims) == 1
                    and dims[0] % st.dim() == st.dim() - 1 and keep and w == 1 and N <= FULL_ROW_MAX
                    and plan.tile_src.get(src) is not None and plan.width[plan.tile_src[src]] == N
                    and _stripped(st.shape) == _stripped(tuple(t.shape[:-1]) + (N,)))

    def _softmax_fits(self, n: fx.Node, t: torch.Tensor, w: int) -> bool:
        src = n.args[0]
        st = _val(src)
        return (isinstance(src, fx.Node) and src in self.group and st is not None and n.args[1] % st.dim() ==
                st.dim() - 1 and not n.args[2] and w == self.N and self.N <= FULL_ROW_MAX
                and self.operand_fits(src, tuple(t.shape)))

    def member_kind(self, n: fx.Node) -> str | None:
        """'reduce', 'softmax' or 'elementwise' when ``n`` can compute on the output tiles, else None."""
        from .graph import ROW_REDUCE, _elementwise_kind

        t = _val(n)
        # values are stored dense; a member PyTorch would lay out otherwise stays on the normal path
        if t is None or not t.dtype.is_floating_point or t.numel() == 0 or not t.is_contiguous():
            return None
        w = self.width_of(t)
        if w is None:
            return None
        if n.target in ROW_REDUCE:
            return "reduce" if self._row_reduce_fits(n, t, w) else None
        if n.target in SOFTMAX:
            return "softmax" if self._softmax_fits(n, t, w) else None
        if _elementwise_kind(n) is None:
            return None
        inside = False
        for x in n.args:
            if not isinstance(x, fx.Node):
                continue
            if x in self.group:
                if not self.operand_fits(x, tuple(t.shape)):
                    return None
                inside = True
            elif not self.external_ok(x, tuple(t.shape)):
                return None
        return "elementwise" if inside else None

    def keeps_layout(self, n: fx.Node, src: fx.Node, t: torch.Tensor) -> bool:
        """A row view of a group value that keeps its tile's [rows x N] order (same storage, both dense)."""
        plan = self.plan
        return plan.tile_src.get(src) is not None and _tensor(src).is_contiguous() and t.is_contiguous() and \
            t.storage_offset() == _tensor(src).storage_offset() and self.width_of(t) == plan.width[plan.tile_src[src]]

    def join_view(self, n: fx.Node, src: fx.Node, keeps_tile: bool) -> None:
        """A view of a group value: it shares the value's HBM tensor, and its tile when it keeps the layout."""
        plan = self.plan
        plan.value_of[n] = plan.value_of[src]
        # else a view kept only for a layout copy or for users outside
        plan.tile_src[n] = plan.tile_src[src] if keeps_tile else None

    def join_layout_copy(self, n: fx.Node, src: fx.Node) -> bool:
        """A contiguous copy of a permuted view of a full-width tile: stored straight into its layout."""
        plan = self.plan
        base = plan.value_of[src]
        tile = plan.tile_src.get(base)
        if tile is None or plan.width[tile] != self.N:
            return False
        pl = layout_placement(_val(src), _val(base), plan.R, self.N)
        if pl is None or not _runs_ok(pl, plan):
            return False
        plan.value_of[n] = n
        identity = pl.cs == 1 and (pl.rowoff == np.arange(plan.R) * self.N).all()
        plan.tile_src[n] = tile if identity else None
        if not identity:
            plan.layouts[n] = (pl, tile)
        return True

    def join_member(self, n: fx.Node, t: torch.Tensor | None) -> bool:
        kind = self.member_kind(n)
        if kind is None:
            return False
        assert t is not None  # member_kind found a value
        plan = self.plan
        plan.value_of[n] = n
        plan.tile_src[n] = n
        plan.width[n] = self.width_of(t)
        plan.members.append(n)
        if kind != "elementwise":
            plan.full_rows = True
        for x in n.args:
            if isinstance(x, fx.Node) and x not in self.group and x not in plan.externals:
                plan.externals.append(x)
        return True

    def join(self, n: fx.Node) -> bool:
        """Claim ``n`` for the epilogue when it can run on the output tiles."""
        from .graph import VIEW_OPS

        src = n.args[0] if n.args else None
        t = _val(n)
        if not (isinstance(src, fx.Node) and src in self.group):
            return self.join_member(n, t)
        if n.target in ROW_VIEWS and t is not None:
            self.join_view(n, src, self.keeps_layout(n, src, t))
            return True
        if n.target in VIEW_OPS:
            self.join_view(n, src, False)
            return True
        if n.target is aten.clone.default and t is not None and t.is_contiguous() and set(n.kwargs) <= {"memory_format"}:
            return self.join_layout_copy(n, src)
        return self.join_member(n, t)

    def grow(self) -> None:
        """Visit the matmul's users, and the users of every node joined, in graph order."""
        mm, plan = self.plan.mm, self.plan
        self.group.add(mm)
        self.heap = [(self.pos[u], id(u), u) for u in mm.users if u in self.pos]
        heapq.heapify(self.heap)
        while self.heap:
            _, _, n = heapq.heappop(self.heap)
            if n in self.group or n in self.claimed or n.op != "call_function":
                continue
            if self.join(n):
                self.group.add(n)
                plan.nodes.append(n)
                for u in n.users:
                    if u in self.pos and u not in self.group:
                        heapq.heappush(self.heap, (self.pos[u], id(u), u))

    def finish(self, graph_outputs: set) -> None:
        """Order the claimed nodes, and decide which values are stored and whether the product is
        read straight from PSUM."""
        from .graph import ROW_REDUCE

        plan, mm, pos = self.plan, self.plan.mm, self.pos
        plan.nodes.sort(key=lambda x: pos[x])
        plan.members.sort(key=lambda x: pos[x])
        # values whose HBM copy someone outside reads
        outside = set()
        for x in [mm, *plan.nodes]:
            if x in graph_outputs or any(u not in self.group for u in x.users):
                outside.add(plan.value_of[x])
        plan.needed = [x for x in [mm, *plan.nodes] if x in outside]
        # the product is read straight from PSUM only by element-wise members
        readers = [x for x in plan.nodes if any(plan.tile_src.get(a) is mm for a in x.args if isinstance(a, fx.Node))
                   and x in plan.members]
        plan.psum_direct = mm not in outside and all(x.target not in ROW_REDUCE and x.target not in SOFTMAX
                                                     for x in readers) \
            and not any(tile is mm for _, tile in plan.layouts.values())
        plan.bytes_per_col = _bytes_per_col(plan)


def match_epilogue(gc: EpilogueHost, mm: fx.Node, pos: dict, eff: dict, claimed: set) -> EpiloguePlan | None:
    """The epilogue of matmul node ``mm``: the nodes after it that can run on its output tiles."""
    v = _val(mm)
    if mm.target not in GEMM_OPS or v is None or not v.dtype.is_floating_point or v.numel() == 0:
        return None
    a = _val(mm.args[1] if mm.target is aten.addmm.default else mm.args[0])
    b = _val(mm.args[2] if mm.target is aten.addmm.default else mm.args[1])
    if a is None or b is None or a.dtype != b.dtype or a.shape[-1] == 0:
        return None
    N = v.shape[-1]
    plan = EpiloguePlan(mm, v.shape[0] if v.dim() == 3 else 1, v.shape[-2], N, a.shape[-1])
    plan.tile_src[mm] = mm
    plan.value_of[mm] = mm
    plan.width[mm] = N
    matcher = _Matcher(plan, pos, eff, claimed)
    matcher.grow()
    if not plan.members and not plan.layouts:
        return None
    matcher.finish(gc.graph_outputs)
    # the epilogue's tiles must fit beside the matmul's own
    try:
        A = meta_of(a)
        gemm_blocking(plan.K, plan.M, N, DType.parse(device_dtype(a.dtype)), device_dtype(v.dtype), gc.spec,
                      Mat(0, A.dtype, 0, A.stride[-2] if A.ndim > 1 else 0, A.stride[-1]),
                      epilogue=_Sizing(plan))
    except AllocationError:
        return None
    return plan


@dataclass
class _Sizing:
    """The planning face of an epilogue (what gemm_blocking reads) before any tile exists."""
    plan: EpiloguePlan

    @property
    def psum_direct(self) -> bool:
        return self.plan.psum_direct

    @property
    def min_cols(self) -> int:
        return self.plan.N if self.plan.full_rows else 0

    @property
    def bytes_per_col(self) -> int:
        return self.plan.bytes_per_col


def _bytes_per_col(plan: EpiloguePlan) -> int:
    """SBUF per partition per output column: full-width tiles twice (double buffered), broadcast
    rows once, fp32 temporaries (a squared row, softmax's exponentials, an alpha-scaled operand)."""
    from .graph import ROW_REDUCE

    total = 0
    for n in plan.members:
        if plan.width[n] == plan.N:
            isz = device_dtype(_tensor(n).dtype).itemsize
            total += 2 * isz + (2 * 4 if n.target in SOFTMAX or n.kwargs.get("alpha", 1) != 1 else 0)
        elif n.target in ROW_REDUCE:
            total += 4  # the squared row of a square+sum, released at once
    for x in plan.externals:
        t = _tensor(x)
        pl = broadcast_placement(meta_of(t), (plan.R, plan.N))
        isz = device_dtype(t.dtype).itemsize
        total += isz if pl is None or pl.uniform else 2 * isz
    return total


# --- emission --------------------------------------------------------------------------------------

class _Tiles(dict):
    """Tiles of one output tile by graph node; views and copies resolve to the node whose tile they share."""

    def __init__(self, plan: EpiloguePlan, base: dict):
        super().__init__(base)
        self.plan = plan

    def __missing__(self, key):
        src = self.plan.tile_src.get(key)
        if src is None or src is key or not dict.__contains__(self, src):
            raise KeyError(key)
        return dict.__getitem__(self, src)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default


class GraphEpilogue:
    """Emits a planned epilogue for the output tiles of one graph matmul (see module docstring)."""

    def __init__(self, gc: EpilogueHost, plan: EpiloguePlan):
        self.gc, self.plan = gc, plan
        self.kb = gc.kb
        self.psum_direct = plan.psum_direct
        self.min_cols = plan.N if plan.full_rows else 0
        self.bytes_per_col = plan.bytes_per_col
        self.row_base = 0
        self.q_in = self.kb.queue("qSyncIO3", "input")
        self.q_out = self.kb.queue("qSyncIO2", "output")
        self.ext: dict[fx.Node, tuple[Placement, int, DType]] = {}
        for x in plan.externals:
            val = gc.materialized(x)
            user = next(m for m in plan.members if x in m.args)
            pl = broadcast_placement(val.meta, tuple(_tensor(user).shape))
            if pl is None or not (pl.uniform or _runs_ok(pl, plan)):
                raise AllocationError(f"{x.name}: operand layout differs from its planned one")
            self.ext[x] = (pl, val.hbm, val.meta.dtype)
        self.stores: dict[fx.Node, tuple[Placement, int, DType]] = {}
        for x in plan.needed:
            if x is plan.mm:
                continue
            val = gc.values[x]
            if x in plan.layouts:
                self.stores[x] = (plan.layouts[x][0], val.hbm, val.meta.dtype)
            else:
                w = plan.width[plan.tile_src[x]]
                self.stores[x] = (Placement(np.arange(plan.R, dtype=np.int64) * w, 1 if w > 1 else 0), val.hbm,
                                  val.meta.dtype)
        squares = gc.square_feeding_reduce(plan.members)
        # a square folded into its sum reads its input once more: not possible from PSUM banks
        self.squares = {s for s in squares if not (plan.psum_direct and plan.tile_src.get(s.args[0]) is plan.mm)}
        self.block: tuple[int, int] | None = None
        self.broadcast: dict[fx.Node, AP] = {}
        self.held: list[AP] = []

    # --- GemmEpilogue -------------------------------------------------------------------------------
    def begin_block(self, b, n0: int, ncols: int) -> None:
        """Operands the same for every row (bias rows, weights, scalars): once per column block."""
        if self.block == (n0, ncols):
            return
        b.release(*self.broadcast.values())
        self.broadcast = {}
        self.block = (n0, ncols)
        rows = min(P, self.plan.M)
        for x, (pl, tensor, dt) in self.ext.items():
            if not pl.uniform:
                continue
            cols = ncols if pl.cs else 1
            t = b.tile(P, (cols,), dt)
            dims = [(pl.cs, ncols)] if pl.cs else [(1, 1)]
            b.dma(self.q_in, _hbm(tensor, rows, 0, dims, dt, int(pl.rowoff[0]) + n0 * pl.cs), t.rows(0, rows))
            self.broadcast[x] = t

    def tile(self, b, m0: int, mp: int, n0: int, ncols: int, value, slices) -> None:
        from .graph import member_label

        plan, gc = self.plan, self.gc
        r0 = self.row_base + m0
        fresh: list[AP] = []
        base: dict = {plan.mm: value}
        for x, (pl, tensor, dt) in self.ext.items():
            if pl.uniform:
                t = self.broadcast[x]
                base[x] = t.view(0, [(1, t.free_size)], partitions=mp)
                continue
            cols = ncols if pl.cs else 1
            t = b.tile(mp, (cols,), dt)
            fresh.append(t)
            dims = [(pl.cs, ncols)] if pl.cs else [(1, 1)]
            for i0, n, off, ps in row_runs(pl.rowoff[r0:r0 + mp]):
                load(b, self.q_in, tensor, dt, off + n0 * pl.cs, ps, n, dims, t.rows(i0, n))
            base[x] = t
        tiles = _Tiles(plan, base)
        for n in plan.members:
            if n in self.squares:
                continue
            dt = device_dtype(_tensor(n).dtype)
            width = ncols if plan.width[n] == plan.N else 1
            out = b.tile(mp, (width,), dt)
            fresh.append(out)
            with gc.program.origin(member_label(n)):
                self._member(b, n, mp, ncols, width, tiles, out, slices, fresh)
            tiles[n] = out
        for x, (pl, tensor, dt) in self.stores.items():
            t = tiles[x] if x not in plan.layouts else tiles[plan.layouts[x][1]]
            cols = ncols if plan.width[plan.tile_src.get(x) or plan.layouts[x][1]] == plan.N else 1
            dims = [(pl.cs, cols)] if cols > 1 else [(1, 1)]
            for i0, n, off, ps in row_runs(pl.rowoff[r0:r0 + mp]):
                store(b, self.q_out, t.rows(i0, n), tensor, dt, off + n0 * pl.cs, ps, n, dims)
        b.release(*self.held)
        self.held = fresh

    def close(self) -> None:
        self.kb.release(*self.held, *self.broadcast.values())
        self.held, self.broadcast = [], {}

    # --- members ------------------------------------------------------------------------------------
    def _member(self, b, n: fx.Node, mp: int, ncols: int, width: int, tiles: _Tiles, out: AP, slices,
                temps: list) -> None:
        plan, gc = self.plan, self.gc
        if n.target in SOFTMAX:
            _softmax(b, tiles[n.args[0]], out, SOFTMAX[n.target], temps)
            return
        args = [a for a in n.args if isinstance(a, fx.Node)]
        banks = [a for a in args if isinstance(tiles.get(a), list)]
        if not banks:
            gc.emit_member(n, plan.N, mp, ncols, tiles, self.squares, out=out, temps=temps)
            return
        # the first op reads the product in PSUM, one bank (512 columns) at a time
        for k, (s0, w) in enumerate(slices):
            view = {}
            for a in args:
                t = tiles.get(a)
                if isinstance(t, list):
                    view[a] = t[k]
                elif t.free_size == ncols and ncols > 1:
                    view[a] = t.view(s0, [(1, w)], partitions=mp)
                else:
                    view[a] = t
            gc.emit_member(n, plan.N, mp, w, view, self.squares, out=out.view(s0, [(1, w)], partitions=mp),
                            temps=temps)


def _hbm(tensor: int, rows: int, pstride: int, dims, dt: DType, offset: int) -> AP:
    from ..isa import hbm

    return hbm(tensor, rows, pstride, dims, dt, offset=offset)


def _softmax(b, x: AP, out: AP, log: bool, temps: list) -> None:
    """NKI's softmax recipe on a whole-row tile: VectorE negated max, ScalarE exp(x - max) with
    add-accumulation, VectorE divide (log-softmax: one two-op tensor_scalar)."""
    rows, cols = x.partitions, x.free_size
    nmax = b.tile(rows, (1,), F32)
    total = b.tile(rows, (1,), F32)
    temps += [nmax, total]
    b.emit(TensorReduce(alu=Alu.MAX, inp=x, out=nmax, negate=True))
    if log:
        junk = b.tile(rows, (cols,), F32)
        lse = b.tile(rows, (1,), F32)
        temps += [junk, lse]
        b.emit(Activation(func=Act.EXP, inp=x, out=junk, bias=nmax, accum_out=total))
        b.emit(Activation(func=Act.LOG, inp=total, out=lse))
        b.emit(TensorScalar(inp=x, out=out, alu0=Alu.ADD, scalar0=nmax, alu1=Alu.SUBTRACT, scalar1=lse))
        return
    e = out if out.dtype == F32 else b.tile(rows, (cols,), F32)
    if e is not out:
        temps.append(e)
    b.emit(Activation(func=Act.EXP, inp=x, out=e, bias=nmax, accum_out=total))
    b.emit(TensorScalar(inp=e, out=out, alu0=Alu.DIVIDE, scalar0=total))


# --- the matmul itself -----------------------------------------------------------------------------

def emit_matmul_with_epilogue(gc: EpilogueHost, plan: EpiloguePlan) -> None:
    """Bind the stored values, then emit the gemm (per batch for bmm) with the epilogue attached."""
    from .graph import Value, member_label

    mm = plan.mm
    for x in plan.needed:
        t = _tensor(x)
        meta = TensorMeta.contiguous(tuple(t.shape), device_dtype(t.dtype))
        gc.values[x] = Value(meta.bind(gc.program, f"t_{x.name}", "scratch"), meta)
    epi = GraphEpilogue(gc, plan)
    addmm = mm.target is aten.addmm.default
    a_node, b_node = (mm.args[1], mm.args[2]) if addmm else (mm.args[0], mm.args[1])
    A, B = gc.materialized(a_node), gc.materialized(b_node)
    out = gc.values.get(mm) if mm in plan.needed else None
    alpha = float(mm.kwargs.get("alpha", 1)) if addmm else 1.0
    beta = float(mm.kwargs.get("beta", 1)) if addmm else 0.0
    bias = None
    if addmm and beta != 0:
        bv = gc.materialized(mm.args[0])
        bias = Bias(_bias_mat(bv.hbm, bv.meta, plan.M, plan.N), beta)
    # staging tiles (for a bias, an alpha or a layout copy) round like the eager product does
    odt = out.meta.dtype if out is not None else device_dtype(_tensor(mm).dtype)
    # emit_gemm evacuates into staging tiles unless the epilogue reads the banks itself
    staging = not (plan.psum_direct and out is None and bias is None and alpha == 1.0)
    with gc.program.origin(member_label(mm)), batch_buffers(
            gc.kb, plan.K, plan.M, plan.N, _mat(A.hbm, A.meta), odt, plan.batches, bias, epi, staging) as bufs:
        for i in range(plan.batches):
            epi.row_base = i * plan.M
            emit_gemm(gc.kb, _mat(A.hbm, A.meta, i), _mat(B.hbm, B.meta, i),
                      _mat(out.hbm, out.meta, i) if out is not None else None, plan.M, plan.K, plan.N,
                      bias=bias, alpha=alpha, epilogue=epi, out_dtype=odt, blocking=bufs and bufs.blk,
                      buffers=bufs)
    epi.close()
    gc.kernels += 1
    gc.fused += len(plan.members) + len(plan.layouts)
