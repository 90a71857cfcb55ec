"""Derived access patterns: the same arguments give the same (immutable) pattern, equal to one made
from scratch, and arguments whose text would differ (256 vs 256.0) are never conflated."""

from trnscope.isa import AP, DType, Space, neff, sbuf


def _fresh(ap: AP) -> AP:
    return AP(ap.space, ap.dtype, ap.partitions, ap.dims, ap.start, ap.offset, ap.tensor, ap.pstride)


def test_view_of_the_same_window_is_the_same_pattern():
    buf = sbuf(0, 128, (2048,), "bfloat16", offset=4096)
    a = buf.view(512, [(1, 512)], partitions=64)
    assert buf.view(512, [(1, 512)], partitions=64) is a
    assert buf.view(512, ((1, 512),), partitions=64) is a
    f = _fresh(a)
    assert a == f and hash(a) == hash(f) and a._sid == f._sid and a._fid == f._fid
    assert (a.offset, a.partitions, a.dims) == (4096 + 1024, 64, ((1, 512),))
    assert buf.view(512, [(1, 256)], partitions=64) is not a


def test_view_arguments_that_print_differently_stay_apart():
    buf = sbuf(0, 128, (64,), "float32")
    exact = buf.view(8, [(1, 8)])
    floaty = buf.view(8.0, [(1, 8)])
    assert floaty is not exact and floaty._sid != exact._sid
    assert neff._json(floaty.to_list()) != neff._json(exact.to_list())


def test_hbm_view_and_derived_fields():
    from trnscope.isa import hbm

    h = hbm(3, 128, 4096, [(1, 512)], DType.bfloat16, offset=7)
    v = h.view(100, [(1, 64)], partitions=32)
    assert v is h.view(100, [(1, 64)], partitions=32)
    assert (v.space, v.tensor, v.pstride, v.offset, v.partitions) == (Space.HBM, 3, 4096, 107, 32)
    assert v.rows(1, 8) == _fresh(v.rows(1, 8)) and v.rows(1, 8).offset == 107 + 4096
    assert h.with_dtype(DType.float32).dtype is DType.float32
