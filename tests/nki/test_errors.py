"""Trace-time errors: each names the kernel source line at fault and what to do (docs/nki.md, "Errors")."""

import inspect

import numpy as np
import pytest

import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl
from trnscope.nki import (NkiAllocationError, NkiLegacyError, NkiUninitializedError, NkiUnsupportedError,
                          NkiValidationError)

X = np.zeros((128, 512), np.float32)


def line_of(fn, text: str) -> str:
    """'test_errors.py:<n>' of the first line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return f"test_errors.py:{first + k}"
    raise AssertionError(text)


def out_of(x):
    out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
    nisa.memset(t, 0.0)
    nisa.dma_copy(out, t)
    return out


def raises(kernel_fn, exc, match, marker, *args):
    k = nki.jit(kernel_fn)
    with pytest.raises(exc, match=match) as info:
        k(*(args or (X,)))
    assert line_of(kernel_fn, marker) in str(info.value), str(info.value)
    return info.value


def test_partition_dim_over_128():
    def k(x):
        nl.ndarray((256, 4), nl.float32, buffer=nl.sbuf)  # BAD
        return out_of(x)
    raises(k, NkiValidationError, "partition dim 256 > 128", "# BAD")


def test_moving_free_size_over_512():
    def k(x):
        a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        b = nl.ndarray((128, 1024), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(a, 0.0)
        nisa.memset(b, 0.0)
        acc = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a, b)  # BAD
        return out_of(x)
    raises(k, NkiValidationError, "moving free size 1024 > 512", "# BAD")


def test_matmul_output_crossing_a_psum_bank():
    def k(x):
        a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(a, 0.0)
        nisa.memset(b, 0.0)
        acc = nl.ndarray((128, 1024), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc[:, 256:768], a, b)  # BAD
        return out_of(x)
    raises(k, NkiValidationError, "crosses a 2048-byte PSUM bank boundary", "# BAD")


def test_psum_address_off_a_bank_boundary():
    def k(x):
        nl.ndarray((128, 128), nl.float32, buffer=nl.psum, address=(0, 1024))  # BAD
        return out_of(x)
    raises(k, NkiValidationError, "bank boundary", "# BAD")


@pytest.mark.parametrize("buffer, count, match", [("sbuf", 8, "SBUF capacity exceeded"),
                                                   ("psum", 9, "PSUM capacity exceeded")])
def test_capacity_exceeded_names_the_live_tiles(trn1, buffer, count, match):
    def k(x):
        tiles = []
        for i in range(count):
            if buffer == "sbuf":
                t = nl.ndarray((128, 6144), nl.float32, buffer=nl.sbuf)  # 24 KiB per partition: 8 > 192 KiB
            else:
                t = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)  # BANK: one bank each, 9 > 8 banks
            nisa.memset(t, 0.0)
            tiles.append(t)
        for t in tiles:  # all live at once
            s = nl.ndarray((128, 1), nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(s, nl.add, t, axis=1)
        return out_of(x)
    err = raises(k, NkiAllocationError, match, "24 KiB" if buffer == "sbuf" else "# BANK")
    assert "Live now:" in str(err) and "created at test_errors.py:" in str(err)


def test_overlapping_address_placements():
    def k(x):
        a = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 0))
        b = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf, address=(0, 128))  # BAD
        nisa.memset(a, 0.0)
        nisa.memset(b, 1.0)
        nisa.tensor_tensor(a, a, b, nl.add)
        return out_of(x)
    raises(k, NkiAllocationError, "overlapping address= placements", "# BAD")


def test_reading_never_written_memory():
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(u, t)  # BAD
        return out_of(x)
    raises(k, NkiUninitializedError, "never written", "# BAD")


def test_reading_partly_written_memory():
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t[:, 0:256], x[:, 0:256])
        u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(u, t)  # BAD
        return out_of(x)
    err = raises(k, NkiUninitializedError, "partly unwritten", "# BAD")
    assert "reads 32768 element(s)" in str(err)


def test_partly_written_tile_read_only_where_written_is_fine():
    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t[:, 0:256], x[:, 0:256])
        nisa.dma_copy(t[:, 256:512], x[:, 256:512])
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out
    x = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    np.testing.assert_array_equal(k(x), x)


def test_uninitialized_reads_can_be_downgraded(monkeypatch):
    monkeypatch.setenv("TRNSCOPE_NKI_UNINITIALIZED", "warn")

    @nki.jit
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(out, t)
        return out
    with pytest.warns(UserWarning, match="nothing has written"):
        got = k(X)
    assert np.isnan(got).all()  # the interpreter's sentinels, as Neuron's simulator fills new tensors


def test_accumulating_into_uninitialized_psum():
    def k(x):
        a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(a, 0.0)
        nisa.memset(b, 0.0)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a, b, accumulate=True)  # BAD
        return out_of(x)
    raises(k, NkiUninitializedError, "uninitialised PSUM", "# BAD")


def test_accumulating_onto_a_memset_psum_tile():
    def k(x):
        a = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(a, 0.0)
        nisa.memset(b, 0.0)
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        nisa.memset(acc, 0.0)
        nisa.nc_matmul(acc, a, b, accumulate=True)  # BAD
        return out_of(x)
    raises(k, NkiValidationError, "no matmul started", "# BAD")


def test_hardware_rules_from_the_isa_validator_name_the_line():
    def k(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        u = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(u[16:80, :], t[16:80, :])  # BAD: 64 partitions may start at 0 or 64 only
        return out_of(x)
    raises(k, NkiValidationError, "cannot start at partition 16", "# BAD")


def test_legacy_constructs_inside_nki_kernels():
    def with_mask(x):
        nl.load(x[0:128, :], mask=None)  # BAD
        return out_of(x)
    raises(with_mask, NkiLegacyError, "mask=.*slice the operands", "# BAD")

    def returning_tile(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(t, x)
        nisa.tensor_copy(src=t)  # BAD
        return out_of(x)
    with pytest.raises(NkiLegacyError, match="destination comes first"):
        nki.jit(returning_tile)(X)

    for removed in (nki.benchmark, nki.profile, nki.baremetal, nki.simulate_kernel):
        with pytest.raises(NkiLegacyError, match="not available in nki"):
            removed(lambda: None)


def test_neuronxcc_inside_an_nki_kernel_is_an_error():
    nki.install_aliases()
    import neuronxcc.nki.language as nl01

    def k(x):
        nl01.load(x)  # BAD
        return out_of(x)
    raises(k, NkiLegacyError, "compile error inside nki", "# BAD")


def test_unsupported_instructions_say_so():
    def k(x):
        nisa.topk(None, None, None, 8)
    with pytest.raises(NkiUnsupportedError, match="not emulated"):
        nki.jit(k)(X)

    def e(x):
        t = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.exponential(t, t)  # BAD
    raises(e, NkiValidationError, "NeuronCore-v4", "# BAD")


def test_outputs_must_be_shared_hbm():
    @nki.jit
    def k(x):
        return nl.ndarray(x.shape, x.dtype, buffer=nl.hbm)
    with pytest.raises(NkiValidationError, match="shared_hbm"):
        k(X)
