"""Activation backward passes, clamps, masked fills and the optimizer element-wise ops.

All of them stream through :func:`elementwise.emit_map` (operands broadcast by strides, tiles
double-buffered). The work is split the way a kernel writer splits it: ScalarE evaluates the
transcendental functions and every affine ``a * x + b`` of one tensor (free scale and bias in one
activation), VectorE does the tensor-tensor products and comparisons; intermediates are FP32 SBUF
tiles so a BF16 result is rounded once, as PyTorch's CPU kernels round it.
"""

from __future__ import annotations

import math

from ...isa import AP, Act, Activation, Alu, ScalarTensorTensor, Select, TensorScalar, TensorTensor
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..scalars import ScalarArg
from .common import attr
from .elementwise import emit_map, psum_cols, ptemp, temp

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_LN_INV_SQRT_2PI = math.log(1.0 / math.sqrt(2.0 * math.pi))
_K_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi), as ATen spells it
_K_KAPPA = 0.044715


def _act(kb: KernelBuilder, func: Act, inp: AP, out: AP, scale=1.0, bias=0.0) -> None:
    kb.emit(Activation(func=func, inp=inp, out=out, scale=scale, bias=bias))


def _tt(kb: KernelBuilder, alu: Alu, a: AP, b: AP, out: AP) -> None:
    kb.emit(TensorTensor(alu=alu, in0=a, in1=b, out=out))


class _Const:
    """A number as a [rows, 1] tile read with a zero free stride (``ScalarArg.broadcast`` of a known
    value), called with the tile it is read next to."""

    def __init__(self, kb: KernelBuilder, value: float, dtype) -> None:
        self._arg, self.dtype = ScalarArg(kb, value), dtype

    def __call__(self, like: AP) -> AP:
        return self._arg.broadcast(like, self.dtype)

    def release(self) -> None:
        self._arg.release()


# --- activation backward ------------------------------------------------------------------------------

@lowering("aten::gelu_backward")
def _gelu_backward(ctx: LoweringContext) -> None:
    tanh = attr(ctx, "approximate", "none") == "tanh"

    def exact(kb, t, out):
        # Phi(x) + x phi(x) is one function of ScalarE's table (nl.gelu_dx): VectorE keeps only the
        # product with the gradient (it took the x phi(x) product and the sum as well)
        g, x = t
        a = temp(kb, out)
        _act(kb, Act.GELU_DX, x, a)
        _tt(kb, Alu.MULTIPLY, g, a, out)

    def approx(kb, t, out):
        # d/dx 0.5 x (1 + tanh(u)), u = kBeta (x + kKappa x^3), as ATen's GeluBackward computes it
        g, x = t
        a, b, c = temp(kb, out), temp(kb, out), temp(kb, out)
        _act(kb, Act.SQUARE, x, a)                                                 # x^2
        kb.emit(TensorScalar(inp=a, out=b, alu0=Alu.MULTIPLY, scalar0=_K_KAPPA, alu1=Alu.ADD, scalar1=1.0))
        _tt(kb, Alu.MULTIPLY, x, b, b)                                             # x + kKappa x^3
        _act(kb, Act.TANH, b, b, scale=_K_BETA)                                    # T
        _act(kb, Act.COPY, a, a, scale=3.0 * _K_KAPPA * _K_BETA, bias=_K_BETA)     # du/dx
        _act(kb, Act.SQUARE, b, c)
        _act(kb, Act.COPY, c, c, scale=-1.0, bias=1.0)                             # 1 - T^2
        _tt(kb, Alu.MULTIPLY, c, a, c)
        _tt(kb, Alu.MULTIPLY, c, x, c)                                             # x (1 - T^2) du/dx
        _tt(kb, Alu.ADD, c, b, c)
        kb.emit(TensorScalar(inp=c, out=c, alu0=Alu.ADD, scalar0=1.0, alu1=Alu.MULTIPLY, scalar1=0.5))
        _tt(kb, Alu.MULTIPLY, g, c, out)

    emit_map(ctx, [0, 1], approx if tanh else exact)


@lowering("aten::silu_backward")
def _silu_backward(ctx: LoweringContext) -> None:
    # s (1 + x (1 - s)) is one function of ScalarE's table (nl.silu_dx): VectorE keeps only the
    # product with the gradient (three FP32 products before)
    def compute(kb, t, out):
        g, x = t
        d = temp(kb, out)
        _act(kb, Act.SILU_DX, x, d)
        _tt(kb, Alu.MULTIPLY, g, d, out)

    emit_map(ctx, [0, 1], compute)


@lowering("aten::threshold_backward", scalars=("threshold",))
def _threshold_backward(ctx: LoweringContext) -> None:
    threshold = ctx.scalar("threshold", 0.0)
    zero = ScalarArg(ctx.kb, 0.0)
    out_dt = ctx.call.outputs[0].dtype

    def compute(kb, t, out):
        g, x = t
        keep = temp(kb, out)
        kb.emit(TensorScalar(inp=x, out=keep, alu0=Alu.IS_GT, scalar0=threshold.operand(x)))
        kb.emit(Select(pred=keep, on_true=g, on_false=zero.broadcast(out, out_dt), out=out))

    emit_map(ctx, [0, 1], compute)
    zero.release()


@lowering("aten::sigmoid_backward")
def _sigmoid_backward(ctx: LoweringContext) -> None:
    def compute(kb, t, out):
        g, y = t
        d = temp(kb, out)
        _act(kb, Act.COPY, y, d, scale=-1.0, bias=1.0)   # 1 - y
        _tt(kb, Alu.MULTIPLY, g, d, d)
        _tt(kb, Alu.MULTIPLY, d, y, out)

    emit_map(ctx, [0, 1], compute)


@lowering("aten::tanh_backward")
def _tanh_backward(ctx: LoweringContext) -> None:
    def compute(kb, t, out):
        g, y = t
        d = temp(kb, out)
        _act(kb, Act.SQUARE, y, d)
        _act(kb, Act.COPY, d, d, scale=-1.0, bias=1.0)   # 1 - y^2
        _tt(kb, Alu.MULTIPLY, g, d, out)

    emit_map(ctx, [0, 1], compute)


# --- clamp -----------------------------------------------------------------------------------------------

def _clamp_scalar(ctx: LoweringContext, lo: ScalarArg | None, hi: ScalarArg | None) -> None:
    ops = [(alu, v) for alu, v in ((Alu.MAX, lo), (Alu.MIN, hi)) if v is not None]
    if not ops:
        raise ValueError("clamp needs min or max")

    def compute(kb, t, out):
        (alu0, s0), (alu1, s1) = ops[0], ops[1] if len(ops) > 1 else (None, None)
        kb.emit(TensorScalar(inp=t[0], out=out, alu0=alu0, scalar0=s0.operand(t[0]), alu1=alu1,
                             scalar1=s1.operand(t[0]) if s1 is not None else None))

    emit_map(ctx, [0], compute)


def _clamp_tensor(ctx: LoweringContext, lo_idx: int | None, hi_idx: int | None) -> None:
    operands = [0] + [i for i in (lo_idx, hi_idx) if i is not None]
    alus = ([Alu.MAX] if lo_idx is not None else []) + ([Alu.MIN] if hi_idx is not None else [])

    def compute(kb, t, out):
        src = t[0]
        for k, alu in enumerate(alus):
            dst = out if k == len(alus) - 1 else temp(kb, out)
            _tt(kb, alu, src, t[k + 1], dst)
            src = dst

    emit_map(ctx, operands, compute)


def _slot(ctx: LoweringContext, i: int) -> int | None:
    return i if ctx.call.inputs.optional(i) is not None else None


# a bound's value is a runtime operand; whether a bound is given at all is part of the kernel
@lowering("aten::clamp", "aten::clamp_", "aten::clamp.Tensor", "aten::clamp_.Tensor", scalars=("min", "max"))
def _clamp(ctx: LoweringContext) -> None:
    lo_t, hi_t = _slot(ctx, 1), _slot(ctx, 2)
    if lo_t is not None or hi_t is not None:
        if ctx.call.attr("min") is not None or ctx.call.attr("max") is not None:
            raise NotImplementedError("clamp with one Tensor bound and one Scalar bound")
        _clamp_tensor(ctx, lo_t, hi_t)
    else:
        _clamp_scalar(ctx, ctx.scalar("min"), ctx.scalar("max"))


@lowering("aten::clamp_min", "aten::clamp_min_", "aten::clamp_min.Tensor", "aten::clamp_min_.Tensor",
          scalars=("min",))
def _clamp_min(ctx: LoweringContext) -> None:
    if _slot(ctx, 1) is not None:
        _clamp_tensor(ctx, 1, None)
    else:
        _clamp_scalar(ctx, ctx.scalar("min"), None)


@lowering("aten::clamp_max", "aten::clamp_max_", "aten::clamp_max.Tensor", "aten::clamp_max_.Tensor",
          scalars=("max",))
def _clamp_max(ctx: LoweringContext) -> None:
    if _slot(ctx, 1) is not None:
        _clamp_tensor(ctx, None, 1)
    else:
        _clamp_scalar(ctx, None, ctx.scalar("max"))


@lowering("aten::hardtanh", "aten::hardtanh_", scalars=("min_val", "max_val"))
def _hardtanh(ctx: LoweringContext) -> None:
    _clamp_scalar(ctx, ctx.scalar("min_val", -1.0), ctx.scalar("max_val", 1.0))


# --- masked_fill / where with scalars -------------------------------------------------------------------

@lowering("aten::masked_fill.Scalar", "aten::masked_fill_.Scalar", "aten::masked_fill.Tensor",
          "aten::masked_fill_.Tensor", scalars=("value",))
def _masked_fill(ctx: LoweringContext) -> None:
    out_dt = ctx.call.outputs[0].dtype
    if _slot(ctx, 2) is not None:
        emit_map(ctx, [0, 1, 2], lambda kb, t, out: kb.emit(Select(pred=t[1], on_true=t[2], on_false=t[0], out=out)))
        return
    value = ctx.scalar("value", 0.0)
    emit_map(ctx, [0, 1], lambda kb, t, out: kb.emit(
        Select(pred=t[1], on_true=value.broadcast(out, out_dt), on_false=t[0], out=out)))


@lowering("aten::where.ScalarOther", "aten::where.ScalarSelf", "aten::where.Scalar", scalars=("self", "other"))
def _where_scalar(ctx: LoweringContext) -> None:
    # inputs hold the tensor arguments only: (condition, self) for ScalarOther, (condition, other)
    # for ScalarSelf, (condition,) for Scalar; the scalars are attributes
    out_dt = ctx.call.outputs[0].dtype
    overload = ctx.call.name.split(".")[-1]
    tensor_side = {"ScalarOther": 0, "ScalarSelf": 1}.get(overload)
    consts = {side: ctx.scalar(name, 0.0) for side, name in ((0, "self"), (1, "other")) if side != tensor_side}
    operands = [0] + ([1] if tensor_side is not None else [])

    def compute(kb, t, out):
        pick = [t[1] if side == tensor_side else consts[side].broadcast(out, out_dt) for side in (0, 1)]
        kb.emit(Select(pred=t[0], on_true=pick[0], on_false=pick[1], out=out))

    emit_map(ctx, operands, compute)


# --- optimizer element-wise ops ------------------------------------------------------------------------

def _scaled_combine(alu: Alu, value: ScalarArg):
    """self + value * (t1 <alu> t2): addcmul (multiply) and addcdiv (divide)."""
    def compute(kb, t, out):
        s, a, b = t
        tmp = temp(kb, out)
        _tt(kb, alu, a, b, tmp)
        if value.known != 1.0:
            _act(kb, Act.COPY, tmp, tmp, scale=value.operand(tmp))
        _tt(kb, Alu.ADD, s, tmp, out)
    return compute


@lowering("aten::addcmul", "aten::addcmul_", scalars={"value": (1,)})
def _addcmul(ctx: LoweringContext) -> None:
    emit_map(ctx, [0, 1, 2], _scaled_combine(Alu.MULTIPLY, ctx.scalar("value", 1.0)))


@lowering("aten::addcdiv", "aten::addcdiv_", scalars={"value": (1,)})
def _addcdiv(ctx: LoweringContext) -> None:
    emit_map(ctx, [0, 1, 2], _scaled_combine(Alu.DIVIDE, ctx.scalar("value", 1.0)))


@lowering("aten::lerp.Scalar", "aten::lerp_.Scalar", "aten::lerp.Tensor", "aten::lerp_.Tensor", scalars=("weight",))
def _lerp(ctx: LoweringContext) -> None:
    # ATen: |w| < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w)
    if _slot(ctx, 2) is not None:
        # VectorE's intermediates in PSUM (elementwise.ptemp): every pass after end - self reads one
        # PSUM and one SBUF operand (N cycles, not 2N); ScalarE makes 1 - w and the form's mark,
        # trunc(2 w), nonzero exactly where |w| >= 0.5 (or w is NaN, where both forms are NaN):
        # 7 VectorE cycles an FP32 element, where it took 13
        def tensor_weight(kb, t, out):
            s, e, w = t
            diff, a = ptemp(kb, out), ptemp(kb, out)
            one, big = temp(kb, out), temp(kb, out)
            _tt(kb, Alu.SUBTRACT, e, s, diff)
            _tt(kb, Alu.MULTIPLY, w, diff, a)
            _tt(kb, Alu.ADD, s, a, a)                           # self + w * diff
            _act(kb, Act.COPY, w, one, scale=-1.0, bias=1.0)
            _tt(kb, Alu.MULTIPLY, diff, one, diff)
            _tt(kb, Alu.SUBTRACT, e, diff, diff)                # end - diff * (1 - w)
            _act(kb, Act.TRUNC, w, big, scale=2.0)
            kb.emit(Select(pred=big, on_true=diff, on_false=a, out=out))
        emit_map(ctx, [0, 1, 2], tensor_weight, max_cols=psum_cols(ctx.kb, 2))
        return
    w = ctx.scalar("weight", 0.5)
    if w.runtime:
        # both of ATen's forms, chosen per call by |w| < 0.5 computed on the weight's tile
        # e - diff * (1 - w) as diff * (w - 1) + e: RN(w - 1) = -RN(1 - w), so the product is the exact
        # negative and the sum the same number; each form is one scalar_tensor_tensor pass
        # Both forms are base + c * diff, (base, c) = (self, w) or (end, w - 1) by one choice per call:
        # the [P, 1] tiles hold the mark |w| < 0.5 and c, and each tile selects its base (a select
        # writing PSUM: N cycles) and makes c * diff + base in one scalar_tensor_tensor. Only the
        # chosen form is computed: 5 VectorE cycles an FP32 element, where both forms and a select
        # of them took 8
        small = w.apply(Alu.ABS_MAX, 0.0, Alu.IS_LT, 0.5, known=lambda v: float(abs(v) < 0.5))

        def coefficient(kb, wt, out):
            mark, less_one = kb.tile(wt.partitions, (1,), out.dtype), kb.tile(wt.partitions, (1,), out.dtype)
            kb.emit(TensorScalar(inp=wt, out=mark, alu0=Alu.ABS_MAX, scalar0=0.0, alu1=Alu.IS_LT, scalar1=0.5))
            kb.emit(TensorScalar(inp=wt, out=less_one, alu0=Alu.ADD, scalar0=-1.0))
            kb.emit(Select(pred=mark, on_true=wt, on_false=less_one, out=out))
            kb.release(mark, less_one)

        coef = w.derive(coefficient, known=lambda v: float(v) if abs(v) < 0.5 else float(v) - 1.0)

        def runtime_weight(kb, t, out):
            s, e = t
            diff, base = temp(kb, out), ptemp(kb, out)
            _tt(kb, Alu.SUBTRACT, e, s, diff)
            kb.emit(Select(pred=small.broadcast(diff), on_true=s, on_false=e, out=base))
            kb.emit(ScalarTensorTensor(inp=diff, scalar0=coef.operand(diff), alu0=Alu.MULTIPLY, in1=base,
                                       alu1=Alu.ADD, out=out))
        emit_map(ctx, [0, 1], runtime_weight)
        return
    weight = float(w.known)

    def scalar_weight(kb, t, out):
        s, e = t
        diff = temp(kb, out)
        _tt(kb, Alu.SUBTRACT, e, s, diff)
        if abs(weight) < 0.5:
            kb.emit(ScalarTensorTensor(inp=diff, scalar0=weight, alu0=Alu.MULTIPLY, in1=s, alu1=Alu.ADD, out=out))
        else:
            # e - diff * (1 - w): the product's negative is diff * -(1 - w) exactly
            kb.emit(ScalarTensorTensor(inp=diff, scalar0=-(1.0 - weight), alu0=Alu.MULTIPLY, in1=e, alu1=Alu.ADD,
                                       out=out))

    emit_map(ctx, [0, 1], scalar_weight)
