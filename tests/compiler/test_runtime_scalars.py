"""Scalars as runtime operands: one Program per op whatever its scalars' values, and that one Program
computes the right numbers for every value (the interpreter reads each call's value from the
NEFF's runtime-scalar tensors)."""

from __future__ import annotations

import pytest
import torch

from trnscope.compiler import lower
from trnscope.compiler.lowering import LoweringContext, lowering, runtime_scalars
from trnscope.compiler.opcall import from_aten
from trnscope.compiler.scalars import SCALAR_KIND, RuntimeScalar
from trnscope.isa import neff

from .helpers import DTYPES, aten, check, randint, randn


def _program(op, *args, **kwargs):
    out = op(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return lower(from_aten(op, args, kwargs, tuple(o for o in outs if isinstance(o, torch.Tensor))))


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimizer_ops_share_one_program_across_values(dtype):
    p, a, b = randn(96, 80, dtype=dtype, seed=1), randn(96, 80, dtype=dtype, seed=2), randn(96, 80, dtype=dtype,
                                                                                                 seed=3).abs() + 0.5
    values = [-1e-3, 0.37, -2.5, 7.0]
    for op in (aten.addcdiv.default, aten.addcmul.default):
        assert len({id(check(op, p, a, b, value=v)) for v in values}) == 1, op
    assert len({id(check(aten.mul.Tensor, p, v)) for v in values}) == 1
    assert len({id(check(aten.div.Tensor, p, v)) for v in values}) == 1
    assert len({id(check(aten.add.Tensor, p, v)) for v in values}) == 1
    assert len({id(check(aten.sub.Tensor, p, a, alpha=v)) for v in values}) == 1
    assert len({id(check(aten.lerp.Scalar, p, a, v)) for v in (0.1, 0.45, 0.7, -0.9)}) == 1  # both of ATen's forms
    assert len({id(check(aten.clamp.default, p, -v, v)) for v in (0.5, 1.0, 3.0)}) == 1
    assert len({id(check(aten.masked_fill.Scalar, p, a > 0, v)) for v in values}) == 1
    assert len({id(check(aten.fill.Scalar, p, v)) for v in values}) == 1


def test_special_values_get_their_own_program_and_no_other_value_does():
    x, y = randn(64, 48, seed=4).abs() + 0.1, randn(64, 48, seed=5)
    # ATen's CPU pow is not deterministic to the last bits across its threads (pow(x, 0.5) differs from
    # sqrt(x) by up to 3e-4 relative in some runs): compared at 1e-3
    square = check(aten.pow.Tensor_Scalar, x, 2.0, rtol=1e-3)
    sqrt = check(aten.pow.Tensor_Scalar, x, 0.5, rtol=1e-3)
    general = {id(check(aten.pow.Tensor_Scalar, x, e, rtol=1e-3)) for e in (3.0, 1.7, -2.25)}
    assert len(general) == 1 and id(square) not in general and id(sqrt) not in general and square is not sqrt
    assert any(type(i).__name__ == "Activation" for i in square.instructions)
    plain = check(aten.add.Tensor, x, y)                                  # alpha == 1: no multiply
    scaled = {id(check(aten.add.Tensor, x, y, alpha=v)) for v in (2.0, -0.5, 3.0)}
    assert len(scaled) == 1 and id(plain) not in scaled
    assert len(check(aten.addcmul.default, x, y, y, value=1.0)) < len(check(aten.addcmul.default, x, y, y, value=0.2))


def test_a_runtime_scalar_keeps_every_bit_of_its_value():
    x = randn(130, 70, seed=10)
    # the sign of a zero, infinities and NaN reach the kernel as they are
    assert len({id(check(aten.copysign.Scalar, x, v)) for v in (-0.0, 0.0, -3.5)}) == 1
    assert len({id(check(aten.div.Tensor, x, v)) for v in (-0.0, float("inf"), float("nan"), 7.0)}) == 1


def test_integer_scalars_on_integer_tensors_stay_exact():
    xi = randint(-1000, 1000, (50, 30), seed=6, dtype=torch.int32)
    progs = {id(check(aten.add.Tensor, xi, v)) for v in (7, -3, 100_000_007)}
    assert len(progs) == 1
    assert len({id(check(aten.clamp.default, xi, -v, v)) for v in (5, 700)}) == 1
    # an int and a float promote differently: each kind its own Program, each value computed right
    assert check(aten.mul.Tensor, xi, 3) is not check(aten.mul.Tensor, xi, 2.5)


def test_a_neff_declares_its_runtime_scalars():
    p, a, b = randn(32, 16, seed=7), randn(32, 16, seed=8), randn(32, 16, seed=9).abs() + 1
    prog = _program(aten.addcdiv.default, p, a, b, value=-0.25)
    assert [(t.name, t.shape, t.dtype.value) for t in prog.tensors if t.kind == SCALAR_KIND] == [
        ("value", (1,), "float32")]
    back = neff.from_bytes(neff.to_bytes(prog))
    assert [t.kind for t in back.tensors] == [t.kind for t in prog.tensors]
    assert back.content_hash == prog.content_hash
    assert _program(aten.addcdiv.default, p, a, b, value=3.5).content_hash == prog.content_hash


@pytest.fixture
def scratch_registry():
    from trnscope.compiler import lowering as _  # noqa: F401
    import sys

    mod = sys.modules["trnscope.compiler.lowering"]
    saved = dict(mod._REGISTRY), dict(mod._SCALARS)
    yield
    mod._REGISTRY.clear()
    mod._REGISTRY.update(saved[0])
    mod._SCALARS.clear()
    mod._SCALARS.update(saved[1])


def test_a_lowering_that_uses_a_runtime_scalars_value_fails_clearly(scratch_registry):
    @lowering("aten::_trnscope_test_uses_value", scalars=("value",))
    def _bad(ctx: LoweringContext) -> None:
        float(ctx.call.attr("value"))

    assert runtime_scalars("aten::_trnscope_test_uses_value") == {"value": ()}
    from trnscope.compiler.lowering import OpCall
    from trnscope.compiler.meta import TensorMeta
    from trnscope.isa import DType

    m = TensorMeta((4,), (1,), DType.float32)
    with pytest.raises(TypeError, match=r"'value' is a runtime scalar .* ctx\.scalar\('value'\)"):
        lower(OpCall.make("aten::_trnscope_test_uses_value", [m], [m], {"value": 0.5}))
    rs = RuntimeScalar("value", "float")
    for use in (lambda: rs * 2, lambda: rs < 1, lambda: bool(rs), lambda: -rs):
        with pytest.raises(TypeError, match="runtime scalar"):
            use()
