"""Element-wise kernels: HBM -> SBUF tiles -> engine op(s) -> HBM, pipelined across tiles.

One driver (:func:`emit_map`) streams tiles of every operand through SBUF; a kernel only says
what to compute on a tile. Operands broadcast through their strides: a row broadcast reads one row
into every partition, a column broadcast loads a [rows, 1] tile and reads it with a zero free
stride, and a tile that is the same for every iteration (a weight vector) is loaded once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import numpy as np

from ...isa import AP, Act, Activation, Alu, DType, ScalarTensorTensor, Select, Space, TensorScalar, TensorTensor
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..scalars import ScalarArg
from ..meta import broadcast_strides
from ..tiling import CostModel, plan_map
from .common import ScratchScope, move, scratch

MAX_COLS = 2048
# what compute returns (the instruction it emitted, or nothing) is not used
Compute = Callable[[KernelBuilder, list, Any], object]   # out: the tile, or a tuple of them (emit_map's also)


def emit_map(ctx: LoweringContext, operands: list[int], compute: Compute, out_index: int = 0,
             max_cols: int = MAX_COLS, also: tuple[int, ...] = ()) -> None:
    """Stream ``operands`` (indices into the call's inputs) through ``compute`` into output ``out_index``.

    ``compute(kb, tiles, out)`` gets one SBUF pattern per operand ([rows, cols], broadcast by
    strides) and the output tile to write. The layout (which dims, or pieces of a dim, go on the
    partitions) is tiling.plan_map's cheapest under the spec's costs. ``also``: more outputs laid
    out as ``out_index`` is (same shape and strides: see :func:`same_layout`), written by the same
    pass over the inputs; ``out`` is then the tuple of output tiles, ``out_index``'s first.
    """
    kb = ctx.kb
    out_meta = ctx.call.outputs[out_index]
    metas = [ctx.call.inputs[k] for k in operands]
    shape = out_meta.shape
    strides = [out_meta.stride] + [broadcast_strides(m, shape) for m in metas]
    cm = CostModel(kb.spec, tuple(m.dtype.itemsize for m in [out_meta, *metas]), inputs=len(metas))
    tiles = plan_map(shape, strides, max_cols, cm, max_part_dims=3, max_free_dims=kb.spec.ap_max_dims - 1)
    queues = [kb.queue(f"qSyncIO{i % 2}", "input") for i in range(max(1, len(metas)))]
    q_out = kb.queue("qSyncIO2", "output")
    # an input read identically by every tile (a bias row, RoPE's cos table) is loaded once
    keys = Counter((k, o.offset, o.part, o.free, t.free) for t in tiles for k, o in enumerate(t.operands[1:]))
    invariant: dict[tuple, AP] = {}
    held: list[AP] = []
    for t in tiles:
        fresh: list[AP] = []
        ins: list[AP] = []
        for k, (meta, om) in enumerate(zip(metas, t.operands[1:])):
            key = (k, om.offset, om.part, om.free, t.free)
            tile = invariant.get(key)
            bcast = om.broadcasts_free(t.free)
            if tile is None:
                rows, pstride, dims = om.hbm(t.free, skip_broadcast=True)
                tile = kb.tile(t.rows, (om.loaded(t.free),), meta.dtype)
                move(kb, queues[k % len(queues)], ctx.inputs[operands[k]], meta.dtype, meta.offset + om.offset, rows,
                     pstride, dims, tile, inbound=True)
                if len(tiles) > 1 and keys[key] == len(tiles):
                    invariant[key] = tile
                else:
                    fresh.append(tile)
            ins.append(tile.view(0, om.view(t.free)) if bcast else tile)
        out_tile = kb.tile(t.rows, (t.cols,), out_meta.dtype)
        extra = [kb.tile(t.rows, (t.cols,), ctx.call.outputs[k].dtype) for k in also]
        with ScratchScope() as made:
            compute(kb, ins, (out_tile, *extra) if also else out_tile)
        o = t.operands[0]
        rows, pstride, dims = o.hbm(t.free)
        for k, tile in zip((out_index, *also), (out_tile, *extra)):
            meta = ctx.call.outputs[k]
            move(kb, q_out, ctx.outputs[k], meta.dtype, meta.offset + o.offset, rows, pstride, dims, tile,
                 inbound=False)
        # free the previous iteration's tiles now: the next iteration gets other bytes (double buffering)
        kb.release(*held)
        held = fresh + [out_tile] + extra + made
    kb.release(*held, *invariant.values())


def same_layout(ctx: LoweringContext, a: int, b: int) -> bool:
    """Outputs ``a`` and ``b`` can share one emit_map pass (``also``): same shape and strides."""
    x, y = ctx.call.outputs[a], ctx.call.outputs[b]
    return x.shape == y.shape and tuple(x.stride) == tuple(y.stride)


# --- scalar helpers --------------------------------------------------------------------------------

def scalar_arg(ctx: LoweringContext, index: int, name: str, default=None):
    """A non-tensor argument: positional ``arg<index>`` or keyword ``name``."""
    v = ctx.call.attr(f"arg{index}")
    if v is None:
        v = ctx.call.attr(name, default)
    return v


def scalar_operand(ctx: LoweringContext, index: int, name: str) -> ScalarArg:
    """:func:`scalar_arg` as an operand (``scalars.ScalarArg``: a number or a runtime scalar); the
    op's schema makes it required."""
    positional = f"arg{index}"
    return ctx.required_scalar(positional if ctx.call.attr(positional) is not None else name)


def temp(kb: KernelBuilder, like: AP, dtype=DType.float32) -> AP:
    """A temporary shaped like ``like``: inside emit_map's compute it is released one tile later
    (see common.scratch), so callers need not (and should not) release it."""
    return scratch(kb, like.partitions, like.free_size, dtype)


def ptemp(kb: KernelBuilder, like: AP) -> AP:
    """An FP32 temporary in PSUM shaped like ``like``, for VectorE alone (released as :func:`temp`).

    A VectorE tensor_tensor reading one operand from PSUM and one from SBUF costs N cycles instead
    of the 2N of two SBUF operands (S9), and so does a select over mixed spaces: a kernel that keeps
    its VectorE intermediates here halves those passes. ScalarE never reads or writes these tiles:
    NC-v2 lets VectorE and ScalarE access PSUM only one at a time (hardware.md 2.3), which the
    simulator does not model, so a kernel that kept ScalarE off PSUM is timed as it would run.
    DMA does not read PSUM either: a kernel's last instruction writes its SBUF output tile."""
    return scratch(kb, like.partitions, like.free_size, DType.float32, space=Space.PSUM)


def psum_cols(kb: KernelBuilder, per_tile: int) -> int:
    """emit_map's ``max_cols`` for a kernel holding ``per_tile`` :func:`ptemp` tiles per iteration:
    two iterations' tiles (the scratch of one is released a tile later) fit PSUM, each a whole
    number of banks."""
    spec = kb.spec
    banks = max(1, spec.psum_banks // (2 * per_tile))
    return min(MAX_COLS, banks * spec.psum_bank_bytes // DType.float32.itemsize)


# --- unary ------------------------------------------------------------------------------------------

UNARY_ACT = {
    "exp": Act.EXP, "log": Act.LOG, "tanh": Act.TANH, "sigmoid": Act.SIGMOID, "relu": Act.RELU,
    "silu": Act.SILU, "sqrt": Act.SQRT, "rsqrt": Act.RSQRT, "reciprocal": Act.RECIPROCAL, "abs": Act.ABS,
    "neg": Act.NEG, "sin": Act.SIN, "cos": Act.COS, "tan": Act.TAN, "erf": Act.ERF, "sign": Act.SIGN,
    "floor": Act.FLOOR, "ceil": Act.CEIL, "trunc": Act.TRUNC, "round": Act.ROUND, "log1p": Act.LOG1P,
    "expm1": Act.EXPM1, "log2": Act.LOG2, "exp2": Act.EXP2, "asin": Act.ASIN, "acos": Act.ACOS,
    "atan": Act.ATAN, "sinh": Act.SINH, "cosh": Act.COSH, "asinh": Act.ASINH, "acosh": Act.ACOSH,
    "atanh": Act.ATANH, "erfinv": Act.ERFINV, "square": Act.SQUARE, "logical_not": Act.LOGICAL_NOT,
    "bitwise_not": Act.BITWISE_NOT, "isnan": Act.IS_NAN, "isinf": Act.IS_INF, "isfinite": Act.IS_FINITE,
}


_NO_INPLACE = {"isnan", "isinf", "isfinite"}  # ATen has no in-place form of these


def _unary(func: Act):
    def lower_unary(ctx: LoweringContext) -> None:
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))
    return lower_unary


for _name, _func in UNARY_ACT.items():
    # out= variants reach the registry under their functional name (opcall.functional_name)
    lowering(f"aten::{_name}", *(() if _name in _NO_INPLACE else (f"aten::{_name}_",)))(_unary(_func))


@lowering("aten::gelu", "aten::gelu_")
def _gelu(ctx: LoweringContext) -> None:
    func = Act.GELU_TANH if ctx.call.attr("approximate", "none") == "tanh" else Act.GELU
    emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))


# exponents with an instruction of their own; any other exponent is a runtime operand of one POW
POW_SPECIAL = {2.0: Act.SQUARE, 0.5: Act.SQRT, -0.5: Act.RSQRT, -1.0: Act.RECIPROCAL, 1.0: Act.COPY}


@lowering("aten::pow.Tensor_Scalar", "aten::pow_.Scalar", scalars={"exponent": tuple(POW_SPECIAL)})
def _pow_scalar(ctx: LoweringContext) -> None:
    exponent = scalar_operand(ctx, 1, "exponent")
    known = exponent.known
    if known is not None and float(known) in POW_SPECIAL:
        func = POW_SPECIAL[float(known)]
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))
    else:
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(
            TensorScalar(inp=t[0], out=out, alu0=Alu.POW, scalar0=exponent.operand(t[0]))))


# --- binary -----------------------------------------------------------------------------------------

BINARY_ALU = {
    "add": Alu.ADD, "sub": Alu.SUBTRACT, "mul": Alu.MULTIPLY, "div": Alu.DIVIDE, "maximum": Alu.MAX,
    "minimum": Alu.MIN, "pow": Alu.POW, "eq": Alu.IS_EQUAL, "ne": Alu.NOT_EQUAL, "gt": Alu.IS_GT,
    "ge": Alu.IS_GE, "lt": Alu.IS_LT, "le": Alu.IS_LE, "logical_and": Alu.LOGICAL_AND,
    "logical_or": Alu.LOGICAL_OR, "logical_xor": Alu.LOGICAL_XOR, "bitwise_and": Alu.BITWISE_AND,
    "bitwise_or": Alu.BITWISE_OR, "bitwise_xor": Alu.BITWISE_XOR, "atan2": Alu.ATAN2,
    # the ALU's mod is Python's (the sign of the divisor): torch.remainder. torch.fmod (the sign of the
    # dividend) is not one ALU op: see _fmod below
    "remainder": Alu.MOD,
}


def _binary(alu: Alu):
    def lower_binary(ctx: LoweringContext) -> None:
        alpha = ctx.scalar("alpha", 1)
        scaled = alu in (Alu.ADD, Alu.SUBTRACT) and alpha.known != 1
        other_scalar = ctx.call.inputs.optional(1) is None
        if other_scalar:
            value = scalar_operand(ctx, 1, "other")
            if alu in (Alu.ADD, Alu.SUBTRACT):
                value = value.times(alpha)
            emit_map(ctx, [0], lambda kb, t, out: kb.emit(
                TensorScalar(inp=t[0], out=out, alu0=alu, scalar0=value.operand(t[0]))))
            return
        if ctx.call.inputs.optional(0) is None:  # scalar <op> tensor: the scalar is the first operand
            value = scalar_operand(ctx, 0, "self")
            if scaled:
                def scaled_first(kb: KernelBuilder, t, out: AP) -> None:
                    kb.emit(TensorScalar(inp=t[0], out=out, alu0=Alu.MULTIPLY, scalar0=alpha.operand(t[0]),
                                         alu1=alu, scalar1=value.operand(t[0]), reverse1=True))
                emit_map(ctx, [1], scaled_first)
                return
            emit_map(ctx, [1], lambda kb, t, out: kb.emit(
                TensorScalar(inp=t[0], out=out, alu0=alu, scalar0=value.operand(t[0]), reverse0=True)))
            return

        def compute(kb: KernelBuilder, t, out: AP) -> None:
            a, b = t
            if scaled:
                product = temp(kb, out)
                kb.emit(TensorScalar(inp=b, out=product, alu0=Alu.MULTIPLY, scalar0=alpha.operand(b)))
                b = product
            kb.emit(TensorTensor(alu=alu, in0=a, in1=b, out=out))
        emit_map(ctx, [0, 1], compute)
    return lower_binary


# a Python number (or a 0-dim CPU tensor) next to a tensor is a runtime operand; alpha == 1 skips a multiply
BINARY_SCALARS = {"self": (), "other": (), "alpha": (1,)}


# The ATen overloads each binary op arrives as: tensor-tensor and tensor-scalar forms and their
# in-place variants. pow.Scalar (scalar base) and bitwise_*.Scalar_Tensor (scalar first, no tensor
# slot for it) are other signatures and are not served here.
_DEFAULT_ONLY = {"maximum": False, "minimum": False, "logical_and": True, "logical_or": True,
                 "logical_xor": True, "atan2": True}  # name -> has an in-place variant
for _name, _alu in BINARY_ALU.items():
    if _name == "pow":
        _names: tuple[str, ...] = ("aten::pow.Tensor_Tensor", "aten::pow_.Tensor")
    elif _name in _DEFAULT_ONLY:
        _names = (f"aten::{_name}",) + ((f"aten::{_name}_",) if _DEFAULT_ONLY[_name] else ())
    else:
        _names = tuple(f"aten::{_name}{_ip}.{_ov}" for _ip in ("", "_") for _ov in ("Tensor", "Scalar"))
    lowering(*_names, scalars=BINARY_SCALARS)(_binary(_alu))


@lowering("aten::fmod.Tensor", "aten::fmod.Scalar", "aten::fmod_.Tensor", "aten::fmod_.Scalar")
def _fmod(ctx: LoweringContext) -> None:
    """C fmod = Python mod - divisor, where the operands' signs differ and the remainder is not 0."""
    out_dt = ctx.call.outputs[0].dtype
    scalar = ctx.call.inputs.optional(1) is None

    def float_fmod(kb: KernelBuilder, t, out: AP) -> None:
        # fmod(a, b) = sign(a) * mod(|a|, |b|): the remainders of nonnegative operands agree, and
        # NaN (a NaN or infinite a, a zero b) and b = inf (a itself) come out of the ALU's mod.
        # ScalarE makes |a|, |b| and sign(a); VectorE the mod and the signed product (one
        # scalar_tensor_tensor for a Scalar divisor)
        a = t[0]
        mag, sgn = temp(kb, out), temp(kb, out)
        kb.emit(Activation(func=Act.ABS, inp=a, out=mag))
        kb.emit(Activation(func=Act.SIGN, inp=a, out=sgn))
        if scalar:
            divisor = abs(float(scalar_arg(ctx, 1, "other")))
            if out_dt.itemsize < 4:
                # ATen wraps the Scalar as a tensor of self's type: a BF16 fmod divides by 0.7 rounded
                # to BF16 (0.69921875), not by 0.7
                divisor = float(np.asarray(divisor, np.float32).astype(out_dt.np).astype(np.float32))
            kb.emit(ScalarTensorTensor(inp=mag, scalar0=divisor, alu0=Alu.MOD, in1=sgn, alu1=Alu.MULTIPLY, out=out))
            return
        div = temp(kb, out)
        kb.emit(Activation(func=Act.ABS, inp=t[1], out=div))
        kb.emit(TensorTensor(alu=Alu.MOD, in0=mag, in1=div, out=mag))
        kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=mag, in1=sgn, out=out))

    if out_dt.is_float:
        emit_map(ctx, [0] if scalar else [0, 1], float_fmod)
        return

    def compute(kb: KernelBuilder, t, out: AP) -> None:
        a = t[0]
        wdt = out_dt   # integers stay exact
        r, fix, tmp = temp(kb, out, wdt), temp(kb, out, wdt), temp(kb, out, wdt)
        if scalar:
            divisor = float(scalar_arg(ctx, 1, "other"))
            kb.emit(TensorScalar(inp=a, out=r, alu0=Alu.MOD, scalar0=divisor))
            kb.emit(TensorScalar(inp=a, out=fix, alu0=Alu.IS_LT if divisor > 0 else Alu.IS_GT, scalar0=0))
        else:
            b = t[1]
            kb.emit(TensorTensor(alu=Alu.MOD, in0=a, in1=b, out=r))
            kb.emit(TensorScalar(inp=a, out=fix, alu0=Alu.IS_LT, scalar0=0))
            kb.emit(TensorScalar(inp=b, out=tmp, alu0=Alu.IS_LT, scalar0=0))
            kb.emit(TensorTensor(alu=Alu.LOGICAL_XOR, in0=fix, in1=tmp, out=fix))   # signs differ
        kb.emit(TensorScalar(inp=r, out=tmp, alu0=Alu.NOT_EQUAL, scalar0=0))
        kb.emit(TensorTensor(alu=Alu.LOGICAL_AND, in0=fix, in1=tmp, out=fix))
        if scalar:
            kb.emit(TensorScalar(inp=fix, out=fix, alu0=Alu.MULTIPLY, scalar0=divisor))
        else:
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=fix, in1=b, out=fix))
        kb.emit(TensorTensor(alu=Alu.SUBTRACT, in0=r, in1=fix, out=out))

    emit_map(ctx, [0] if scalar else [0, 1], compute)


@lowering("aten::where.self")
def _where(ctx: LoweringContext) -> None:
    emit_map(ctx, [0, 1, 2], lambda kb, t, out: kb.emit(Select(pred=t[0], on_true=t[1], on_false=t[2], out=out)))


# copies (copy_, _copy_from, _to_copy, clone, ...) are DMA work: movement.py
