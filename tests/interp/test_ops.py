"""Every ALU op and every activation function against torch, on random data, in float32 and bfloat16."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trnscope import interp
from trnscope.isa import Act, Activation, Alu, TensorScalar, TensorTensor

from . import programs as P
from .helpers import as_dtype, close, np_dtype, rand, t32

DTYPES = ["float32", "bfloat16"]
PP, FF = 128, 96  # tile shape for single-instruction programs

# --- ALU ----------------------------------------------------------------------------------------------------

FLOAT_ALU = {
    Alu.ADD: torch.add,
    Alu.SUBTRACT: torch.sub,
    Alu.MULTIPLY: torch.mul,
    Alu.DIVIDE: torch.div,
    Alu.MAX: torch.maximum,
    Alu.MIN: torch.minimum,
    Alu.POW: torch.pow,
    Alu.MOD: torch.remainder,
    Alu.ABS_MAX: lambda a, b: torch.maximum(a.abs(), b.abs()),
    Alu.BYPASS: lambda a, b: a,
    Alu.IS_EQUAL: lambda a, b: (a == b).float(),
    Alu.NOT_EQUAL: lambda a, b: (a != b).float(),
    Alu.IS_GT: lambda a, b: (a > b).float(),
    Alu.IS_GE: lambda a, b: (a >= b).float(),
    Alu.IS_LT: lambda a, b: (a < b).float(),
    Alu.IS_LE: lambda a, b: (a <= b).float(),
    Alu.LOGICAL_AND: lambda a, b: torch.logical_and(a, b).float(),
    Alu.LOGICAL_OR: lambda a, b: torch.logical_or(a, b).float(),
    Alu.LOGICAL_XOR: lambda a, b: torch.logical_xor(a, b).float(),
    Alu.ATAN2: torch.atan2,
}
INT_ALU = {
    Alu.ADD: torch.add,
    Alu.SUBTRACT: torch.sub,
    Alu.MULTIPLY: torch.mul,
    Alu.MAX: torch.maximum,
    Alu.MIN: torch.minimum,
    Alu.MOD: torch.remainder,
    Alu.ABS_MAX: lambda a, b: torch.maximum(a.abs(), b.abs()),
    Alu.BYPASS: lambda a, b: a,
    Alu.IS_EQUAL: torch.eq,
    Alu.NOT_EQUAL: torch.ne,
    Alu.IS_GT: torch.gt,
    Alu.IS_GE: torch.ge,
    Alu.IS_LT: torch.lt,
    Alu.IS_LE: torch.le,
    Alu.LOGICAL_AND: torch.logical_and,
    Alu.LOGICAL_OR: torch.logical_or,
    Alu.LOGICAL_XOR: torch.logical_xor,
    Alu.BITWISE_AND: torch.bitwise_and,
    Alu.BITWISE_OR: torch.bitwise_or,
    Alu.BITWISE_XOR: torch.bitwise_xor,
    Alu.LEFT_SHIFT: torch.bitwise_left_shift,
    Alu.RIGHT_SHIFT: torch.bitwise_right_shift,
}
EXACT = {Alu.ADD, Alu.SUBTRACT, Alu.MULTIPLY, Alu.DIVIDE, Alu.MAX, Alu.MIN, Alu.ABS_MAX, Alu.BYPASS, Alu.IS_EQUAL,
         Alu.NOT_EQUAL, Alu.IS_GT, Alu.IS_GE, Alu.IS_LT, Alu.IS_LE, Alu.LOGICAL_AND, Alu.LOGICAL_OR,
         Alu.LOGICAL_XOR}


def test_every_alu_op_is_covered():
    assert set(FLOAT_ALU) | set(INT_ALU) == set(Alu)
    assert set(interp.ALU_OPS) == set(Alu)


def _alu_operands(alu, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-4, 4, (PP, FF)).astype(np.float32)
    b = rng.uniform(-4, 4, (PP, FF)).astype(np.float32)
    if alu is Alu.POW:
        a = np.abs(a) + 0.25
    if alu in (Alu.DIVIDE, Alu.MOD):
        b = np.where(np.abs(b) < 0.25, 0.5, b).astype(np.float32)
    # equal values and zeros so comparisons and logical ops see every case
    b[::3] = a[::3]
    a[:, ::7] = 0
    b[:, ::5] = 0 if alu not in (Alu.DIVIDE, Alu.MOD) else 1
    return a.astype(np_dtype(dtype)), b.astype(np_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alu", list(FLOAT_ALU), ids=lambda a: a.value)
def test_alu_float(alu, dtype):
    a, b = _alu_operands(alu, dtype, seed=list(Alu).index(alu))
    prog = P.single(PP, FF, lambda x0, x1, out: TensorTensor(alu=alu, in0=x0, in1=x1, out=out),
                    [dtype, dtype], dtype, name=f"tt_{alu.value}")
    out = interp.run(prog, [a, b])["out"]
    ref = as_dtype(FLOAT_ALU[alu](t32(a), t32(b)), dtype)
    if alu in EXACT:
        np.testing.assert_array_equal(out, ref)
    else:
        close(out, ref, dtype)


def _int_operands(alu, seed):
    rng = np.random.default_rng(seed)
    big = alu in (Alu.ADD, Alu.SUBTRACT, Alu.MAX, Alu.MIN, Alu.ABS_MAX, Alu.IS_EQUAL, Alu.NOT_EQUAL, Alu.IS_GT,
                  Alu.BITWISE_AND, Alu.BITWISE_OR, Alu.BITWISE_XOR, Alu.RIGHT_SHIFT)
    lim = 2**30 if big else 2**12  # beyond 2**24: FP32 would lose these values
    a = rng.integers(-lim, lim, (PP, FF)).astype(np.int32)
    b = rng.integers(-lim, lim, (PP, FF)).astype(np.int32)
    if alu in (Alu.LEFT_SHIFT, Alu.RIGHT_SHIFT):
        b = rng.integers(0, 20, (PP, FF)).astype(np.int32)
    if alu is Alu.MOD:
        b[b == 0] = 7
    b[::3] = a[::3] if alu not in (Alu.LEFT_SHIFT, Alu.RIGHT_SHIFT, Alu.MOD) else b[::3]
    a[:, ::7] = 0
    return a, b


@pytest.mark.parametrize("alu", list(INT_ALU), ids=lambda a: a.value)
def test_alu_int32_keeps_integer_semantics(alu):
    a, b = _int_operands(alu, seed=100 + list(Alu).index(alu))
    prog = P.single(PP, FF, lambda x0, x1, out: TensorTensor(alu=alu, in0=x0, in1=x1, out=out),
                    ["int32", "int32"], "int32", name=f"tt_int_{alu.value}")
    out = interp.run(prog, [a, b])["out"]
    ref = INT_ALU[alu](torch.from_numpy(a), torch.from_numpy(b)).to(torch.int32).numpy()
    np.testing.assert_array_equal(out, ref)


def test_comparison_of_int32_writes_float_one_zero():
    a, b = _int_operands(Alu.IS_EQUAL, seed=3)
    b[0, 0] = a[0, 0] + 1  # differs by 1 near 2**30: FP32 could not tell them apart
    prog = P.single(PP, FF, lambda x0, x1, out: TensorTensor(alu=Alu.IS_EQUAL, in0=x0, in1=x1, out=out),
                    ["int32", "int32"], "float32")
    out = interp.run(prog, [a, b])["out"]
    assert out.dtype == np.float32 and set(np.unique(out)) == {0.0, 1.0}
    np.testing.assert_array_equal(out, (a == b).astype(np.float32))


# --- TensorScalar -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reverse0,reverse1", [(False, False), (True, False), (False, True), (True, True)])
def test_tensor_scalar_reverse_and_second_op(dtype, reverse0, reverse1):
    x = rand((PP, FF), dtype, seed=20, lo=0.5, hi=4)
    prog = P.single(PP, FF, lambda x0, out: TensorScalar(inp=x0, out=out, alu0=Alu.SUBTRACT, scalar0=1.5,
                                                         alu1=Alu.DIVIDE, scalar1=3.0, reverse0=reverse0,
                                                         reverse1=reverse1), [dtype], dtype)
    out = interp.run(prog, [x])["out"]
    v = t32(x)
    r = (1.5 - v) if reverse0 else (v - 1.5)
    r = (3.0 / r) if reverse1 else (r / 3.0)
    close(out, as_dtype(r, dtype), dtype)


def test_tensor_scalar_per_partition_operands():
    from trnscope.isa import hbm

    k = P.Kernel("ts_ap")
    x = k.tensor("x", (PP, FF), "float32")
    s = k.tensor("s", (PP, 2), "float32")
    out = k.tensor("out", (PP, FF), "float32", kind="output")
    xt, st, ot = k.sbuf(PP, [FF], "float32"), k.sbuf(PP, [2], "float32"), k.sbuf(PP, [FF], "float32")
    t1 = k.load(xt, P.rows_ap(x, 0, PP, FF, "float32"))
    t2 = k.load(st, hbm(s, PP, 2, ((1, 2),), "float32"))
    s0, s1 = P.sub(st, dims=((1, 1),)), P.sub(st, offset_elems=1, dims=((1, 1),))
    t = k.add(TensorScalar(inp=xt, out=ot, alu0=Alu.MAX, scalar0=s0, alu1=Alu.MULTIPLY, scalar1=s1), t1, t2)
    k.store(P.rows_ap(out, 0, PP, FF, "float32"), ot, t)
    xv, sv = rand((PP, FF), seed=21), rand((PP, 2), seed=22)
    res = interp.run(k.prog, {"x": xv, "s": sv})["out"]
    np.testing.assert_array_equal(res, np.maximum(xv, sv[:, :1]) * sv[:, 1:])


def test_tensor_scalar_integer_shift_by_immediate():
    x = np.random.default_rng(23).integers(-2**30, 2**30, (PP, FF)).astype(np.int32)
    prog = P.single(PP, FF, lambda x0, out: TensorScalar(inp=x0, out=out, alu0=Alu.RIGHT_SHIFT, scalar0=3.0,
                                                         alu1=Alu.BITWISE_AND, scalar1=0xFFFF), ["int32"], "int32")
    np.testing.assert_array_equal(interp.run(prog, [x])["out"], (x >> 3) & 0xFFFF)


# --- activation functions -------------------------------------------------------------------------------------------

def _gelu_math(x):
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in np.asarray(x, np.float64).ravel()]).reshape(
        np.shape(x))


ACT = {
    Act.COPY: (lambda x: x, (-3, 3)),
    Act.EXP: (torch.exp, (-10, 10)),
    Act.EXPM1: (torch.expm1, (-3, 3)),
    Act.LOG: (torch.log, (0.01, 10)),
    Act.LOG1P: (torch.log1p, (-0.9, 5)),
    Act.TANH: (torch.tanh, (-5, 5)),
    Act.SIGMOID: (torch.sigmoid, (-20, 20)),
    Act.RELU: (torch.relu, (-3, 3)),
    Act.GELU: (F.gelu, (-6, 6)),
    Act.GELU_TANH: (lambda x: F.gelu(x, approximate="tanh"), (-6, 6)),
    Act.SILU: (F.silu, (-8, 8)),
    Act.GELU_DX: (lambda x: torch.ops.aten.gelu_backward(torch.ones_like(x), x), (-6, 6)),
    Act.SILU_DX: (lambda x: torch.ops.aten.silu_backward(torch.ones_like(x), x), (-8, 8)),
    Act.SOFTPLUS: (F.softplus, (-15, 15)),
    Act.SQUARE: (torch.square, (-3, 3)),
    Act.SQRT: (torch.sqrt, (0, 10)),
    Act.RSQRT: (torch.rsqrt, (0.01, 10)),
    Act.RECIPROCAL: (torch.reciprocal, (0.1, 3)),
    Act.ABS: (torch.abs, (-3, 3)),
    Act.SIGN: (torch.sign, (-3, 3)),
    Act.SIN: (torch.sin, (-6, 6)),
    Act.COS: (torch.cos, (-6, 6)),
    Act.TAN: (torch.tan, (-1.4, 1.4)),
    Act.ASIN: (torch.asin, (-0.99, 0.99)),
    Act.ACOS: (torch.acos, (-0.99, 0.99)),
    Act.ATAN: (torch.atan, (-10, 10)),
    Act.SINH: (torch.sinh, (-5, 5)),
    Act.COSH: (torch.cosh, (-5, 5)),
    Act.ASINH: (torch.asinh, (-10, 10)),
    Act.ACOSH: (torch.acosh, (1, 10)),
    Act.ATANH: (torch.atanh, (-0.99, 0.99)),
    Act.ERF: (torch.erf, (-4, 4)),
    Act.ERFINV: (torch.erfinv, (-0.999, 0.999)),
    Act.FLOOR: (torch.floor, (-5, 5)),
    Act.CEIL: (torch.ceil, (-5, 5)),
    Act.TRUNC: (torch.trunc, (-5, 5)),
    Act.ROUND: (torch.round, (-5, 5)),
    Act.LOG2: (torch.log2, (0.01, 10)),
    Act.EXP2: (torch.exp2, (-10, 10)),
    Act.NEG: (torch.neg, (-3, 3)),
    Act.LOGICAL_NOT: (lambda x: torch.logical_not(x).float(), (-3, 3)),
    Act.IS_NAN: (lambda x: torch.isnan(x).float(), (-3, 3)),
    Act.IS_INF: (lambda x: torch.isinf(x).float(), (-3, 3)),
    Act.IS_FINITE: (lambda x: torch.isfinite(x).float(), (-3, 3)),
}


def test_every_act_is_covered():
    assert set(ACT) | {Act.BITWISE_NOT} == set(Act)
    assert set(interp.ACT_FUNCS) == set(Act)


def _act_input(func, dtype, seed):
    lo, hi = ACT[func][1]
    x = rand((PP, FF), "float32", seed=seed, lo=lo, hi=hi)
    if func in (Act.LOGICAL_NOT, Act.SIGN, Act.RELU, Act.ABS):
        x[:, ::4] = 0.0
    if func in (Act.ROUND, Act.FLOOR, Act.CEIL, Act.TRUNC):
        x[:, ::3] = np.round(x[:, ::3] * 2) / 2  # exact halves: round half to even
    if func in (Act.IS_NAN, Act.IS_INF, Act.IS_FINITE, Act.COPY):
        x[:, ::5], x[:, 1::5], x[:, 2::5] = np.nan, np.inf, -np.inf
    return x.astype(np_dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("func", list(ACT), ids=lambda f: f.value)
def test_activation(func, dtype):
    x = _act_input(func, dtype, seed=200 + list(Act).index(func))
    prog = P.single(PP, FF, lambda x0, out: Activation(func=func, inp=x0, out=out), [dtype], dtype,
                    name=f"act_{func.value}")
    out = interp.run(prog, [x])["out"]
    # float64 reference: torch's float32 gelu loses all precision for x << 0 (1 + erf(x) cancels)
    ref = as_dtype(ACT[func][0](t32(x).double()).float(), dtype)
    close(out, ref, dtype)


def test_bitwise_not_int32():
    x = np.random.default_rng(5).integers(-2**31, 2**31 - 1, (PP, FF)).astype(np.int32)
    prog = P.single(PP, FF, lambda x0, out: Activation(func=Act.BITWISE_NOT, inp=x0, out=out), ["int32"], "int32")
    np.testing.assert_array_equal(interp.run(prog, [x])["out"], ~x)


def test_gelu_against_math_erf():
    x = np.concatenate([np.linspace(-9, 9, PP * FF - 4), [0.0, -0.0, 1e-20, -30.0]]).astype(np.float32)
    x = x.reshape(PP, FF)
    prog = P.single(PP, FF, lambda x0, out: Activation(func=Act.GELU, inp=x0, out=out), ["float32"], "float32")
    out = interp.run(prog, [x])["out"]
    ref = _gelu_math(x).astype(np.float32)  # correctly rounded from float64
    np.testing.assert_array_max_ulp(out, ref, maxulp=1)


def test_gelu_tanh_and_silu_formulas():
    x = rand((PP, FF), seed=7, lo=-6, hi=6).astype(np.float64)
    for func, f in [(Act.GELU_TANH, lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))),
                    (Act.SILU, lambda v: v / (1 + np.exp(-v)))]:
        prog = P.single(PP, FF, lambda x0, out: Activation(func=func, inp=x0, out=out), ["float32"], "float32")
        close(interp.run(prog, [x.astype(np.float32)])["out"], f(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_scale_bias_and_accum(dtype):
    """out = func(x * scale + bias) with an immediate scale and a per-partition bias, sum into accum_out."""
    from trnscope.isa import hbm

    k = P.Kernel("act_sb")
    x = k.tensor("x", (PP, FF), dtype)
    bias = k.tensor("bias", (PP,), "float32")
    scale = k.tensor("scale", (PP,), "float32")
    out = k.tensor("out", (PP, FF), dtype, kind="output")
    acc = k.tensor("acc", (PP,), "float32", kind="output")
    xt, bt, st = k.sbuf(PP, [FF], dtype), k.sbuf(PP, [1], "float32"), k.sbuf(PP, [1], "float32")
    ot, at = k.sbuf(PP, [FF], dtype), k.sbuf(PP, [1], "float32")
    deps = [k.load(xt, P.rows_ap(x, 0, PP, FF, dtype)), k.load(bt, hbm(bias, PP, 1, ((1, 1),), "float32")),
            k.load(st, hbm(scale, PP, 1, ((1, 1),), "float32"))]
    t = k.add(Activation(func=Act.TANH, inp=xt, out=ot, scale=st, bias=bt, accum_out=at), *deps)
    t2 = k.add(Activation(func=Act.SQUARE, inp=xt, out=xt, scale=0.5, bias=0.25), t)  # immediates, in place
    k.store(P.rows_ap(out, 0, PP, FF, dtype), ot, t)
    k.store(hbm(acc, PP, 1, ((1, 1),), "float32"), at, t)
    xv, bv, sv = rand((PP, FF), dtype, seed=8), rand((PP,), seed=9), rand((PP,), seed=10, lo=0.5, hi=2)
    res = interp.run(k.prog, {"x": xv, "bias": bv, "scale": sv})
    y = torch.tanh(t32(xv) * t32(sv)[:, None] + t32(bv)[:, None])
    close(res["out"], as_dtype(y, dtype), dtype)
    close(res["acc"], y.sum(1), rtol=1e-5, atol=1e-5)  # accumulated in FP32 before the output cast
    assert t2  # the in-place square ran after the tanh read its input
