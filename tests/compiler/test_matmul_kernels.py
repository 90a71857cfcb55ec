"""The matmul family on TensorE (mm, addmm, bmm, baddbmm, mv, addmv, dot) against PyTorch."""

from __future__ import annotations

import pytest
import torch

from trnscope import interp
from trnscope.compiler.builder import KernelBuilder
from trnscope.compiler.kernels.matmul import Blocking, Mat, emit_gemm
from trnscope.isa import DType, Program

from .helpers import DTYPES, aten, check, rand

# FP32 sums of K products round differently from PyTorch's blocking: absolute error ~ sqrt(K) ulps
FP32_TOL = dict(rtol=1e-4, atol=2e-4)


def tol(dtype):
    return FP32_TOL if dtype == torch.float32 else {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_partial_tiles_and_layouts(dtype):
    a, b = rand(200, 150, dtype=dtype, seed=1), rand(150, 300, dtype=dtype, seed=2)
    check(aten.mm.default, a, b, **tol(dtype))                       # row-major A: DMA-transposed A^T
    check(aten.mm.default, a.t().contiguous().t(), b, **tol(dtype))  # A already transposed in HBM
    w = rand(96, 150, dtype=dtype, seed=3)
    check(aten.mm.default, a, w.t(), **tol(dtype))                   # nn.Linear's weight.t()
    check(aten.mm.default, a[::2, 10:], b[10:, 5:70], **tol(dtype))  # strided views, partial tiles


@pytest.mark.parametrize("dtype", DTYPES)
def test_addmm_bias_kinds_and_scalars(dtype):
    a, w = rand(140, 70, dtype=dtype, seed=4), rand(90, 70, dtype=dtype, seed=5)
    check(aten.addmm.default, rand(90, dtype=dtype, seed=6), a, w.t(), **tol(dtype))            # row bias
    check(aten.addmm.default, rand(90, dtype=dtype, seed=6), a, w.t(), beta=0.5, alpha=2.0, **tol(dtype))
    check(aten.addmm.default, rand(140, 1, dtype=dtype, seed=7), a, w.t(), beta=-1.0, alpha=0.5, **tol(dtype))
    check(aten.addmm.default, rand(140, 90, dtype=dtype, seed=8), a, w.t(), alpha=1.5, **tol(dtype))
    check(aten.addmm.default, rand(1, dtype=dtype, seed=9), a, w.t(), **tol(dtype))              # scalar bias
    nan_bias = torch.full((90,), float("nan"), dtype=dtype)
    check(aten.addmm.default, nan_bias, a, w.t(), beta=0.0, **tol(dtype))   # beta=0 ignores the bias


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_and_baddbmm(dtype):
    x, y = rand(3, 130, 40, dtype=dtype, seed=10), rand(3, 40, 60, dtype=dtype, seed=11)
    check(aten.bmm.default, x, y, **tol(dtype))
    check(aten.bmm.default, x, y.transpose(1, 2).contiguous().transpose(1, 2), **tol(dtype))
    check(aten.bmm.default, x.expand(3, 130, 40), y[:1].expand(3, 40, 60), **tol(dtype))  # broadcast batch
    check(aten.baddbmm.default, rand(60, dtype=dtype, seed=12), x, y, beta=2.0, alpha=0.5, **tol(dtype))
    check(aten.baddbmm.default, rand(3, 130, 60, dtype=dtype, seed=13), x, y, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_baddbmm_full_bias_prefetched_per_block(dtype):
    """A full bias's tiles are loaded when each M block starts (its own dtype at beta = 1, FP32 for
    beta x bias): several M tiles and blocks, K in several tiles, alpha and beta, inf and NaN entries
    (which must stay in their own elements)."""
    x, y = rand(2, 300, 260, dtype=dtype, seed=30), rand(2, 260, 600, dtype=dtype, seed=31)
    bias = rand(2, 300, 600, dtype=dtype, seed=32)
    check(aten.baddbmm.default, bias, x, y, **tol(dtype))
    check(aten.baddbmm.default, bias, x, y, beta=0.5, alpha=2.0, **tol(dtype))
    special = bias.clone()
    special[0, 5, 7], special[1, 200, 599], special[1, 0, 0] = float("inf"), float("nan"), float("-inf")
    check(aten.baddbmm.default, special, x, y, **tol(dtype))
    check(aten.addmm.default, special[0], x[0], y[0], beta=-1.0, **tol(dtype))


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_full_bias_costs_no_more_than_its_bytes(target):
    """baddbmm's full bias adds a third to bmm's HBM traffic (16 of 48 MiB at 8x1024x1024 BF16) and
    one VectorE add per PSUM bank, which replaces an evacuation: the kernel may take at most 4/3 of
    bmm's time (5% for scheduling). Before its tiles were loaded per block in advance it took 2.04x."""
    from trnscope.device.roofline_sweep import measure

    bmm, baddbmm = measure("aten::bmm", target), measure("aten::baddbmm", target)
    assert not bmm.error and not baddbmm.error
    assert baddbmm.time_ns <= bmm.time_ns * 4 / 3 * 1.05, (baddbmm.time_ns, bmm.time_ns)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_products(dtype):
    a, v = rand(200, 150, dtype=dtype, seed=14), rand(150, dtype=dtype, seed=15)
    check(aten.mv.default, a, v, **tol(dtype))
    check(aten.addmv.default, rand(200, dtype=dtype, seed=16), a, v, beta=0.5, alpha=-1.0, **tol(dtype))
    check(aten.dot.default, v, rand(150, dtype=dtype, seed=17), **tol(dtype))
    # many row tiles (results stored as rows of values), a long row in pieces, strided and broadcast
    big, w = rand(1100, 5000, dtype=dtype, seed=30), rand(5000, dtype=dtype, seed=31)
    check(aten.mv.default, big, w, **tol(dtype))
    check(aten.addmv.default, rand(1100, dtype=dtype, seed=32), big, w, beta=0.5, alpha=2.0, **tol(dtype))
    check(aten.addmv.default, rand(1, dtype=dtype, seed=33), big.t()[:300], w[:1100], **tol(dtype))
    check(aten.mv.default, a.t(), rand(200, dtype=dtype, seed=34), **tol(dtype))


def test_in_place_and_out_variants():
    a, w = rand(64, 32, seed=18), rand(48, 32, seed=19)
    check(aten.addmm_.default, rand(64, 48, seed=20), a, w.t(), alpha=0.5, **FP32_TOL)
    check(aten.mm.out, a, w.t(), out=torch.empty(64, 48), **FP32_TOL)   # arrives as aten::mm


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_deep_contraction_accumulates_chunks_in_psum(dtype):
    """K split into chunks that accumulate into the same PSUM banks (what a too-deep K gets)."""
    import numpy as np
    import ml_dtypes

    M, K, N = 70, 600, 200
    prog = Program("gemm_chunked")
    dt = DType.parse(dtype)
    a = prog.tensor("a", (M, K), dt)
    b = prog.tensor("b", (K, N), dt)
    o = prog.tensor("o", (M, N), "float32", "output")
    with prog.origin("aten::mm"):
        emit_gemm(KernelBuilder(prog), Mat(a, dt, 0, K, 1), Mat(b, dt, 0, N, 1), Mat(o, DType.float32, 0, N, 1),
                  M, K, N, blocking=Blocking(nb=512, mb=128, kc=2))
    rng = np.random.default_rng(0)
    npdt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    av = rng.standard_normal((M, K)).astype(npdt)
    bv = rng.standard_normal((K, N)).astype(npdt)
    got = interp.run(prog, {"a": av, "b": bv})["o"]
    ref = av.astype(np.float64) @ bv.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
    assert sum(1 for i in prog.instructions if i.OPCODE == "MATMUL" and i.accumulate) > 0
