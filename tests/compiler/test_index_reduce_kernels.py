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


@pytest.mark.parametrize("dtype", DTYPES)
def test_arg_reductions_over_everything_spread_over_the_partitions(dtype):
    """dim=None: each partition scans a slice, the first partition holding the extreme wins; a tail
    of n % 128 elements scans on its own partition; a NaN anywhere is the answer (its first one)."""
    x = randn(130, 70, dtype=dtype, seed=11)          # 9100 = 128 * 71 + 12: a tail
    x[100, 3] = 50
    x[5, 1] = 50                                       # the same extreme on two partitions: the first
    check(aten.argmax.default, x)
    check(aten.argmin.default, x)
    x[129, 69] = -80                                   # the extreme in the tail
    check(aten.argmin.default, x)
    x[90, 2] = float("nan")
    x[120, 0] = float("nan")
    check(aten.argmax.default, x)
    check(aten.argmin.default, x)
    long = randn(128 * 9000, dtype=dtype, seed=12)     # pieces of 4096 per partition, no tail
    long[777777] = 99
    check(aten.argmax.default, long)


def test_a_full_argmax_runs_at_hbm_speed_not_on_one_partition():
    from trnscope.device.roofline_sweep import measure

    row = measure("aten::argmax", "trn2")
    assert not row.error and row.ratio < 10, row


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
