"""Tiled matmul on TensorE and the ATen matmul family: mm, bmm, addmm, baddbmm, mv, addmv, dot.

TensorE computes ``stationary[K, M].T @ moving[K, N]`` with K on the partitions, so out = A @ B
needs A^T tiles [K, M] (stationary, LoadStationary) and B tiles [K, N] (moving, MultiplyMoving).
Each operand is loaded the cheap way for its layout (common.load): directly when the tile's free
axis is contiguous in HBM (A already a transposed view, such as nn.Linear's ``weight.t()`` as B),
with a DMA transpose when the contraction dim is the contiguous one (a row-major A), so no
transpose kernel runs and no layout is assumed.

Blocking (the NKI matmul tutorial's blocked kernel; docs/cost-model.md, "matmul blocking"): an
output block of ``mb`` rows x ``nb`` columns (``nb`` up to half of PSUM) is computed K chunk by K
chunk. A chunk's A^T and B tiles are double-buffered (the next chunk loads while this one
multiplies); within a 128-row M tile each K tile's weights are loaded once (LoadStationary) and
multiplied against every 512-column slice of the block, accumulating in PSUM banks that rotate
through all of PSUM, so TensorE never waits for an evacuation. The chunks' partial products are
summed in an FP32 accumulator in SBUF; with a single chunk the B block instead stays in SBUF for
every M block of its columns. Block sizes and the chunk depth come from the target spec and the
cost model (:func:`plan_blocks`), not from constants. FP32 operands are first cast to BF16 as the
compiler's auto-cast setting says (:mod:`..precision`).

Epilogue: PSUM is evacuated into an output staging tile alternately by VectorE and ScalarE,
fused with addmm's ``beta * bias + alpha * (A @ B)`` (a per-partition column bias rides in
ScalarE's bias operand, a row or full bias in one VectorE tensor_tensor that reads PSUM and SBUF
together; with several chunks and alpha = 1 the bias joins the first chunk instead), and stored
with one DMA per M tile of the block.

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

# The epilogue module's planning constants (one 512-FP32 PSUM bank per slice, four banks per block);
# the gemm itself reads the target spec's partitions, moving free size and PSUM banks.
MOVING_MAX = 512
PSUM_BANKS_PER_BLOCK = 4
RESERVED = 16 * 1024  # bytes per partition left for bias rows and the kernels around a matmul
MB_MAX_TILES = 16     # output block rows: up to 16 M tiles (2048 rows) share one B chunk
# DMA transpose reaches 90% of copy throughput loading from HBM (S2; isa.DMA_TRANSPOSE_EFFICIENCY)
DMA_TRANSPOSE_LOAD = 0.9


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
    """out[M, N] = lhsT[K, M].T @ rhs[K, N], all row-major HBM tensors (operands as they are: no auto-cast)."""
    emit_gemm(b, Mat(lhsT, dt, 0, 1, M), Mat(rhs, dt, 0, N, 1), Mat(out, odt, 0, N, 1), M, K, N, auto_cast=False)


@dataclass(frozen=True)
class Blocking:
    """One output block is ``mb`` rows x ``nb`` columns; the contraction runs in chunks of ``kc`` K tiles.

    ``kt``: K tiles in all (0: unknown, taken from K when the gemm runs). With one chunk the B block
    stays in SBUF for every M block of its columns; with several, each chunk's product is added
    into an FP32 accumulator in SBUF (the NKI matmul tutorial's blocked kernel), so neither operand
    block has to hold the whole contraction.
    """
    nb: int   # output block columns (B block)
    mb: int   # output block rows (A^T block columns)
    kc: int   # K tiles per chunk
    kt: int = 0

    def chunks(self, kt_n: int) -> list[tuple[int, int]]:
        return [(c, min(c + self.kc, kt_n)) for c in range(0, kt_n, self.kc)]

    def multi(self, kt_n: int | None = None) -> bool:
        return self.kc < (kt_n if kt_n is not None else self.kt)


@dataclass(frozen=True)
class _Shape:
    """What the blocking estimate needs of one gemm: sizes, element sizes, operand layouts, the spec."""
    K: int
    M: int
    N: int
    itemsize: int
    out_itemsize: int
    spec: HardwareSpec
    a_transposed: bool   # A^T tiles arrive by DMA transpose (a row-major A)
    b_transposed: bool   # B tiles arrive by DMA transpose (B = W.t() of a row-major W)
    batches: int = 1     # gemms sharing the buffers (a bmm's): their loads overlap, one fill in all
    bias_kind: str | None = None   # Bias.kind: a row or full bias is added by VectorE on the way out
    bias_itemsize: int = 0         # bytes per element of a full bias as its tiles are loaded


def _tile_ns(nbytes: int, spec: HardwareSpec, transposed: bool) -> float:
    """DMA engine time of one descriptor (docs/cost-model.md, DMA): max(bytes, knee) / rate."""
    ns = max(nbytes, spec.dma_descriptor_knee_bytes) / spec.dma_effective_bytes_per_ns
    return ns / DMA_TRANSPOSE_LOAD if transposed else ns


def estimate_gemm_ns(sh: _Shape, nb: int, mb: int, kc: int) -> tuple[float, int, float]:
    """(estimated device time, SBUF bytes per partition, DMA engine time) of the blocked gemm, from the published costs
    the simulator uses: TensorE per matmul instruction, DMA per descriptor spread over the DMA
    engines, PSUM evacuation per bank on VectorE/ScalarE; the busiest runs throughout, the first
    chunk's loads show before it (fill). Only to rank blockings; the simulator gives the time."""
    spec = sh.spec
    P_, mt = spec.partitions, spec.gemm_stationary_fmax
    kt = ceil_div(sh.K, P_)
    multi = kc < kt
    nblk_n, nblk_m = ceil_div(sh.N, nb), ceil_div(sh.M, mb)
    nchunks = ceil_div(kt, kc)
    mtiles = ceil_div(sh.M, mt)
    slices = ceil_div(sh.N, spec.gemm_moving_fmax)  # blocks are whole multiples of a slice
    # TensorE: every (K tile, M tile, 512-column slice) is one MultiplyMoving of ~slice width cycles
    mm_cycles = max(spec.mm_init_latency_cycles, min(sh.N, spec.gemm_moving_fmax))
    te = kt * mtiles * slices * mm_cycles / spec.tensor_clock_hz * 1e9
    # DMA: A^T rows of the M block, B rows of the N block, output rows of the N block
    a_desc = kt * P_ * nblk_n * nblk_m
    b_desc = kt * P_ * nblk_n * (nblk_m if multi else 1)
    mcols, ncols = min(mb, sh.M), min(nb, sh.N)
    dma = (a_desc * _tile_ns(mcols * sh.itemsize, spec, sh.a_transposed)
           + b_desc * _tile_ns(ncols * sh.itemsize, spec, sh.b_transposed)
           + sh.M * nblk_n * _tile_ns(ncols * sh.out_itemsize, spec, False)) / spec.dma_engines
    # evacuation: one instruction per (M tile, slice, chunk); the first chunk's on ScalarE, the rest
    # (accumulation into SBUF, the last one into the output tile) on VectorE. A row or full bias
    # is a second tensor, which only VectorE's tensor_tensor adds: every evacuation that carries it
    # (the first chunk's with several, else the only one) moves to VectorE.
    per = max(spec.min_ii_cycles, min(sh.N, spec.gemm_moving_fmax)) + spec.dependent_overhead_cycles
    evac = mtiles * slices
    if sh.bias_kind in ("row", "full"):
        act_share, vec_share = 0.0, float(nchunks if multi else 1)
    else:
        act_share, vec_share = (1.0, float(nchunks - 1)) if multi else (0.5, 0.5)
    act = evac * per / spec.scalar_clock_hz * 1e9 * act_share
    vec = evac * per / spec.vector_clock_hz * 1e9 * vec_share
    if sh.bias_kind == "full":
        # one bias tile per (M tile, N block): a descriptor per output row of the block
        dma += sh.M * nblk_n * _tile_ns(ncols * sh.bias_itemsize, spec, False) / spec.dma_engines
    fill_bytes = kc * P_ * (mcols + ncols) * sh.itemsize
    fill = 2 * spec.dma_fixed_latency_ns + fill_bytes / (spec.dma_effective_bytes_per_ns * spec.dma_engines)
    need = (2 * kc * (nb + mb) * sh.itemsize + max(2, ceil_div(mb, mt)) * nb * sh.out_itemsize
            + (ceil_div(mb, mt) * nb * F32.itemsize if multi else 0))
    if sh.bias_kind == "full":
        need += 2 * ceil_div(mb, mt) * nb * sh.bias_itemsize   # GemmBuffers.bias: two blocks' tiles
    # the gemms of a sequence run back to back on shared buffers: the busiest engine's work repeats,
    # the first chunk's loads show once
    return sh.batches * max(te, dma, act, vec) + fill, need, dma * sh.batches


def plan_blocks(K: int, M: int, N: int, itemsize: int, out_itemsize: int, spec: HardwareSpec,
                bias_bytes_per_col: int = 0, wide_lhs: bool = False, min_nb: int = 0,
                b_transposed: bool = False, batches: int = 1, bias_kind: str | None = None,
                bias_itemsize: int = 0) -> Blocking:
    """The blocking with the lowest estimated time (:func:`estimate_gemm_ns`) whose double-buffered
    A^T and B chunks, output staging and FP32 accumulators fit SBUF, and whose M tile's banks leave
    half of PSUM to the tiles being evacuated.

    ``wide_lhs``: A^T arrives by DMA transpose (a row-major A); its descriptors are rows of the A^T
    block, so wider blocks make them longer. ``bias_bytes_per_col``: SBUF per output column for the
    bias rows or an epilogue's tiles. ``min_nb``: a block must hold this many columns (an epilogue
    reducing whole rows); raises :class:`AllocationError` when that cannot fit. ``batches``: the
    number of same-shaped gemms that will share the buffers; ``bias_kind`` / ``bias_itemsize``: the
    fused bias (:class:`Bias`), which decides which engine evacuates and adds its loads.
    """
    P_, mt, mv = spec.partitions, spec.gemm_stationary_fmax, spec.gemm_moving_fmax
    kt = ceil_div(K, P_)
    capacity = spec.sbuf_bytes_per_partition - RESERVED
    nb_max = mv * max(1, spec.psum_banks // 2)
    if min_nb > nb_max:
        raise AllocationError(f"a block of {min_nb} columns exceeds {spec.psum_banks // 2} PSUM banks "
                              f"(half of PSUM: the other half holds the tiles being evacuated)")
    sh = _Shape(K, M, N, itemsize, out_itemsize, spec, wide_lhs, b_transposed, max(1, batches), bias_kind,
                bias_itemsize)
    nbs = [w for w in range(mv, min(nb_max, ceil_div(N, mv) * mv) + 1, mv) if w >= min_nb] or [nb_max]
    mbs = list(range(mt, min(MB_MAX_TILES * mt, ceil_div(M, mt) * mt) + 1, mt))
    kcs = sorted({kt} | {c for c in (1, 2, 4, 8, 16, 32, 64) if c < kt})
    best = None
    for nb in nbs:
        for mb in mbs:
            for kc in kcs:
                est, need, dma = estimate_gemm_ns(sh, nb, mb, kc)
                need += nb * bias_bytes_per_col
                if need > capacity:
                    continue
                # estimates equal to the microsecond go to the blocking that leaves the DMA engines
                # most slack (they serve the stores and the kernels around too), then to less SBUF
                key = (round(est / 1000), round(dma / 1000), need)
                if best is None or key < best[0]:
                    best = (key, Blocking(nb, mb, kc, kt))
    if best is None:
        need = estimate_gemm_ns(sh, nbs[0], mt, 1)[1] + nbs[0] * bias_bytes_per_col
        raise AllocationError(f"matmul blocks of {nbs[0]} columns need {need} bytes per partition; "
                              f"{capacity} available")
    return best[1]


class EpilogueSizing(Protocol):
    """What :func:`gemm_blocking` reads of an epilogue fused into the gemm's PSUM evacuation.

    ``psum_direct``: the epilogue's first instructions read the PSUM banks themselves, so the gemm
    does not evacuate (it still does when there is a bias, an alpha, a stored product or a
    contraction in several chunks).
    ``min_cols``: every block must hold this many columns (whole rows for a row reduction).
    ``bytes_per_col``: SBUF bytes per partition per block column the epilogue's tiles take.
    """
    @property
    def psum_direct(self) -> bool: ...

    @property
    def min_cols(self) -> int: ...

    @property
    def bytes_per_col(self) -> int: ...


class GemmEpilogue(EpilogueSizing, Protocol):
    """What :func:`emit_gemm` asks of an epilogue (its sizing, then its instructions per block)."""

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
                  bias: Bias | None = None, epilogue: EpilogueSizing | None = None, B: Mat | None = None,
                  batches: int = 1) -> Blocking:
    """The blocking :func:`emit_gemm` uses (for ``batches`` gemms sharing buffers); raises
    :class:`AllocationError` when the epilogue cannot fit."""
    kind = bias.kind if bias is not None else None
    full_size = _full_bias_dtype(bias).itemsize if bias is not None and kind == "full" else 0
    # a row bias: one FP32 row per block (a full one's tiles depend on the block's rows: the estimate
    # counts them)
    per_col = F32.itemsize if kind == "row" else 0
    if epilogue is not None:
        per_col += epilogue.bytes_per_col
    b_t = B is not None and B.rs == 1 and B.cs != 1
    return plan_blocks(K, M, N, dt.itemsize, odt.itemsize, spec, bias_bytes_per_col=per_col,
                       wide_lhs=A.cs == 1 and A.rs != 1, min_nb=epilogue.min_cols if epilogue else 0,
                       b_transposed=b_t, batches=batches, bias_kind=kind, bias_itemsize=full_size)


def _stage_count(blk: Blocking, mt: int) -> int:
    return max(2, ceil_div(blk.mb, mt))


class GemmBuffers:
    """The double-buffered operand chunks, staging tiles, FP32 accumulators and held PSUM banks of a gemm.

    A sequence of same-shaped gemms (a bmm's batches) shares one set, so the next batch's loads go
    to the other buffer and overlap this batch's matmuls and evacuation; fresh buffers per batch
    would land on the same SBUF bytes and wait for the previous batch to finish with them.
    """

    def __init__(self, b: KernelBuilder, blk: Blocking, dt: DType, odt: DType, staging: bool = True,
                 bias_dt: DType | None = None):
        self.blk, self.dt, self.odt = blk, dt, odt
        P_ = b.spec.partitions
        multi = blk.multi()
        # one allocation per K tile: the builder tracks dependencies per allocation, so K tiles loaded
        # into one big tile would serialize their DMAs (each waiting for the previous one's write)
        self.rhs = [[b.tile(P_, (blk.nb,), dt) for _ in range(blk.kc)] for _ in range(2)]
        self.lhs = [[b.tile(P_, (blk.mb,), dt) for _ in range(blk.kc)] for _ in range(2)]
        # a contraction in chunks is finished in SBUF, so it always needs somewhere to put the result;
        # one staging tile per M tile of a block, so finishing a block never waits for its own stores
        # (which queue on the DMA engines behind the next chunk's loads)
        mt = b.spec.gemm_stationary_fmax
        self.stages = [b.tile(P_, (blk.nb,), odt) for _ in range(_stage_count(blk, mt))] if staging or multi else []
        self.acc = [b.tile(P_, (blk.nb,), F32) for _ in range(ceil_div(blk.mb, mt))] if multi else []
        # a full bias: its tiles for every M tile of a block, loaded when the block starts so they are
        # in SBUF by the time its products leave PSUM; two sets, the next block's loading meanwhile
        self.bias = [[b.tile(P_, (blk.nb,), bias_dt) for _ in range(ceil_div(blk.mb, mt))]
                     for _ in range(2)] if bias_dt is not None else []
        self.turns = {"rhs": 0, "lhs": 0, "stage": 0, "evac": 0, "bias": 0}
        # PSUM bank sets of the M tiles still being evacuated, oldest first: half of PSUM accumulates
        # while the other half drains, so TensorE never waits for an evacuation
        banks = ceil_div(blk.nb, b.spec.gemm_moving_fmax)
        self.depth = max(2, b.spec.psum_banks // max(1, banks))
        self.held: list[list[AP]] = []

    def turn(self, what: str, n: int = 2) -> int:
        """Which of the ``n`` buffers (two, or the two engines for evacuation) is next."""
        t = self.turns[what]
        self.turns[what] = t + 1
        return t % n

    def banks(self, b: KernelBuilder, mp: int, slices: list[tuple[int, int]]) -> list[AP]:
        """Fresh PSUM banks for one M tile; the oldest held set goes back first when PSUM is full."""
        if len(self.held) >= self.depth:
            b.release(*self.held.pop(0))
        new = [b.psum_tile(mp, (w,)) for _, w in slices]
        self.held.append(new)
        return new

    def release(self, b: KernelBuilder) -> None:
        b.release(*(t for s in self.held for t in s), *self.rhs[0], *self.rhs[1], *self.lhs[0], *self.lhs[1],
                  *self.stages, *self.acc, *(t for s in self.bias for t in s))
        self.held = []


def emit_gemm(b: KernelBuilder, A: Mat, B: Mat, out: Mat | None, M: int, K: int, N: int, bias: Bias | None = None,
              alpha: float = 1.0, blocking: Blocking | None = None, epilogue: GemmEpilogue | None = None,
              out_dtype: DType | None = None, buffers: GemmBuffers | None = None, auto_cast: bool = True) -> None:
    """out[M, N] = alpha * A[M, K] @ B[K, N] (+ beta * bias), every operand any strided view.

    With an ``epilogue``, each output tile is handed to it after the product is complete; ``out``
    may then be None (nothing outside the epilogue reads the product; ``out_dtype`` names its dtype).
    ``buffers`` (made with the same blocking) are shared with other gemms of a sequence.
    ``auto_cast``: FP32 operands are cast first as the compiler setting says (:mod:`..precision`).
    """
    odt = out.dtype if out is not None else (out_dtype or F32)
    if M == 0 or N == 0:
        return
    if K == 0:
        if epilogue is not None:
            raise ValueError("an epilogue needs a product: K must be positive")
        if out is None:
            raise ValueError("a gemm without an epilogue writes its product: out is required")
        _fill_bias_only(b, out, M, N, bias)
        return
    if auto_cast:
        A, B = cast_operands(b, A, B, M, K, N)
    dt = A.dtype
    kt_n = ceil_div(K, b.spec.partitions)
    blk = blocking or gemm_blocking(K, M, N, dt, odt, b.spec, A, bias, epilogue, B)
    blk = blk if blk.kt == kt_n else Blocking(blk.nb, blk.mb, blk.kc, kt_n)
    multi = blk.multi(kt_n)
    # the epilogue reads PSUM itself unless the product must first be finished or kept
    direct = (epilogue is not None and epilogue.psum_direct and out is None and bias is None and alpha == 1.0
              and not multi)
    # A and B chunks go through one queue, K tile by K tile: the DMA engines serve descriptors in
    # the order they were queued, so the first K tiles of both operands arrive first
    q_in = b.queue("qSyncIO0", "input")
    q_out = b.queue("qSyncIO2", "output")
    own = buffers is None
    bias_dt = _full_bias_dtype(bias) if bias is not None and bias.kind == "full" else None
    bufs = buffers or GemmBuffers(b, blk, dt, odt, staging=not direct, bias_dt=bias_dt)
    if (bufs.blk.nb != blk.nb or bufs.blk.mb != blk.mb or bufs.blk.kc != blk.kc or bufs.dt != dt or bufs.odt != odt
            or bool(bufs.bias) != (bias_dt is not None)):
        raise ValueError("shared gemm buffers were made for another blocking or dtype")
    gemm = _Gemm(b, A, B, out, M, K, N, bias, alpha, epilogue, blk, bufs, direct, q_in, q_out)
    for n0 in range(0, N, blk.nb):
        gemm.column_block(n0)
    if own:
        bufs.release(b)


class _Gemm:
    """The instructions of one blocked gemm (:func:`emit_gemm`): per column block of ``nb`` output
    columns, per block of ``mb`` rows, per K chunk: the chunk's loads, its matmuls per 128-row M tile,
    then the tile's partial product into the accumulator, or (the last chunk) the finished product
    through bias, alpha and the epilogue to the output."""

    def __init__(self, b: KernelBuilder, A: Mat, B: Mat, out: Mat | None, M: int, K: int, N: int, bias: Bias | None,
                 alpha: float, epilogue: GemmEpilogue | None, blk: Blocking, bufs: GemmBuffers, direct: bool,
                 q_in: int, q_out: int):
        self.b, self.A, self.B, self.out, self.M, self.K, self.N = b, A, B, out, M, K, N
        self.bias, self.alpha, self.epilogue, self.blk, self.bufs = bias, alpha, epilogue, blk, bufs
        self.direct, self.q_in, self.q_out = direct, q_in, q_out
        self.P, self.mt, self.mv = b.spec.partitions, b.spec.gemm_stationary_fmax, b.spec.gemm_moving_fmax
        self.chunks = blk.chunks(blk.kt)
        self.multi = len(self.chunks) > 1
        self.kind = bias.kind if bias is not None else None
        # with several chunks and alpha = 1 the bias joins the first chunk's evacuation into the
        # accumulator (no extra pass); with an alpha it has to wait for the whole product
        self.bias_first = self.multi and alpha == 1.0 and bias is not None
        self.block_bias: list[AP] = []   # the current M block's full-bias tiles (load_block_bias)

    # --- loads ------------------------------------------------------------------------------------
    def load_rhs(self, buf: AP, n0: int, ncols: int, kt: int) -> None:
        B, P_ = self.B, self.P
        k0, kp = kt * P_, min(P_, self.K - kt * P_)
        # in the dtype TensorE reads, A's (the operands match after auto-cast)
        load(self.b, self.q_in, B.tensor, self.A.dtype, B.at(k0, n0), B.rs, kp, [(B.cs, ncols)],
             buf.view(0, [(1, ncols)], partitions=kp))

    def load_lhs(self, buf: AP, m0: int, mcols: int, kt: int) -> None:
        # A^T[k, m] = A[m, k]: partitions walk k (stride A.cs), the free axis walks m (stride A.rs)
        A, P_ = self.A, self.P
        k0, kp = kt * P_, min(P_, self.K - kt * P_)
        load(self.b, self.q_in, A.tensor, A.dtype, A.at(m0, k0), A.cs, kp, [(A.rs, mcols)],
             buf.view(0, [(1, mcols)], partitions=kp))

    def load_block_bias(self, m0: int, mcols: int, n0: int, ncols: int) -> list[AP]:
        """A full bias's tiles for the M tiles of block m0 (none for other kinds), into the next set."""
        if self.bias is None or self.kind != "full":
            return []
        tiles = self.bufs.bias[self.bufs.turn("bias")]
        out = []
        for i, mt0 in enumerate(range(0, mcols, self.mt)):
            mp = min(self.mt, mcols - mt0)
            t = tiles[i].view(0, [(1, ncols)], partitions=mp)
            _load_full_bias(self.b, self.bias, t, m0 + mt0, mp, n0, ncols)
            out.append(t)
        return out

    # --- the loop nest ----------------------------------------------------------------------------
    def column_block(self, n0: int) -> None:
        """Every output row of columns n0..n0+nb-1, M block by M block, K chunk by K chunk."""
        b, blk, bufs, mv, mt = self.b, self.blk, self.bufs, self.mv, self.mt
        ncols = min(blk.nb, self.N - n0)
        slices = [(s0, min(mv, ncols - s0)) for s0 in range(0, ncols, mv)]
        if self.epilogue is not None:
            self.epilogue.begin_block(b, n0, ncols)
        rhs: list[AP] | None = None
        row_bias = None
        if self.bias is not None and self.kind == "row":
            row_bias = _load_row_bias(b, self.bias, n0, ncols, min(mt, self.M))
        for m0 in range(0, self.M, blk.mb):
            mcols = min(blk.mb, self.M - m0)
            self.block_bias = self.load_block_bias(m0, mcols, n0, ncols)
            for c, (kt0, kt1) in enumerate(self.chunks):
                # with one chunk the B block stays in SBUF for every M block of its columns
                new_rhs = self.multi or m0 == 0
                if new_rhs:
                    rhs = bufs.rhs[bufs.turn("rhs")]
                assert rhs is not None  # loaded at m0 == 0
                lhs = bufs.lhs[bufs.turn("lhs")]
                for kt in range(kt0, kt1):
                    self.load_lhs(lhs[kt - kt0], m0, mcols, kt)
                    if new_rhs:
                        self.load_rhs(rhs[kt - kt0], n0, ncols, kt)
                self.multiply_chunk(c, lhs, rhs, m0, mcols, n0, ncols, slices, row_bias)
        if row_bias is not None:
            b.release(row_bias)

    def multiply_chunk(self, c: int, lhs: list[AP], rhs: list[AP], m0: int, mcols: int, n0: int, ncols: int,
                       slices: list[tuple[int, int]], row_bias: AP | None) -> None:
        """Chunk c's matmuls for each 128-row M tile of the block (each K tile's weights loaded once,
        multiplied against every 512-column slice), then the tile's product on its way out of PSUM."""
        b, bufs, P_ = self.b, self.bufs, self.P
        kt0, kt1 = self.chunks[c]
        last = c == len(self.chunks) - 1
        for i, mt0 in enumerate(range(0, mcols, self.mt)):
            mp = min(self.mt, mcols - mt0)
            banks = bufs.banks(b, mp, slices)
            for kt in range(kt0, kt1):
                kp = min(P_, self.K - kt * P_)
                b.emit(LoadStationary(src=lhs[kt - kt0].view(mt0, [(1, mp)], partitions=kp)))
                for (s0, w), bank in zip(slices, banks):
                    b.emit(MultiplyMoving(moving=rhs[kt - kt0].view(s0, [(1, w)], partitions=kp),
                                          dst=bank, accumulate=kt > kt0))
            acc = bufs.acc[i] if self.multi else None
            if last:
                self.finish(m0 + mt0, mp, n0, ncols, banks, acc, slices, row_bias)
                continue
            assert acc is not None  # not the last chunk: several, so an accumulator
            self.accumulate(c, m0 + mt0, mp, n0, ncols, banks, acc, slices, row_bias)

    # --- out of PSUM ------------------------------------------------------------------------------
    def biases(self, m_abs: int, mp: int, n0: int, ncols: int, row_bias: AP | None):
        """(col bias tile, full bias tile, per-slice bias AP getter) of one output tile."""
        b, bias, kind = self.b, self.bias, self.kind
        col_bias = _load_col_bias(b, bias, m_abs, mp) if bias is not None and kind in ("col", "scalar") else None
        # a full bias's tile was loaded when the block began (held by the buffers, not released here)
        full_bias = self.block_bias[(m_abs % self.blk.mb) // self.mt] if kind == "full" else None
        wide = row_bias if row_bias is not None else full_bias

        def at(s0: int, w: int) -> AP | None:
            return wide.view(s0, [(1, w)], partitions=mp) if wide is not None else None
        return col_bias, at

    def finish(self, m_abs: int, mp: int, n0: int, ncols: int, banks: list[AP], acc: AP | None,
               slices: list[tuple[int, int]], row_bias: AP | None) -> None:
        """The product of rows m_abs.. is complete in ``banks`` (+ ``acc``): bias, alpha, store, epilogue."""
        b, bufs, out, epilogue, alpha = self.b, self.bufs, self.out, self.epilogue, self.alpha
        if self.direct and epilogue is not None:  # direct implies an epilogue
            epilogue.tile(b, m_abs, mp, n0, ncols, banks, slices)
            return
        stage = bufs.stages[bufs.turn("stage", len(bufs.stages))]
        col_bias, bias_at = self.biases(m_abs, mp, n0, ncols, row_bias) if not self.bias_first else (
            None, lambda s0, w: None)
        for (s0, w), bank in zip(slices, banks):
            st = stage.view(s0, [(1, w)], partitions=mp)
            bias_ap = bias_at(s0, w)
            if acc is None:
                _evacuate(b, bank, st, alpha, col_bias, bias_ap, bufs.turn("evac"))
                continue
            part = acc.view(s0, [(1, w)], partitions=mp)
            if alpha == 1.0 and col_bias is None and bias_ap is None:
                b.emit(TensorTensor(alu=Alu.ADD, in0=bank, in1=part, out=st))  # PSUM + SBUF: the cheap form
            else:
                b.emit(TensorTensor(alu=Alu.ADD, in0=bank, in1=part, out=part))
                _evacuate(b, part, st, alpha, col_bias, bias_ap, bufs.turn("evac"))
        if out is not None:
            b.dma(self.q_out, stage.view(0, [(1, ncols)], partitions=mp),
                  hbm(out.tensor, mp, out.rs, [(out.cs, ncols)], out.dtype, offset=out.at(m_abs, n0)))
        if epilogue is not None:
            epilogue.tile(b, m_abs, mp, n0, ncols, stage.view(0, [(1, ncols)], partitions=mp), slices)
        if col_bias is not None:
            b.release(col_bias)

    def accumulate(self, c: int, m_abs: int, mp: int, n0: int, ncols: int, banks: list[AP], acc: AP,
                   slices: list[tuple[int, int]], row_bias: AP | None) -> None:
        """A chunk's partial product joins the FP32 accumulator: the first one copied (by ScalarE,
        with the bias when it goes first), the others added by VectorE (PSUM + SBUF, its fast form)."""
        b = self.b
        col_bias = None
        bias_at = None
        if c == 0 and self.bias_first:
            col_bias, bias_at = self.biases(m_abs, mp, n0, ncols, row_bias)
        for (s0, w), bank in zip(slices, banks):
            part = acc.view(s0, [(1, w)], partitions=mp)
            if bias_at is not None:
                _evacuate(b, bank, part, 1.0, col_bias, bias_at(s0, w), 1)
            elif c == 0:
                b.emit(Activation(func=Act.COPY, inp=bank, out=part))
            else:
                b.emit(TensorTensor(alu=Alu.ADD, in0=bank, in1=part, out=part))
        if col_bias is not None:
            b.release(col_bias)


def cast_operands(b: KernelBuilder, A: Mat, B: Mat, M: int, K: int, N: int) -> tuple[Mat, Mat]:
    """A and B as TensorE reads them under the auto-cast setting: FP32 operands cast once into HBM
    scratch copies (keeping their memory order, so the gemm's transfers stay long) when the setting
    casts matmuls, as neuronx-cc's default ``--auto-cast matmult`` does."""
    from ..precision import matmul_dtype, note_cast

    target = matmul_dtype(A.dtype, B.dtype)
    if target is None:
        return A, B
    note_cast(b.p, target)
    return _cast_mat(b, A, M, K, target), _cast_mat(b, B, K, N, target)


def _cast_mat(b: KernelBuilder, x: Mat, R: int, C: int, target: DType) -> Mat:
    from .movement import copy_region

    if x.dtype == target:
        return x
    column_major = x.rs == 1 and x.cs != 1
    shape, stride = ((C, R), (x.cs, x.rs)) if column_major else ((R, C), (x.rs, x.cs))
    src = TensorMeta(shape, stride, x.dtype, x.offset)
    dst = TensorMeta.contiguous(shape, target)
    t = b.p.tensor(f"autocast{len(b.p.tensors)}", (max(1, R * C),), target, "scratch")
    copy_region(b, x.tensor, src, t, dst)
    return Mat(t, target, 0, 1, R) if column_major else Mat(t, target, 0, C, 1)


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
    t = b.tile(b.spec.partitions, (ncols,), F32)
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


def _full_bias_dtype(bias: Bias) -> DType:
    """The SBUF dtype of a full bias's tiles: its own when beta is 1 (VectorE's add reads it as it is
    and widens it exactly, at half the DMA bytes of FP32 for a BF16 bias), else FP32 for beta x it."""
    return bias.mat.dtype if bias.beta == 1.0 and bias.mat.dtype.is_float else F32


def _load_full_bias(b: KernelBuilder, bias: Bias, t: AP, m0: int, mp: int, n0: int, ncols: int) -> None:
    q = b.queue("qSyncIO1", "input")
    load(b, q, bias.mat.tensor, bias.mat.dtype, bias.mat.at(m0, n0), bias.mat.rs, mp, [(bias.mat.cs, ncols)], t)
    _scale(b, t, bias.beta)


def _fill_bias_only(b: KernelBuilder, out: Mat, M: int, N: int, bias: Bias | None) -> None:
    """K = 0: the product is zero; the output is beta * bias (or zeros)."""
    from ...isa import Memset

    q_out = b.queue("qSyncIO2", "output")
    P_ = b.spec.partitions
    for m0 in range(0, M, P_):
        mp = min(P_, M - m0)
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
                  bias: Bias | None = None, epilogue: GemmEpilogue | None = None, staging: bool = True,
                  B: Mat | None = None):
    """Buffers shared by the ``batches`` gemms of a bmm (None when there is nothing to share), in the
    dtype TensorE reads after auto-cast."""
    if batches < 2 or M == 0 or N == 0 or K == 0:
        yield None
        return
    from ..precision import matmul_dtype

    dt = matmul_dtype(A.dtype, (B or A).dtype) or A.dtype
    A_ = Mat(A.tensor, dt, A.offset, A.rs, A.cs)
    B_ = Mat(B.tensor, dt, B.offset, B.rs, B.cs) if B is not None else None
    blk = gemm_blocking(K, M, N, dt, odt, b.spec, A_, bias, epilogue, B_, batches=batches)
    bias_dt = _full_bias_dtype(bias) if bias is not None and bias.kind == "full" else None
    bufs = GemmBuffers(b, blk, dt, odt, staging=staging, bias_dt=bias_dt)
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
    with batch_buffers(ctx.kb, K, M, N, _mat(ctx.inputs[0], a), out.dtype, nb, B=_mat(ctx.inputs[1], bm)) as bufs:
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
    with batch_buffers(ctx.kb, K, M, N, _mat(ctx.inputs[1], a), out.dtype, nb, first,
                       B=_mat(ctx.inputs[2], bm)) as bufs:
        for i in range(nb):
            bias = Bias(_bias_mat(ctx.inputs[0], bias_m, M, N, i), beta) if beta != 0 else None
            emit_gemm(ctx.kb, _mat(ctx.inputs[1], a, i), _mat(ctx.inputs[2], bm, i), _mat(ctx.outputs[0], out, i),
                      M, K, N, bias=bias, alpha=alpha, blocking=bufs and bufs.blk, buffers=bufs)


@lowering("aten::mv")
def _mv(ctx: LoweringContext) -> None:
    a, v = ctx.call.inputs[0], ctx.call.inputs[1]
    out = ctx.call.outputs[0]
    M, K = a.shape
    from .linalg_small import emit_matvec

    if emit_matvec(ctx, 0, 1):
        return
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
    from .linalg_small import emit_matvec

    if emit_matvec(ctx, 1, 2, bias=0 if beta != 0 else None, alpha=alpha, beta=beta):
        return
    bias = None
    if beta != 0:
        rs = bias_m.stride[0] if bias_m.ndim == 1 and bias_m.shape[0] != 1 else 0
        bias = Bias(Mat(ctx.inputs[0], bias_m.dtype, bias_m.offset, rs, 0), beta)
    vec = Mat(ctx.inputs[2], v.dtype, v.offset, v.stride[0], 0)
    emit_gemm(ctx.kb, _mat(ctx.inputs[1], a), vec, Mat(ctx.outputs[0], out.dtype, out.offset, out.stride[0], 0),
              M, K, 1, bias=bias, alpha=alpha)

