"""The nki.isa / nki.language calls the examples do not exercise, each against NumPy."""

import numpy as np
import pytest

import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl


def test_iota_and_partition_reduce():
    @nki.jit
    def k(x):
        t = nl.ndarray((64, 4, 8), nl.int32, buffer=nl.sbuf)
        nisa.iota(t, [[10, 4], [1, 8]], offset=5, channel_multiplier=100)
        s = nl.ndarray((64, 32), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(s, x)
        r = nl.ndarray((1, 32), nl.float32, buffer=nl.sbuf)
        nisa.tensor_partition_reduce(r, nl.maximum, s)
        o1 = nl.ndarray((64, 4, 8), nl.int32, buffer=nl.shared_hbm)
        o2 = nl.ndarray((1, 32), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(o1, t)
        nisa.dma_copy(o2, r)
        return o1, o2

    x = np.random.rand(64, 32).astype(np.float32)
    iota, red = k(x)
    p, i, j = np.meshgrid(np.arange(64), np.arange(4), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(iota, 5 + 100 * p + 10 * i + j)
    np.testing.assert_allclose(red[0], x.max(0))
    assert "gpsimd" in {k for k, v in k.last_run.engines().items() if v > 0}


def test_scalar_tensor_tensor():
    @nki.jit
    def k(x, y, s):
        tx, ty = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf), nl.ndarray(y.shape, y.dtype, buffer=nl.sbuf)
        ts = nl.ndarray(s.shape, s.dtype, buffer=nl.sbuf)
        nisa.dma_copy(tx, x)
        nisa.dma_copy(ty, y)
        nisa.dma_copy(ts, s)
        a = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(a, tx, nl.subtract, ts, nl.multiply, ty)  # (x - s) * y
        b = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(b, tx, nl.subtract, 2.0, nl.divide, ty, reverse0=True, reverse1=True)  # y / (2 - x)
        outs = [nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm) for _ in range(2)]
        nisa.dma_copy(outs[0], a)
        nisa.dma_copy(outs[1], b)
        return tuple(outs)

    rng = np.random.default_rng(1)
    x, y = rng.random((128, 64), np.float32), rng.random((128, 64), np.float32) + 0.5
    s = rng.random((128, 1), np.float32)
    a, b = k(x, y, s)
    np.testing.assert_allclose(a, (x - s) * y, rtol=1e-6)
    np.testing.assert_allclose(b, y / (2.0 - x), rtol=1e-6)
    names = [type(i).__name__ for i in k.last_run.program.instructions]
    assert names.count("ScalarTensorTensor") == 2


def test_indirect_gather_and_scatter():
    @nki.jit
    def gather_scatter(table, idx, out_rows):
        P, F = idx.shape[0], table.shape[1]
        ix = nl.ndarray((P, 1), nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(ix, idx)
        rows = nl.ndarray((P, F), table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(rows, table.ap(pattern=[[F, P], [1, F]], vector_offset=ix, indirect_dim=0))
        nisa.dma_copy(out_rows.ap(pattern=[[F, P], [1, F]], vector_offset=ix, indirect_dim=0), rows)
        out = nl.ndarray((P, F), table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, rows)
        return out

    table = np.random.rand(100, 16).astype(np.float32)
    idx = np.random.permutation(100)[:32].astype(np.int32).reshape(32, 1)
    dst = np.zeros((100, 16), np.float32)
    got = gather_scatter(table, idx, dst)
    np.testing.assert_array_equal(got, table[idx[:, 0]])
    np.testing.assert_array_equal(dst[idx[:, 0]], table[idx[:, 0]])   # scattered in place
    assert {type(i).__name__ for i in gather_scatter.last_run.program.instructions} >= {"DmaGather", "DmaScatter"}


def test_dma_transpose_predicated_copy_and_language_wrappers():
    @nki.jit
    def k(a, b, m):
        at = nl.load_transpose2d(a)                   # a^T [64, 128] from HBM [128, 64]
        bt = nl.load(b)
        prod = nl.matmul(at, bt, transpose_x=True)    # at.T @ bt = a @ b  -> PSUM
        y = nl.copy(prod, dtype=nl.float32)
        sm = nl.softmax(y)
        tr = nl.transpose(y[:, 0:64])                 # TensorE transpose to PSUM
        trc = nl.copy(tr)
        mask = nl.load(m)
        keep = nl.ndarray(sm.shape, nl.float32, buffer=nl.sbuf)
        nisa.memset(keep, -1.0)
        nisa.tensor_copy_predicated(keep, sm, mask)
        v = nl.var(y, axis=1)
        bc = nl.broadcast_to(nl.load(b[0:1, :]), (128, 96))
        outs = [nl.ndarray(t.shape, nl.float32, buffer=nl.shared_hbm) for t in (keep, trc, v, bc)]
        for o, t in zip(outs, (keep, trc, v, bc)):
            nl.store(o, t)
        return tuple(outs)

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 96)).astype(np.float32)
    m = (rng.random((128, 96)) > 0.5).astype(np.uint8)
    keep, trc, v, bc = k(a, b, m)
    y = a @ b
    e = np.exp(y - y.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(keep, np.where(m != 0, sm, -1.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trc, y[:, 0:64].T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v[:, 0], y.var(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bc, np.broadcast_to(b[0:1], (128, 96)), rtol=1e-6, atol=1e-6)  # a ones-matmul in fp32: exact


@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_tensor_copy_engines(engine, monkeypatch):
    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(u, t, engine=getattr(nisa.engine, engine))
        out = nl.ndarray(x.shape, nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(out, u)
        return out

    x = np.random.rand(128, 64).astype(np.float32)
    got = k(x)
    np.testing.assert_allclose(got.astype(np.float32), x, rtol=1e-2)
    assert k.last_run.engines()[engine] > 0
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    if engine == "scalar":
        with pytest.raises(nki.NkiValidationError, match="activation"):
            k(x)
