"""LayerNorm forward/backward (bn_stats/bn_aggr, TensorE column sums) and var/std/var_mean/std_mean."""

from __future__ import annotations

import pytest
import torch

from trnscope.compiler.verify import run_lowered

from .helpers import DTYPES, aten, check, randn


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_forward(dtype):
    x = randn(3, 70, 96, dtype=dtype, seed=1, scale=2) + 1
    w, b = randn(96, dtype=dtype, seed=2), randn(96, dtype=dtype, seed=3)
    check(aten.native_layer_norm.default, x, [96], w, b, 1e-5)
    check(aten.native_layer_norm.default, x, [96], None, None, 1e-5)
    check(aten.native_layer_norm.default, x, [96], w, None, 1e-6)
    check(aten.native_layer_norm.default, x, [70, 96], randn(70, 96, dtype=dtype, seed=4), None, 1e-5)
    wide = randn(130, 1100, dtype=dtype, seed=5)     # 3 bn_stats chunks per row
    check(aten.native_layer_norm.default, wide, [1100], randn(1100, dtype=dtype, seed=6),
          randn(1100, dtype=dtype, seed=7), 1e-5)
    check(aten.native_layer_norm.default, x.transpose(0, 1), [96], w, b, 1e-5)   # non-contiguous rows


def _ln_backward_inputs(dtype, rows=150, h=200):
    x = randn(rows, h, dtype=dtype, seed=8, scale=2)
    w, b = randn(h, dtype=dtype, seed=9), randn(h, dtype=dtype, seed=10)
    _, mean, rstd = aten.native_layer_norm.default(x, [h], w, b, 1e-5)
    return randn(rows, h, dtype=dtype, seed=11), x, mean, rstd, w, b


def test_layer_norm_backward_fp32_every_mask():
    dy, x, mean, rstd, w, b = _ln_backward_inputs(torch.float32)
    check(aten.native_layer_norm_backward.default, dy, x, [200], mean, rstd, w, b, [True, True, True])
    check(aten.native_layer_norm_backward.default, dy, x, [200], mean, rstd, w, b, [False, True, True])
    check(aten.native_layer_norm_backward.default, dy, x, [200], mean, rstd, w, b, [True, False, True])
    check(aten.native_layer_norm_backward.default, dy, x, [200], mean, rstd, None, None, [True, False, False])
    dy3, x3 = dy.reshape(3, 50, 200), x.reshape(3, 50, 200)
    check(aten.native_layer_norm_backward.default, dy3, x3, [200], mean.reshape(3, 50, 1), rstd.reshape(3, 50, 1),
          w, b, [True, True, True])


def test_layer_norm_backward_bf16_against_fp32_math():
    """PyTorch's CPU kernel sums BF16 weight/bias gradients with BF16 rounding (errors ~0.4 here);
    the device sums in FP32 PSUM. Compare with the FP32 computation on the same BF16 inputs."""
    dy, x, mean, rstd, w, b = _ln_backward_inputs(torch.bfloat16)
    _, _, got = run_lowered(aten.native_layer_norm_backward.default, (dy, x, [200], mean, rstd, w, b,
                                                                     [True, True, True]))
    ref = aten.native_layer_norm_backward.default(dy.float(), x.float(), [200], mean.float(), rstd.float(),
                                                  w.float(), b.float(), [True, True, True])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.float(), r.to(torch.bfloat16).float(), rtol=2e-2, atol=3e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_moments(dtype):
    v = randn(6, 50, 33, dtype=dtype, seed=12, scale=3) + 2
    check(aten.var.correction, v, [1])
    check(aten.var.correction, v, [0, 2], correction=0, keepdim=True)
    check(aten.std.correction, v, None)
    check(aten.var_mean.correction, v, [2], keepdim=True)
    check(aten.std_mean.correction, v.transpose(0, 2), [0])
    check(aten.var.dim, v, [1], False)
    check(aten.std.dim, v, [2], True, True)
    check(aten.var.default, v)
    check(aten.std.default, v, False)
    check(aten.var_mean.dim, v, [0], True)
    check(aten.std_mean.default, v)


def test_moments_of_long_rows_fold_their_statistics():
    check(aten.var.correction, randn(3, 300_000, seed=13, scale=2) + 5, [1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_moments_over_everything_spread_over_the_partitions(dtype):
    """dim=None: each partition's bn_stats triple, merged on one partition by bn_aggr (Chan)."""
    big = randn(640, 2100, dtype=dtype, seed=16, scale=3) + 7    # 10500 per partition: folded pieces
    check(aten.var.correction, big, None)
    check(aten.std_mean.correction, big, None, correction=0)
    check(aten.var.correction, big.t(), None)                     # not contiguous: one row, as before


def test_a_full_variance_runs_near_hbm_speed():
    from trnscope.device.roofline_sweep import measure

    row = measure("aten::var.correction", "trn2")
    assert not row.error and row.ratio < 3, row


def test_moments_edge_corrections():
    check(aten.var.correction, randn(4, 1, seed=14), [1])                    # n - correction = 0: NaN
    check(aten.var.correction, randn(4, 9, seed=15), [1], correction=3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_per_row_results_leave_as_rows_of_values(dtype):
    """One value per row (a reduction's, a norm's mean and rstd) is transposed into rows of 128 values
    every few tiles instead of leaving as one 4-byte descriptor per row; the last partial tile as before."""
    from .helpers import program_for

    x = randn(1100, 300, dtype=dtype, seed=20, scale=2) + 1
    check(aten.var.correction, x, [1])
    check(aten.std_mean.correction, x, [1], keepdim=True)
    check(aten.norm.ScalarOpt_dim, x, 2, [1])
    check(aten.count_nonzero.dim_IntList, (x > 1).to(dtype), [1])
    w, b = randn(300, dtype=dtype, seed=21), randn(300, dtype=dtype, seed=22)
    check(aten.native_layer_norm.default, x, [300], w, b, 1e-5)
    prog = program_for(aten.var.correction, x, [1])
    assert any(type(i).__name__ == "TensorTranspose" for i in prog.instructions)
    stores = [i for i in prog.instructions if type(i).__name__ == "Dma" and i.dst.space.value == "hbm"]
    assert sum(s.dst.partitions for s in stores) < 1100 // 4
