"""A kernel's inputs: a required tensor's slot read as such, an optional one through optional(), and a
kernel that reads an empty slot as required is reported with its op's name."""

import pytest

from trnscope.compiler.lowering import HbmInputs, LoweringContext, MissingInput, OpCall, TensorInputs, build
from trnscope.compiler.meta import TensorMeta
from trnscope.hw import get_spec
from trnscope.isa import DType

X = TensorMeta.contiguous((4, 8), DType.float32)


def test_slots_read_required_and_optional():
    ins = TensorInputs((X, None))
    assert ins[0] is X and ins[-2] is X
    assert ins.optional(0) is X
    assert ins.optional(1) is None and ins.optional(2) is None  # absent, past the end
    assert list(ins) == [X, None] and ins[:2] == (X, None)       # iterating and slicing: the slots as they are
    with pytest.raises(MissingInput, match=r"input 1 holds no tensor.*\.optional\(1\)"):
        ins[1]
    with pytest.raises(IndexError):
        ins[2]
    hbm = HbmInputs((0, None))
    assert hbm[0] == 0 and hbm.optional(1) is None
    with pytest.raises(MissingInput):
        hbm[1]


def test_empty_slot_read_as_required_names_the_op():
    call = OpCall("aten::example_op", (X, None), (X,))

    def reads_absent_weight(ctx: LoweringContext) -> None:
        ctx.call.inputs[1]

    with pytest.raises(MissingInput, match=r"^aten::example_op: input 1 holds no tensor"):
        build(call, reads_absent_weight, get_spec())


def test_missing_required_scalar_names_the_op():
    call = OpCall("aten::example_op", (X,), (X,))

    def reads_alpha(ctx: LoweringContext) -> None:
        ctx.required_scalar("alpha")

    with pytest.raises(MissingInput, match=r"^aten::example_op: scalar argument 'alpha' is missing"):
        build(call, reads_alpha, get_spec())
