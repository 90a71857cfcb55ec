"""SCALAR_TENSOR_TENSOR end to end: the instruction added in one class (isa) plus its semantics (interp).

Its numerics against NumPy, its rules, its published cost (S9: N for BF16 subtract-then-multiply with
an even N, else 2N) as the simulator prices it, and its NEFF round trip.
"""

from __future__ import annotations

import numpy as np
import pytest

from trnscope import hw, interp
from trnscope.isa import Alu, ProgramError, ScalarTensorTensor, Space, neff, validate
from trnscope.isa.ap import dense_dims
from trnscope.sim import simulate

from . import programs as P
from .helpers import rand

PP = 128


def _program(F, dtype="float32", scalar=0.5, alu0=Alu.SUBTRACT, alu1=Alu.MULTIPLY, reverse0=False, reverse1=False):
    return P.single(PP, F, lambda x0, x1, out: ScalarTensorTensor(
        inp=x0, scalar0=scalar, in1=x1, out=out, alu0=alu0, alu1=alu1, reverse0=reverse0, reverse1=reverse1),
        [dtype, dtype], dtype)


@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, False), (False, True), (True, True)])
def test_numerics_match_two_ops_in_sequence(reverse0, reverse1):
    x, y = rand((PP, 40), seed=1), rand((PP, 40), seed=2)
    prog = _program(40, alu0=Alu.SUBTRACT, alu1=Alu.DIVIDE, reverse0=reverse0, reverse1=reverse1)
    out = interp.run(prog, {"x0": x, "x1": y})["out"]
    t = (np.float32(0.5) - x) if reverse0 else (x - np.float32(0.5))
    want = (y / t) if reverse1 else (t / y)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_a_per_partition_scalar_operand():
    k = P.Kernel("stt_vec")
    xs = [k.tensor(n, (PP, 16), "float32") for n in ("x", "y")]
    sv = k.tensor("s", (PP, 1), "float32")
    out = k.tensor("out", (PP, 16), "float32", kind="output")
    tx, ty, ts, to = k.sbuf(PP, [16], "float32"), k.sbuf(PP, [16], "float32"), k.sbuf(PP, [1], "float32"), \
        k.sbuf(PP, [16], "float32")
    loads = [k.load(tx, P.rows_ap(xs[0], 0, PP, 16, "float32")), k.load(ty, P.rows_ap(xs[1], 0, PP, 16, "float32")),
             k.load(ts, P.rows_ap(sv, 0, PP, 1, "float32"))]
    t = k.add(ScalarTensorTensor(inp=tx, scalar0=ts, in1=ty, out=to, alu0=Alu.MULTIPLY, alu1=Alu.ADD), *loads)
    k.store(P.rows_ap(out, 0, PP, 16, "float32"), to, t)
    x, y, s = rand((PP, 16), seed=3), rand((PP, 16), seed=4), rand((PP, 1), seed=5)
    got = interp.run(k.prog, {"x": x, "y": y, "s": s})["out"]
    np.testing.assert_allclose(got, x * s + y, rtol=1e-6)


def _bad(**change):
    prog = _program(32)
    i = next(i for i, ins in enumerate(prog.instructions) if isinstance(ins, ScalarTensorTensor))
    ins = prog.instructions[i]
    fields = {"inp": ins.inp, "scalar0": ins.scalar0, "in1": ins.in1, "out": ins.out, "alu0": ins.alu0,
              "alu1": ins.alu1, **change}
    prog.instructions[i] = ScalarTensorTensor(waits=ins.waits, signals=ins.signals, op=ins.op, **fields)
    return prog


def test_rules_name_the_fault():
    spec = hw.TRN2
    with pytest.raises(ProgramError, match="SCALAR_TENSOR_TENSOR.*arithmetic ops only"):
        validate(_bad(alu1=Alu.BITWISE_AND), spec)
    narrow = _program(32).instructions[2].out.view(0, ((1, 16),))
    with pytest.raises(ProgramError, match="SCALAR_TENSOR_TENSOR.*shape mismatch"):
        validate(_bad(out=narrow), spec)
    psum = lambda off: type(narrow)(Space.PSUM, narrow.dtype, PP, dense_dims((32,)), 0, off)  # noqa: E731
    with pytest.raises(ProgramError, match="at most one tile from PSUM"):
        validate(_bad(inp=psum(0), in1=psum(2048)), spec)


@pytest.mark.parametrize("dtype,F,alus,cycles_per_element", [
    ("bfloat16", 512, (Alu.SUBTRACT, Alu.MULTIPLY), 1),   # the published fast case
    ("bfloat16", 511, (Alu.SUBTRACT, Alu.MULTIPLY), 2),   # odd N
    ("bfloat16", 512, (Alu.ADD, Alu.MULTIPLY), 2),        # other ops
    ("float32", 512, (Alu.SUBTRACT, Alu.MULTIPLY), 2),    # not BF16
])
def test_cost_is_the_published_formula(dtype, F, alus, cycles_per_element):
    spec = hw.TRN2
    prog = _program(F, dtype, alu0=alus[0], alu1=alus[1])
    i = next(i for i, ins in enumerate(prog.instructions) if isinstance(ins, ScalarTensorTensor))
    assert prog.instructions[i].cycles(spec) == max(spec.min_ii_cycles, cycles_per_element * F)
    tl = simulate(prog, spec, cache=False)
    # it waited on the loads (another engine): the dependency overhead is on top of the formula
    expected = (cycles_per_element * F + spec.dependent_overhead_cycles) * 1e9 / spec.clock_hz("vector")
    assert tl.end_ns[i] - tl.start_ns[i] == pytest.approx(expected)
    assert tl.records()[i]["opcode"] == "SCALAR_TENSOR_TENSOR"


def test_neff_round_trip_keeps_the_instruction():
    prog = _program(64, scalar=-2.0, reverse1=True)
    back = neff.from_bytes(neff.to_bytes(prog))
    assert back.instructions == prog.instructions
    assert back.content_hash == prog.content_hash
