"""softmax / log_softmax (any dim, long rows, fully masked rows) and their backward passes."""

from __future__ import annotations

import pytest
import torch

from .helpers import DTYPES, aten, check, randn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [aten._softmax.default, aten._log_softmax.default], ids=["softmax", "log_softmax"])
def test_softmax_over_any_dim(op, dtype):
    x = randn(200, 96, dtype=dtype, seed=1, scale=3)
    check(op, x, -1, False)                       # last dim, partial last 128-row tile
    check(op, x, 0, False)                        # rows contiguous: DMA transpose in and out
    x3 = randn(3, 50, 140, dtype=dtype, seed=2)
    check(op, x3, 1, False)
    check(op, x3.transpose(1, 2), 2, False)       # non-contiguous view


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [aten._softmax.default, aten._log_softmax.default], ids=["softmax", "log_softmax"])
def test_long_rows_take_two_passes_and_survive_minus_inf(op, dtype):
    x = randn(5, 7000, dtype=dtype, seed=3, scale=4)
    x[1, :3000] = float("-inf")                   # the first chunk of row 1 is all -inf
    check(op, x, 1, False)


def test_softmax_of_fully_masked_row_is_nan_and_safe_softmax_gives_zeros():
    x = randn(20, 30, seed=4)
    x[3] = float("-inf")
    check(aten._softmax.default, x, -1, False)    # NaN row, as PyTorch
    check(aten._safe_softmax.default, x, -1)      # zeros
    big = randn(3, 20000, seed=5)
    big[0] = float("-inf")
    check(aten._safe_softmax.default, big, -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_backward(dtype):
    x = randn(150, 70, dtype=dtype, seed=6, scale=2)
    g = randn(150, 70, dtype=dtype, seed=7)
    y = torch.softmax(x.float(), -1).to(dtype)
    check(aten._softmax_backward_data.default, g, y, 1, dtype)
    check(aten._softmax_backward_data.default, g, y, 0, dtype)
    ly = torch.log_softmax(x.float(), -1).to(dtype)
    check(aten._log_softmax_backward_data.default, g, ly, 1, dtype)
    check(aten._log_softmax_backward_data.default, g.t(), ly.t(), 0, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_backward_over_rows_too_long_for_one_tile(dtype):
    """A 60000-wide row (a vocabulary): the row sum over chunks, then the gradient read again."""
    x = randn(130, 6000, dtype=dtype, seed=9, scale=2)
    g = randn(130, 6000, dtype=dtype, seed=10)
    y = torch.softmax(x.float(), -1).to(dtype)
    check(aten._softmax_backward_data.default, g, y, 1, dtype)
    ly = torch.log_softmax(x.float(), -1).to(dtype)
    check(aten._log_softmax_backward_data.default, g, ly, 1, dtype)
    check(aten._log_softmax_backward_data.default, g.t(), ly.t(), 0, dtype)   # rows by DMA transpose


def test_composite_softmax_names_used_by_graphs():
    x = randn(40, 33, seed=8)
    check(aten.softmax.int, x, 1)
    check(aten.log_softmax.int, x, 0)
