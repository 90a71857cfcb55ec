"""Scatter-family and pooling kernels (kernels/scatter.py, kernels/pooling.py) against PyTorch on CPU.

Each lowering runs through the interpreter in float32 and bfloat16 on shapes with more than one
128-row tile, index chunks longer than one mask tile, duplicate and negative indices, padding,
dilation, ceil mode, and 0-dim / empty tensors. ``COVERAGE`` gives tests/compiler/test_lowering_coverage.py
one sample per registered name.
"""

from __future__ import annotations

import pytest
import torch

from .helpers import DTYPES, aten, check, randint, randn

COVERAGE: dict[str, tuple] = {}


def sample(name: str, op, *args, **kwargs) -> None:
    COVERAGE[name] = (op, args, kwargs)


X = randn(5, 7, seed=301)
SRC = randn(4, 6, seed=302)
IDX0 = randint(0, 5, (4, 6), seed=303)
IDX1 = randint(0, 7, (4, 6), seed=304)
sample("aten::scatter.src", aten.scatter.src, X, 1, IDX1, SRC)
sample("aten::scatter_.src", aten.scatter_.src, X.clone(), 1, IDX1, SRC)
sample("aten::scatter.value", aten.scatter.value, X, 0, IDX0, 2.5)
sample("aten::scatter_.value", aten.scatter_.value, X.clone(), 0, IDX0, -1.0)
sample("aten::scatter.reduce", aten.scatter.reduce, X, 1, IDX1, SRC, reduce="multiply")
sample("aten::scatter_.reduce", aten.scatter_.reduce, X.clone(), 0, IDX0, SRC, reduce="add")
sample("aten::scatter_add", aten.scatter_add.default, X, 0, IDX0, SRC)
sample("aten::scatter_add_", aten.scatter_add_.default, X.clone(), 1, IDX1, SRC)
sample("aten::scatter_reduce.two", aten.scatter_reduce.two, X, 0, IDX0, SRC, "mean", include_self=False)
sample("aten::scatter_reduce_.two", aten.scatter_reduce_.two, X.clone(), 1, IDX1, SRC, "amax")
SLICE_IDX = torch.tensor([0, 4, 2, 4])
sample("aten::index_add", aten.index_add.default, X, 0, SLICE_IDX, randn(4, 7, seed=305), alpha=2)
sample("aten::index_add_", aten.index_add_.default, X.clone(), 1, torch.tensor([6, 0, 6]), randn(5, 3, seed=306))
sample("aten::index_copy", aten.index_copy.default, X, 1, torch.tensor([6, 0, 3]), randn(5, 3, seed=307))
sample("aten::index_copy_", aten.index_copy_.default, X.clone(), 0, torch.tensor([3, 1]), randn(2, 7, seed=308))
sample("aten::index_fill.int_Scalar", aten.index_fill.int_Scalar, X, 1, torch.tensor([-1, 0]), -3.0)
sample("aten::index_fill_.int_Scalar", aten.index_fill_.int_Scalar, X.clone(), 0, torch.tensor([2]), 7.0)
sample("aten::index_fill.int_Tensor", aten.index_fill.int_Tensor, X, 0, torch.tensor([1, 3]), torch.tensor(4.0))
sample("aten::index_fill_.int_Tensor", aten.index_fill_.int_Tensor, X.clone(), 1, torch.tensor([5]),
       torch.tensor(-4.0))
IMG = randn(2, 3, 9, 11, seed=309)
VOL = randn(2, 2, 5, 6, 7, seed=310)
sample("aten::avg_pool2d", aten.avg_pool2d.default, IMG, [3, 2], [2, 2], [1, 1], True, False)
sample("aten::avg_pool3d", aten.avg_pool3d.default, VOL, [2, 3, 2], [2, 2, 1], [1, 1, 0])
sample("aten::max_pool2d_with_indices", aten.max_pool2d_with_indices.default, IMG, [3, 2], [2, 2], [1, 1], [1, 2],
       True)
sample("aten::max_pool3d_with_indices", aten.max_pool3d_with_indices.default, VOL, [2, 3, 2], [1, 2, 2],
       [1, 1, 1], [2, 1, 1])
sample("aten::_adaptive_avg_pool2d", aten._adaptive_avg_pool2d.default, IMG, [4, 5])
sample("aten::_adaptive_avg_pool3d", aten._adaptive_avg_pool3d.default, VOL, [3, 2, 4])
sample("aten::trace", aten.trace.default, randn(9, 6, seed=341))
sample("aten::vdot", aten.vdot.default, randn(50, seed=342), randn(50, seed=343))


@pytest.mark.parametrize("name", sorted(COVERAGE))
def test_coverage_sample_float32(name):
    op, args, kwargs = COVERAGE[name]
    check(op, *args, **kwargs)


# --- scatter family ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_modes(dtype, reduce, include_self):
    x, src = randn(5, 7, seed=311, dtype=dtype), randn(4, 6, seed=312, dtype=dtype)
    check(aten.scatter_reduce.two, x, 0, randint(0, 5, (4, 6), seed=313), src, reduce, include_self=include_self)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_long_rows_and_many_tiles(dtype):
    # 150 rows (two tiles), index rows of 3000 (several mask chunks, reloaded per k chunk), K = 300
    x, src = randn(200, 300, seed=314, dtype=dtype), randn(150, 3000, seed=315, dtype=dtype)
    idx = randint(0, 300, (150, 3000), seed=316)
    check(aten.scatter_reduce.two, x, 1, idx, src, "amax")
    check(aten.scatter_add.default, x, 1, idx[:, :1500], src)
    # duplicates: the last source per position wins, as in PyTorch's serial loop
    check(aten.scatter.src, x, 1, idx[:, :1200], src)


def test_scatter_index_smaller_than_self_and_non_contiguous():
    x = randn(9, 8, seed=317).t()                       # non-contiguous self
    idx = randint(0, 8, (3, 5), seed=318)                 # rows 3..7 of dim 0 stay as they are
    check(aten.scatter_add.default, x, 0, idx, randn(6, 6, seed=319))
    check(aten.scatter.value, x, 1, randint(0, 9, (2, 4), seed=320), 0.5)


def test_scatter_0dim_and_empty():
    check(aten.scatter_add.default, torch.tensor(1.0), 0, torch.tensor(0), torch.tensor(2.0))
    # empty views over real storage (verify binds each view's storage span)
    check(aten.scatter.src, randn(3, 4, seed=321), 0, randint(0, 3, (2, 4), seed=338)[:0], randn(2, 4, seed=322))
    check(aten.index_add.default, randn(4, 3, seed=323), 0, torch.tensor([1, 2])[:0], randn(2, 3, seed=339)[:0])


def test_scatter_integer_dtype():
    x = randint(-50, 50, (6, 5), seed=324, dtype=torch.int32)
    src = randint(-50, 50, (6, 5), seed=325, dtype=torch.int32)
    idx = randint(0, 5, (6, 5), seed=326)
    check(aten.scatter_add.default, x, 1, idx, src)
    check(aten.scatter_reduce.two, x, 1, idx, src, "amin", include_self=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_slices(dtype):
    x = randn(140, 6, 5, seed=327, dtype=dtype)
    check(aten.index_add.default, x, 1, torch.tensor([5, 0, 5, 2]), randn(140, 4, 5, seed=328, dtype=dtype),
          alpha=-1.5)
    check(aten.index_copy.default, x, 2, torch.tensor([4, 1]), randn(140, 6, 2, seed=329, dtype=dtype))
    check(aten.index_fill.int_Scalar, x, 0, torch.tensor([-1, 3, 129]), 9.0)
    check(aten.index_fill.int_Tensor, x, 2, torch.tensor([0]), torch.tensor(-2.0, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_slices_by_indirect_dma(dtype):
    """Long slices move by the DMA engines' indirect scatter (self copied, then 128 slices per DMA
    written or accumulated), with duplicate and negative indices, a strided source, slices of several
    dims and one cut in pieces."""
    from .helpers import program_for

    x = randn(300, 600, seed=330, dtype=dtype)
    idx = torch.cat([randint(0, 300, (190,), seed=331), torch.tensor([7, 7, 299, 0])])
    src = randn(194, 600, seed=332, dtype=dtype)
    check(aten.index_add.default, x, 0, idx, src, alpha=0.5)
    assert any(type(i).__name__ == "DmaScatter" for i in program_for(aten.index_add.default, x, 0, idx, src).instructions)
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(3))[:150]
    check(aten.index_copy.default, x, 0, perm, randn(600, 150, seed=333, dtype=dtype).t())   # strided source
    check(aten.index_fill.int_Scalar, x, 0, torch.cat([idx, torch.tensor([-1, -300])]), -2.5)
    check(aten.index_fill.int_Tensor, x, 0, idx[:20], torch.tensor(4.0, dtype=dtype))
    v = randn(6, 40, 50, 60, seed=334, dtype=dtype)
    check(aten.index_add.default, v, 1, randint(0, 40, (30,), seed=335), randn(6, 30, 50, 60, seed=336, dtype=dtype))
    wide = randn(200, 20000, seed=337, dtype=dtype)                        # a slice cut in two DMAs
    check(aten.index_copy.default, wide, 0, torch.tensor([5, 199, 0]), randn(3, 20000, seed=338, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_of_an_index_expanded_over_the_slice_moves_slices(dtype):
    """``scatter_add(0, idx[:, None].expand(-1, D), src)`` (message passing, bincount-style sums) is an
    index_add: it takes the same indirect DMA, also for a partial slice and a narrower source."""
    from .helpers import program_for

    x = randn(300, 700, seed=340, dtype=dtype)
    idx = randint(0, 300, (500,), seed=341)
    src = randn(500, 700, seed=342, dtype=dtype)
    full = idx[:, None].expand(-1, 700)
    check(aten.scatter_add.default, x, 0, full, src)
    assert any(type(i).__name__ == "DmaScatter" for i in program_for(aten.scatter_add.default, x, 0, full, src).instructions)
    check(aten.scatter_reduce.two, x, 0, full, src, "sum")
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(4))[:200]
    check(aten.scatter.src, x, 0, perm[:, None].expand(-1, 600), randn(200, 650, seed=343, dtype=dtype))
    check(aten.scatter.value, x.t(), 1, perm[None, :].expand(500, -1), 1.5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_element_scatter_along_a_long_dim_by_indirect_dma(dtype):
    """Each index element to its own place along a long dim: one DMA descriptor per element (the
    one-hot kernel's K x J comparisons cost more), duplicates summed (scatter_add) or the last one
    kept (scatter), other dims and a narrower index included."""
    from .helpers import program_for

    x = randn(200, 3000, dtype=dtype, seed=350)
    idx = randint(0, 3000, (150, 1500), seed=351)               # duplicates within rows
    src = randn(180, 1600, dtype=dtype, seed=352)
    check(aten.scatter_add.default, x, 1, idx, src)
    assert any(type(i).__name__ == "DmaScatter" for i in program_for(aten.scatter_add.default, x, 1, idx, src).instructions)
    check(aten.scatter_reduce.two, x, 1, idx, src, "sum")
    g = torch.Generator().manual_seed(5)
    perm = torch.stack([torch.randperm(3000, generator=g)[:1200] for _ in range(120)])
    check(aten.scatter.src, x, 1, perm, src)
    check(aten.scatter.value, x, 1, perm, -1.5)
    col = randint(0, 2500, (2000, 3), seed=353)                  # along dim 0
    check(aten.scatter_add.default, randn(2500, 4, dtype=dtype, seed=354), 0, col, randn(2000, 3, dtype=dtype, seed=355))


@pytest.mark.parametrize("op", ["aten::index_add", "aten::index_copy", "aten::index_fill.int_Scalar"])
def test_index_slices_run_at_hbm_speed(op):
    """The representative calls (docs/roofline-report.md) were 1100-2400x their bound with one-hot
    matching. Now HBM-bound: self is copied before the scatter (which rows the index overwrites is
    known only at run time), 1.33-1.67x the bound's bytes, so up to 2.5x the bound on trn1."""
    from trnscope.device.roofline_sweep import measure

    for target in ("trn1", "trn2"):
        row = measure(op, target)
        assert not row.error and row.ratio < 2.5 and row.bottleneck == "dma/hbm" and row.mbu_percent > 50, row


# --- trace / vdot --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_and_vdot(dtype):
    check(aten.trace.default, randn(20, 30, seed=344, dtype=dtype).t())           # transposed view
    check(aten.trace.default, randn(300, 301, seed=345, dtype=dtype)[:, ::150])  # 3 columns of a wide matrix
    check(aten.vdot.default, randn(20000, seed=346, dtype=dtype), randn(40000, seed=347, dtype=dtype)[::2],
          rtol=5e-2 if dtype == torch.bfloat16 else None, atol=5e-1 if dtype == torch.bfloat16 else None)
    check(aten.vdot.default, randn(1, seed=348, dtype=dtype)[:0], randn(1, seed=349, dtype=dtype)[:0])


# --- pooling -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_avg_pool2d_variants(dtype):
    x = randn(2, 3, 9, 11, seed=330, dtype=dtype)
    check(aten.avg_pool2d.default, x, [3, 3], [2, 2], [1, 1], True, False)     # ceil mode, padding excluded
    check(aten.avg_pool2d.default, x, [3, 3], [2, 1], [1, 0], True, True, 5)   # divisor override
    check(aten.avg_pool2d.default, x[0], [2, 2])                              # unbatched
    big = randn(130, 1, 60, 70, seed=331, dtype=dtype)                        # two row tiles, chunked planes
    check(aten.avg_pool2d.default, big, [3, 3], [1, 1], [1, 1], False, False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_with_indices(dtype):
    x = randn(2, 3, 9, 11, seed=332, dtype=dtype)
    check(aten.max_pool2d_with_indices.default, x, [2, 2])
    big = randn(130, 1, 60, 70, seed=333, dtype=dtype)
    check(aten.max_pool2d_with_indices.default, big, [3, 3], [2, 2], [1, 1])
    check(aten.max_pool3d_with_indices.default, randn(2, 2, 5, 6, 7, seed=334, dtype=dtype), [2, 3, 2], [1, 2, 2],
          [1, 1, 1], [2, 1, 1], True)


def test_max_pool_all_minus_inf_and_nan_windows():
    x = torch.full((1, 1, 4, 4), float("-inf"))
    x[0, 0, 1, 1] = float("nan")
    # -inf windows report their first in-bounds cell, NaN wins wherever it is in the window
    check(aten.max_pool2d_with_indices.default, x, [2, 2], [1, 1], [1, 1])
    check(aten.max_pool2d_with_indices.default, x, [3, 3], [2, 2], [1, 1], [2, 2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_avg_pool(dtype):
    check(aten._adaptive_avg_pool2d.default, randn(130, 3, 9, 11, seed=335, dtype=dtype), [4, 5])
    check(aten._adaptive_avg_pool2d.default, randn(3, 7, 5, seed=336, dtype=dtype), [7, 1])   # unbatched
    check(aten._adaptive_avg_pool3d.default, randn(2, 2, 5, 6, 7, seed=337, dtype=dtype), [3, 2, 4])


def test_empty_pooling_output():
    check(aten.avg_pool2d.default, randn(1, 3, 4, 4, seed=340)[:0], [2, 2])
