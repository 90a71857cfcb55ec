"""Element-wise kernels: HBM -> SBUF tiles -> engine op(s) -> HBM, pipelined across tiles.

One driver (:func:`emit_map`) streams tiles of every operand through SBUF; a kernel only says
what to compute on a tile. Operands broadcast through their strides: a row broadcast reads one row
into every partition, a column broadcast loads a [rows, 1] tile and reads it with a zero free
stride, and a tile that is the same for every iteration (a weight vector) is loaded once.
"""

from __future__ import annotations

from typing import Callable

from ...isa import AP, Act, Activation, Alu, DType, Select, TensorScalar, TensorTensor, hbm
from ..builder import KernelBuilder
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta, broadcast_strides
from ..tiling import plan_tiles

MAX_COLS = 2048
Compute = Callable[[KernelBuilder, list, AP], None]


def emit_map(ctx: LoweringContext, operands: list[int], compute: Compute, out_index: int = 0,
             max_cols: int = MAX_COLS) -> None:
    """Stream ``operands`` (indices into the call's inputs) through ``compute`` into output ``out_index``.

    ``compute(kb, tiles, out)`` gets one SBUF pattern per operand ([rows, cols], broadcast by
    strides) and the output tile to write.
    """
    kb = ctx.kb
    out_meta = ctx.call.outputs[out_index]
    metas: list[TensorMeta] = [ctx.call.inputs[k] for k in operands]  # type: ignore[misc]
    shape = out_meta.shape
    strides = [out_meta.stride] + [broadcast_strides(m, shape) for m in metas]
    tiles = plan_tiles(shape, strides, max_cols)
    queues = [kb.queue(f"qSyncIO{i % 2}", "input") for i in range(max(1, len(metas)))]
    q_out = kb.queue("qSyncIO2", "output")
    invariant: dict[tuple, AP] = {}
    held: list[AP] = []
    for t in tiles:
        fresh: list[AP] = []
        ins: list[AP] = []
        for k, (meta, opt) in enumerate(zip(metas, t.operands[1:])):
            hbm_idx = ctx.inputs[operands[k]]
            col_bcast = opt.cstride == 0 and t.cols > 1
            cols = 1 if col_bcast else t.cols
            key = (k, opt.offset, opt.pstride, opt.cstride, t.rows, cols)
            tile = invariant.get(key)
            if tile is None:
                tile = kb.tile(t.rows, (cols,), meta.dtype)
                src = hbm(hbm_idx, t.rows, opt.pstride, [(opt.cstride if cols > 1 else 1, cols)], meta.dtype,
                          offset=meta.offset + opt.offset)
                kb.dma(queues[k % len(queues)], src, tile)
                if _is_invariant(t, opt, tiles):
                    invariant[key] = tile
                else:
                    fresh.append(tile)
            ins.append(tile.view(0, [(0, t.cols)]) if col_bcast else tile)
        out_tile = kb.tile(t.rows, (t.cols,), out_meta.dtype)
        compute(kb, ins, out_tile)
        dst = hbm(ctx.outputs[out_index], t.rows, t.operands[0].pstride, [(t.operands[0].cstride, t.cols)],
                  out_meta.dtype, offset=out_meta.offset + t.operands[0].offset)
        kb.dma(q_out, out_tile, dst)
        # free the previous iteration's tiles now: the next iteration gets other bytes (double buffering)
        kb.release(*held)
        held = fresh + [out_tile]
    kb.release(*held, *invariant.values())


def _is_invariant(t, opt, tiles) -> bool:
    """A broadcast operand read identically by every tile (e.g. a bias row) is loaded once."""
    return len(tiles) > 1 and opt.pstride == 0 and all(x.cols == t.cols for x in tiles)


# --- scalar helpers --------------------------------------------------------------------------------

def scalar_arg(ctx: LoweringContext, index: int, name: str, default=None):
    """A non-tensor argument: positional ``arg<index>`` or keyword ``name``."""
    v = ctx.call.attr(f"arg{index}")
    if v is None:
        v = ctx.call.attr(name, default)
    return v


def temp(kb: KernelBuilder, like: AP, dtype=DType.float32) -> AP:
    return kb.tile(like.partitions, (like.free_size,), dtype)


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


def _unary(func: Act):
    def lower_unary(ctx: LoweringContext) -> None:
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))
    return lower_unary


for _name, _func in UNARY_ACT.items():
    lowering(f"aten::{_name}", f"aten::{_name}_", f"aten::{_name}.out")(_unary(_func))


@lowering("aten::gelu", "aten::gelu_")
def _gelu(ctx: LoweringContext) -> None:
    func = Act.GELU_TANH if ctx.call.attr("approximate", "none") == "tanh" else Act.GELU
    emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))


@lowering("aten::pow.Tensor_Scalar", "aten::pow_.Scalar")
def _pow_scalar(ctx: LoweringContext) -> None:
    exponent = float(scalar_arg(ctx, 1, "exponent"))
    special = {2.0: Act.SQUARE, 0.5: Act.SQRT, -0.5: Act.RSQRT, -1.0: Act.RECIPROCAL, 1.0: Act.COPY}
    if exponent in special:
        func = special[exponent]
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(Activation(func=func, inp=t[0], out=out)))
    else:
        emit_map(ctx, [0], lambda kb, t, out: kb.emit(
            TensorScalar(inp=t[0], out=out, alu0=Alu.POW, scalar0=exponent)))


# --- binary -----------------------------------------------------------------------------------------

BINARY_ALU = {
    "add": Alu.ADD, "sub": Alu.SUBTRACT, "mul": Alu.MULTIPLY, "div": Alu.DIVIDE, "maximum": Alu.MAX,
    "minimum": Alu.MIN, "pow": Alu.POW, "eq": Alu.IS_EQUAL, "ne": Alu.NOT_EQUAL, "gt": Alu.IS_GT,
    "ge": Alu.IS_GE, "lt": Alu.IS_LT, "le": Alu.IS_LE, "logical_and": Alu.LOGICAL_AND,
    "logical_or": Alu.LOGICAL_OR, "logical_xor": Alu.LOGICAL_XOR, "bitwise_and": Alu.BITWISE_AND,
    "bitwise_or": Alu.BITWISE_OR, "bitwise_xor": Alu.BITWISE_XOR, "atan2": Alu.ATAN2, "fmod": Alu.MOD,
}


def _binary(alu: Alu):
    def lower_binary(ctx: LoweringContext) -> None:
        alpha = ctx.call.attr("alpha", 1)
        other_scalar = ctx.call.inputs[1] is None if len(ctx.call.inputs) > 1 else True
        if other_scalar:
            value = float(scalar_arg(ctx, 1, "other")) * (alpha if alu in (Alu.ADD, Alu.SUBTRACT) else 1)
            emit_map(ctx, [0], lambda kb, t, out: kb.emit(TensorScalar(inp=t[0], out=out, alu0=alu, scalar0=value)))
            return
        if ctx.call.inputs[0] is None:  # scalar <op> tensor: the scalar is the first operand
            value = float(scalar_arg(ctx, 0, "self"))
            if alpha != 1 and alu in (Alu.ADD, Alu.SUBTRACT):
                def scaled_first(kb: KernelBuilder, t, out: AP) -> None:
                    kb.emit(TensorScalar(inp=t[0], out=out, alu0=Alu.MULTIPLY, scalar0=float(alpha),
                                         alu1=alu, scalar1=value, reverse1=True))
                emit_map(ctx, [1], scaled_first)
                return
            emit_map(ctx, [1], lambda kb, t, out: kb.emit(
                TensorScalar(inp=t[0], out=out, alu0=alu, scalar0=value, reverse0=True)))
            return

        def compute(kb: KernelBuilder, t, out: AP) -> None:
            a, b = t
            if alpha != 1 and alu in (Alu.ADD, Alu.SUBTRACT):
                scaled = temp(kb, out)
                kb.emit(TensorScalar(inp=b, out=scaled, alu0=Alu.MULTIPLY, scalar0=float(alpha)))
                b = scaled
                kb.emit(TensorTensor(alu=alu, in0=a, in1=b, out=out))
                kb.release(scaled)
                return
            kb.emit(TensorTensor(alu=alu, in0=a, in1=b, out=out))
        emit_map(ctx, [0, 1], compute)
    return lower_binary


for _name, _alu in BINARY_ALU.items():
    # pow.Scalar is (scalar base, tensor exponent): not the "scalar other" form of the others
    for _overload in (".Tensor", "") if _name == "pow" else (".Tensor", ".Scalar", ""):
        lowering(f"aten::{_name}{_overload}", f"aten::{_name}_{_overload}")(_binary(_alu))


@lowering("aten::where.self")
def _where(ctx: LoweringContext) -> None:
    emit_map(ctx, [0, 1, 2], lambda kb, t, out: kb.emit(Select(pred=t[0], on_true=t[1], on_false=t[2], out=out)))


@lowering("aten::copy_", "aten::_copy_from", "aten::_to_copy", "aten::clone", "aten::contiguous")
def _copy(ctx: LoweringContext) -> None:
    src = 1 if ctx.call.name == "aten::copy_" else 0  # copy_(self=dst, src); _copy_from(self=src, dst)
    emit_map(ctx, [src], lambda kb, t, out: kb.emit(Activation(func=Act.COPY, inp=t[0], out=out)))
