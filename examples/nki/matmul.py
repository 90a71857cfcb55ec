"""The matrix-multiplication optimisation ladder of Neuron's NKI tutorial, written for trnscope in NKI 0.6
style: out[M, N] = lhsT[K, M].T @ rhs[K, N] (lhs delivered transposed, K on the partitions).

Each step keeps the tutorial's algorithm and block sizes so its simulated time can be compared with the
published trn1 figures (docs/nki.md): basic (one 64x128x512 tile), tiled, hoisted loads, blocked free
dims, and fully optimised (blocked M, N and K with SBUF-resident result blocks).

    trnscope run examples/nki/matmul.py            # numerics on small shapes + the ladder on trn1
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_basic(lhsT, rhs):
    """One TensorE tile: [64, 128] x [128, 512]."""
    K, M = lhsT.shape
    _, N = rhs.shape
    assert (K, M, N) == (128, 64, 512), "the basic kernel is one 64x128x512 tile"
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(acc, a, b)
    res = nl.ndarray((M, N), dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out


def _tiles(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, f"contraction dims differ: lhsT has K={K}, rhs K={K2}"
    tm, tk, tn = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    assert M % tm == 0 and K % tk == 0 and N % tn == 0, "M, K must be multiples of 128 and N of 512"
    return K, M, N, tm, tk, tn


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Every output tile accumulates over K in PSUM; both operand tiles are loaded for every matmul."""
    K, M, N, TM, TK, TN = _tiles(lhsT, rhs)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // TM):
        for n in range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(acc, a, b)
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """The lhsT column of tiles is loaded once per m and reused for every n."""
    K, M, N, TM, TK, TN = _tiles(lhsT, rhs)
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in range(M // TM):
        a_col = []
        for k in range(K // TK):
            a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            a_col.append(a)
        for n in range(N // TN):
            b_col = []
            for k in range(K // TK):
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                b_col.append(b)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in range(K // TK):
                nisa.nc_matmul(acc, a_col[k], b_col[k])
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def matmul_blocked_free(lhsT, rhs, tiles_m=2, tiles_n=2):
    """Blocks of tiles_m x tiles_n output tiles: each loaded operand tile serves a whole block row/column."""
    K, M, N, TM, TK, TN = _tiles(lhsT, rhs)
    BM, BN = TM * tiles_m, TN * tiles_n
    assert M % BM == 0 and N % BN == 0, f"M must divide by {BM} and N by {BN}"
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    kt = K // TK
    for mb in range(M // BM):
        a_blk = [[None] * kt for _ in range(tiles_m)]
        for i in range(tiles_m):
            m0 = mb * BM + i * TM
            for k in range(kt):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m0:m0 + TM])
                a_blk[i][k] = a
        for nb in range(N // BN):
            b_blk = [[None] * kt for _ in range(tiles_n)]
            for j in range(tiles_n):
                n0 = nb * BN + j * TN
                for k in range(kt):
                    b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n0:n0 + TN])
                    b_blk[j][k] = b
            for i in range(tiles_m):
                for j in range(tiles_n):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in range(kt):
                        nisa.nc_matmul(acc, a_blk[i][k], b_blk[j][k])
                    res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=res, src=acc)
                    m0, n0 = mb * BM + i * TM, nb * BN + j * TN
                    nisa.dma_copy(dst=out[m0:m0 + TM, n0:n0 + TN], src=res)
    return out


@nki.jit
def matmul_optimized(lhsT, rhs, tiles_m=16, tiles_n=2, tiles_k=8):
    """Blocked M, N and K. For each N block the result rows stay in SBUF (one [128, tiles_n, 512] tile per
    128 rows, zeroed first); each K block's rhs rows and lhsT columns are loaded with one DMA per 128-row
    slab; PSUM partial sums are added into the SBUF result as they leave PSUM; each result tile is
    stored with one DMA of tiles_n * 512 columns."""
    K, M, N, TM, TK, TN = _tiles(lhsT, rhs)
    BM, BN, BK = TM * tiles_m, TN * tiles_n, TK * tiles_k
    assert M % BM == 0 and N % BN == 0 and K % BK == 0, f"M, N, K must divide by {BM}, {BN}, {BK}"
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in range(N // BN):
        n0 = nb * BN
        rows = []
        for t in range(M // TM):
            r = nl.ndarray((TM, tiles_n, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.memset(dst=r, value=0.0)
            rows.append(r)
        for kb in range(K // BK):
            b_blk = nl.ndarray((TK, tiles_k, BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in range(tiles_k):
                k0 = (kb * tiles_k + k) * TK
                nisa.dma_copy(dst=b_blk[:, k, :], src=rhs[k0:k0 + TK, n0:n0 + BN])
            for mb in range(M // BM):
                m0 = mb * BM
                a_blk = nl.ndarray((TK, tiles_k, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for k in range(tiles_k):
                    k0 = (kb * tiles_k + k) * TK
                    nisa.dma_copy(dst=a_blk[:, k, :], src=lhsT[k0:k0 + TK, m0:m0 + BM])
                for j in range(tiles_n):
                    for i in range(tiles_m):
                        acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for k in range(tiles_k):
                            nisa.nc_matmul(acc, a_blk[:, k, i * TM:(i + 1) * TM], b_blk[:, k, j * TN:(j + 1) * TN])
                        r = rows[mb * tiles_m + i]
                        nisa.tensor_tensor(dst=r[:, j, :], data1=r[:, j, :], data2=acc, op=nl.add)
        for t in range(M // TM):
            nisa.dma_copy(dst=out[t * TM:(t + 1) * TM, n0:n0 + BN], src=rows[t].reshape((TM, BN)))
    return out


LADDER = {"tiled": matmul_tiled, "hoisted loads": matmul_hoisted, "blocked free dims": matmul_blocked_free,
          "fully optimised": matmul_optimized}
# Neuron's matmul tutorial, trn1, bf16 [4096, 8192] @ [8192, 8192] (aws-neuron-sdk, tutorial table, 2025)
PUBLISHED_MS = {"tiled": 51.80, "hoisted loads": 42.96, "blocked free dims": 22.07, "fully optimised": 6.97}
LADDER_SHAPE = (4096, 8192, 8192)  # M, K, N


def ladder(target: str = "trn1"):
    """Simulated time of each step at the tutorial's size on ``target``: {step: RunReport}."""
    import os

    from trnscope.nki import ArgSpec

    M, K, N = LADDER_SHAPE
    saved = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    try:
        return {step: k.timeline(ArgSpec((K, M), "bfloat16"), ArgSpec((K, N), "bfloat16"))
                for step, k in LADDER.items()}
    finally:
        if saved is None:
            del os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"]
        else:
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = saved


if __name__ == "__main__":
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    print("basic 64x128x512: max |err| vs NumPy", float(np.abs(matmul_basic(a, b) - a.T @ b).max()))
    for step, report in ladder().items():
        print(f"{step:<18} {report.total_ms:8.2f} ms  (published {PUBLISHED_MS[step]:.2f} ms)  "
              f"MFU {report.mfu:5.1f}%  {report.instruction_count} instructions")
