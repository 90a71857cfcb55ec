"""Numeric semantics of the engines: casts, the ALU table and the activation table.

The compute engines work in FP32 with free casting on input and output (hardware.md 2.4): operands
are widened to FP32, the operation runs in FP32 and the result is rounded (round-to-nearest-even,
via ml_dtypes) to the output dtype when it is written. Integer semantics are kept where they
matter: integer-only ALU ops (bitwise ops, shifts) always compute on integers, and the other ops
compute exactly on integers (int64) when every operand is an integer tensor or an integral
immediate and the op has an exact integer form (add, subtract, multiply, max, min, mod, abs_max,
comparisons, logical ops). Divide, pow and atan2 always run in FP32.

Casts to an integer dtype: integer values wrap (two's complement truncation); float values are
truncated toward zero and saturate at the type's range, NaN becoming 0. Comparisons and logical
ops produce 1/0 in the compute domain, hence 1.0/0.0 in a float output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from ..isa import Act, Alu
from . import special

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)
BF16 = np.dtype(ml_dtypes.bfloat16)

Array = np.ndarray


# --- casts -------------------------------------------------------------------------------------------

def is_int(a: Array) -> bool:
    """Integer or bool data: what keeps integer semantics."""
    return a.dtype.kind in "iub"


def is_int_dtype(dt: np.dtype) -> bool:
    return dt.kind in "iub"


def to_f32(a: Array) -> Array:
    """Widen to FP32 (the engines' compute type). May return ``a`` itself: never write to the result."""
    if a.dtype == F32:
        return a
    if a.dtype == BF16 and a.size >= 16384:
        # bf16 is the top half of an FP32: on large tiles a shift is about twice as fast as ml_dtypes' cast
        return (a.view(np.uint16).astype(np.uint32) << 16).view(F32)
    return a.astype(F32)


def to_i64(a: Array) -> Array:
    """Integer view of operands for integer ops; floats truncate toward zero and saturate."""
    if is_int(a):
        return a.astype(I64, copy=False)
    return _float_to_int(a, I64)


def _float_to_int(a: Array, dt: np.dtype) -> Array:
    info = np.iinfo(dt)
    lo, hi = float(info.min), float(info.max)
    if int(hi) > info.max:  # int64's max is not a float64: use the largest float below it
        hi = float(np.nextafter(hi, 0.0))
    with np.errstate(invalid="ignore"):
        f = np.trunc(a.astype(np.float64))
        f = np.nan_to_num(f, nan=0.0, posinf=hi, neginf=lo)
        return np.clip(f, lo, hi).astype(dt)


def cast(values: Array | np.generic, dt: np.dtype) -> Array:
    """Convert computed values to a destination dtype the way the engines write them."""
    values = np.asarray(values)
    if values.dtype == dt:
        return values
    if dt.kind == "b":
        return values != 0
    if is_int_dtype(dt):
        if is_int(values):
            return values.astype(dt)
        return _float_to_int(values, dt)
    if is_int(values):
        return values.astype(np.float64).astype(dt)
    return values.astype(dt)


def dma_cast(values: Array, dt: np.dtype) -> Array:
    """DMA data conversion: bit-exact when dtypes match, through FP32 between float types."""
    if values.dtype == dt:
        return values
    if not is_int(values) and not is_int_dtype(dt):
        return cast(to_f32(values), dt)
    return cast(values, dt)


def numeric(r: Array, domain: np.dtype) -> Array:
    """Booleans (comparisons, logical ops) become 1/0 in the compute domain."""
    r = np.asarray(r)
    return r.astype(domain) if r.dtype.kind == "b" else r


def immediate(value) -> Array:
    """An immediate scalar operand: integral values (2.0, 3, 0xFF) behave as integers, so integer tiles keep
    integer semantics; others are FP32 (the engines' immediates are FP32). -0.0 stays a float."""
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return np.asarray(int(value), dtype=I64)
    v = float(value)
    if v.is_integer() and abs(v) < 2.0**63 and not (v == 0 and math.copysign(1.0, v) < 0):
        return np.asarray(int(v), dtype=I64)
    return np.asarray(v, dtype=F32)


# --- ALU ---------------------------------------------------------------------------------------------

Binary = Callable[[Array, Array], Array]
Reducer = Callable[..., Array]  # (x, axis) -> x reduced / scanned along axis


@dataclass(frozen=True)
class AluOp:
    """How one ALU op computes: ``fn`` in FP32, ``int_fn`` on int64 (None: always FP32)."""

    fn: Binary
    int_fn: Binary | None
    int_only: bool = False
    reduce: Reducer | None = None  # None: a left fold with fn
    scan: Reducer | None = None  # None: a running left fold with fn

    def fn_for(self, domain: np.dtype) -> Binary:
        """The function computing in ``domain``: int64 only where the op has an integer form (``_domain``)."""
        if domain == I64:
            if self.int_fn is None:
                raise TypeError("this ALU op has no integer form")
            return self.int_fn
        return self.fn


def _ufunc_op(uf: np.ufunc, exact_int: bool = True, int_only: bool = False) -> AluOp:
    return AluOp(uf, uf if (exact_int or int_only) else None, int_only,
                 lambda x, axis: uf.reduce(x, axis=axis), lambda x, axis: uf.accumulate(x, axis=axis))


def _cmp(uf: np.ufunc) -> AluOp:
    return AluOp(uf, uf)


def _logical(uf: np.ufunc) -> AluOp:
    def fn(a, b):
        return uf(a != 0, b != 0)
    return AluOp(fn, fn, reduce=lambda x, axis: uf.reduce(x != 0, axis=axis),
                 scan=lambda x, axis: uf.accumulate(x != 0, axis=axis))


def _abs_max(a, b):
    return np.maximum(np.abs(a), np.abs(b))


def _bypass(a, b):
    return np.broadcast_to(a, np.broadcast_shapes(np.shape(a), np.shape(b)))


def _bypass_scan(x, axis):
    return np.broadcast_to(np.take(x, [0], axis=axis), x.shape)


ALU_OPS: dict[Alu, AluOp] = {
    Alu.ADD: _ufunc_op(np.add),
    Alu.SUBTRACT: _ufunc_op(np.subtract),
    Alu.MULTIPLY: _ufunc_op(np.multiply),
    Alu.DIVIDE: _ufunc_op(np.divide, exact_int=False),
    Alu.MAX: _ufunc_op(np.maximum),
    Alu.MIN: _ufunc_op(np.minimum),
    Alu.POW: _ufunc_op(np.power, exact_int=False),
    # nki.language.mod: "equivalent to the Python modulus x % y", sign of the divisor (numpy.mod)
    Alu.MOD: _ufunc_op(np.mod),
    # reduced / scanned as the (running) maximum of absolute values
    Alu.ABS_MAX: AluOp(_abs_max, _abs_max, reduce=lambda x, axis: np.max(np.abs(x), axis=axis),
                       scan=lambda x, axis: np.maximum.accumulate(np.abs(x), axis=axis)),
    Alu.BYPASS: AluOp(_bypass, _bypass, reduce=lambda x, axis: np.take(x, 0, axis=axis), scan=_bypass_scan),
    Alu.IS_EQUAL: _cmp(np.equal),
    Alu.NOT_EQUAL: _cmp(np.not_equal),
    Alu.IS_GT: _cmp(np.greater),
    Alu.IS_GE: _cmp(np.greater_equal),
    Alu.IS_LT: _cmp(np.less),
    Alu.IS_LE: _cmp(np.less_equal),
    Alu.LOGICAL_AND: _logical(np.logical_and),
    Alu.LOGICAL_OR: _logical(np.logical_or),
    Alu.LOGICAL_XOR: _logical(np.logical_xor),
    Alu.BITWISE_AND: _ufunc_op(np.bitwise_and, int_only=True),
    Alu.BITWISE_OR: _ufunc_op(np.bitwise_or, int_only=True),
    Alu.BITWISE_XOR: _ufunc_op(np.bitwise_xor, int_only=True),
    Alu.LEFT_SHIFT: _ufunc_op(np.left_shift, int_only=True),
    Alu.RIGHT_SHIFT: _ufunc_op(np.right_shift, int_only=True),  # arithmetic on signed values
    Alu.ATAN2: _ufunc_op(np.arctan2, exact_int=False),
}

COMPARISONS = frozenset({Alu.IS_EQUAL, Alu.NOT_EQUAL, Alu.IS_GT, Alu.IS_GE, Alu.IS_LT, Alu.IS_LE})


def _domain(op: AluOp, *operands: Array) -> np.dtype:
    if op.int_only or (op.int_fn is not None and all(is_int(x) for x in operands)):
        return I64
    return F32


def _to(domain: np.dtype, a: Array) -> Array:
    return to_i64(a) if domain == I64 else to_f32(a)


def binary(alu: Alu, a: Array, b: Array) -> Array:
    """``a <alu> b`` with broadcasting, in the op's compute domain (FP32 or int64)."""
    op = ALU_OPS[alu]
    domain = _domain(op, a, b)
    fn = op.fn_for(domain)
    return numeric(fn(_to(domain, a), _to(domain, b)), domain)


def reduce(alu: Alu, x: Array, axis: int = -1) -> Array:
    op = ALU_OPS[alu]
    domain = _domain(op, x)
    x = _to(domain, x)
    if op.reduce is not None:
        return numeric(op.reduce(x, axis), domain)
    fn = op.fn_for(domain)
    x = np.moveaxis(x, axis, -1)
    acc = x[..., 0]
    for i in range(1, x.shape[-1]):
        acc = numeric(fn(acc, x[..., i]), domain)
    return acc


def scan(alu: Alu, x: Array, axis: int = -1) -> Array:
    """Inclusive scan: out[0] = x[0], out[i] = out[i-1] <alu> x[i]."""
    op = ALU_OPS[alu]
    domain = _domain(op, x)
    x = _to(domain, x)
    if op.scan is not None:
        return numeric(op.scan(x, axis), domain)
    fn = op.fn_for(domain)
    x = np.moveaxis(x, axis, -1)
    out = np.empty(x.shape, dtype=domain)
    out[..., 0] = x[..., 0]
    for i in range(1, x.shape[-1]):
        out[..., i] = numeric(fn(out[..., i - 1], x[..., i]), domain)
    return np.moveaxis(out, -1, axis)


# --- activation functions ----------------------------------------------------------------------------

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def _gelu(x):
    """Exact GELU: x * Phi(x) = 0.5 * x * erfc(-x / sqrt(2)), evaluated in float64."""
    x64 = x.astype(np.float64)
    return 0.5 * x64 * special.erfc(-x64 * _INV_SQRT2)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.float32(_SQRT_2_OVER_PI) * (x + np.float32(0.044715) * x * x * x)))


def _silu(x):
    return x * _sigmoid(x)


def _gelu_dx(x):
    """d/dx of exact GELU as ATen's GeluBackward forms it, Phi(x) + x phi(x), in float64 (so
    NaN at +-inf, where x phi(x) is inf * 0, as there)."""
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * special.erfc(-x64 * _INV_SQRT2) + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)


def _silu_dx(x):
    """d/dx of SiLU as ATen's silu_backward forms it, s (1 + x (1 - s)) with s = sigmoid(x), in
    float64 (NaN at +-inf, as there)."""
    x64 = x.astype(np.float64)
    s = _sigmoid(x64)
    with np.errstate(invalid="ignore", over="ignore"):
        return s * (1.0 + x64 * (1.0 - s))


def _rsqrt(x):
    return np.float32(1.0) / np.sqrt(x)


def _relu(x):
    return np.maximum(x, np.float32(0.0))


def _logical_not(x):
    return x == 0


ACT_FUNCS: dict[Act, Callable[[Array], Array]] = {
    Act.COPY: lambda x: x,
    Act.EXP: np.exp,
    Act.EXPM1: np.expm1,
    Act.LOG: np.log,
    Act.LOG1P: np.log1p,
    Act.TANH: np.tanh,
    Act.SIGMOID: _sigmoid,
    Act.RELU: _relu,
    Act.GELU: _gelu,
    Act.GELU_TANH: _gelu_tanh,
    Act.GELU_DX: _gelu_dx,
    Act.SILU: _silu,
    Act.SILU_DX: _silu_dx,
    Act.SOFTPLUS: lambda x: np.logaddexp(np.float32(0.0), x),
    Act.SQUARE: np.square,
    Act.SQRT: np.sqrt,
    Act.RSQRT: _rsqrt,
    Act.RECIPROCAL: np.reciprocal,
    Act.ABS: np.abs,
    Act.SIGN: np.sign,
    Act.SIN: np.sin,
    Act.COS: np.cos,
    Act.TAN: np.tan,
    Act.ASIN: np.arcsin,
    Act.ACOS: np.arccos,
    Act.ATAN: np.arctan,
    Act.SINH: np.sinh,
    Act.COSH: np.cosh,
    Act.ASINH: np.arcsinh,
    Act.ACOSH: np.arccosh,
    Act.ATANH: np.arctanh,
    Act.ERF: special.erf,
    Act.ERFINV: special.erfinv,
    Act.FLOOR: np.floor,
    Act.CEIL: np.ceil,
    Act.TRUNC: np.trunc,
    Act.ROUND: np.rint,  # half to even, like torch.round
    Act.LOG2: np.log2,
    Act.EXP2: np.exp2,
    Act.NEG: np.negative,
    Act.LOGICAL_NOT: _logical_not,
    Act.BITWISE_NOT: np.invert,
    Act.IS_NAN: np.isnan,
    Act.IS_INF: np.isinf,
    Act.IS_FINITE: np.isfinite,
}

INT_ONLY_ACTS = frozenset({Act.BITWISE_NOT})


def activate(func: Act, x: Array) -> Array:
    """func(x) for FP32 ``x`` (int64 for integer-only functions); FP32 (int64) result."""
    if func in INT_ONLY_ACTS:
        return numeric(ACT_FUNCS[func](to_i64(x)), I64)
    r = numeric(ACT_FUNCS[func](to_f32(x)), F32)
    return r if r.dtype == F32 else r.astype(F32)  # float64 helpers (erf, gelu) round once to FP32
