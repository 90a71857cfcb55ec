"""Map an N-d iteration space onto [partition x free] tiles for every operand at once.

Dims that every operand walks densely are merged (coalesced); the last merged dim becomes the free
axis, the one before it the partition axis (tiled by 128), the rest are looped over. A single dense
dim is split into 128 rows so all partitions work. Each operand keeps its own strides, so
broadcasting (stride 0) and non-contiguous views need no copies: their DMAs are simply less
efficient, as on the device.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod

P = 128


@dataclass(frozen=True)
class OperandTile:
    offset: int   # element offset from the operand's base
    pstride: int  # element stride between rows (partitions)
    cstride: int  # element stride between columns (free axis)


@dataclass(frozen=True)
class Tile:
    rows: int
    cols: int
    operands: tuple[OperandTile, ...]
    row0: int = 0   # index of the first row within its block (for kernels that need positions)
    col0: int = 0


def coalesce(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dims where every operand is dense across them; drop size-1 dims."""
    dims = [(s, [st[d] for st in strides]) for d, s in enumerate(shape) if s != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    merged = [dims[0]]
    for size, sts in dims[1:]:
        psize, psts = merged[-1]
        if all(ps == s * size for ps, s in zip(psts, sts)):
            merged[-1] = (psize * size, sts)
        else:
            merged.append((size, sts))
    shape_c = tuple(s for s, _ in merged)
    strides_c = [tuple(m[1][k] for m in merged) for k in range(len(strides))]
    return shape_c, strides_c


def plan_tiles(shape: tuple[int, ...], strides: list[tuple[int, ...]], max_cols: int) -> list[Tile]:
    """Tiles covering ``shape``; ``strides[k]`` are operand k's strides over ``shape``."""
    if prod(shape) == 0:
        return []
    shape_c, strides_c = coalesce(tuple(shape), strides)
    if len(shape_c) == 1:
        n = shape_c[0]
        st = [s[0] for s in strides_c]
        tiles: list[Tile] = []
        rows = min(P, n)
        cols = n // rows
        tiles += _block(rows, cols, [0] * len(st), [c * cols for c in st], st, max_cols)
        rest = n - rows * cols
        if rest:
            tiles += _block(1, rest, [c * rows * cols for c in st], [0] * len(st), st, max_cols)
        return tiles
    outer = shape_c[:-2]
    nrows, ncols = shape_c[-2], shape_c[-1]
    tiles = []
    for idx in itertools.product(*(range(s) for s in outer)):
        base = [sum(i * s for i, s in zip(idx, st[:-2])) for st in strides_c]
        tiles += _block(nrows, ncols, base, [st[-2] for st in strides_c], [st[-1] for st in strides_c], max_cols)
    return tiles


def _block(nrows: int, ncols: int, base, pstrides, cstrides, max_cols: int) -> list[Tile]:
    out = []
    for r0 in range(0, nrows, P):
        rows = min(P, nrows - r0)
        for c0 in range(0, ncols, max_cols):
            cols = min(max_cols, ncols - c0)
            ops = tuple(OperandTile(b + r0 * ps + c0 * cs, ps, cs) for b, ps, cs in zip(base, pstrides, cstrides))
            out.append(Tile(rows, cols, ops, r0, c0))
    return out
