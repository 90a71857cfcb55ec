"""Element-wise activations and math functions built from several engine instructions.

ScalarE's function table has no ELU, log-sigmoid, erfc or logaddexp; a kernel writer composes them
from the functions it has (exp/expm1, log/log1p, softplus, sigmoid, tanh, erf, sin, round, ...) and
VectorE's ALU (min/max, comparisons, select). Every kernel streams through
:func:`elementwise.emit_map` (broadcasting by strides, double-buffered tiles); intermediates are FP32
SBUF tiles so a BF16 result is rounded once, as ATen's CPU kernels round it. Where ATen's formula
has special cases (inf, NaN, zeros) the kernel reproduces them with a compare and a select rather
than changing the answer.
"""

from __future__ import annotations

import math

from ...isa import AP, Act, Activation, Alu, DType, ScalarTensorTensor, Select, TensorScalar, TensorTensor
from ..builder import KernelBuilder
from ..lowering import HbmInputs, LoweringContext, OpCall, lowering
from ..meta import TensorMeta
from ..scalars import ScalarArg
from .common import F32, FLT_MAX, attr
from .elementwise import MAX_COLS, emit_map, ptemp, same_layout, temp

_LN2 = math.log(2.0)
_INV_LN10 = 1.0 / math.log(10.0)


def _act(kb: KernelBuilder, func: Act, inp: AP, out: AP, scale=1.0, bias=0.0) -> None:
    kb.emit(Activation(func=func, inp=inp, out=out, scale=scale, bias=bias))


def _tt(kb: KernelBuilder, alu: Alu, a: AP, b: AP, out: AP) -> None:
    kb.emit(TensorTensor(alu=alu, in0=a, in1=b, out=out))


def _ts(kb: KernelBuilder, inp: AP, out: AP, alu0: Alu, s0, alu1: Alu | None = None, s1=None, reverse0=False) -> None:
    kb.emit(TensorScalar(inp=inp, out=out, alu0=alu0, scalar0=s0, alu1=alu1, scalar1=s1, reverse0=reverse0))


def _sel(kb: KernelBuilder, pred: AP, on_true: AP, on_false: AP, out: AP) -> None:
    kb.emit(Select(pred=pred, on_true=on_true, on_false=on_false, out=out))


def _unary(ctx: LoweringContext, compute) -> None:
    emit_map(ctx, [0], lambda kb, t, out: compute(kb, t[0], out))


def _operands(ctx: LoweringContext, names: tuple[str, ...]):
    """(tensor slots, per-argument source): an argument is a tensor slot of the call or a Scalar
    (a Scalar-typed argument, or a 0-dim CPU tensor that opcall turned into a value)."""
    ins = ctx.call.inputs
    k = 0
    slots: list[int] = []
    sources: list[tuple[str, object]] = []
    for name in names:
        value = ctx.call.attr(name)
        if value is not None and not isinstance(value, str):
            if k < len(ins) and ins[k] is None:
                k += 1
            sources.append(("scalar", ctx.scalar(name)))
        else:
            while k < len(ins) and ins[k] is None:
                k += 1
            sources.append(("tensor", len(slots)))
            slots.append(k)
            k += 1
    return slots, sources


# the Scalar arguments of the ops streamed through _nary, as runtime operands (their lowerings declare them)
NARY_SCALARS = ("self", "other")


def _nary(ctx: LoweringContext, names: tuple[str, ...], compute, max_cols: int = MAX_COLS) -> None:
    """Stream the named arguments (tensors or scalars held in constant tiles) through
    ``compute(kb, operands, out)``; ``max_cols``: see elementwise.psum_cols."""
    slots, sources = _operands(ctx, names)
    consts = {i: v for i, (kind, v) in enumerate(sources) if kind == "scalar"}

    def fn(kb, t, out):
        ops = [t[v] if kind == "tensor" else consts[i].broadcast(out, F32) for i, (kind, v) in enumerate(sources)]
        compute(kb, ops, out)

    emit_map(ctx, slots, fn, max_cols=max_cols)


def _in_dtype(value: float, dtype: DType) -> float:
    """A Scalar argument as ATen's kernels use it: converted to the tensor's type first."""
    import numpy as np

    return float(np.asarray(value, dtype=np.float32).astype(dtype.np).astype(np.float32)) if dtype.is_float \
        else value


def _float_only(ctx: LoweringContext) -> None:
    if not ctx.call.outputs[0].dtype.is_float:
        raise NotImplementedError(f"{ctx.call.name}: integer results are computed on the CPU")


# --- activations ----------------------------------------------------------------------------------------

@lowering("aten::elu", "aten::elu_")
def _elu(ctx: LoweringContext) -> None:
    # scale * max(x, 0) + alpha * scale * expm1(input_scale * min(x, 0)): no predicate tile needed
    alpha, scale = float(attr(ctx, "alpha", 1.0)), float(attr(ctx, "scale", 1.0))
    in_scale = float(attr(ctx, "input_scale", 1.0))

    # min(x, 0) = -relu(-x) and, for scale > 0, max(x, 0) * scale = relu(x * scale) (the product's
    # rounding is the same either side of the max): ScalarE makes both parts, VectorE only the sum
    # (the alpha multiply fused into it)

    def compute(kb, x, out):
        neg, pos = temp(kb, out), temp(kb, out)
        _act(kb, Act.RELU, x, neg, scale=-1.0)
        _act(kb, Act.EXPM1, neg, neg, scale=-in_scale)
        if scale > 0:
            _act(kb, Act.RELU, x, pos, scale=scale)
        else:
            _ts(kb, x, pos, Alu.MAX, 0.0, Alu.MULTIPLY, scale)
        _stt(kb, neg, alpha * scale, Alu.MULTIPLY, pos, Alu.ADD, out)

    _unary(ctx, compute)


@lowering("aten::leaky_relu", "aten::leaky_relu_")
def _leaky_relu(ctx: LoweringContext) -> None:
    slope = float(attr(ctx, "negative_slope", 0.01))

    def compute(kb, x, out):
        pred, neg = temp(kb, out), temp(kb, out)
        _ts(kb, x, pred, Alu.IS_GT, 0.0)
        _act(kb, Act.COPY, x, neg, scale=slope)
        _sel(kb, pred, x, neg, out)

    _unary(ctx, compute)


@lowering("aten::hardsigmoid", "aten::hardsigmoid_")
def _hardsigmoid(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        r = temp(kb, out)
        _ts(kb, x, r, Alu.ADD, 3.0, Alu.MAX, 0.0)
        _ts(kb, r, out, Alu.MIN, 6.0, Alu.DIVIDE, 6.0)

    _unary(ctx, compute)


@lowering("aten::hardswish", "aten::hardswish_")
def _hardswish(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        r = temp(kb, out)
        _ts(kb, x, r, Alu.ADD, 3.0, Alu.MAX, 0.0)
        _stt(kb, r, 6.0, Alu.MIN, x, Alu.MULTIPLY, r)      # x * min(r, 6) in one pass
        _ts(kb, r, out, Alu.DIVIDE, 6.0)

    _unary(ctx, compute)


@lowering("aten::softplus")
def _softplus(ctx: LoweringContext) -> None:
    beta, threshold = float(attr(ctx, "beta", 1.0)), float(attr(ctx, "threshold", 20.0))

    def compute(kb, x, out):
        sp, lin = temp(kb, out), temp(kb, out)
        _act(kb, Act.SOFTPLUS, x, sp, scale=beta)
        _ts(kb, sp, sp, Alu.DIVIDE, beta)
        _ts(kb, x, lin, Alu.MULTIPLY, beta, Alu.IS_GT, threshold)   # the linear region
        _sel(kb, lin, x, sp, out)

    _unary(ctx, compute)


@lowering("aten::mish", "aten::mish_")
def _mish(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        r = temp(kb, out)
        _act(kb, Act.SOFTPLUS, x, r)
        _act(kb, Act.TANH, r, r)
        _tt(kb, Alu.MULTIPLY, x, r, out)

    _unary(ctx, compute)


@lowering("aten::log_sigmoid_forward")
def _log_sigmoid_forward(ctx: LoweringContext) -> None:
    # ATen: buffer = exp(-|x|), output = min(x, 0) - log1p(buffer). Both outputs come from one pass
    # over x when they are laid out alike (x is read once, not once per output); VectorE makes
    # min(x, 0) - log1p(buffer) in one scalar_tensor_tensor, ScalarE the rest
    def both(kb, x, outs):
        out, buf = outs
        z = temp(kb, out)
        _act(kb, Act.ABS, x, z)
        _act(kb, Act.EXP, z, z, scale=-1.0)
        _act(kb, Act.COPY, z, buf)
        _act(kb, Act.LOG1P, z, z)
        _stt(kb, x, 0.0, Alu.MIN, z, Alu.SUBTRACT, out)

    if len(ctx.call.outputs) > 1 and ctx.call.outputs[1].numel and same_layout(ctx, 0, 1):
        emit_map(ctx, [0], lambda kb, t, outs: both(kb, t[0], outs), also=(1,))
        return

    def output(kb, x, out):
        z, m = temp(kb, out), temp(kb, out)
        _act(kb, Act.ABS, x, z)
        _act(kb, Act.EXP, z, z, scale=-1.0)
        _act(kb, Act.LOG1P, z, z)
        _ts(kb, x, m, Alu.MIN, 0.0)
        _tt(kb, Alu.SUBTRACT, m, z, out)

    def buffer(kb, x, out):
        z = temp(kb, out)
        _act(kb, Act.ABS, x, z)
        _act(kb, Act.EXP, z, out, scale=-1.0)

    emit_map(ctx, [0], lambda kb, t, out: output(kb, t[0], out), out_index=0)
    if len(ctx.call.outputs) > 1 and ctx.call.outputs[1].numel:
        emit_map(ctx, [0], lambda kb, t, out: buffer(kb, t[0], out), out_index=1)


@lowering("aten::glu")
def _glu(ctx: LoweringContext) -> None:
    """a * sigmoid(b) for the two halves of ``dim``: both halves are views of the input (an offset
    apart), streamed as two operands."""
    x = ctx.call.inputs[0]
    dim = int(attr(ctx, "dim", -1)) % x.ndim
    half = x.shape[dim] // 2
    shape = x.shape[:dim] + (half,) + x.shape[dim + 1:]
    a = TensorMeta(shape, x.stride, x.dtype, x.offset)
    b = TensorMeta(shape, x.stride, x.dtype, x.offset + half * x.stride[dim])
    views = LoweringContext(OpCall(ctx.call.name, (a, b), ctx.call.outputs, ctx.call.attrs), ctx.kb,
                            HbmInputs((ctx.inputs[0], ctx.inputs[0])), ctx.outputs, ctx.label)

    def compute(kb, t, out):
        s = temp(kb, out)
        _act(kb, Act.SIGMOID, t[1], s)
        _tt(kb, Alu.MULTIPLY, t[0], s, out)

    emit_map(views, [0, 1], compute)


@lowering("aten::threshold", "aten::threshold_")
def _threshold(ctx: LoweringContext) -> None:
    th = float(attr(ctx, "threshold", 0.0))
    value = ScalarArg(ctx.kb, float(attr(ctx, "value", 0.0)))

    def compute(kb, x, out):
        keep = temp(kb, out)
        _ts(kb, x, keep, Alu.IS_GT, th)
        _sel(kb, keep, x, value.broadcast(out, F32), out)

    _unary(ctx, compute)
    value.release()


@lowering("aten::softshrink")
def _softshrink(ctx: LoweringContext) -> None:
    # x - clamp(x, -l, l): x - l above, x + l below, exactly 0 inside, NaN stays NaN
    lam = _in_dtype(float(attr(ctx, "lambd", 0.5)), ctx.call.inputs[0].dtype)

    def compute(kb, x, out):
        c = temp(kb, out)
        _ts(kb, x, c, Alu.MAX, -lam, Alu.MIN, lam)
        _tt(kb, Alu.SUBTRACT, x, c, out)

    _unary(ctx, compute)


@lowering("aten::hardshrink")
def _hardshrink(ctx: LoweringContext) -> None:
    lam = _in_dtype(float(attr(ctx, "lambd", 0.5)), ctx.call.inputs[0].dtype)
    zero = ScalarArg(ctx.kb, 0.0)

    def compute(kb, x, out):
        inside = temp(kb, out)
        _act(kb, Act.ABS, x, inside)
        _ts(kb, inside, inside, Alu.IS_LE, lam)     # NaN compares false: kept, as in ATen
        _sel(kb, inside, zero.broadcast(out, F32), x, out)

    _unary(ctx, compute)
    zero.release()


@lowering("aten::logit", "aten::logit_")
def _logit(ctx: LoweringContext) -> None:
    eps = ctx.call.attr("eps")

    def compute(kb, x, out):
        p, q = temp(kb, out), temp(kb, out)
        if eps is not None:
            _ts(kb, x, p, Alu.MAX, float(eps), Alu.MIN, 1.0 - float(eps))
        else:
            _act(kb, Act.COPY, x, p)
        _act(kb, Act.COPY, p, q, scale=-1.0, bias=1.0)
        _tt(kb, Alu.DIVIDE, p, q, p)
        _act(kb, Act.LOG, p, out)

    _unary(ctx, compute)


# --- math functions -------------------------------------------------------------------------------------

@lowering("aten::sinc", "aten::sinc_")
def _sinc(ctx: LoweringContext) -> None:
    one = ScalarArg(ctx.kb, 1.0)

    # sin(pi x) / (pi x): ScalarE takes pi x as its scale and makes the x == 0 predicate; VectorE
    # divides by pi x formed in the same pass (the product rounded as ATen rounds it) and selects
    def compute(kb, x, out):
        s, z = temp(kb, out), temp(kb, out)
        _act(kb, Act.SIN, x, s, scale=math.pi)
        _act(kb, Act.LOGICAL_NOT, x, z)
        kb.emit(ScalarTensorTensor(inp=x, scalar0=math.pi, alu0=Alu.MULTIPLY, in1=s, alu1=Alu.DIVIDE, out=s,
                                   reverse1=True))
        _sel(kb, z, one.broadcast(out, F32), s, out)

    _unary(ctx, compute)
    one.release()


@lowering("aten::erfc", "aten::erfc_")
def _erfc(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        e = temp(kb, out)
        _act(kb, Act.ERF, x, e)
        _act(kb, Act.COPY, e, out, scale=-1.0, bias=1.0)

    _unary(ctx, compute)


@lowering("aten::log10", "aten::log10_")
def _log10(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        e = temp(kb, out)
        _act(kb, Act.LOG, x, e)
        _ts(kb, e, out, Alu.MULTIPLY, _INV_LN10)

    _unary(ctx, compute)


@lowering("aten::frac", "aten::frac_")
def _frac(ctx: LoweringContext) -> None:
    def compute(kb, x, out):
        t = temp(kb, out)
        _act(kb, Act.TRUNC, x, t)
        _tt(kb, Alu.SUBTRACT, x, t, out)

    _unary(ctx, compute)


@lowering("aten::sgn", "aten::sgn_")
def _sgn(ctx: LoweringContext) -> None:
    _unary(ctx, lambda kb, x, out: _act(kb, Act.SIGN, x, out))


def _sign_bit(kb: KernelBuilder, x: AP, out: AP) -> None:
    """1 where x's sign bit is set, -0.0 included: 1 / tanh(x) < 0. tanh keeps every sign (+-0
    stays +-0, subnormals stay themselves) and makes +-inf +-1, so its reciprocal is negative
    exactly where the sign bit is set (1/-0 = -inf; 1/x alone would make -inf -0). Both functions
    on ScalarE: one VectorE pass (the compare), where min(x, 1/x) < 0 took a 2-cycle one too."""
    r = temp(kb, x)
    _act(kb, Act.TANH, x, r)
    _act(kb, Act.RECIPROCAL, r, r)
    _ts(kb, r, out, Alu.IS_LT, 0.0)


@lowering("aten::signbit")
def _signbit(ctx: LoweringContext) -> None:
    if ctx.call.inputs[0].dtype.is_float:
        _unary(ctx, _sign_bit)
    else:
        _unary(ctx, lambda kb, x, out: _ts(kb, x, out, Alu.IS_LT, 0))


@lowering("aten::nan_to_num", "aten::nan_to_num_")
def _nan_to_num(ctx: LoweringContext) -> None:
    import ml_dtypes

    dt = ctx.call.outputs[0].dtype
    if not dt.is_float:
        _unary(ctx, lambda kb, x, out: kb.copy(x, out))   # integers have no NaN or inf
        return
    finfo = ml_dtypes.finfo(dt.np)  # NumPy's finfo knows no ml_dtypes type before ml_dtypes 0.7
    values = {"nan": 0.0, "posinf": float(finfo.max), "neginf": float(finfo.min)}
    consts = {k: ScalarArg(ctx.kb, float(ctx.call.attr(k)) if ctx.call.attr(k) is not None else v)
              for k, v in values.items()}

    if all(ctx.call.attr(k) is None for k in ("posinf", "neginf")):
        # infinities become the dtype's extremes, which every finite value lies between: a clamp
        # (its max/min keep NaN) and one select for NaN
        def clamped(kb, x, out):
            pred, r = temp(kb, out), temp(kb, out)
            _act(kb, Act.IS_NAN, x, pred)
            _ts(kb, x, r, Alu.MAX, values["neginf"], Alu.MIN, values["posinf"])
            _sel(kb, pred, consts["nan"].broadcast(out, dt), r, out)

        _unary(ctx, clamped)
        for c in consts.values():
            c.release()
        return

    def compute(kb, x, out):
        pred, r = temp(kb, out), temp(kb, out)
        _act(kb, Act.IS_NAN, x, pred)
        _sel(kb, pred, consts["nan"].broadcast(out, dt), x, r)
        _ts(kb, x, pred, Alu.IS_EQUAL, float("inf"))
        _sel(kb, pred, consts["posinf"].broadcast(out, dt), r, r)
        _ts(kb, x, pred, Alu.IS_EQUAL, float("-inf"))
        _sel(kb, pred, consts["neginf"].broadcast(out, dt), r, out)

    _unary(ctx, compute)
    for c in consts.values():
        c.release()


@lowering("aten::copysign.Tensor", "aten::copysign.Scalar", "aten::copysign_.Tensor", "aten::copysign_.Scalar",
          scalars=NARY_SCALARS)
def _copysign(ctx: LoweringContext) -> None:
    _, sources = _operands(ctx, ("self", "other"))
    by = sources[1][1] if sources[0][0] == "tensor" and sources[1][0] == "scalar" else None
    if isinstance(by, ScalarArg):
        # a Scalar sign source: +-1 from its sign bit, made once on its [P, 1] tile, is ScalarE's
        # scale for |a|, so the whole op runs on ScalarE (|a| * +-1 is exact)
        def multiplier(kb, b, s):
            _act(kb, Act.RECIPROCAL, b, s)
            _tt(kb, Alu.MIN, b, s, s)                          # < 0 exactly when b's sign bit is set
            _ts(kb, s, s, Alu.IS_LT, 0.0, Alu.MULTIPLY, -2.0)
            _ts(kb, s, s, Alu.ADD, 1.0)

        sign = by.derive(multiplier, known=lambda v: math.copysign(1.0, float(v)))

        def scaled(kb, t, out):
            mag = temp(kb, out)
            _act(kb, Act.ABS, t[0], mag)
            _act(kb, Act.COPY, mag, out, scale=sign.operand(mag))

        _nary(ctx, ("self", "other"), scaled)
        return

    def compute(kb, t, out):
        a, b = t
        # the sign mark in PSUM: the select reads it beside SBUF operands (N cycles, not 2N)
        mag, neg, sb = temp(kb, out), temp(kb, out), ptemp(kb, out)
        _act(kb, Act.ABS, a, mag)
        _act(kb, Act.NEG, mag, neg)
        _sign_bit(kb, b, sb)
        _sel(kb, sb, neg, mag, out)

    _nary(ctx, ("self", "other"), compute)


@lowering("aten::heaviside", "aten::heaviside_", scalars=("self", "values"))
def _heaviside(ctx: LoweringContext) -> None:
    def compute(kb, t, out):
        x, v = t
        z, pos = temp(kb, out), temp(kb, out)
        _ts(kb, x, pos, Alu.IS_GT, 0.0)
        _ts(kb, x, z, Alu.IS_EQUAL, 0.0)
        _sel(kb, z, v, pos, out)

    _nary(ctx, ("self", "values"), compute)


@lowering("aten::hypot", "aten::hypot_", scalars=NARY_SCALARS)
def _hypot(ctx: LoweringContext) -> None:
    def compute(kb, t, out):
        a, b = t
        a2, b2 = temp(kb, out), temp(kb, out)
        _act(kb, Act.SQUARE, a, a2)
        _act(kb, Act.SQUARE, b, b2)
        _tt(kb, Alu.ADD, a2, b2, a2)
        _act(kb, Act.SQRT, a2, out)

    _nary(ctx, ("self", "other"), compute)


def _nan_ignoring(alu: Alu):
    """fmax/fmin: max/min, but a NaN operand yields the other one (both NaN: NaN)."""
    def lower_fm(ctx: LoweringContext) -> None:
        _float_only(ctx)

        # the max/min kept in PSUM (elementwise.ptemp): both selects read it beside SBUF operands,
        # N cycles each instead of 2N; the NaN marks are ScalarE's
        def compute(kb, t, out):
            a, b = t
            r, na, nb = ptemp(kb, out), temp(kb, out), temp(kb, out)
            _tt(kb, alu, a, b, r)
            _act(kb, Act.IS_NAN, a, na)
            _act(kb, Act.IS_NAN, b, nb)
            _sel(kb, na, b, r, r)
            _sel(kb, nb, a, r, out)

        _nary(ctx, ("self", "other"), compute)
    return lower_fm


lowering("aten::fmax", scalars=NARY_SCALARS)(_nan_ignoring(Alu.MAX))
lowering("aten::fmin", scalars=NARY_SCALARS)(_nan_ignoring(Alu.MIN))


def _logaddexp(base2: bool):
    """max(a, b) + log1p(exp(-|a - b|)) (base 2: log1p(exp2(-|a - b|)) / ln 2). a - b is NaN exactly
    when an operand is NaN or a and b are the same infinity; there max(a, b) is the answer (VectorE's
    max propagates NaN, and is a itself for equal infinities, where the formula would give NaN), so
    one select on isnan(a - b) covers ATen's special cases: the predicate and log1p(exp(-|d|)) (as
    softplus(-|d|), one function: base 2 scales by ln 2 into it and 1/ln 2 out) run on ScalarE;
    VectorE keeps the difference, the max (in PSUM, so the sum and the select read it beside SBUF
    operands: N cycles each, not 2N), the sum and the select."""
    def lower_lae(ctx: LoweringContext) -> None:
        def compute(kb, t, out):
            a, b = t
            m, d, nan = ptemp(kb, out), temp(kb, out), temp(kb, out)
            _tt(kb, Alu.SUBTRACT, a, b, d)
            _tt(kb, Alu.MAX, a, b, m)
            _act(kb, Act.IS_NAN, d, nan)
            _act(kb, Act.ABS, d, d)
            if base2:
                _act(kb, Act.SOFTPLUS, d, d, scale=-_LN2)
                _act(kb, Act.COPY, d, d, scale=1.0 / _LN2)
            else:
                _act(kb, Act.SOFTPLUS, d, d, scale=-1.0)
            _tt(kb, Alu.ADD, m, d, d)
            _sel(kb, nan, m, d, out)

        # 1024-column tiles: twice as many, so the first tile's load and ScalarE chain and the last
        # tile's store, which nothing overlaps, are half as long
        _nary(ctx, ("self", "other"), compute, max_cols=1024)
    return lower_lae


lowering("aten::logaddexp", scalars=NARY_SCALARS)(_logaddexp(False))
lowering("aten::logaddexp2", scalars=NARY_SCALARS)(_logaddexp(True))


def _xlog(func: Act):
    """x * log(y) (xlogy) or x * log1p(y) (xlog1py): 0 where x == 0, NaN where y is NaN.

    Where x == 0 the answer is 0 * tanh(y) + 0: +0 for every y but NaN, which tanh keeps (and
    maps +-inf to +-1); a y outside the log's domain is no NaN there, as in ATen. The predicate
    (logical_not x), the log, the tanh and that product run on ScalarE; VectorE multiplies and
    selects."""
    def lower_xlog(ctx: LoweringContext) -> None:
        def compute(kb, t, out):
            x, y = t
            r, p, z = temp(kb, out), temp(kb, out), temp(kb, out)
            _act(kb, func, y, r)
            _act(kb, Act.LOGICAL_NOT, x, p)
            _act(kb, Act.TANH, y, z)
            _act(kb, Act.COPY, z, z, scale=0.0, bias=0.0)
            _tt(kb, Alu.MULTIPLY, x, r, r)
            _sel(kb, p, z, r, out)

        _nary(ctx, ("self", "other"), compute)
    return lower_xlog


lowering("aten::xlogy.Tensor", "aten::xlogy.Scalar_Other", "aten::xlogy.Scalar_Self", "aten::xlogy_.Tensor",
         "aten::xlogy_.Scalar_Other", scalars=NARY_SCALARS)(_xlog(Act.LOG))
lowering("aten::special_xlog1py", "aten::special_xlog1py.other_scalar",
         "aten::special_xlog1py.self_scalar", scalars=NARY_SCALARS)(_xlog(Act.LOG1P))


@lowering("aten::special_entr")
def _entr(ctx: LoweringContext) -> None:
    # -x log x for x > 0, 0 at 0, -inf below 0, NaN stays NaN

    # x <= 0 takes log(x == 0): 0 at +-0, -inf below; relu(x) is nonzero exactly where -x log x is
    # the answer (x > 0, and NaN, which stays NaN through the product). ScalarE makes both logs, the
    # x == 0 mark and the relu; VectorE only the product (into PSUM) and a select reading it (N cycles)
    def compute(kb, x, out):
        r, p, z, pos = temp(kb, out), ptemp(kb, out), temp(kb, out), temp(kb, out)
        _act(kb, Act.LOG, x, r)
        _stt(kb, r, -1.0, Alu.MULTIPLY, x, Alu.MULTIPLY, p)
        _act(kb, Act.LOGICAL_NOT, x, z)
        _act(kb, Act.LOG, z, z)
        _act(kb, Act.RELU, x, pos)
        _sel(kb, pos, p, z, out)

    _unary(ctx, compute)


@lowering("aten::rsub.Tensor", "aten::rsub.Scalar", scalars={"self": (), "other": (), "alpha": (1,)})
def _rsub(ctx: LoweringContext) -> None:
    # other - alpha * self
    alpha = ctx.scalar("alpha", 1.0)

    def compute(kb, t, out):
        x, o = t
        if alpha.known != 1.0:
            s = temp(kb, out, out.dtype if not out.dtype.is_float else F32)
            _ts(kb, x, s, Alu.MULTIPLY, alpha.operand(x))
            x = s
        _tt(kb, Alu.SUBTRACT, o, x, out)

    _nary(ctx, ("self", "other"), compute)


@lowering("aten::pow.Scalar", scalars=("self",))
def _pow_scalar_base(ctx: LoweringContext) -> None:
    base = ctx.required_scalar("self")
    emit_map(ctx, [0], lambda kb, t, out: _ts(kb, t[0], out, Alu.POW, base.operand(t[0]), reverse0=True))


# --- rounding division --------------------------------------------------------------------------------------

def _clamp_divisor(kb: KernelBuilder, b: AP, out: AP) -> None:
    """b with its infinities made +-FLT_MAX. The mod below is Python's (sign of b), so a divisor of
    +-inf gives a remainder of +-inf where the signs differ and (a - mod) / b is inf / inf = NaN,
    where ATen (fmod, then div - 1) gives -1; FLT_MAX leaves every finite |a| with the quotient ATen
    gives (0 or -1), and inf or NaN a still NaN."""
    _ts(kb, b, out, Alu.MAX, -FLT_MAX, Alu.MIN, FLT_MAX)


def _floor_from_quotient(kb: KernelBuilder, q: AP, spare: AP, out: AP) -> None:
    """ATen's last step: floor(q), plus one where q - floor(q) > 0.5 (the quotient's rounding left it
    just below an integer). The floor is ScalarE's; VectorE makes the mark, q mod 1 > 0.5 (Python's
    mod by 1 is q - floor(q), the same subtraction ATen rounds; NaN for an infinite q, whose mark is
    0), in PSUM ``spare``, and adds it to the floor."""
    f = temp(kb, out)
    _act(kb, Act.FLOOR, q, f)
    _ts(kb, q, spare, Alu.MOD, 1.0, Alu.IS_GT, 0.5)
    _tt(kb, Alu.ADD, spare, f, out)


# 1024-column tiles for floor division: VectorE's five to eight passes make a tile's compute longer
# than its transfers, so the first tile's load and the last one's store (which nothing overlaps) are
# kept short; 4 KiB FP32 rows stay above the DMA knee (1M FP32 elements on trn1: 52.1 -> 46.3 us)
FLOOR_DIV_COLS = 1024


def _floor_div(kb: KernelBuilder, a: AP, b: AP, out: AP) -> None:
    """ATen's div_floor_floating: (a - mod(a, b)) / b rounded to the integer it lies next to; a / b
    where b == 0.

    VectorE keeps its intermediates in PSUM (elementwise.ptemp), so each pass but the first reads
    one PSUM and one SBUF operand (N cycles instead of 2N), and b == 0 is handled before the divide
    (a in place of a - mod, so the divide itself gives IEEE's a / 0) instead of by a second divide and
    a select: 8 VectorE cycles an FP32 element where it took 14. ScalarE (SBUF only) makes the b == 0
    mark and the floor."""
    bc, m, q, z = temp(kb, out), ptemp(kb, out), temp(kb, out), temp(kb, out)
    _clamp_divisor(kb, b, bc)
    _tt(kb, Alu.MOD, a, bc, m)          # Python mod (sign of b): fmod with ATen's sign correction folded in
    _tt(kb, Alu.SUBTRACT, a, m, m)      # a - mod(a, b)
    _act(kb, Act.LOGICAL_NOT, b, z)     # b == 0, on ScalarE
    _sel(kb, z, a, m, m)
    _tt(kb, Alu.DIVIDE, m, bc, q)
    _floor_from_quotient(kb, q, m, out)


def _stt(kb: KernelBuilder, inp: AP, s0, alu0: Alu, in1: AP, alu1: Alu, out: AP) -> None:
    kb.emit(ScalarTensorTensor(inp=inp, scalar0=s0, alu0=alu0, in1=in1, alu1=alu1, out=out))


def _floor_div_scalar(kb: KernelBuilder, a: AP, b: ScalarArg, out: AP) -> None:
    """_floor_div by a nonzero Scalar b (a number, or a runtime value in a [P, 1] tile: zero is a
    special value of the declaration, so a runtime b is never 0 and needs no b == 0 select), made
    +-FLT_MAX where infinite (_clamp_divisor) on its [P, 1] tile: the same steps with b as each
    instruction's scalar operand (tensor_scalar, N cycles) and the intermediates in PSUM, so a - mod
    is N cycles too: 5 VectorE cycles an FP32 element (8 with them in SBUF), the floor on ScalarE."""
    bo = b.operand(a)
    m, q = ptemp(kb, out), temp(kb, out)
    _ts(kb, a, m, Alu.MOD, bo)
    _tt(kb, Alu.SUBTRACT, a, m, m)          # a - mod(a, b)
    _ts(kb, m, q, Alu.DIVIDE, bo)
    _floor_from_quotient(kb, q, m, out)


def _scalar_divisor(ctx: LoweringContext) -> ScalarArg | None:
    """The divisor as a ScalarArg when the call divides a tensor by a Scalar, else None."""
    _, sources = _operands(ctx, ("self", "other"))
    by = sources[1][1] if sources[0][0] == "tensor" and sources[1][0] == "scalar" else None
    return by if isinstance(by, ScalarArg) else None


def _floor_div_by(by: ScalarArg | None):
    """floor division's compute for _nary: the Scalar-operand kernel for a nonzero Scalar divisor
    (zero is a special value of the declaration: its own Program, with the b == 0 select)."""
    if by is not None and (by.runtime or float(by.known) != 0.0):
        clamped = by.apply(Alu.MAX, -FLT_MAX, Alu.MIN, FLT_MAX, known=lambda v: max(-FLT_MAX, min(FLT_MAX, float(v))))
        return lambda kb, t, out: _floor_div_scalar(kb, t[0], clamped, out)
    return lambda kb, t, out: _floor_div(kb, t[0], t[1], out)


@lowering("aten::floor_divide", "aten::floor_divide.Scalar", "aten::floor_divide_.Tensor",
          "aten::floor_divide_.Scalar", scalars={"self": (), "other": (0.0, -0.0)})
def _floor_divide(ctx: LoweringContext) -> None:
    _float_only(ctx)
    _nary(ctx, ("self", "other"), _floor_div_by(_scalar_divisor(ctx)), max_cols=FLOOR_DIV_COLS)


# a zero divisor (either sign) gets its own Program: the floor division by any other Scalar skips
# the b == 0 select
@lowering("aten::div.Tensor_mode", "aten::div.Scalar_mode", "aten::div_.Tensor_mode", "aten::div_.Scalar_mode",
          scalars={"self": (), "other": (0.0, -0.0)})
def _div_mode(ctx: LoweringContext) -> None:
    mode = ctx.call.attr("rounding_mode")
    if mode is not None:
        _float_only(ctx)
    floor = _floor_div_by(_scalar_divisor(ctx))

    def compute(kb, t, out):
        a, b = t
        if mode == "floor":
            floor(kb, t, out)
        elif mode == "trunc":
            # ATen truncates a / b computed in the tensor's own type (a BF16 quotient is rounded first)
            q = temp(kb, out, out.dtype)
            _tt(kb, Alu.DIVIDE, a, b, q)
            _act(kb, Act.TRUNC, q, out)
        else:
            _tt(kb, Alu.DIVIDE, a, b, out)

    _nary(ctx, ("self", "other"), compute, max_cols=FLOOR_DIV_COLS if mode == "floor" else MAX_COLS)


@lowering("aten::round.decimals", "aten::round_.decimals")
def _round_decimals(ctx: LoweringContext) -> None:
    # ATen: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d (in FP32)
    decimals = int(attr(ctx, "decimals", 0))
    ten_pow = float(DType.float32.np.type(10.0) ** abs(decimals))

    def compute(kb, x, out):
        r = temp(kb, out)
        if decimals >= 0:
            _ts(kb, x, r, Alu.MULTIPLY, ten_pow)
            _act(kb, Act.ROUND, r, r)
            _ts(kb, r, out, Alu.DIVIDE, ten_pow)
        else:
            _ts(kb, x, r, Alu.DIVIDE, ten_pow)
            _act(kb, Act.ROUND, r, r)
            _ts(kb, r, out, Alu.MULTIPLY, ten_pow)

    _unary(ctx, compute)
