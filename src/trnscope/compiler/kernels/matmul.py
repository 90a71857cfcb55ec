"""Tiled matmul on TensorE: out[M, N] = lhsT[K, M].T @ rhs[K, N] (the NKI tiled-matmul layout).

Blocking (NKI performance guide, S4): a block of rhs columns stays in SBUF while blocks of lhsT
columns stream through it, double-buffered; within an M tile each K tile's weights are loaded once
(LoadStationary) and multiplied against every 512-column slice of the rhs block, accumulating in
up to four PSUM banks. Results are evacuated PSUM -> SBUF alternately on VectorE and ScalarE and
stored by DMA on their own queue, so loads, matmuls, evacuation and stores overlap.
"""

from __future__ import annotations

from ...hw import HardwareSpec, get_spec
from ...isa import AP, Activation, Act, DType, Engine, LoadStationary, MultiplyMoving, Program, hbm
from ..builder import KernelBuilder

P = 128
MOVING_MAX = 512
PSUM_BANKS_PER_BLOCK = 4


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def matmul_program(K: int, M: int, N: int, dtype="bfloat16", out_dtype=None, spec: HardwareSpec | None = None,
                   name: str | None = None) -> Program:
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


def _block_sizes(K: int, M: int, N: int, itemsize: int, spec: HardwareSpec) -> tuple[int, int]:
    """(rhs block columns, lhsT block columns) that fit SBUF with double-buffered lhsT blocks."""
    kt = _ceil(K, P)
    capacity = spec.sbuf_bytes_per_partition - 8 * 1024  # leave room for output staging
    nb = min(_ceil(N, MOVING_MAX) * MOVING_MAX, MOVING_MAX * PSUM_BANKS_PER_BLOCK)
    mb = min(_ceil(M, P) * P, 4 * P)
    while nb > MOVING_MAX and kt * (nb + 2 * mb) * itemsize > capacity:
        nb //= 2
    while mb > P and kt * (nb + 2 * mb) * itemsize > capacity:
        mb //= 2
    if kt * (nb + 2 * mb) * itemsize > capacity:
        raise ValueError(f"K={K} is too deep for one SBUF pass on {spec.name}; split K")
    return nb, mb


def emit_matmul(b: KernelBuilder, lhsT: int, rhs: int, out: int, K: int, M: int, N: int, dt: DType,
                odt: DType) -> None:
    spec = b.spec
    kt_n = _ceil(K, P)
    nb, mb = _block_sizes(K, M, N, dt.itemsize, spec)
    q_rhs = b.queue("qSyncIO0", "input")
    q_lhs = b.queue("qSyncIO1", "input")
    q_out = b.queue("qSyncIO2", "output")
    rhs_block = b.tile(P, (kt_n, nb), dt)
    lhs_blocks = [b.tile(P, (kt_n, mb), dt) for _ in range(2)]
    stage = [b.tile(P, (MOVING_MAX,), odt) for _ in range(2)]
    evac = 0
    lhs_turn = 0
    held: list[AP] = []  # the previous M tile's PSUM banks: kept so the next tile uses the other banks
    for n0 in range(0, N, nb):
        ncols = min(nb, N - n0)
        for kt in range(kt_n):
            k0, kp = kt * P, min(P, K - kt * P)
            src = hbm(rhs, kp, N, [(1, ncols)], dt, offset=k0 * N + n0)
            b.dma(q_rhs, src, rhs_block.view(kt * nb, [(1, ncols)], partitions=kp))
        for m0 in range(0, M, mb):
            mcols = min(mb, M - m0)
            lhs = lhs_blocks[lhs_turn % 2]
            lhs_turn += 1
            for kt in range(kt_n):
                k0, kp = kt * P, min(P, K - kt * P)
                src = hbm(lhsT, kp, M, [(1, mcols)], dt, offset=k0 * M + m0)
                b.dma(q_lhs, src, lhs.view(kt * mb, [(1, mcols)], partitions=kp))
            for mt0 in range(0, mcols, P):
                mp = min(P, mcols - mt0)
                slices = [(s0, min(MOVING_MAX, ncols - s0)) for s0 in range(0, ncols, MOVING_MAX)]
                banks = [b.psum_tile(mp, (w,)) for _, w in slices]
                b.release(*held)
                held = banks
                for kt in range(kt_n):
                    kp = min(P, K - kt * P)
                    b.emit(LoadStationary(src=lhs.view(kt * mb + mt0, [(1, mp)], partitions=kp)))
                    for (s0, w), bank in zip(slices, banks):
                        b.emit(MultiplyMoving(moving=rhs_block.view(kt * nb + s0, [(1, w)], partitions=kp),
                                              dst=bank, accumulate=kt > 0))
                for (s0, w), bank in zip(slices, banks):
                    st = stage[evac % 2].view(0, [(1, w)], partitions=mp)
                    if evac % 2 == 0:
                        b.copy(bank, st, on=Engine.VECTOR)
                    else:
                        b.emit(Activation(func=Act.COPY, inp=bank, out=st))
                    evac += 1
                    dst = hbm(out, mp, N, [(1, w)], odt, offset=(m0 + mt0) * N + n0 + s0)
                    b.dma(q_out, st, dst)
    b.release(*held)
