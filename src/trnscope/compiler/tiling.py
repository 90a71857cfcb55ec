"""Map an N-d iteration space onto [partition x free] tiles for every operand at once.

Dims that every operand walks densely are merged (coalesced). A *layout* then cuts the merged dims,
taken in their order or in one operand's memory order and optionally with one of them split in two, into loop dims (outermost), partition dims (their product
is the tile's rows, at most 128) and free dims (innermost, their product the tile's columns). Each
operand keeps its own strides over every dim, so broadcasting (stride 0) and non-contiguous views
need no copies; several partition dims are one DMA whose HBM side walks them as extra dims (a DMA
moves elements in order; only the SBUF side needs one row per partition).

Which layout is best is a cost question, not a rule: more partitions make each engine instruction
shorter (a VectorE op costs its free size per partition, on all 128 partitions at once), but cutting
a contiguous dim finer makes DMA descriptors shorter, and descriptors under ~2 KiB cost as much as
2 KiB (docs/cost-model.md, DMA). :func:`plan_map` enumerates the layouts and keeps the one whose
estimated time (the published instruction and descriptor costs of the hardware spec, loads and
compute overlapped across tiles) is lowest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod

from ..hw import HardwareSpec, get_spec
from ..isa import DMA_TRANSPOSE_EFFICIENCY

# The planner and the kernels read the target's ``spec.partitions``; this constant (128 on every
# NeuronCore so far) is left to the matmul family's blocking (kernels.matmul, compiler.epilogue).
P = 128
# DMA transpose throughput relative to a copy, loads (from HBM) and stores (from SBUF), as Dma prices them
TRANSPOSE_LOAD, TRANSPOSE_STORE = DMA_TRANSPOSE_EFFICIENCY[True], DMA_TRANSPOSE_EFFICIENCY[False]

Dim = tuple[int, tuple[int, ...]]   # (size, per-operand strides)


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


@dataclass(frozen=True)
class OperandMap:
    """One operand over a :class:`MapTile`: element offset, then (stride, size) of the partition dims
    (outermost first, sizes multiply to the tile's rows) and its stride over each free dim."""
    offset: int
    part: tuple[tuple[int, int], ...]
    free: tuple[int, ...]

    def hbm(self, free: tuple[int, ...], skip_broadcast: bool = False) -> tuple[int, int, list[tuple[int, int]]]:
        """(rows, row stride, free dims) of this operand's HBM pattern for a tile of ``free`` sizes.

        The first partition dim is the pattern's partition dim; the others and the free dims follow
        as free dims, merged where dense. ``skip_broadcast`` leaves out free dims the operand reads
        with stride 0 (they are broadcast on chip instead of loaded again).
        """
        (pst, rows), inner = self.part[0], list(self.part[1:])
        inner += [(st, sz) for st, sz in zip(self.free, free) if not (skip_broadcast and st == 0)]
        return rows, pst, merge_dims(inner)

    def view(self, free: tuple[int, ...]) -> list[tuple[int, int]]:
        """On-chip free dims reading a tile loaded with ``skip_broadcast``: dense over the loaded dims,
        stride 0 over the broadcast ones."""
        dims, step = [], 1
        for st, sz in reversed(list(zip(self.free, free))):
            if st == 0:
                dims.append((0, sz))
            else:
                dims.append((step, sz))
                step *= sz
        return merge_dims(dims[::-1])

    def loaded(self, free: tuple[int, ...]) -> int:
        """Elements per partition of the tile loaded with ``skip_broadcast``."""
        return prod(sz for st, sz in zip(self.free, free) if st != 0)

    def broadcasts_free(self, free: tuple[int, ...]) -> bool:
        return any(st == 0 and sz > 1 for st, sz in zip(self.free, free))


@dataclass(frozen=True)
class MapTile:
    rows: int
    free: tuple[int, ...]             # free dim sizes, outermost first
    operands: tuple[OperandMap, ...]

    @property
    def cols(self) -> int:
        return prod(self.free)


def merge_dims(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(stride, size) dims, outermost first, with size-1 dims dropped and dense neighbours merged."""
    out: list[tuple[int, int]] = []
    for st, sz in dims:
        if sz == 1:
            continue
        if out and out[-1][0] == st * sz:
            out[-1] = (st, out[-1][1] * sz)
        else:
            out.append((st, sz))
    return out or [(1, 1)]


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


# --- layouts ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    loop: tuple[Dim, ...]
    part: tuple[Dim, ...]   # part[0] is cut into chunks of ``pchunk`` (one tile's share)
    pchunk: int
    free: tuple[Dim, ...]   # free[0] is cut into chunks of ``fchunk``
    fchunk: int

    def chunks(self, size: int, chunk: int) -> list[tuple[int, int]]:
        return [(c0, min(chunk, size - c0)) for c0 in range(0, size, chunk)]

    def tiles(self, base: tuple[int, ...]) -> list[MapTile]:
        nops = len(base)
        out = []
        p0 = self.part[0] if self.part else (1, (0,) * nops)
        f0 = self.free[0] if self.free else (1, (0,) * nops)
        pin, fin = self.part[1:], self.free[1:]
        for idx in itertools.product(*(range(s) for s, _ in self.loop)):
            lbase = [b + sum(i * d[1][k] for i, d in zip(idx, self.loop)) for k, b in enumerate(base)]
            for r0, rows in self.chunks(p0[0], self.pchunk):
                for c0, cols in self.chunks(f0[0], self.fchunk):
                    ops = tuple(OperandMap(
                        lbase[k] + r0 * p0[1][k] + c0 * f0[1][k],
                        ((p0[1][k], rows),) + tuple((st[k], sz) for sz, st in pin),
                        (f0[1][k],) + tuple(st[k] for _, st in fin)) for k in range(nops))
                    out.append(MapTile(rows * prod(s for s, _ in pin), (cols,) + tuple(s for s, _ in fin), ops))
        return out


def _splits(dims: list[Dim], parts: int) -> list[list[Dim]]:
    """The dims as they are, and with one dim cut in two (outer size <= 128): the pieces can go to
    different places (partitions and free), which fills the partitions from one long dim."""
    out = [dims]
    for i, (n, st) in enumerate(dims):
        for a in range(2, min(parts, n - 1) + 1):
            if n % a == 0:
                b = n // a
                out.append(dims[:i] + [(a, tuple(s * b for s in st)), (b, st)] + dims[i + 1:])
    return out


def _layouts(dims: list[Dim], max_cols: int, max_part_dims: int, max_free_dims: int, parts: int):
    nd = len(dims)
    for f in range(nd + 1):
        free = dims[f:]
        if len(free) > max_free_dims:
            continue
        inner_f = prod(s for s, _ in free[1:])
        if inner_f > max_cols:
            continue
        fchunk = min(free[0][0], max_cols // inner_f) if free else 1
        for p in range(f, -1, -1):
            part = dims[p:f]
            if len(part) > max_part_dims:
                break
            inner_p = prod(s for s, _ in part[1:])
            if inner_p > parts:
                break
            pchunk = min(part[0][0], parts // inner_p) if part else 1
            yield Layout(tuple(dims[:p]), tuple(part), pchunk, tuple(free), fchunk)


@dataclass(frozen=True)
class CostModel:
    """What :func:`plan_map` needs to price a layout: the spec, and per operand its element size."""
    spec: HardwareSpec
    itemsizes: tuple[int, ...]
    inputs: int = 1      # streamed inputs per compute instruction (VectorE: ~N cycles per input, S1)
    # each operand moves its free dims in its own memory order (largest stride outermost) and one
    # engine copy per tile reorders them on chip (a permuted copy: both DMA sides get long runs)
    reorder: bool = False
    engines: int = 1     # compute engines sharing each tile's copy (their time divides)

    def __post_init__(self):
        object.__setattr__(self, "inputs", max(1, min(2, self.inputs)))


def estimate_ns(layout: Layout, cm: CostModel) -> float | None:
    """Estimated device time of streaming ``layout``'s tiles: DMA and compute per tile from the
    published costs, overlapped across tiles (double buffering), plus one load and one store latency.
    None when some operand's pattern cannot be expressed (more free dims than an access pattern has)."""
    est = _estimate(layout, cm)
    return None if est is None else est[0]


def _estimate(layout: Layout, cm: CostModel) -> tuple[float, float] | None:
    """(estimated time, compute engine time) in ns."""
    spec = cm.spec
    nops = len(cm.itemsizes)
    loops = prod(s for s, _ in layout.loop)
    p0 = layout.part[0] if layout.part else (1, (0,) * nops)
    f0 = layout.free[0] if layout.free else (1, (0,) * nops)
    pin = prod(s for s, _ in layout.part[1:])
    fin = prod(s for s, _ in layout.free[1:])
    prow = [(n, c) for c, n in _chunk_counts(p0[0], layout.pchunk)]
    fcol = [(n, c) for c, n in _chunk_counts(f0[0], layout.fchunk)]
    total_dma = total_compute = 0.0
    ntiles = 0
    rate = spec.dma_effective_bytes_per_ns
    engines = spec.dma_engines
    for rn, rows_c in prow:
        for fn, cols_c in fcol:
            count = loops * rn * fn
            ntiles += count
            rows, cols = rows_c * pin, cols_c * fin
            free_sizes = (cols_c,) + tuple(s for s, _ in layout.free[1:])
            for k in range(nops):
                fstr = (f0[1][k],) + tuple(st[k] for _, st in layout.free[1:])
                fsz = free_sizes
                if cm.reorder:
                    fsz, fstr = own_order(free_sizes, fstr)
                om = OperandMap(0, ((p0[1][k], rows_c),) + tuple((st[k], sz) for sz, st in layout.part[1:]), fstr)
                skip = k > 0  # inputs broadcast along free dims on chip; the output is stored whole
                _, _, hdims = om.hbm(fsz, skip_broadcast=skip)
                if len(hdims) > spec.ap_max_dims:
                    return None
                if skip and om.broadcasts_free(fsz) and len(om.view(fsz)) > spec.ap_max_dims:
                    return None
                loaded = om.loaded(fsz) if skip else prod(fsz)
                run = min(_run(hdims), loaded)
                transposed = transposable(om, hdims)
                if transposed:
                    # rows contiguous in HBM: a DMA transpose moves whole rows (a descriptor per SBUF row
                    # loading, per HBM row storing), at DMA_TRANSPOSE_EFFICIENCY of copy throughput
                    run = loaded if k else rows
                desc = -(-(rows * loaded) // run)
                desc_ns = max(run * cm.itemsizes[k], spec.dma_descriptor_knee_bytes) / rate
                if transposed:
                    desc_ns /= TRANSPOSE_LOAD if k else TRANSPOSE_STORE
                # descriptors of the transfers in flight spread over all DMA engines
                total_dma += desc * desc_ns / engines * (1 if k and _invariant(layout, k) else count)
            share = -(-cols // cm.engines)
            cycles = max(spec.min_ii_cycles, cm.inputs * share) + spec.dependent_overhead_cycles
            total_compute += count * cycles / spec.vector_clock_hz * 1e9
    # n tiles pipelined: the slower side runs throughout, the other shows for one tile (fill and drain)
    both = max(total_dma, total_compute) + min(total_dma, total_compute) / max(1, ntiles)
    return 2 * spec.dma_fixed_latency_ns + both, total_compute


def own_order(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Free dims (sizes, strides) sorted into the operand's memory order, largest stride outermost
    (stable: equal strides keep the tile's order)."""
    order = sorted(range(len(sizes)), key=lambda i: -abs(strides[i]))
    return tuple(sizes[i] for i in order), tuple(strides[i] for i in order)


def transposable(om: OperandMap, hdims: list[tuple[int, int]]) -> bool:
    """One partition dim of stride 1 and one strided free dim: the rows are what is contiguous."""
    return len(om.part) == 1 and om.part[0][0] == 1 and om.part[0][1] > 1 and len(hdims) == 1 and hdims[0][0] != 1


def _chunk_counts(size: int, chunk: int) -> list[tuple[int, int]]:
    """[(chunk size, how many)] covering ``size``."""
    full, rest = divmod(size, chunk)
    return [(chunk, full)] + ([(rest, 1)] if rest else [])


def _run(dims: list[tuple[int, int]]) -> int:
    run = 1
    for st, sz in reversed(dims):
        if sz == 1:
            continue
        if st != run:
            break
        run *= sz
    return run


def _invariant(layout: Layout, k: int) -> bool:
    """Operand k reads the same tile everywhere: stride 0 over the loops and over the chunked dims."""
    moving = [d for d in layout.loop if d[0] > 1]
    if layout.part and layout.part[0][0] > layout.pchunk:
        moving.append(layout.part[0])
    if layout.free and layout.free[0][0] > layout.fchunk:
        moving.append(layout.free[0])
    return bool(moving) and all(st[k] == 0 for _, st in moving) and (
        not layout.part or layout.part[0][0] % layout.pchunk == 0) and (
        not layout.free or layout.free[0][0] % layout.fchunk == 0)


def plan_map(shape: tuple[int, ...], strides: list[tuple[int, ...]], max_cols: int, cm: CostModel | None = None,
             max_part_dims: int = 3, max_free_dims: int = 3) -> list[MapTile]:
    """Tiles covering ``shape`` (``strides[k]``: operand k's strides over it; operand 0 is written),
    laid out by the cheapest layout under ``cm`` (default: the current spec, 4-byte elements)."""
    return plan_map_priced(shape, strides, max_cols, cm, max_part_dims, max_free_dims)[1]


def plan_map_priced(shape: tuple[int, ...], strides: list[tuple[int, ...]], max_cols: int,
                    cm: CostModel | None = None, max_part_dims: int = 3,
                    max_free_dims: int = 3) -> tuple[float, list[MapTile]]:
    """:func:`plan_map` with the chosen layout's estimated time (ns)."""
    if prod(shape) == 0:
        return 0.0, []
    cm = cm or CostModel(get_spec(), (4,) * len(strides))
    shape_c, strides_c = coalesce(tuple(shape), strides)
    dims = [(n, tuple(s[d] for s in strides_c)) for d, n in enumerate(shape_c)]
    base = (0,) * len(strides)
    best = None
    for order in _orders(dims):
        cand = _best(order, max_cols, cm, max_part_dims, max_free_dims)
        if cand and (best is None or (round(cand[0]), cand[2]) < (round(best[0]), best[2])):
            best = cand
    if best is None:
        raise ValueError(f"no tile layout covers shape {shape} with strides {strides}")
    # a long innermost dim with no divisor that fills the partitions: 128 rows of it, then the tail
    n, st = dims[-1]
    P = cm.spec.partitions
    if n > P and n % P:
        main = dims[:-1] + [(P, tuple(s * (n // P) for s in st)), (n // P, st)]
        tail = dims[:-1] + [(n % P, st)]
        a = _best(main, max_cols, cm, max_part_dims, max_free_dims, splits=False)
        b = _best(tail, max_cols, cm, max_part_dims, max_free_dims)
        if a and b and a[0] + b[0] < best[0]:
            head = P * (n // P)
            return a[0] + b[0], a[1].tiles(base) + b[1].tiles(tuple(head * s for s in st))
    return best[0], best[1].tiles(base)


def _orders(dims: list[Dim]) -> list[list[Dim]]:
    """The dims in their order and in each operand's memory order (largest stride outermost): an
    operand walked in its own order gets long contiguous runs on the free axis (a transposed view)."""
    out = [dims]
    for k in range(len(dims[0][1]) if dims else 0):
        order = sorted(dims, key=lambda d: -abs(d[1][k]))
        if order not in out:
            out.append(order)
    return out


def _best(dims: list[Dim], max_cols: int, cm: CostModel, max_part_dims: int, max_free_dims: int,
          splits: bool = True):
    best = key = None
    parts = cm.spec.partitions
    for variant in (_splits(dims, parts) if splits else [dims]):
        for layout in _layouts(variant, max_cols, max_part_dims, max_free_dims, parts):
            est = _estimate(layout, cm)
            if est is None:
                continue
            # equal times (to the nanosecond: the rest is float noise) go to the layout that keeps the
            # engines least busy, leaving them to the rest of the program
            k = (round(est[0]), est[1])
            if key is None or k < key:
                best, key = (est[0], layout, est[1]), k
    return best


def plan_tiles(shape: tuple[int, ...], strides: list[tuple[int, ...]], max_cols: int,
               cm: CostModel | None = None) -> list[Tile]:
    """Tiles covering ``shape`` with one row stride and one column stride per operand (``strides[k]``
    are operand k's strides over ``shape``): the cheapest layout with one partition and one free dim."""
    tiles = plan_map(shape, strides, max_cols, cm, max_part_dims=1, max_free_dims=1)
    return [Tile(t.rows, t.cols, tuple(OperandTile(o.offset, o.part[0][0], o.free[0]) for o in t.operands))
            for t in tiles]
