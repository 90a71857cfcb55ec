"""VectorE and ScalarE cannot access PSUM at the same time on NeuronCore-v2 (S1); on NeuronCore-v3
they can, unless they hit the same PSUM bank (S2). Instructions touching only SBUF are not affected."""

import pytest

from trnscope import hw
from trnscope.isa import Act, Activation, Alu, Program, TensorTensor, psum, sbuf
from trnscope.sim import simulate
from trnscope.sim.encode import encode, psum_lock_mask

N = 1024


def _pair(a_space: str, b_space: str, b_bank: int = 0):
    """An independent VectorE add and ScalarE exp: no semaphore between them."""
    p = Program("pair")

    def tile(space, bank, slot):
        if space == "psum":
            return psum(0, 128, (N // 2,), "float32", offset=bank * 2048)
        return sbuf(0, 128, (N,), "float32", offset=slot * 4 * N)

    a = tile(a_space, 0, 0)
    o = sbuf(0, 128, a.free_shape, "float32", offset=2 * 4 * N)
    b = tile(b_space, b_bank, 1)
    ob = sbuf(0, 128, b.free_shape, "float32", offset=3 * 4 * N)
    p.add(TensorTensor(alu=Alu.ADD, in0=a, in1=o, out=o))
    p.add(Activation(func=Act.EXP, inp=b, out=ob))
    return p, 0, 1


def _overlap(tl, i, j) -> float:
    return min(tl.end_ns[i], tl.end_ns[j]) - max(tl.start_ns[i], tl.start_ns[j])


def test_vector_and_scalar_psum_accesses_do_not_overlap_on_trn1():
    p, v, s = _pair("psum", "psum", b_bank=3)  # different banks: trn1 still serialises all of PSUM
    tl = simulate(p, hw.TRN1, cache=False)
    assert _overlap(tl, v, s) <= 0.0
    # the later one waited on the other engine: it pays the dependent-instruction overhead
    later = v if tl.start_ns[v] > tl.start_ns[s] else s
    first = s if later == v else v
    assert tl.start_ns[later] == pytest.approx(tl.end_ns[first])
    eng = "vector" if later == v else "scalar"
    extra = hw.TRN1.dependent_overhead_cycles / hw.TRN1.clock_hz(eng) * 1e9
    alone = simulate(_pair("psum", "psum", 3)[0], hw.TRN1.replace(psum_vector_scalar_exclusive="none"), cache=False)
    assert tl.end_ns[later] - tl.start_ns[later] == pytest.approx(alone.end_ns[later] - alone.start_ns[later] + extra)


@pytest.mark.parametrize("spaces", [("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum")])
def test_sbuf_only_or_one_sided_psum_access_overlaps_on_trn1(spaces):
    p, v, s = _pair(*spaces)
    tl = simulate(p, hw.TRN1, cache=False)
    assert tl.start_ns[v] == tl.start_ns[s] == 0.0
    assert _overlap(tl, v, s) > 0.0


def test_trn2_serialises_only_the_same_bank():
    p, v, s = _pair("psum", "psum", b_bank=3)
    tl = simulate(p, hw.TRN2, cache=False)
    assert tl.start_ns[v] == tl.start_ns[s] == 0.0
    p, v, s = _pair("psum", "psum", b_bank=0)
    tl = simulate(p, hw.TRN2, cache=False)
    assert _overlap(tl, v, s) <= 0.0


def test_lock_masks():
    a = psum(0, 128, (1024,), "float32", offset=2048)  # banks 1 and 2
    ins = Activation(func=Act.EXP, inp=a, out=sbuf(0, 128, (1024,), "float32"))
    assert psum_lock_mask(ins, hw.TRN2) == 0b110
    assert psum_lock_mask(ins, hw.TRN1) == 1
    only_sbuf = Activation(func=Act.EXP, inp=sbuf(0, 128, (8,), "float32"), out=sbuf(0, 128, (8,), "float32"))
    assert psum_lock_mask(only_sbuf, hw.TRN1) == 0


def test_unknown_sharing_mode_is_refused():
    p, _, _ = _pair("psum", "psum")
    with pytest.raises(ValueError, match="psum_vector_scalar_exclusive"):
        encode(p, hw.TRN1.replace(psum_vector_scalar_exclusive="sometimes"))
