"""In-place random fills (``uniform_``, ``normal_``, ``bernoulli_``, ``exponential_``): GpSimdE
generates the numbers tile by tile in SBUF and DMA writes them out. Parameter initialisation of a
model built on the device (``nn.Linear(..., device="neuron")``) runs here."""

from __future__ import annotations

from ...isa import AP, Random, hbm
from ..lowering import LoweringContext, lowering
from ..meta import TensorMeta
from ..tiling import plan_tiles
from .elementwise import MAX_COLS


def _emit_random(ctx: LoweringContext, dist: str, a: float, b: float) -> None:
    kb = ctx.kb
    out: TensorMeta = ctx.call.outputs[0]
    q_out = kb.queue("qSyncIO2", "output")
    held: list[AP] = []
    for i, t in enumerate(plan_tiles(out.shape, [out.stride], MAX_COLS)):
        tile = kb.tile(t.rows, (t.cols,), out.dtype)
        kb.emit(Random(out=tile, dist=dist, a=a, b=b, seed=i))
        o = t.operands[0]
        kb.dma(q_out, tile, hbm(ctx.outputs[0], t.rows, o.pstride, [(o.cstride, t.cols)], out.dtype, offset=o.offset))
        kb.release(*held)
        held = [tile]
    kb.release(*held)


@lowering("aten::uniform_")
def _uniform(ctx: LoweringContext) -> None:
    _emit_random(ctx, "uniform", float(ctx.call.attr("from", 0.0)), float(ctx.call.attr("to", 1.0)))


@lowering("aten::normal_")
def _normal(ctx: LoweringContext) -> None:
    _emit_random(ctx, "normal", float(ctx.call.attr("mean", 0.0)), float(ctx.call.attr("std", 1.0)))


@lowering("aten::bernoulli_.float")
def _bernoulli(ctx: LoweringContext) -> None:
    _emit_random(ctx, "bernoulli", float(ctx.call.attr("p", 0.5)), 0.0)


@lowering("aten::exponential_")
def _exponential(ctx: LoweringContext) -> None:
    _emit_random(ctx, "exponential", float(ctx.call.attr("lambd", 1.0)), 0.0)
