"""Data movement: copies and casts, cat/stack, fills, arange, triu/tril, embedding, index_select,
gather and embedding's backward."""

from __future__ import annotations

import pytest
import torch

from trnscope.compiler import OpCall
from trnscope.compiler.opcall import meta_of
from trnscope.compiler.verify import run_lowered

from .helpers import DTYPES, aten, check, program_for, randint, randn, run_call, sim_ns


@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_across_layouts_and_dtypes(dtype):
    x = randn(130, 70, dtype=dtype, seed=1, scale=8)
    check(aten.clone.default, x)
    check(aten.clone.default, x.t())                                           # transposed source
    check(aten._to_copy.default, x, dtype=torch.float16)
    check(aten._to_copy.default, x, dtype=torch.int32)                         # float -> int truncates
    check(aten._to_copy.default, randint(-5, 5, (30, 40), seed=2), dtype=dtype)
    check(aten.copy_.default, torch.empty(70, 130), x.t())
    check(aten.copy_.default, torch.empty(4, 130, 70, dtype=dtype), x)         # broadcast
    check(aten.copy_.default, torch.empty(130, 70, dtype=torch.bool), x)


def test_copy_from_writes_its_second_argument():
    """aten::_copy_from(self=src, dst) has no CPU kernel to compare with: the expected result is the cast."""
    src, dst = randn(65, 70, dtype=torch.bfloat16, seed=29), torch.empty(65, 70)
    call = OpCall.make("aten::_copy_from", [meta_of(src), meta_of(dst)], [meta_of(dst)], {"non_blocking": False})
    (got,) = run_call(call, [src, dst], [dst])
    torch.testing.assert_close(got, src.float(), rtol=0, atol=0)


def test_copy_of_contiguous_same_dtype_is_one_hbm_to_hbm_dma_per_physical_core():
    from trnscope import hw
    from trnscope.compiler.lowering import lower
    from trnscope.compiler.opcall import from_aten

    x = torch.empty(512, 256)
    for lnc in (1, 2):
        prog = lower(from_aten(aten.clone.default, (x,), {}, (torch.empty_like(x),)), hw.logical_spec("trn2", lnc))
        assert [i.OPCODE for i in prog.instructions] == ["DMA_DIRECT2D"] * lnc


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_of_an_expanded_scalar_is_a_fill(dtype):
    """The gradient of ``x.sum()`` is a scalar expanded to x's shape (every stride 0); copying it
    (contiguous, or a matmul operand made contiguous) once took a 4-byte descriptor per element,
    7 ms for 1024x1024 on trn2. Read once, broadcast on chip and stored as rows, it costs what a
    fill of the same output costs, and no more than a contiguous copy."""
    one = randn(1, dtype=dtype, seed=6, scale=4)[0]
    expanded = one.expand(300, 70)
    check(aten.clone.default, expanded, memory_format=torch.contiguous_format)
    check(aten._to_copy.default, expanded, dtype=torch.float32)
    check(aten.copy_.default, torch.empty(4, 300, 70, dtype=dtype), one.expand(300, 70))
    big = torch.empty(1024, 1024, dtype=dtype)
    expanded_ns = sim_ns(aten.clone.default, big[:1, :1].expand(1024, 1024), memory_format=torch.contiguous_format)
    assert expanded_ns <= sim_ns(aten.fill_.Scalar, big, 1.0) * 1.05
    assert expanded_ns <= 2 * sim_ns(aten.clone.default, big)


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_of_an_element_strided_source_reads_whole_spans(dtype):
    """x[:, ::2] (the even half of interleaved RoPE) has no contiguous dim: read one element per
    descriptor it took 1.74 ms for 1024x512 fp32; each row's span read whole and every second element
    picked on chip costs about what a dense copy of the span does."""
    x = randn(300, 140, dtype=dtype, seed=7)
    check(aten.clone.default, x[:, ::2], memory_format=torch.contiguous_format)
    check(aten.clone.default, x[:, 1::3], memory_format=torch.contiguous_format)
    check(aten._to_copy.default, x[::2, 1::2], dtype=torch.float32)
    big = torch.empty(1024, 1024, dtype=dtype)
    strided_ns = sim_ns(aten.clone.default, big[:, ::2], memory_format=torch.contiguous_format)
    assert strided_ns <= 2 * sim_ns(aten.clone.default, big)


def test_dense_copy_runs_on_both_physical_cores_at_lnc2():
    """A contiguous HBM->HBM copy at trn2's LNC=2 is cut in one DMA per physical core, so both
    cores' DMA engines move it: half the time of one core's (which is what LNC=1 takes)."""
    from trnscope import hw
    from trnscope.compiler.lowering import lower
    from trnscope.compiler.opcall import from_aten
    from trnscope.sim import simulate

    x = torch.empty(2048, 2048)
    call = from_aten(aten.clone.default, (x,), {}, (torch.empty_like(x),))
    one, pair = hw.logical_spec("trn2", 1), hw.logical_spec("trn2", 2)
    one_ns = simulate(lower(call, one), one).total_ns
    pair_ns = simulate(lower(call, pair), pair).total_ns
    assert pair_ns < 0.6 * one_ns, (pair_ns, one_ns)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_and_stack(dtype):
    x = randn(130, 70, dtype=dtype, seed=3)
    check(aten.cat.default, [x, x[:, :5], randn(130, 3, dtype=dtype, seed=4)], 1)
    check(aten.cat.default, [x, x[:7]], 0)
    check(aten.cat.default, [x.t(), x.t()], 1)
    check(aten.cat.default, [x, x.to(torch.float32)], 0)                      # promoted dtype
    check(aten.stack.default, [x, x * 2, x + 1], 1)
    check(aten.stack.default, [x, x], 0)


def test_cat_skips_legacy_empty_inputs():
    x = randn(3, 4, seed=5)
    prog = program_for(aten.cat.default, [x, torch.empty(0), x], 0)
    assert len(prog.instructions) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_fills_and_arange(dtype):
    check(aten.fill_.Scalar, torch.empty(130, 70, dtype=dtype), 3.5)
    check(aten.fill_.Scalar, torch.empty(300, dtype=torch.int64), 7)
    check(aten.fill_.Tensor, torch.empty(130, 70, dtype=dtype), torch.tensor(2.5, dtype=dtype))
    check(aten.fill.Scalar, torch.empty(9, 3, dtype=dtype), -1.0)
    check(aten.zero_.default, torch.empty(5, 7, 9, dtype=dtype).transpose(0, 2))
    check(aten.arange.start_step, -1.0, 1.0, 0.013, dtype=dtype)
    check(aten.arange.default, 300, dtype=dtype)
    check(aten.arange.start, 3, 20, dtype=dtype)


def test_integer_arange():
    check(aten.arange.start_step, 0, 1000, 3, dtype=torch.int64)
    check(aten.arange.start_step, 10, -30, -7, dtype=torch.int32)
    check(aten.arange.start_out, 2, 50, 2, out=torch.empty(24, dtype=torch.int64))
    check(aten.arange.out, 129, out=torch.empty(129, dtype=torch.int64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("diagonal", [-3, 0, 1, 5])
def test_triu_tril(dtype, diagonal):
    x = randn(130, 70, dtype=dtype, seed=6)
    check(aten.triu.default, x, diagonal)
    check(aten.tril.default, x, diagonal)


def test_triu_tril_batched_wide_and_in_place():
    big = randn(2, 200, 2100, seed=7)                  # diagonal, fully kept and fully zero tiles
    check(aten.tril.default, big, 0)
    check(aten.triu.default, big[:, :, ::2], 1)        # strided columns
    check(aten.triu_.default, randn(6, 200, seed=8), 1)
    check(aten.tril_.default, randn(200, 6, seed=9), -1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_and_index_select(dtype):
    w = randn(1000, 64, dtype=dtype, seed=10)
    idx = randint(0, 1000, (4, 100), seed=11)
    check(aten.embedding.default, w, idx)                                  # [128, T] index block
    check(aten.embedding.default, w, idx[:, ::3])                          # strided indices
    check(aten.embedding.default, w.t().contiguous().t(), randint(0, 1000, (7,), seed=12))
    check(aten.embedding.default, w, randint(0, 1000, (300,), seed=13, dtype=torch.int32))
    check(aten.index_select.default, w, 0, randint(0, 1000, (300,), seed=14))
    check(aten.index_select.default, w, 1, randint(0, 64, (10,), seed=15))
    check(aten.index_select.default, randn(3, 50, 4, dtype=dtype, seed=16), 1, torch.tensor([3, 1, 4, 1]))


def test_embedding_rows_longer_than_one_indirect_dma():
    check(aten.embedding.default, randn(10, 9000, seed=17), randint(0, 10, (5,), seed=18))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    x = randn(130, 70, dtype=dtype, seed=19)
    check(aten.gather.default, x, 1, randint(0, 70, (130, 5), seed=20))
    check(aten.gather.default, x, 0, randint(0, 130, (20, 70), seed=21))
    check(aten.gather.default, x.t(), 1, randint(0, 130, (70, 1), seed=22))
    check(aten.gather.default, randn(3, 4, 50, dtype=dtype, seed=23), 2, randint(0, 50, (3, 4, 1), seed=24))
    check(aten.gather.default, x, 1, randint(0, 70, (100, 2500), seed=27))   # index rows in pieces, fewer rows
    check(aten.gather.default, x.t(), 1, randint(0, 130, (70, 3), seed=28).t().contiguous().t())  # strided index


def test_gather_of_rows_too_long_for_sbuf_uses_indirect_dma():
    x, idx = randn(3, 20000, seed=29), randint(0, 20000, (3, 4), seed=30)
    check(aten.gather.default, x, 1, idx)
    prog = program_for(aten.gather.default, x, 1, idx)
    assert {type(i).__name__ for i in prog.instructions} >= {"DmaGather"}


def test_gather_along_rows_in_sbuf_is_one_gpsimd_gather_per_tile_at_hbm_speed():
    """The representative gather (docs/roofline-report.md): 654x its bound with one indirect DMA per
    element; GpSimdE's in-partition gather makes it DMA-bound."""
    from trnscope.device.roofline_sweep import measure

    for target in ("trn1", "trn2"):
        row = measure("aten::gather", target)
        assert not row.error and row.ratio < 2, row


def test_embedding_dense_backward_of_rows_longer_than_a_tile():
    g, idx = randn(300, 20000, seed=44), randint(0, 40, (300,), seed=45)
    check(aten.embedding_dense_backward.default, g, idx, 40, 3, False)
    check(aten.embedding_dense_backward.default, g[:50], idx[:50], 40, -1, True)


def test_embedding_dense_backward_fp32():
    g, idx = randn(4, 300, 64, seed=25), randint(0, 50, (4, 300), seed=26)
    check(aten.embedding_dense_backward.default, g, idx, 50, 3, False)     # padding row stays zero
    check(aten.embedding_dense_backward.default, g, idx, 50, -1, True)     # scale_grad_by_freq
    check(aten.embedding_dense_backward.default, g[0, :7], idx[0, :7], 50, -1, False)


def test_embedding_dense_backward_bf16_against_exact_sums():
    g, idx = randn(300, 32, dtype=torch.bfloat16, seed=27), randint(0, 1000, (300,), seed=28)
    _, _, got = run_lowered(aten.embedding_dense_backward.default, (g, idx, 1000, -1, False))
    ref = torch.zeros(1000, 32).index_add_(0, idx, g.float())
    torch.testing.assert_close(got[0].float(), ref.to(torch.bfloat16).float(), rtol=2e-2, atol=2e-2)
