"""Simulator sanity checks per kernel family: the schedules do what their docstrings claim.

Programs are lowered from meta tensors (shapes only) and timed with trnscope.sim.simulate; the
checks are ratios and traffic counts, never wall-clock time.
"""

from __future__ import annotations

import pytest
import torch

from .helpers import aten, meta, program_for, sim_ns, summary

pytestmark = pytest.mark.usefixtures("one_physical_core")  # the emitters on one core (LNC=1)


def test_large_bf16_matmul_keeps_tensor_engine_busy():
    s = summary(aten.mm.default, meta(2048, 2048), meta(2048, 2048))
    assert s["bottleneck"] == "tensor"
    assert s["mfu_estimated_percent"] > 80
    assert s["model_flops"] == 2 * 2048 ** 3


def test_linear_layout_needs_no_transpose_kernel_and_stays_efficient():
    """x @ W.T with both operands row-major: DMA transposes feed TensorE, MFU stays high."""
    s = summary(aten.addmm.default, meta(3072), meta(4096, 768), meta(3072, 768).t())
    assert s["mfu_estimated_percent"] > 75
    prog = program_for(aten.addmm.default, meta(3072), meta(4096, 768), meta(3072, 768).t())
    assert not any(i.OPCODE == "TRANSPOSE" for i in prog.instructions)


def test_fp32_matmul_costs_four_times_bf16_on_tensor_engine():
    bf = summary(aten.mm.default, meta(1024, 1024), meta(1024, 1024))
    fp = summary(aten.mm.default, meta(1024, 1024, dtype=torch.float32), meta(1024, 1024, dtype=torch.float32))
    ratio = fp["engines"]["tensor"]["instruction_time_ns"] / bf["engines"]["tensor"]["instruction_time_ns"]
    assert ratio == pytest.approx(4.0, rel=0.05)


def test_fused_attention_beats_its_parts():
    B, H, L, E = 1, 4, 1024, 64
    q = meta(B, H, L, E)
    fused = sim_ns(aten.scaled_dot_product_attention.default, q, q, q)
    parts = (sim_ns(aten.bmm.default, meta(B * H, L, E), meta(B * H, L, E).transpose(1, 2))
             + sim_ns(aten._softmax.default, meta(B * H, L, L), -1, False)
             + sim_ns(aten.bmm.default, meta(B * H, L, L), meta(B * H, L, E)))
    assert fused < 0.8 * parts
    # scores and probabilities never go to HBM: traffic is q, k, v and the output
    s = summary(aten.scaled_dot_product_attention.default, q, q, q)
    assert s["hbm_read_bytes"] + s["hbm_write_bytes"] == 4 * B * H * L * E * 2


def test_causal_attention_skips_blocks_above_the_diagonal():
    q = meta(1, 2, 2048, 64)
    full = program_for(aten.scaled_dot_product_attention.default, q, q, q)
    causal = program_for(aten.scaled_dot_product_attention.default, q, q, q, is_causal=True)
    mm = lambda p: sum(1 for i in p.instructions if i.OPCODE == "MATMUL")  # noqa: E731
    assert mm(causal) < 0.7 * mm(full)
    assert sim_ns(aten.scaled_dot_product_attention.default, q, q, q, is_causal=True) < \
        sim_ns(aten.scaled_dot_product_attention.default, q, q, q)


def test_softmax_reads_its_input_once_and_long_rows_twice():
    x = meta(1024, 2048)
    one = summary(aten._softmax.default, x, -1, False)
    assert one["hbm_read_bytes"] == x.numel() * 2
    long_rows = meta(64, 40000)
    two = summary(aten._log_softmax.default, long_rows, -1, False)
    assert two["hbm_read_bytes"] == 2 * long_rows.numel() * 2


def test_softmax_over_a_leading_dim_loads_whole_rows_by_dma_transpose():
    """No element-wise descriptors and no separate transpose kernel: each load is a DMA transpose
    whose descriptors are whole 2048-element rows of the softmax dim."""
    prog = program_for(aten._softmax.default, meta(2048, 1024), 0, False)
    loads = [i for i in prog.instructions if i.OPCODE == "DMA_DIRECT2D" and i.src.space.value == "hbm"]
    assert loads and all(i.transpose and i.dst.contiguous_run() == 2048 for i in loads)
    assert not any(i.OPCODE == "TRANSPOSE" for i in prog.instructions)


def test_layer_norm_is_one_pass_and_bf16_is_faster():
    x, w = meta(4096, 1024), meta(1024)
    s = summary(aten.native_layer_norm.default, x, [1024], w, w, 1e-5)
    assert x.numel() * 2 < s["hbm_read_bytes"] < x.numel() * 2 + 1024 * 1024   # x once (+ w, b once)
    _, mean, rstd = aten.native_layer_norm.default(x, [1024], w, w, 1e-5)
    stats = sum(t.numel() * t.element_size() for t in (mean, rstd))
    assert s["hbm_write_bytes"] == x.numel() * 2 + stats                       # y, mean and rstd once
    x32, w32 = meta(4096, 1024, dtype=torch.float32), meta(1024, dtype=torch.float32)
    assert s["total_time_ns"] < sim_ns(aten.native_layer_norm.default, x32, [1024], w32, w32, 1e-5)


def test_layer_norm_backward_sums_weight_gradients_on_tensor_engine():
    dy, x = meta(2048, 512, dtype=torch.float32), meta(2048, 512, dtype=torch.float32)
    st = meta(2048, 1, dtype=torch.float32)
    w = meta(512, dtype=torch.float32)
    s = summary(aten.native_layer_norm_backward.default, dy, x, [512], st, st, w, w, [True, True, True])
    assert s["engines"]["tensor"]["instruction_count"] > 0
    assert s["hbm_read_bytes"] < 2.2 * dy.numel() * 4 + 256 * 1024     # dy and x once each


def test_activation_backward_overlaps_dma_and_compute():
    g, x = meta(4096, 1024), meta(4096, 1024)
    s = summary(aten.gelu_backward.default, g, x)
    busiest = max(e["active_time_ns"] for e in s["engines"].values())
    others = sum(e["active_time_ns"] for e in s["engines"].values()) - busiest
    # consecutive tiles overlap (temporaries are released a tile late): the other engines' work hides
    # under the busiest one's
    assert s["total_time_ns"] < busiest + 0.25 * others


def test_copy_and_cat_are_pure_dma():
    for s in (summary(aten.clone.default, meta(2048, 2048)),
              summary(aten.cat.default, [meta(2048, 1024), meta(2048, 1024)], 1)):
        assert s["bottleneck"] == "dma/hbm"
        assert all(e["instruction_count"] == 0 for k, e in s["engines"].items() if k != "dma")
        assert s["dma_transfer_average_bytes"] >= 1 << 20


def test_embedding_reads_only_the_rows_it_gathers():
    table, idx = meta(50000, 768), torch.empty(4096, dtype=torch.int64, device="meta")
    s = summary(aten.embedding.default, table, idx)
    assert s["hbm_read_bytes"] < 4096 * 768 * 2 + 4096 * 8 + 4096    # gathered rows and the indices
    assert s["bottleneck"] == "dma/hbm"


def test_argmax_reads_its_input_once():
    x = meta(512, 8192)
    s = summary(aten.argmax.default, x, 1)
    assert s["hbm_read_bytes"] == x.numel() * 2
