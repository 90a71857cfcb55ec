"""Kernels whose operand is an expanded (stride-0) view: the gradient of ``x.sum()`` (a scalar
expanded to x's shape), a bias gradient ``grad.sum(0)`` of it, a column broadcast along rows.

Read with one 4-byte descriptor per element, each costs what a 2 KiB one does (S6): a [1024, 1024]
FP32 mm with such an operand took 7 ms and its sum(0) 3.5 ms on trn2. The shared operand load
(kernels.common.load) reads the distinct data once and broadcasts it on chip; these tests hold the
results to PyTorch's and the modelled time to the same kernel on a dense operand."""

from __future__ import annotations

import pytest
import torch

from trnscope import hw
from trnscope.compiler.lowering import lower
from trnscope.compiler.opcall import from_aten
from trnscope.isa import DmaInstruction
from trnscope.sim import simulate

from .helpers import DTYPES, aten, check, randint, randn

TARGETS = [("trn1", 1), ("trn2", 2)]   # trn2 at its default LNC=2


def _program(spec, op, *args, **kwargs):
    out = op(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return lower(from_aten(op, args, kwargs, tuple(o for o in outs if isinstance(o, torch.Tensor))), spec)


def _ns(spec, op, *args, **kwargs) -> float:
    return simulate(_program(spec, op, *args, **kwargs), spec).total_ns


def _descriptors(spec, op, *args, **kwargs) -> int:
    prog = _program(spec, op, *args, **kwargs)
    return sum(i.transfer(spec).descriptors for i in prog.instructions if isinstance(i, DmaInstruction))


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_with_expanded_operands_matches_pytorch(dtype):
    """Every way an operand of mm can broadcast: a scalar everywhere, a row repeated down the rows
    (A's free axis reads stride 0 once transposed), a column repeated along the columns (B's)."""
    a, b = randn(130, 200, dtype=dtype, seed=1), randn(200, 70, dtype=dtype, seed=2)
    one = randn(1, dtype=dtype, seed=3)[0]
    check(aten.mm.default, one.expand(130, 200), b)
    check(aten.mm.default, a, one.expand(200, 70))
    check(aten.mm.default, randn(1, 200, dtype=dtype, seed=4).expand(130, 200), b)
    check(aten.mm.default, randn(130, 1, dtype=dtype, seed=5).expand(130, 200), b)
    check(aten.mm.default, a, randn(200, 1, dtype=dtype, seed=6).expand(200, 70))
    check(aten.addmm.default, randn(70, dtype=dtype, seed=7), one.expand(130, 200), b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_of_expanded_tensors_match_pytorch(dtype):
    one = randn(1, dtype=dtype, seed=8, scale=0.5)[0]
    g = one.expand(300, 140)
    for dims in ([0], [1], [0, 1]):
        check(aten.sum.dim_IntList, g, dims)
    check(aten.sum.default, one.expand(70000))                             # one long vector
    check(aten.mean.dim, randn(4, 1, 96, dtype=dtype, seed=9).expand(4, 130, 96), [1])
    check(aten.sum.dim_IntList, randn(300, 1, dtype=dtype, seed=10).expand(300, 140), [0])
    check(aten.amax.default, randn(1, 140, dtype=dtype, seed=11).expand(300, 140), [1])
    check(aten.amax.default, randint(-50, 50, (300, 1), seed=12, dtype=torch.int32).expand(300, 140), [0])
    # the row kernels' loads (var, std, norms): each row a constant, or every row the same
    check(aten.var.correction, randn(300, 1, dtype=dtype, seed=13).expand(300, 140), [1])
    check(aten.std.correction, randn(1, 140, dtype=dtype, seed=14).expand(300, 140), [0])
    check(aten.var.correction, one.expand(70000))


@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_of_partly_expanded_sources_match_pytorch(dtype):
    """A column expanded along the last dim (x[..., None].expand(.., 64).contiguous()), a batch of
    rows repeated, casts on the way, and an integer source (copied exactly)."""
    col = randn(300, 1, dtype=dtype, seed=15)
    check(aten.clone.default, col.expand(300, 64), memory_format=torch.contiguous_format)
    check(aten._to_copy.default, col.expand(300, 64), dtype=torch.float32)
    check(aten.clone.default, randn(4, 1, 96, dtype=dtype, seed=16).expand(4, 130, 96),
          memory_format=torch.contiguous_format)
    check(aten.clone.default, randn(300, 70, dtype=dtype, seed=17)[:, None, :].expand(300, 3, 70),
          memory_format=torch.contiguous_format)
    check(aten.clone.default, randint(-9, 9, (300, 1), seed=18).expand(300, 64), memory_format=torch.contiguous_format)
    check(aten.copy_.default, torch.empty(300, 64, dtype=torch.float32), randint(-9, 9, (300, 1), seed=19).expand(300, 64))


@pytest.mark.parametrize("target,lnc", TARGETS)
def test_matmul_with_an_expanded_operand_costs_what_a_dense_one_does(target, lnc):
    """A [1024, 1024] FP32 mm (--auto-cast=none, so no cast copy makes the operand dense first) with
    one operand a scalar expanded to its shape: its distinct data is one element, so it costs no
    more DMA descriptors than the dense operand and about the same modelled time (7 ms on trn2 when
    each element was a descriptor)."""
    spec = hw.logical_spec(target, lnc)
    dense = torch.empty(1024, 1024)
    expanded = torch.ones(()).expand(1024, 1024)
    dense_ns = _ns(spec, aten.mm.default, dense, dense)
    for a, b in ((expanded, dense), (dense, expanded)):
        assert _ns(spec, aten.mm.default, a, b) <= 1.1 * dense_ns
        assert _descriptors(spec, aten.mm.default, a, b) <= _descriptors(spec, aten.mm.default, dense, dense)


@pytest.mark.parametrize("target,lnc", TARGETS)
def test_bias_gradient_of_an_expanded_gradient_costs_what_a_dense_one_does(target, lnc):
    """``grad.sum(0)`` where grad is the gradient of ``x.sum()`` (a Linear's bias gradient in a
    training step): 3.5 ms per call on trn2 read element by element."""
    spec = hw.logical_spec(target, lnc)
    dense_ns = _ns(spec, aten.sum.dim_IntList, torch.empty(1024, 1024), [0])
    g = torch.ones(()).expand(1024, 1024)
    assert _ns(spec, aten.sum.dim_IntList, g, [0]) <= 1.1 * dense_ns
    assert _ns(spec, aten.sum.default, g) <= 1.1 * _ns(spec, aten.sum.default, torch.empty(1024, 1024))
    col = torch.ones(1024, 1).expand(1024, 1024)
    assert _ns(spec, aten.var.correction, col, [1]) <= 1.2 * _ns(spec, aten.var.correction, torch.empty(1024, 1024), [1])


@pytest.mark.parametrize("target,lnc", TARGETS)
def test_copy_of_a_column_expanded_along_the_last_dim_is_not_per_element(target, lnc):
    """``x[:, None].expand(4096, 64).contiguous()`` writes what a dense [4096, 64] clone writes and
    reads a 64th of it: within twice the dense clone's time (it took 5.6 to 12.6 times as long when
    the source was read one element per descriptor)."""
    spec = hw.logical_spec(target, lnc)
    dense_ns = _ns(spec, aten.clone.default, torch.empty(4096, 64))
    expanded_ns = _ns(spec, aten.clone.default, torch.empty(4096, 1).expand(4096, 64),
                      memory_format=torch.contiguous_format)
    assert expanded_ns <= 2 * dense_ns
