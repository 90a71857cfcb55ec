"""NKI 0.1 kernels through neuronxcc.nki, and the jit's caching, grids and in-place arguments."""

import sys
from pathlib import Path

import numpy as np
import pytest

import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl

sys.path.insert(0, str(Path(__file__).parent / "kernels"))


@pytest.fixture(scope="module")
def legacy():
    nki.install_aliases()
    import legacy_kernels

    return legacy_kernels


@pytest.mark.parametrize("rows", [128, 300])
def test_legacy_rmsnorm(legacy, rows):
    x = np.random.randn(rows, 512).astype(np.float32)
    g = np.random.randn(512).astype(np.float32)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True)) * g
    np.testing.assert_allclose(legacy.rmsnorm_01(x, g), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows", [128, 200])
def test_legacy_softmax(legacy, rows):
    x = np.random.randn(rows, 300).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(legacy.softmax_01(x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    names = {type(i).__name__ for i in legacy.softmax_01.last_run.program.instructions}
    assert {"TensorReduce", "Activation", "TensorScalar", "Dma"} <= names


@nki.jit
def add_into(x, out, bias=1.0):
    """Writes ``out`` in place (no return): the caller's array is updated, as nki.simulate does."""
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    y = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(y, t, nl.add, bias)
    nisa.dma_copy(out, y)


def test_in_place_arguments_and_caching():
    x = np.random.rand(64, 32).astype(np.float32)
    out = np.zeros_like(x)
    assert add_into(x, out) is None
    np.testing.assert_allclose(out, x + 1)
    add_into(x, out, bias=2.0)
    np.testing.assert_allclose(out, x + 2)
    assert len(add_into._cache) == 2  # a constant is part of the specialisation
    add_into(x, out, bias=2.0)
    assert len(add_into._cache) == 2
    add_into(np.zeros((128, 32), np.float32), np.zeros((128, 32), np.float32))
    assert len(add_into._cache) == 3  # and so is every shape


@nki.jit
def per_program(x):
    """One row block per SPMD program: program_id picks it (the 0.1 launch-grid style)."""
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0) * nl.num_programs(1) + nl.program_id(1)
    n = nl.num_programs()
    rows = x.shape[0] // n
    t = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x[i * rows:(i + 1) * rows, :])
    y = nl.ndarray((rows, x.shape[1]), x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(y, t, nl.multiply, float(i + 1))
    nisa.dma_copy(out[i * rows:(i + 1) * rows, :], y)
    return out


def test_spmd_grid_shares_shared_hbm_outputs():
    x = np.ones((4 * 32, 16), np.float32)
    got = per_program[2, 2](x)  # 4 programs of a 2 x 2 grid traced into one Program
    np.testing.assert_allclose(got[:, 0], np.repeat([1, 2, 3, 4], 32))


def test_lnc_bracket_must_match_the_runtime(monkeypatch):
    x, out = np.ones((32, 16), np.float32), np.zeros((32, 16), np.float32)
    add_into[1](x, out)
    with pytest.raises(nki.NkiValidationError, match="NCC_EVRF066"):
        add_into[2](x, out)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    with pytest.raises(nki.NkiUnsupportedError, match="LNC=2"):
        add_into[2](x, out)


def test_timeline_without_data_and_the_source_map(trn1):
    from trnscope.nki import ArgSpec

    report = add_into.timeline(ArgSpec((128, 512), "float32"), ArgSpec((128, 512), "float32"))
    assert report.target == "trn1" and report.total_ns > 0 and not hasattr(report, "outputs")
    locs = report.program.meta["nki"]["locations"]
    assert all("test_legacy_and_jit.py:" in loc and "(add_into)" in loc for loc in locs)
    with pytest.raises(nki.NkiError, match="ArgSpec"):
        add_into(ArgSpec((128, 512), "float32"), np.zeros((128, 512), np.float32))
