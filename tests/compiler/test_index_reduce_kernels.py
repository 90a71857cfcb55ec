"""argmax/argmin, max.dim/min.dim (values and first indices, NaN as PyTorch), prod, max/min.other."""

from __future__ import annotations

import pytest
import torch

from .helpers import DTYPES, aten, check, rand, randint, randn


@pytest.mark.parametrize("dtype", DTYPES)
def test_arg_reductions(dtype):
    x = randn(130, 70, dtype=dtype, seed=1)
    x[3, 5] = float("nan")
    x[7, :] = 1.0                                   # ties: the first index wins
    check(aten.argmax.default, x, 1)
    check(aten.argmin.default, x, 0)
    check(aten.argmax.default, x)                   # over everything
    check(aten.argmin.default, x, 1, True)
    check(aten.max.dim, x, 1)
    check(aten.min.dim, x, 0, True)
    check(aten.max.dim, x.t(), 1)                   # non-contiguous


@pytest.mark.parametrize("dtype", DTYPES)
def test_arg_reductions_over_long_rows(dtype):
    big = randn(3, 9000, dtype=dtype, seed=2)
    big[1, 5000] = 100
    big[2, 7000] = float("nan")
    big[2, 100] = float("nan")
    check(aten.argmax.default, big, 1)
    check(aten.max.dim, big, 1)
    check(aten.min.dim, big, -1)


def test_integer_arg_reductions():
    xi = randint(-50, 50, (40, 33), seed=3, dtype=torch.int32)
    check(aten.argmax.default, xi, 1)
    check(aten.max.dim, xi, 0)
    check(aten.min.dim, xi, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prod_and_binary_max_min(dtype):
    check(aten.prod.default, rand(50, dtype=dtype, seed=4, lo=0.5, hi=1.5))
    check(aten.prod.dim_int, rand(30, 40, dtype=dtype, seed=5, lo=0.5, hi=1.5), 1)
    check(aten.prod.dim_int, rand(30, 40, dtype=dtype, seed=6, lo=0.5, hi=1.5), 0, True)
    a, b = randn(130, 70, dtype=dtype, seed=7), randn(70, 130, dtype=dtype, seed=8)
    check(aten.max.other, a, b.t())
    check(aten.min.other, a, b[:1].t())              # broadcast column
