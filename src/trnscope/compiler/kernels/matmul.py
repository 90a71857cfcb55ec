"""Tiled matmul on TensorE and the ATen matmul family: mm, bmm, addmm, baddbmm, mv, addmv, dot.

TensorE computes ``stationary[K, M].T @ moving[K, N]`` with K on the partitions, so out = A @ B
needs A^T tiles [K, M] (stationary, LoadStationary) and B tiles [K, N] (moving, MultiplyMoving).
Each operand is loaded the cheap way for its layout (common.load): directly when the tile's free
axis is contiguous in HBM (A already a transposed view, such as nn.Linear's ``weight.t()`` as B),
with a DMA transpose when the contraction dim is the contiguous one (a row-major A), so no
transpose kernel runs and no layout is assumed.

Blocking (NKI performance guide, S4): a block of B columns (up to 2048) stays in SBUF while blocks
of A^T columns (up to 512) stream through it, both double-buffered; within a 128-row M tile each K
tile's weights are loaded once (LoadStationary) and multiplied against every 512-column slice of
the B block, accumulating in up to four PSUM banks (the previous M tile's banks stay reserved so
TensorE never waits for their evacuation). When K is too deep for SBUF the contraction is split
into chunks that accumulate into the same PSUM banks.

Epilogue: PSUM is evacuated into an output staging tile alternately by VectorE and ScalarE,
fused with addmm's ``beta * bias + alpha * (A @ B)`` (a per-partition column bias rides in
ScalarE's bias operand, a row or full bias in one VectorE tensor_tensor that reads PSUM and SBUF
together), and stored with one DMA per 128 x 2048 output tile.

A caller may hand ``emit_gemm`` a :class:`GemmEpilogue` (the graph compiler does, for element-wise
chains after a matmul): it receives each finished [128 x block] output tile, either still in the
PSUM banks (its first instructions evacuate them) or in the staging tile, and the product itself
is stored only when something outside the epilogue reads it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from ...hw import HardwareSpec, get_spec
from ...isa import AP, Act, Activation, Alu, DType, Engine, LoadStationary, MultiplyMoving, Program, TensorScalar, \
    TensorTensor, hbm
from ..builder import AllocationError, KernelBuilder
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from .common import F32, ceil_div, load

P = 128
MOVING_MAX = 512
PSUM_BANKS_PER_BLOCK = 4
RESERVED = 16 * 1024  # bytes per partition left for bias rows and the kernels around a matmul


@dataclass(frozen=True)
class Mat:
    """A matrix view in HBM: element (i, j) is at ``offset + i * rs + j * cs`` of tensor ``tensor``."""
    tensor: int
    dtype: DType
    offset: int
    rs: int
    cs: int

    def at(self, i: int, j: int) -> int:
        return self.offset + i * self.rs + j * self.cs

    def t(self) -> "Mat":
        return Mat(self.tensor, self.dtype, self.offset, self.cs, self.rs)


def matmul_program(K: int, M: int, N: int, dtype="bfloat16", out_dtype=None, spec: HardwareSpec | None = None,
                   name: str | None = None) -> Program:
    """A stand-alone program: out[M, N] = lhsT[K, M].T @ rhs[K, N] (the NKI tiled-matmul layout)."""
    spec = spec or get_spec()
    dt = DType.parse(dtype)
    odt = DType.parse(out_dtype or dtype)
    prog = Program(name or f"matmul_{K}x{M}x{N}_{dt.value}", target=spec.name)
    lhsT = prog.tensor("lhsT", (K, M), dt, "input")
    rhs = prog.tensor("rhs", (K, N), dt, "input")
    out = prog.tensor("out", (M, N), odt, "output")
    with prog.origin("aten::mm"):
        emit_matmul(KernelBuilder(prog, spec), lhsT, rhs, out, K, M, N, dt, odt)
    return prog


def emit_matmul(b: KernelBuilder, lhsT: int, rhs: int, out: int, K: int, M: int, N: int, dt: DType,
                odt: DType) -> None:
    """out[M, N] = lhsT[K, M].T @ rhs[K, N], all row-major HBM tensors."""
    emit_gemm(b, Mat(lhsT, dt, 0, 1, M), Mat(rhs, dt, 0, N, 1), Mat(out, odt, 0, N, 1), M, K, N)


@dataclass(frozen=True)
class Blocking:
    nb: int   # B block columns
    mb: int   # A^T block columns (M rows of the output)
    kc: int   # K tiles per chunk

    def chunks(self, kt_n: int) -> list[tuple[int, int]]:
        return [(c, min(c + self.kc, kt_n)) for c in range(0, kt_n, self.kc)]


def plan_blocks(K: int, M: int, N: int, itemsize: int, out_itemsize: int, spec: HardwareSpec,
                bias_bytes_per_col: int = 0, wide_lhs: bool = False, min_nb: int = 0) -> Blocking:
    """The largest blocks whose double-buffered A^T and B blocks and output staging fit SBUF.

    ``wide_lhs``: A^T arrives by DMA transpose, whose descriptors are rows of the A^T block, so a
    wider block (up to 2048 columns, >= 2 KiB rows) keeps that transfer efficient.
    ``bias_bytes_per_col``: SBUF per output column for the bias rows or an epilogue's tiles.
    ``min_nb``: a block must hold this many columns (an epilogue reducing whole rows); raises
    :class:`AllocationError` when that cannot fit.
    """
    kt = ceil_div(K, P)
    capacity = spec.sbuf_bytes_per_partition - RESERVED
    nb = min(ceil_div(N, MOVING_MAX) * MOVING_MAX, MOVING_MAX * PSUM_BANKS_PER_BLOCK)
    if min_nb > nb:
        raise AllocationError(f"a block of {min_nb} columns exceeds {PSUM_BANKS_PER_BLOCK} PSUM banks")
    floor_nb = max(MOVING_MAX, min_nb)
    mb = min(ceil_div(M, P) * P, (16 if wide_lhs else 4) * P)
    kc = kt

    def need(nb: int, mb: int, kc: int) -> int:
        return kc * (2 * nb + 2 * mb) * itemsize + 2 * nb * out_itemsize + nb * bias_bytes_per_col

    while need(nb, mb, kc) > capacity and (nb > floor_nb or mb > P):
        if mb > P and (mb >= nb or nb <= floor_nb):
            mb //= 2
        else:
            nb = max(floor_nb, nb // 2)
    while kc > 1 and need(nb, mb, kc) > capacity:
        kc = ceil_div(kc, 2)
    if need(nb, mb, kc) > capacity:
        raise AllocationError(f"matmul blocks of {nb} columns need {need(nb, mb, kc)} bytes per partition; "
                              f"{capacity} available")
    if kc < kt:
        mb = P  # chunked contraction: one M tile's banks stay open across the chunks
    return Blocking(nb, mb, kc)


class GemmEpilogue(Protocol):
    """What :func:`emit_gemm` asks of an epilogue fused into its PSUM evacuation.

    ``psum_direct``: the epilogue's first instructions read the PSUM banks themselves, so the gemm
    does not evacuate (it still does when there is a bias, an alpha or a stored product).
    ``min_cols``: every block must hold this many columns (whole rows for a row reduction).
    ``bytes_per_col``: SBUF bytes per partition per block column the epilogue's tiles take.
    """
    psum_direct: bool
    min_cols: int
    bytes_per_col: int

    def begin_block(self, b: KernelBuilder, n0: int, ncols: int) -> None: ...

    def tile(self, b: KernelBuilder, m0: int, mp: int, n0: int, ncols: int, value: AP | list[AP],
             slices: list[tuple[int, int]]) -> None:
        """Output rows m0..m0+mp-1, columns n0..n0+ncols-1: ``value`` is the list of PSUM banks (one
        per 512-column slice in ``slices``) when ``psum_direct`` held, else the [mp, ncols] staging tile."""


@dataclass(frozen=True)
class Bias:
    """addmm's ``beta * bias``: a Mat over [M, N] whose zero strides say how it broadcasts."""
    mat: Mat
    beta: float = 1.0

    @property
    def kind(self) -> str:
        if self.mat.rs == 0 and self.mat.cs == 0:
            return "scalar"
        if self.mat.cs == 0:
            return "col"
        if self.mat.rs == 0:
            return "row"
        return "full"


def gemm_blocking(K: int, M: int, N: int, dt: DType, odt: DType, spec: HardwareSpec, A: Mat,
                  bias: Bias | None = None, epilogue: GemmEpilogue | None = None) -> Blocking:
    """The blocking :func:`emit_gemm` uses; raises :class:`AllocationError` when the epilogue cannot fit."""
    kind = bias.kind if bias is not None else None
    per_col = 4 * (2 if kind == "full" else 1) if kind in ("row", "full") else 0
    if epilogue is not None:
        per_col += epilogue.bytes_per_col
    return plan_blocks(K, M, N, dt.itemsize, odt.itemsize, spec, bias_bytes_per_col=per_col,
                       wide_lhs=A.cs == 1 and A.rs != 1, min_nb=epilogue.min_cols if epilogue else 0)


class GemmBuffers:
    """The double-buffered operand blocks, staging tiles and held PSUM banks of a gemm.

    A sequence of same-shaped gemms (a bmm's batches) shares one set, so the next batch's loads go
    to the other buffer and overlap this batch's matmuls and evacuation; fresh buffers per batch
    would land on the same SBUF bytes and wait for the previous batch to finish with them.
    """

    def __init__(self, b: KernelBuilder, blk: Blocking, dt: DType, odt: DType, staging: bool = True):
        self.blk, self.dt, self.odt = blk, dt, odt
        # one allocation per K tile: the builder tracks dependencies per allocation, so K tiles loaded
        # into one big tile would serialize their DMAs (each waiting for the previous one's write)
        self.rhs = [[b.tile(P, (blk.nb,), dt) for _ in range(blk.kc)] for _ in range(2)]
        self.lhs = [[b.tile(P, (blk.mb,), dt) for _ in range(blk.kc)] for _ in range(2)]
        self.stages = [b.tile(P, (blk.nb,), odt) for _ in range(2)] if staging else []
        self.turns = {"rhs": 0, "lhs": 0, "stage": 0, "evac": 0}
        self.held: list[AP] = []  # the previous M tile's PSUM banks

    def turn(self, what: str) -> int:
        """Which of the two buffers (or engines, for evacuation) is next."""
        t = self.turns[what]
        self.turns[what] = t + 1
        return t % 2

    def release(self, b: KernelBuilder) -> None:
        b.release(*self.held, *self.rhs[0], *self.rhs[1], *self.lhs[0], *self.lhs[1], *self.stages)
        self.held = []


def emit_gemm(b: KernelBuilder, A: Mat, B: Mat, out: Mat | None, M: int, K: int, N: int, bias: Bias | None = None,
              alpha: float = 1.0, blocking: Blocking | None = None, epilogue: GemmEpilogue | None = None,
              out_dtype: DType | None = None, buffers: GemmBuffers | None = None) -> None:
    """out[M, N] = alpha * A[M, K] @ B[K, N] (+ beta * bias), every operand any strided view.

    With an ``epilogue``, each output tile is handed to it after the product is complete; ``out``
    may then be None (nothing outside the epilogue reads the product; ``out_dtype`` names its dtype).
    ``buffers`` (made with the same blocking) are shared with other gemms of a sequence.
    """
    spec = b.spec
    dt = A.dtype
    odt = out.dtype if out is not None else (out_dtype or F32)
    if M == 0 or N == 0:
        return
    if K == 0:
        if epilogue is not None:
            raise ValueError("an epilogue needs a product: K must be positive")
        _fill_bias_only(b, out, M, N, bias)
        return
    kt_n = ceil_div(K, P)
    kind = bias.kind if bias is not None else None
    blk = blocking or gemm_blocking(K, M, N, dt, odt, spec, A, bias, epilogue)
    # the epilogue reads PSUM itself unless the product must first be finished or kept
    direct = epilogue is not None and epilogue.psum_direct and out is None and bias is None and alpha == 1.0
    chunks = blk.chunks(kt_n)
    multi = len(chunks) > 1
    q_rhs = b.queue("qSyncIO0", "input")
    q_lhs = b.queue("qSyncIO1", "input")
    q_out = b.queue("qSyncIO2", "output")
    own = buffers is None
    bufs = buffers or GemmBuffers(b, blk, dt, odt, staging=not direct)
    if bufs.blk != blk or bufs.dt != dt or bufs.odt != odt:
        raise ValueError("shared gemm buffers were made for another blocking or dtype")
    rhs_bufs, lhs_bufs, stages = bufs.rhs, bufs.lhs, bufs.stages

    def load_rhs(buf: list[AP], n0: int, ncols: int, kt0: int, kt1: int) -> None:
        for kt in range(kt0, kt1):
            k0, kp = kt * P, min(P, K - kt * P)
            load(b, q_rhs, B.tensor, dt, B.at(k0, n0), B.rs, kp, [(B.cs, ncols)],
                 buf[kt - kt0].view(0, [(1, ncols)], partitions=kp))

    def load_lhs(buf: list[AP], m0: int, mcols: int, kt0: int, kt1: int) -> None:
        # A^T[k, m] = A[m, k]: partitions walk k (stride A.cs), the free axis walks m (stride A.rs)
        for kt in range(kt0, kt1):
            k0, kp = kt * P, min(P, K - kt * P)
            load(b, q_lhs, A.tensor, dt, A.at(m0, k0), A.cs, kp, [(A.rs, mcols)],
                 buf[kt - kt0].view(0, [(1, mcols)], partitions=kp))

    for n0 in range(0, N, blk.nb):
        ncols = min(blk.nb, N - n0)
        slices = [(s0, min(MOVING_MAX, ncols - s0)) for s0 in range(0, ncols, MOVING_MAX)]
        if epilogue is not None:
            epilogue.begin_block(b, n0, ncols)
        rhs = None
        if not multi:
            rhs = rhs_bufs[bufs.turn("rhs")]
            load_rhs(rhs, n0, ncols, 0, kt_n)
        row_bias = _load_row_bias(b, bias, n0, ncols, min(P, M)) if kind == "row" else None
        for m0 in range(0, M, blk.mb):
            mcols = min(blk.mb, M - m0)
            mtiles = [(mt0, min(P, mcols - mt0)) for mt0 in range(0, mcols, P)]
            banks: dict[int, list[AP]] = {}
            for c, (kt0, kt1) in enumerate(chunks):
                if multi:
                    rhs = rhs_bufs[bufs.turn("rhs")]
                    load_rhs(rhs, n0, ncols, kt0, kt1)
                lhs = lhs_bufs[bufs.turn("lhs")]
                load_lhs(lhs, m0, mcols, kt0, kt1)
                for mt0, mp in mtiles:
                    if c == 0:
                        banks[mt0] = [b.psum_tile(mp, (w,)) for _, w in slices]
                        b.release(*bufs.held)
                        bufs.held = banks[mt0]
                    for kt in range(kt0, kt1):
                        kp = min(P, K - kt * P)
                        b.emit(LoadStationary(src=lhs[kt - kt0].view(mt0, [(1, mp)], partitions=kp)))
                        for (s0, w), bank in zip(slices, banks[mt0]):
                            b.emit(MultiplyMoving(moving=rhs[kt - kt0].view(s0, [(1, w)], partitions=kp),
                                                  dst=bank, accumulate=c > 0 or kt > kt0))
                    if c < len(chunks) - 1:
                        continue
                    if direct:
                        epilogue.tile(b, m0 + mt0, mp, n0, ncols, banks[mt0], slices)
                        continue
                    stage = stages[bufs.turn("stage")]
                    m_abs = m0 + mt0
                    col_bias = _load_col_bias(b, bias, m_abs, mp) if kind in ("col", "scalar") else None
                    full_bias = _load_full_bias(b, bias, m_abs, mp, n0, ncols) if kind == "full" else None
                    for (s0, w), bank in zip(slices, banks[mt0]):
                        st = stage.view(s0, [(1, w)], partitions=mp)
                        if row_bias is not None:
                            bias_ap = row_bias.view(s0, [(1, w)], partitions=mp)
                        elif full_bias is not None:
                            bias_ap = full_bias.view(s0, [(1, w)], partitions=mp)
                        else:
                            bias_ap = None
                        _evacuate(b, bank, st, alpha, col_bias, bias_ap, bufs.turn("evac"))
                    if out is not None:
                        b.dma(q_out, stage.view(0, [(1, ncols)], partitions=mp),
                              hbm(out.tensor, mp, out.rs, [(out.cs, ncols)], odt, offset=out.at(m_abs, n0)))
                    if epilogue is not None:
                        epilogue.tile(b, m_abs, mp, n0, ncols, stage.view(0, [(1, ncols)], partitions=mp), slices)
                    extra = [t for t in (col_bias, full_bias) if t is not None]
                    b.release(*extra)
        if row_bias is not None:
            b.release(row_bias)
    if own:
        bufs.release(b)


def _evacuate(b: KernelBuilder, bank: AP, st: AP, alpha: float, col_bias: AP | None, bias_ap: AP | None,
              turn: int) -> None:
    """PSUM -> SBUF staging, fused with alpha and the bias; alternates VectorE and ScalarE."""
    if bias_ap is not None:
        if alpha == 1.0:
            b.emit(TensorTensor(alu=Alu.ADD, in0=bank, in1=bias_ap, out=st))
        else:
            tmp = b.tile(st.partitions, (st.free_size,), F32)
            b.emit(Activation(func=Act.COPY, inp=bank, out=tmp, scale=float(alpha)))
            b.emit(TensorTensor(alu=Alu.ADD, in0=tmp, in1=bias_ap, out=st))
            b.release(tmp)
        return
    if col_bias is not None:
        if turn % 2:
            b.emit(Activation(func=Act.COPY, inp=bank, out=st, scale=float(alpha), bias=col_bias))
        else:
            b.emit(TensorScalar(inp=bank, out=st, alu0=Alu.MULTIPLY, scalar0=float(alpha), alu1=Alu.ADD,
                                scalar1=col_bias))
        return
    if alpha != 1.0:
        if turn % 2:
            b.emit(Activation(func=Act.COPY, inp=bank, out=st, scale=float(alpha)))
        else:
            b.emit(TensorScalar(inp=bank, out=st, alu0=Alu.MULTIPLY, scalar0=float(alpha)))
        return
    if turn % 2:
        b.emit(Activation(func=Act.COPY, inp=bank, out=st))
    else:
        b.copy(bank, st, on=Engine.VECTOR)


def _scale(b: KernelBuilder, t: AP, beta: float) -> None:
    if beta != 1.0:
        b.emit(TensorScalar(inp=t, out=t, alu0=Alu.MULTIPLY, scalar0=float(beta)))


def _load_row_bias(b: KernelBuilder, bias: Bias, n0: int, ncols: int, rows: int) -> AP:
    """A bias row (the same for every M) broadcast to the partitions once per B block, in FP32."""
    q = b.queue("qSyncIO1", "input")
    t = b.tile(P, (ncols,), F32)
    view = t.view(0, [(1, ncols)], partitions=rows)
    b.dma(q, hbm(bias.mat.tensor, rows, 0, [(bias.mat.cs, ncols)], bias.mat.dtype, offset=bias.mat.at(0, n0)), view)
    _scale(b, view, bias.beta)
    return t


def _load_col_bias(b: KernelBuilder, bias: Bias, m0: int, mp: int) -> AP:
    q = b.queue("qSyncIO1", "input")
    t = b.tile(mp, (1,), F32)
    b.dma(q, hbm(bias.mat.tensor, mp, bias.mat.rs, [(1, 1)], bias.mat.dtype, offset=bias.mat.at(m0, 0)), t)
    _scale(b, t, bias.beta)
    return t


def _load_full_bias(b: KernelBuilder, bias: Bias, m0: int, mp: int, n0: int, ncols: int) -> AP:
    q = b.queue("qSyncIO1", "input")
    t = b.tile(mp, (ncols,), F32)
    load(b, q, bias.mat.tensor, bias.mat.dtype, bias.mat.at(m0, n0), bias.mat.rs, mp, [(bias.mat.cs, ncols)], t)
    _scale(b, t, bias.beta)
    return t


def _fill_bias_only(b: KernelBuilder, out: Mat, M: int, N: int, bias: Bias | None) -> None:
    """K = 0: the product is zero; the output is beta * bias (or zeros)."""
    from ...isa import Memset

    q_out = b.queue("qSyncIO2", "output")
    for m0 in range(0, M, P):
        mp = min(P, M - m0)
        for n0 in range(0, N, 2048):
            w = min(2048, N - n0)
            t = b.tile(mp, (w,), F32)
            if bias is None:
                b.emit(Memset(out=t, value=0.0))
            else:
                load(b, b.queue("qSyncIO1", "input"), bias.mat.tensor, bias.mat.dtype, bias.mat.at(m0, n0),
                     bias.mat.rs, mp, [(bias.mat.cs, w)], t)
                _scale(b, t, bias.beta)
            o = b.tile(mp, (w,), out.dtype)
            b.copy(t, o)
            b.dma(q_out, o, hbm(out.tensor, mp, out.rs, [(out.cs, w)], out.dtype, offset=out.at(m0, n0)))
            b.release(t, o)


# --- ATen lowerings -------------------------------------------------------------------------------------

def _mat(tensor: int, meta: TensorMeta, batch: int = 0) -> Mat:
    """The 2-D matrix of batch ``batch`` of a [.., R, C] view (a 1-D view is a [1, C] row)."""
    if meta.ndim == 1:
        return Mat(tensor, meta.dtype, meta.offset, 0, meta.stride[0])
    off = meta.offset + (batch * meta.stride[0] if meta.ndim == 3 else 0)
    return Mat(tensor, meta.dtype, off, meta.stride[-2], meta.stride[-1])


def _bias_mat(tensor: int, meta: TensorMeta, M: int, N: int, batch: int = 0) -> Mat:
    """A bias broadcast to [M, N] (of batch ``batch`` when it has 3 dims)."""
    shape, stride = list(meta.shape), list(meta.stride)
    while len(shape) < 2:
        shape.insert(0, 1)
        stride.insert(0, 0)
    off = meta.offset
    if len(shape) == 3:
        off += batch * stride[0] if shape[0] != 1 else 0
        shape, stride = shape[1:], stride[1:]
    rs = stride[0] if shape[0] != 1 else 0
    cs = stride[1] if shape[1] != 1 else 0
    return Mat(tensor, meta.dtype, off, rs, cs)


@contextmanager
def batch_buffers(b: KernelBuilder, K: int, M: int, N: int, A: Mat, odt: DType, batches: int,
                  bias: Bias | None = None, epilogue: GemmEpilogue | None = None, staging: bool = True):
    """Buffers shared by the ``batches`` gemms of a bmm (None when there is nothing to share)."""
    if batches < 2 or M == 0 or N == 0 or K == 0:
        yield None
        return
    blk = gemm_blocking(K, M, N, A.dtype, odt, b.spec, A, bias, epilogue)
    bufs = GemmBuffers(b, blk, A.dtype, odt, staging=staging)
    try:
        yield bufs
    finally:
        bufs.release(b)


def _alpha_beta(ctx: LoweringContext) -> tuple[float, float]:
    a = ctx.call.attr("alpha")
    be = ctx.call.attr("beta")
    return float(1 if a is None else a), float(1 if be is None else be)


@lowering("aten::mm")
def _mm(ctx: LoweringContext) -> None:
    a, bm = ctx.call.inputs[0], ctx.call.inputs[1]
    out = ctx.call.outputs[0]
    M, K = a.shape
    N = bm.shape[1]
    emit_gemm(ctx.kb, _mat(ctx.inputs[0], a), _mat(ctx.inputs[1], bm), _mat(ctx.outputs[0], out), M, K, N)


@lowering("aten::addmm", "aten::addmm_")
def _addmm(ctx: LoweringContext) -> None:
    bias_m, a, bm = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.inputs[2]
    out = ctx.call.outputs[0]
    M, K = a.shape
    N = bm.shape[1]
    alpha, beta = _alpha_beta(ctx)
    bias = Bias(_bias_mat(ctx.inputs[0], bias_m, M, N), beta) if beta != 0 else None
    emit_gemm(ctx.kb, _mat(ctx.inputs[1], a), _mat(ctx.inputs[2], bm), _mat(ctx.outputs[0], out), M, K, N,
              bias=bias, alpha=alpha)


@lowering("aten::bmm")
def _bmm(ctx: LoweringContext) -> None:
    a, bm = ctx.call.inputs[0], ctx.call.inputs[1]
    out = ctx.call.outputs[0]
    nb, M, K = a.shape
    N = bm.shape[2]
    with batch_buffers(ctx.kb, K, M, N, _mat(ctx.inputs[0], a), out.dtype, nb) as bufs:
        for i in range(nb):
            emit_gemm(ctx.kb, _mat(ctx.inputs[0], a, i), _mat(ctx.inputs[1], bm, i), _mat(ctx.outputs[0], out, i),
                      M, K, N, blocking=bufs and bufs.blk, buffers=bufs)


@lowering("aten::baddbmm", "aten::baddbmm_")
def _baddbmm(ctx: LoweringContext) -> None:
    bias_m, a, bm = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.inputs[2]
    out = ctx.call.outputs[0]
    nb, M, K = a.shape
    N = bm.shape[2]
    alpha, beta = _alpha_beta(ctx)
    first = Bias(_bias_mat(ctx.inputs[0], bias_m, M, N, 0), beta) if beta != 0 else None
    with batch_buffers(ctx.kb, K, M, N, _mat(ctx.inputs[1], a), out.dtype, nb, first) as bufs:
        for i in range(nb):
            bias = Bias(_bias_mat(ctx.inputs[0], bias_m, M, N, i), beta) if beta != 0 else None
            emit_gemm(ctx.kb, _mat(ctx.inputs[1], a, i), _mat(ctx.inputs[2], bm, i), _mat(ctx.outputs[0], out, i),
                      M, K, N, bias=bias, alpha=alpha, blocking=bufs and bufs.blk, buffers=bufs)


@lowering("aten::mv")
def _mv(ctx: LoweringContext) -> None:
    a, v = ctx.call.inputs[0], ctx.call.inputs[1]
    out = ctx.call.outputs[0]
    M, K = a.shape
    # out[M] as a [M, 1] column; v[K] as a [K, 1] matrix
    vec = Mat(ctx.inputs[1], v.dtype, v.offset, v.stride[0], 0)
    emit_gemm(ctx.kb, _mat(ctx.inputs[0], a), vec, Mat(ctx.outputs[0], out.dtype, out.offset, out.stride[0], 0),
              M, K, 1)


@lowering("aten::addmv", "aten::addmv_")
def _addmv(ctx: LoweringContext) -> None:
    bias_m, a, v = ctx.call.inputs[0], ctx.call.inputs[1], ctx.call.inputs[2]
    out = ctx.call.outputs[0]
    M, K = a.shape
    alpha, beta = _alpha_beta(ctx)
    bias = None
    if beta != 0:
        rs = bias_m.stride[0] if bias_m.ndim == 1 and bias_m.shape[0] != 1 else 0
        bias = Bias(Mat(ctx.inputs[0], bias_m.dtype, bias_m.offset, rs, 0), beta)
    vec = Mat(ctx.inputs[2], v.dtype, v.offset, v.stride[0], 0)
    emit_gemm(ctx.kb, _mat(ctx.inputs[1], a), vec, Mat(ctx.outputs[0], out.dtype, out.offset, out.stride[0], 0),
              M, K, 1, bias=bias, alpha=alpha)


@lowering("aten::dot")
def _dot(ctx: LoweringContext) -> None:
    x, y = ctx.call.inputs[0], ctx.call.inputs[1]
    out = ctx.call.outputs[0]
    K = x.shape[0]
    emit_gemm(ctx.kb, Mat(ctx.inputs[0], x.dtype, x.offset, 0, x.stride[0]),
              Mat(ctx.inputs[1], y.dtype, y.offset, y.stride[0], 0), Mat(ctx.outputs[0], out.dtype, out.offset, 0, 0),
              1, K, 1)
