"""Copies between permuted layouts whose contiguous runs are short on both sides: each tile is
loaded in the source's memory order and stored in the destination's, reordered on chip
(docs/cost-model.md, "Permuted copies")."""

from __future__ import annotations

import pytest
import torch

from trnscope.compiler.lowering import lower
from trnscope.compiler.opcall import from_aten
from trnscope.hw import logical_spec, resolve
from trnscope.sim import simulate

from .helpers import aten, check, randint, randn


def _ns(spec, op, *args) -> float:
    out = op(*args)
    return simulate(lower(from_aten(op, args, {}, (out,)), spec), spec).summary["total_time_ns"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_permuted_copies_are_bit_exact(dtype):
    x = randn(3, 10, 37, 24, dtype=dtype, seed=3, scale=4)
    check(aten.clone.default, x.permute(0, 2, 1, 3), rtol=0, atol=0)        # head shuffle, odd sizes
    check(aten.clone.default, x.permute(2, 0, 3, 1), rtol=0, atol=0)
    check(aten.clone.default, x.permute(1, 3, 0, 2), rtol=0, atol=0)
    y = randn(2, 96, 16, 64, dtype=dtype, seed=4)
    check(aten.clone.default, y.permute(0, 2, 1, 3), rtol=0, atol=0)
    check(aten._to_copy.default, y.permute(0, 2, 1, 3), dtype=torch.float32, rtol=0, atol=0)


def test_permuted_integer_copies_are_exact():
    x = randint(-2**40, 2**40, (4, 33, 8, 40), seed=5)
    check(aten.clone.default, x.permute(0, 2, 1, 3), rtol=0, atol=0)
    y = randint(-2**30, 2**30, (4, 33, 8, 40), seed=6, dtype=torch.int32)
    check(aten.clone.default, y.permute(0, 2, 1, 3), rtol=0, atol=0)


def test_rope_cat_of_transposed_halves_is_exact():
    q = randn(1, 64, 8, 128, dtype=torch.bfloat16, seed=7).transpose(1, 2)
    x1, x2 = q[..., :64], q[..., 64:]
    check(aten.cat.default, [torch.neg(x2), x1], -1, rtol=0, atol=0)


@pytest.mark.parametrize("target,old_us", [("trn1", 312.1), ("trn2", 275.7), ("trn2-lnc2", 138.3)])
def test_head_shuffle_reorders_on_chip(target, old_us):
    """[4, 16, 256, 64] FP32 permute(0, 2, 1, 3).contiguous(): 256 B runs on both sides before
    (old_us, the modelled time of the per-tile path); long runs on both sides now."""
    spec = logical_spec("trn2", 2) if target == "trn2-lnc2" else resolve(target)
    x = torch.randn(4, 16, 256, 64).permute(0, 2, 1, 3)
    assert _ns(spec, aten.clone.default, x) / 1e3 < 0.2 * old_us


@pytest.mark.parametrize("target,old_us", [("trn1", 623.1), ("trn2", 550.6)])
def test_rope_cat_reorders_on_chip(target, old_us):
    spec = resolve(target)
    q = torch.randn(1, 512, 32, 128, dtype=torch.bfloat16).transpose(1, 2)
    x1, x2 = q[..., :64], q[..., 64:]
    assert _ns(spec, aten.cat.default, [torch.neg(x2), x1], -1) / 1e3 < 0.8 * old_us
