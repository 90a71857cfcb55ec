"""Reductions over any dims: correct through the interpreter, and at HBM speed whichever dim is reduced."""

from __future__ import annotations

import pytest
import torch

from trnscope.hw import get_spec

from .helpers import aten, check, meta, program_for, rand, summary

CASES = [
    ((300, 257), [0]), ((300, 257), [1]), ((7, 130, 5), [0, 2]), ((6, 40, 33), [1]), ((1000, 3), [0]),
    ((1000, 3), [1]), ((130, 4, 9), [0, 1]), ((300, 70, 3), [0, 2]), ((5, 3, 40, 2), [0, 1, 3]), ((4, 700), [0]), ((2, 3, 260), [0, 1, 2]), ((517, 6), [0]),
]


@pytest.mark.parametrize("shape,dims", CASES)
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_reduction_matches_torch(shape, dims, op):
    x = rand(*shape, seed=len(shape) + sum(shape))
    fn = {"sum": aten.sum.dim_IntList, "mean": aten.mean.dim, "amax": aten.amax.default, "amin": aten.amin.default}[op]
    check(fn, x, dims)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reduction_of_a_transposed_view_and_keepdim(dtype):
    x = rand(96, 300, dtype=dtype).t()
    check(aten.sum.dim_IntList, x, [1], True)
    check(aten.amax.default, x, [0], True)
    check(aten.prod.dim_int, rand(40, 6, lo=0.5, hi=1.5), 0)


def _bound_ns(s: dict) -> float:
    """HBM bytes at the rate one core's DMA engines reach HBM (the lower of the two published rates)."""
    spec = get_spec()
    rate = min(spec.hbm_bytes_per_s_per_core, spec.dma_engines * spec.dma_effective_bytes_per_ns * 1e9)
    return (s["hbm_read_bytes"] + s["hbm_write_bytes"]) / rate * 1e9


@pytest.mark.parametrize("dims", [[0], [1]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reducing_either_dim_runs_near_the_hbm_bound(dims, dtype):
    """x.sum(0) read columns with 4-byte descriptors (148 ms for 4096^2 fp32 on trn1): the reduced dim
    now goes on partitions with whole rows on the free axis (ones-matmul on TensorE)."""
    s = summary(aten.sum.dim_IntList, meta(4096, 4096, dtype=dtype), dims)
    assert s["total_time_ns"] < 1.25 * _bound_ns(s)
    prog = program_for(aten.sum.dim_IntList, meta(4096, 4096, dtype=dtype), dims)
    loads = [i for i in prog.instructions if i.OPCODE == "DMA_DIRECT2D" and i.src.space.value == "hbm"]
    assert all(i.src.contiguous_run() * i.src.dtype.itemsize >= 2048 for i in loads)


def test_bias_gradient_sums_rows_on_tensor_engine_and_max_on_vector_engine():
    s = summary(aten.sum.dim_IntList, meta(4096, 4096), [0])
    assert s["engines"]["tensor"]["instruction_count"] > 0
    m = summary(aten.amax.default, meta(4096, 4096, dtype=torch.float32), [0])
    assert m["total_time_ns"] < 1.6 * _bound_ns(m)  # VectorE max of FP32: 2 cycles an element


def test_short_rows_pack_several_to_a_partition():
    for dims in ([0], [1]):
        s = summary(aten.sum.dim_IntList, meta(65536, 8, dtype=torch.float32), dims)
        assert s["total_time_ns"] < 3 * _bound_ns(s) + 2 * get_spec().dma_fixed_latency_ns * 2
        assert s["instruction_count"] < 40


def test_short_inner_run_with_outer_reduced_dims_loads_whole_blocks():
    """x.mean((0, 2)) of [4096, 1000, 3]: 3-element runs inside each kept index; the kept x run block
    goes on the free axis (was one 12-byte descriptor per run: 36 ms on trn2)."""
    s = summary(aten.mean.dim, meta(4096, 1000, 3, dtype=torch.float32), [0, 2])
    assert s["total_time_ns"] < 1.5 * _bound_ns(s)


def test_vdot_and_trace_match_and_vdot_spreads_over_the_partitions():
    check(aten.vdot.default, rand(70000, seed=3), rand(70000, seed=4))
    check(aten.vdot.default, rand(127, seed=5), rand(127, seed=6))
    check(aten.trace.default, rand(300, 200, seed=7))
    s = summary(aten.vdot.default, meta(1 << 20, dtype=torch.float32), meta(1 << 20, dtype=torch.float32))
    assert s["total_time_ns"] < 2 * _bound_ns(s) + 4 * get_spec().dma_fixed_latency_ns
