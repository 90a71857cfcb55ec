"""Whole tiled kernels (tests/interp/programs.py) against NumPy/torch, in float32 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trnscope import interp
from trnscope.isa import ProgramError, validate
from trnscope.hw import get_spec

from . import programs as P
from .helpers import as_dtype, close, rand, t32

DTYPES = ["float32", "bfloat16"]


def run(prog, inputs):
    validate(prog, get_spec())
    return interp.run(prog, inputs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", [(256, 384, 640), (130, 200, 530), (64, 128, 512)])
def test_tiled_matmul(dtype, M, K, N):
    a = rand((M, K), dtype, seed=1)
    b = rand((K, N), dtype, seed=2)
    out = run(P.tiled_matmul(M, K, N, dtype), {"lhsT": np.ascontiguousarray(a.T), "rhs": b})["out"]
    assert out.shape == (M, N) and out.dtype == a.dtype
    ref = t32(a).double() @ t32(b).double()  # exact reference; the device accumulates in FP32
    close(out, as_dtype(ref.float(), dtype), dtype, rtol=1e-2 if dtype == "bfloat16" else 1e-4, atol=1e-3)


def test_matmul_fp32_output_of_bf16_inputs_is_fp32_accumulation():
    M, K, N = 128, 384, 512
    a, b = rand((M, K), "bfloat16", seed=3), rand((K, N), "bfloat16", seed=4)
    out = run(P.tiled_matmul(M, K, N, "bfloat16", out_dtype="float32"), [np.ascontiguousarray(a.T), b])["out"]
    ref = t32(a).double() @ t32(b).double()
    close(out, ref, rtol=1e-5, atol=1e-5)  # bf16 products are exact in FP32: only FP32 summation error


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("column", [False, True], ids=["row_bcast", "col_bcast"])
def test_broadcast_add(dtype, column):
    R, C = 300, 200
    a = rand((R, C), dtype, seed=5)
    b = rand((R, 1) if column else (C,), dtype, seed=6)
    out = run(P.broadcast_add(R, C, dtype, column=column), {"a": a, "b": b})["out"]
    # FP32 add then one RNE rounding to the output dtype: bit-identical to torch doing the same
    np.testing.assert_array_equal(out, as_dtype(t32(a) + t32(b), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_reduce_partial_last_tile(dtype):
    R, C = 300, 1000
    x = rand((R, C), dtype, seed=7)
    res = run(P.row_reduce(R, C, dtype), [x])
    close(res["sum"], as_dtype(t32(x).double().sum(1).float(), dtype), dtype, atol=1e-3 if dtype == "float32" else 0.1)
    np.testing.assert_array_equal(res["max"], x.max(axis=1))  # max is exact in any dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(dtype):
    R, C = 300, 1000
    x = rand((R, C), dtype, seed=8, lo=-4, hi=4)
    out = run(P.softmax(R, C, dtype), [x])["out"]
    close(out, as_dtype(torch.softmax(t32(x), dim=1), dtype), dtype, atol=1e-7)
    close(out.astype(np.float32).sum(1), np.ones(R), rtol=1e-2 if dtype == "bfloat16" else 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm(dtype):
    R, C = 300, 1000
    x = rand((R, C), dtype, seed=9, lo=-3, hi=5)
    g, b = rand((C,), dtype, seed=10), rand((C,), dtype, seed=11)
    out = run(P.layernorm(R, C, dtype), {"x": x, "gamma": g, "beta": b})["out"]
    ref = torch.nn.functional.layer_norm(t32(x), (C,), t32(g), t32(b), eps=1e-5)
    close(out, as_dtype(ref, dtype), dtype, atol=1e-4 if dtype == "float32" else 2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_gather(dtype):
    V, D, N = 1000, 64, 300
    table = rand((V, D), dtype, seed=12)
    ids = np.random.default_rng(13).integers(0, V, size=N).astype(np.int32)
    out = run(P.embedding(V, D, N, dtype), {"table": table, "ids": ids})["out"]
    np.testing.assert_array_equal(out, table[ids])  # a gather moves bits


def test_gather_out_of_range_names_the_instruction():
    V, D, N = 50, 8, 130
    prog = P.embedding(V, D, N)
    ids = np.zeros(N, np.int32)
    ids[129] = V  # second tile, partition 1
    with pytest.raises(ProgramError, match=r"instruction #\d+ q\d+:DMA_GATHER.*gather index 50 at partition 1 is "
                                           r"out of range: the table has 50 rows"):
        interp.run(prog, {"table": rand((V, D)), "ids": ids})
    ids[129] = -3
    with pytest.raises(ProgramError, match="gather index -3"):
        interp.run(prog, {"table": rand((V, D)), "ids": ids})


@pytest.mark.parametrize("accumulate", [True, False])
def test_scatter(accumulate):
    V, D, N = 40, 16, 150
    table, src = rand((V, D), seed=14), rand((N, D), seed=15)
    ids = np.random.default_rng(16).integers(0, V, size=N).astype(np.int32)
    out = run(P.index_add(V, D, N, accumulate=accumulate), {"table": table, "ids": ids, "src": src})["out"]
    if accumulate:
        ref = torch.from_numpy(table).index_add(0, torch.from_numpy(ids).long(), torch.from_numpy(src)).numpy()
        close(out, ref)
    else:
        ref = table.copy()
        for i in range(N):  # in order: the last writer of a row wins
            ref[ids[i]] = src[i]
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dma_transpose(dtype):
    R, C = 200, 96
    x = rand((R, C), dtype, seed=17)
    out = run(P.dma_transpose(R, C, dtype), [x])["out"]
    np.testing.assert_array_equal(out, x.T)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_transpose(dtype):
    x = rand((96, 128), dtype, seed=18)
    out = run(P.tensor_transpose(96, 128, dtype), [x])["out"]
    np.testing.assert_array_equal(out, x.T)


def test_neff_round_trip_computes_the_same():
    from trnscope.isa import neff

    prog = P.layernorm(130, 700, "bfloat16")
    back = neff.from_bytes(neff.to_bytes(prog))
    x = rand((130, 700), "bfloat16", seed=19)
    g, b = rand((700,), "bfloat16", seed=20), rand((700,), "bfloat16", seed=21)
    inputs = {"x": x, "gamma": g, "beta": b}
    np.testing.assert_array_equal(interp.run(back, inputs)["out"], interp.run(prog, inputs)["out"])
