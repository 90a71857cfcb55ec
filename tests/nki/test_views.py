"""NkiTensor's view algebra (NKI 0.5+ language guide rules), checked on shapes, strides and offsets."""

import numpy as np
import pytest

import trnscope.nki as nki
import trnscope.nki.isa as nisa
import trnscope.nki.language as nl
from trnscope.nki import NkiLegacyError, NkiValidationError


def traced(fn, *args):
    """Run fn(*args) inside a kernel trace and return what it returns (views only: no instructions)."""
    box = {}

    @nki.jit
    def k(a):
        box["r"] = fn(a, *args)
        out = nl.ndarray((1, 1), nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 1), nl.float32, buffer=nl.sbuf)
        nisa.memset(t, 0.0)
        nisa.dma_copy(out, t)
        return out

    k(np.zeros((4, 128, 32), np.float32))
    return box["r"]


def test_on_chip_indexing_keeps_the_partition_dim():
    def f(a):
        t = nl.ndarray((64, 64, 64), nl.float32, buffer=nl.sbuf)
        return [t[0, 0, 10], t[:, 0], t[:, 0, 10], t[0:64, 0, 0:64], t[:, :, ::2], t[0, ...], t[...]]
    shapes = [v.shape for v in traced(f)]
    assert shapes == [(1, 1), (64, 64), (64, 1), (64, 64), (64, 64, 32), (1, 64, 64), (64, 64, 64)]


def test_strides_offsets_and_hbm_indexing():
    def f(a):
        t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
        return t, t[16:32, 8:40:2], a[1], a[1, 4:8]
    t, v, h, h2 = traced(f)
    assert t.strides == (64, 1) and t.offset == 0 and t.is_contiguous()
    assert v.shape == (16, 16) and v.strides == (64, 2) and v.offset == 16 * 64 + 8 and not v.is_contiguous()
    assert h.shape == (128, 32) and h.offset == 128 * 32       # HBM drops the indexed dim
    assert h2.shape == (4, 32) and h2.offset == 128 * 32 + 4 * 32


def test_view_primitives():
    def f(a):
        t = nl.ndarray((128, 4, 6), nl.float32, buffer=nl.sbuf)
        return (t.permute((0, 2, 1)), t.reshape((128, 24)), t.reshape_dim(2, (2, 3)), t.flatten_dims(1, 2),
                t[:, 0:1, :].broadcast(1, 8), t.expand_dim(1).squeeze_dim(1),
                t.reshape((128, 24)).rearrange(("b", ("h", "w")), ("b", "w", "h"), {"h": 4}),
                t.view(nl.bfloat16), t.select(1, 2), t.slice(2, 1, 5, 2))
    p, r, rd, fl, bc, es, ra, vw, sel, sl = traced(f)
    assert p.shape == (128, 6, 4) and p.strides == (24, 1, 6)
    assert r.shape == (128, 24) and r.strides == (24, 1)
    assert rd.shape == (128, 4, 2, 3) and rd.strides == (24, 6, 3, 1)
    assert fl.shape == (128, 24)
    assert bc.shape == (128, 8, 6) and bc.strides[1] == 0
    assert es.shape == (128, 4, 6)
    assert ra.shape == (128, 6, 4) and ra.strides == (24, 1, 6)
    assert vw.shape == (128, 4, 12) and vw.dtype == nl.bfloat16 and vw.strides == (48, 12, 1)
    assert sel.shape == (128, 6) and sel.offset == 12
    assert sl.shape == (128, 4, 2) and sl.strides == (24, 6, 2) and sl.offset == 1


@pytest.mark.parametrize("make, message", [
    (lambda t: t.permute((1, 0, 2)), "partition dim first"),
    (lambda t: t.broadcast(0, 4), "partition dim"),
    (lambda t: t.reshape((64, 48)), "keep the partition dim"),
    (lambda t: t.permute((0, 2, 1)).reshape((128, 24)), "incompatible with this view's layout"),
    (lambda t: t.flatten_dims(0, 1), "partition dim"),
    (lambda t: t.view(nl.float32)[:, :, 0:3].view(nl.int8)[:, :, ::2].view(nl.float32), "contiguous"),
])
def test_view_rules_refuse_what_the_hardware_cannot_address(make, message):
    def f(a):
        return make(nl.ndarray((128, 4, 6), nl.float32, buffer=nl.sbuf))
    with pytest.raises(NkiValidationError, match=message):
        traced(f)


def test_dtypes_compare_with_numpy_and_torch():
    import torch

    assert nl.float32 == np.float32 and nl.bfloat16 == "bfloat16" and nl.bfloat16 == torch.bfloat16
    assert nl.float32 != nl.bfloat16 and nl.int32.itemsize == 4


def test_legacy_constructs_name_their_replacement():
    with pytest.raises(NkiLegacyError, match="slices"):
        traced(lambda a: nl.arange(128))
    with pytest.raises(NkiLegacyError, match="mgrid.*NKI 0.1"):
        traced(lambda a: nl.mgrid[0:128, 0:32])
    with pytest.raises(NkiLegacyError, match="partition dim is dim 0"):
        traced(lambda a: nl.ndarray((nl.par_dim(128), 4), nl.float32, buffer=nl.sbuf))
    with pytest.raises(NkiLegacyError, match="tensor_copy"):
        def assign(a):
            t = nl.ndarray((128, 4), nl.float32, buffer=nl.sbuf)
            t[0:4, :] = 1.0
        traced(assign)
