"""Activation backward passes, clamps, masked_fill/where with scalars, addcmul/addcdiv/lerp."""

from __future__ import annotations

import pytest
import torch

from .helpers import DTYPES, aten, check, rand, randint, randn


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_backward(dtype):
    x, g = randn(130, 70, dtype=dtype, seed=1, scale=3), randn(130, 70, dtype=dtype, seed=2)
    check(aten.gelu_backward.default, g, x)
    check(aten.gelu_backward.default, g, x, approximate="tanh")
    check(aten.silu_backward.default, g, x)
    check(aten.silu_backward.default, g[:, :1], x)                 # broadcast grad
    check(aten.threshold_backward.default, g, x, 0.5)
    check(aten.threshold_backward.default, g.t(), x.t(), 0.0)      # non-contiguous
    check(aten.sigmoid_backward.default, g, torch.sigmoid(x.float()).to(dtype))
    check(aten.tanh_backward.default, g, torch.tanh(x.float()).to(dtype))


def test_threshold_backward_keeps_zero_for_non_finite_grads():
    x = randn(40, 30, seed=3)
    g = randn(40, 30, seed=4)
    g[0, :] = float("inf")
    g[1, :] = float("nan")
    check(aten.threshold_backward.default, g, x, 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamps(dtype):
    x = randn(130, 70, dtype=dtype, seed=5, scale=3)
    x[0, 0] = float("nan")
    check(aten.clamp.default, x, -1.0, 2.0)
    check(aten.clamp.default, x, None, 2.0)
    check(aten.clamp.default, x, -1)
    check(aten.clamp.default, x, 1.0, -1.0)                        # min > max: max wins, as PyTorch
    check(aten.clamp.Tensor, x, randn(70, dtype=dtype, seed=6), randn(130, 1, dtype=dtype, seed=7) + 1)
    check(aten.clamp.Tensor, x, None, randn(70, dtype=dtype, seed=8))
    check(aten.clamp_min.default, x, 0.3)
    check(aten.clamp_max.default, x, 0.3)
    check(aten.clamp_min.Tensor, x, torch.zeros(70, dtype=dtype))
    check(aten.clamp_max.Tensor, x, torch.zeros(1, dtype=dtype))
    check(aten.clamp_.default, x.clone(), -1.0, 1.0)
    check(aten.clamp_.Tensor, x.clone(), torch.zeros(70, dtype=dtype), None)
    check(aten.clamp_min_.default, x.clone(), 0.0)
    check(aten.clamp_min_.Tensor, x.clone(), torch.zeros(70, dtype=dtype))
    check(aten.clamp_max_.default, x.clone(), 0.0)
    check(aten.clamp_max_.Tensor, x.clone(), torch.zeros(70, dtype=dtype))
    check(aten.hardtanh.default, x)
    check(aten.hardtanh.default, x, 0.0, 6.0)
    check(aten.hardtanh_.default, x.clone(), -0.5, 0.5)


def test_clamp_of_integers_stays_exact():
    xi = randint(-100, 100, (50, 30), seed=9, dtype=torch.int32)
    check(aten.clamp.default, xi, -5, 7)
    check(aten.clamp_min.default, xi * 1000000, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_fill_and_where(dtype):
    x = randn(130, 70, dtype=dtype, seed=10)
    m = rand(130, 70, seed=11) > 0
    check(aten.masked_fill.Scalar, x, m, -1e4)
    check(aten.masked_fill.Scalar, x, m[:1], float("-inf"))       # broadcast mask
    check(aten.masked_fill.Tensor, x, m, torch.tensor(3.0, dtype=dtype))
    check(aten.masked_fill_.Scalar, x.clone(), m, 2.5)
    check(aten.masked_fill_.Tensor, x.clone(), m, torch.tensor(-2.0, dtype=dtype))
    check(aten.where.self, m, x, torch.zeros(70, dtype=dtype))
    check(aten.where.ScalarOther, m, x, 0.5)
    check(aten.where.ScalarSelf, m, -0.5, x)
    check(aten.where.Scalar, m, 1.0, -1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimizer_ops(dtype):
    x, t1 = randn(130, 70, dtype=dtype, seed=12), randn(130, 70, dtype=dtype, seed=13)
    t2 = rand(130, 70, dtype=dtype, seed=14, lo=0.5, hi=2.0)
    check(aten.addcmul.default, x, t1, t2, value=0.3)
    check(aten.addcmul.default, x, t1, t2[:1])                    # broadcast
    check(aten.addcdiv.default, x, t1, t2, value=-0.01)
    check(aten.addcmul_.default, x.clone(), t1, t2, value=2.0)
    check(aten.addcdiv_.default, x.clone(), t1, t2)
    check(aten.lerp.Scalar, x, t1, 0.1)
    check(aten.lerp.Scalar, x, t1, 0.9)
    check(aten.lerp.Tensor, x, t1, rand(130, 70, dtype=dtype, seed=15, lo=-0.5, hi=1.5))
    check(aten.lerp_.Scalar, x.clone(), t1, 0.25)
    check(aten.lerp_.Tensor, x.clone(), t1, rand(70, dtype=dtype, seed=16, lo=0.0, hi=1.0))
