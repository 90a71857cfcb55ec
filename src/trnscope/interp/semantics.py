"""What each instruction computes: one function per instruction class, registered with
``@semantics(Class)`` (the class itself, in ``isa.instructions``, holds everything else about it).

A semantics function gets the :class:`~trnscope.interp.interpreter.Interpreter` (memories, the
TensorE weights of the current physical core, operand helpers) and the instruction; the numeric
rules (FP32 compute, casts, integer ops) are :mod:`.numerics`'. Errors are :class:`ProgramError`
without the instruction's name, which ``Interpreter.step`` adds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

import numpy as np

from ..isa import (
    AP, Activation, AffineSelect, Alu, BnAggr, BnStats, Dma, DmaGather, DmaScatter, FindIndex8, Gather, Instruction, Iota,
    LoadStationary, Max8, Memset, MultiplyMoving, PartitionReduce, ProgramError, Random, ScalarTensorTensor, Select, SemaphoreSet,
    SemaphoreWait, TensorCopy, TensorReduce, TensorScalar, TensorScalarReduce, TensorScan, TensorTensor, TensorTranspose,
)
from . import numerics as nm

if TYPE_CHECKING:
    from .interpreter import Interpreter

F32 = nm.F32
_F = TypeVar("_F", bound=Callable[..., None])

# instruction class -> what it computes: fn(interpreter, instruction)
SEMANTICS: dict[type[Instruction], Callable[..., None]] = {}


def semantics(cls: type[Instruction]) -> Callable[[_F], _F]:
    """Register the decorated function as what instructions of class ``cls`` compute."""
    def register(fn: _F) -> _F:
        if cls in SEMANTICS:
            raise TypeError(f"{cls.__name__} has semantics already ({SEMANTICS[cls].__name__})")
        SEMANTICS[cls] = fn
        return fn
    return register


# --- TensorE ----------------------------------------------------------------------------------------
@semantics(LoadStationary)
def load_stationary(m: Interpreter, ins: LoadStationary) -> None:
    # a snapshot (later SBUF writes do not change loaded weights), held as stationary.T [M, K] contiguous
    m.stationary = np.array(nm.to_f32(m.read(ins.src)).T, order="C", copy=True)


@semantics(MultiplyMoving)
def multiply_moving(m: Interpreter, ins: MultiplyMoving) -> None:
    if m.stationary is None:
        raise ProgramError("MATMUL with no LDWEIGHTS before it on TensorE")
    stat_t = m.stationary
    moving = nm.to_f32(m.read(ins.moving))
    if moving.shape[0] != stat_t.shape[1]:
        raise ProgramError(f"contraction mismatch: moving has {moving.shape[0]} partitions, "
                           f"stationary {stat_t.shape[1]}")
    if ins.dst.partitions != stat_t.shape[0] or ins.dst.free_size != moving.shape[1]:
        raise ProgramError(f"output tile {list(ins.dst.shape)} does not match stationary.T @ moving "
                           f"[{stat_t.shape[0]}, {moving.shape[1]}]")
    result = stat_t @ moving  # FP32 products and FP32 accumulation
    if ins.dst.dtype.np != F32:  # validate() requires FP32 PSUM; be exact anyway
        if ins.accumulate:
            result += nm.to_f32(m.read(ins.dst))
        m.write(ins.dst, result)
        return
    dst = m.memory.view(ins.dst)
    if ins.accumulate:
        dst += result.reshape(dst.shape)  # read-accumulate-write of PSUM in FP32
    else:
        dst[...] = result.reshape(dst.shape)


@semantics(TensorTranspose)
def transpose(m: Interpreter, ins: TensorTranspose) -> None:
    src = m.read(ins.src)
    if ins.dst.partitions != src.shape[1] or ins.dst.free_size != src.shape[0]:
        raise ProgramError(f"transpose of {list(ins.src.shape)} cannot produce {list(ins.dst.shape)}")
    m.write(ins.dst, nm.dma_cast(src.T, ins.dst.dtype.np))


# --- VectorE / GpSimdE element-wise ------------------------------------------------------------------
@semantics(TensorTensor)
def tensor_tensor(m: Interpreter, ins: TensorTensor) -> None:
    m.same_size(ins.in0, ins.out, "in0")
    m.same_size(ins.in1, ins.out, "in1")
    m.write(ins.out, nm.binary(ins.alu, m.read(ins.in0), m.read(ins.in1)))


@semantics(TensorScalar)
def tensor_scalar(m: Interpreter, ins: TensorScalar) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    p = ins.inp.partitions
    x = m.read(ins.inp)
    s0 = m.scalar(ins.scalar0, p)
    r = nm.binary(ins.alu0, s0, x) if ins.reverse0 else nm.binary(ins.alu0, x, s0)
    if ins.alu1 is not None:
        s1 = m.scalar(ins.scalar1, p)
        r = nm.binary(ins.alu1, s1, r) if ins.reverse1 else nm.binary(ins.alu1, r, s1)
    m.write(ins.out, np.broadcast_to(r, x.shape))


@semantics(TensorScalarReduce)
def tensor_scalar_reduce(m: Interpreter, ins: TensorScalarReduce) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    x = m.read(ins.inp)
    s0 = m.scalar(ins.scalar0, ins.inp.partitions)
    r = nm.binary(ins.alu0, s0, x) if ins.reverse0 else nm.binary(ins.alu0, x, s0)
    m.write(ins.out, np.broadcast_to(r, x.shape))
    # the reduction is over the result as written (nki: reduce_op(dst))
    red = nm.reduce(ins.reduce_alu, m.memory.view(ins.out).reshape(ins.out.partitions, -1), axis=-1)
    m.write(ins.reduce_res, (-red if ins.negate else red).reshape(ins.out.partitions, 1))


@semantics(ScalarTensorTensor)
def scalar_tensor_tensor(m: Interpreter, ins: ScalarTensorTensor) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    m.same_size(ins.in1, ins.out, "in1")
    x = m.read(ins.inp)
    s0 = m.scalar(ins.scalar0, ins.inp.partitions)
    r = nm.binary(ins.alu0, s0, x) if ins.reverse0 else nm.binary(ins.alu0, x, s0)
    y = m.read(ins.in1)
    m.write(ins.out, nm.binary(ins.alu1, y, r) if ins.reverse1 else nm.binary(ins.alu1, r, y))


@semantics(TensorReduce)
def tensor_reduce(m: Interpreter, ins: TensorReduce) -> None:
    inp = ins.inp
    if not 1 <= ins.axes <= len(inp.dims):
        raise ProgramError(f"cannot reduce {ins.axes} innermost dims of {list(inp.shape)}")
    outer = inp.shape[:len(inp.shape) - ins.axes]
    reduced = int(np.prod(inp.shape[len(outer):]))
    if ins.out.partitions != inp.partitions or ins.out.free_size * reduced != inp.free_size:
        raise ProgramError(f"reducing {ins.axes} innermost dims of {list(inp.shape)} cannot give "
                           f"{list(ins.out.shape)}")
    r = nm.reduce(ins.alu, m.memory.view(inp).reshape(*outer, reduced), axis=-1)
    m.write(ins.out, -r if ins.negate else r)


@semantics(TensorScan)
def tensor_scan(m: Interpreter, ins: TensorScan) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    if ins.in1 is not None:
        _tensor_tensor_scan(m, ins)
        return
    x = m.memory.view(ins.inp)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    m.write(ins.out, nm.scan(ins.alu, x, axis=-1))


def _tensor_tensor_scan(m: Interpreter, ins: TensorScan) -> None:
    """out[i] = (inp[i] <alu0> out[i-1]) <alu> in1[i] in FP32, out[-1] = initial (per partition)."""
    in1, alu0 = ins.in1, ins.alu0
    if in1 is None or alu0 is None:
        raise ProgramError("a two-input scan needs in1 and alu0")
    m.same_size(in1, ins.out, "in1")
    p = ins.inp.partitions
    x0 = nm.to_f32(m.read(ins.inp))
    x1 = nm.to_f32(m.read(in1))
    prev = np.broadcast_to(nm.to_f32(m.scalar(ins.initial, p)), (p, 1)).reshape(p)
    out = np.empty_like(x0)
    for i in range(x0.shape[1]):
        a = nm.binary(alu0, prev, x0[:, i]) if ins.reverse0 else nm.binary(alu0, x0[:, i], prev)
        prev = nm.to_f32(nm.binary(ins.alu, x1[:, i], a) if ins.reverse1 else nm.binary(ins.alu, a, x1[:, i]))
        out[:, i] = prev
    m.write(ins.out, out)


@semantics(Max8)
def max8(m: Interpreter, ins: Max8) -> None:
    x = nm.to_f32(m.read(ins.inp)).reshape(ins.inp.partitions, -1)
    # ascending with NaNs last, reversed: NaNs first, then the largest numbers
    m.write(ins.out, np.sort(x, axis=1)[:, ::-1][:, :8])


@semantics(FindIndex8)
def find_index8(m: Interpreter, ins: FindIndex8) -> None:
    x = nm.to_f32(m.read(ins.data)).reshape(ins.data.partitions, -1)
    v = nm.to_f32(m.read(ins.vals)).reshape(ins.vals.partitions, 8)
    hit = (x[:, None, :] == v[:, :, None]) | (np.isnan(x)[:, None, :] & np.isnan(v)[:, :, None])
    first = np.argmax(hit, axis=2)
    m.write(ins.out, np.where(hit.any(axis=2), first, -1).astype(np.int64))


@semantics(BnStats)
def bn_stats(m: Interpreter, ins: BnStats) -> None:
    if ins.out.free_size not in (3, 6):
        raise ProgramError(f"bn_stats writes 3 values (count, mean, M2) or 6 (even and odd elements) per "
                           f"partition, not {ins.out.free_size}")
    x = nm.to_f32(m.read(ins.inp))
    parts = (x,) if ins.out.free_size == 3 else (x[:, 0::2], x[:, 1::2])
    stats = []
    for part in parts:
        n = part.shape[1]
        if n:
            mean = np.mean(part, axis=1, dtype=F32, keepdims=True)
            m2 = np.sum(np.square(part - mean), axis=1, dtype=F32, keepdims=True)
        else:  # a 1-element tile has no odd elements: an empty group
            mean = m2 = np.zeros((x.shape[0], 1), F32)
        stats += [np.full_like(mean, n), mean, m2]
    m.write(ins.out, np.concatenate(stats, axis=1))


@semantics(BnAggr)
def bn_aggr(m: Interpreter, ins: BnAggr) -> None:
    """Chan et al.'s parallel combination of (count, mean, M2) triples, then var = M2 / count."""
    x = nm.to_f32(m.read(ins.inp))
    if x.shape[1] % 3 or ins.out.free_size != 2:
        raise ProgramError("bn_aggr reads bn_stats triples and writes 2 values (mean, var)")
    triples = x.reshape(x.shape[0], -1, 3)
    n, mean, m2 = triples[:, 0, 0], triples[:, 0, 1], triples[:, 0, 2]
    for j in range(1, triples.shape[1]):
        nb, mb, m2b = triples[:, j, 0], triples[:, j, 1], triples[:, j, 2]
        nab = n + nb
        safe = np.where(nab > 0, nab, F32.type(1))
        delta = mb - mean
        mean = np.where(nab > 0, mean + delta * (nb / safe), mean)
        m2 = np.where(nab > 0, m2 + m2b + delta * delta * (n * nb / safe), m2)
        n = nab
    var = m2 / n
    m.write(ins.out, np.stack([mean, var], axis=1))


@semantics(TensorCopy)
def tensor_copy(m: Interpreter, ins: TensorCopy) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    m.write(ins.out, m.read(ins.inp))


@semantics(Select)
def select(m: Interpreter, ins: Select) -> None:
    for name in ("pred", "on_true", "on_false"):
        m.same_size(getattr(ins, name), ins.out, name)
    dt = ins.out.dtype.np
    pred = m.read(ins.pred) != 0
    on_true, on_false = nm.cast(m.read(ins.on_true), dt), nm.cast(m.read(ins.on_false), dt)
    m.write(ins.out, np.where(pred, on_true, on_false))


@semantics(Memset)
def memset(m: Interpreter, ins: Memset) -> None:
    value = nm.immediate(ins.value)
    m.write(ins.out, np.broadcast_to(nm.cast(value, ins.out.dtype.np), ins.out.shape))


# --- ScalarE ------------------------------------------------------------------------------------------
@semantics(Activation)
def activation(m: Interpreter, ins: Activation) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    p = ins.inp.partitions
    x = m.read(ins.inp)
    identity = not isinstance(ins.scale, AP) and ins.scale == 1 and not isinstance(ins.bias, AP) and ins.bias == 0
    if not (identity and ins.func in nm.INT_ONLY_ACTS):
        x = nm.to_f32(x)
        if not identity:
            x = x * nm.to_f32(m.scalar(ins.scale, p)) + nm.to_f32(m.scalar(ins.bias, p))
    r = nm.activate(ins.func, x)
    total = None
    if ins.accum_out is not None:  # before writing out: r may be a view of memory that out overlaps
        if ins.accum_out.partitions != p or ins.accum_out.free_size != 1:
            raise ProgramError(f"accumulate output must be [{p}, 1], got {list(ins.accum_out.shape)}")
        total = np.sum(nm.to_f32(r), axis=1, dtype=F32, keepdims=True)
    m.write(ins.out, r)
    if total is not None and ins.accum_out is not None:
        m.write(ins.accum_out, total)


# --- GpSimdE ------------------------------------------------------------------------------------------
def _affine(ap: AP, base: int, channel_multiplier: int, coefs: tuple[int, ...]) -> np.ndarray:
    """base + channel_multiplier * p + sum_j coefs[j] * i_j over ``ap``'s (partition, *free) grid."""
    free = ap.free_shape
    if len(coefs) > len(free):
        raise ProgramError(f"{len(coefs)} coefficients for a pattern with {len(free)} free dims")
    shape = (ap.partitions, *free)
    expr = np.full(shape, base, dtype=np.int64)
    expr += channel_multiplier * np.arange(ap.partitions, dtype=np.int64).reshape((-1,) + (1,) * len(free))
    for j, c in enumerate(coefs):  # coefs[j] goes with free dim j, outermost first
        if c:
            idx_shape = [1] * len(shape)
            idx_shape[j + 1] = free[j]
            expr += c * np.arange(free[j], dtype=np.int64).reshape(idx_shape)
    return expr


@semantics(Iota)
def iota(m: Interpreter, ins: Iota) -> None:
    m.write(ins.out, _affine(ins.out, ins.base, ins.channel_multiplier, ins.coefs))


@semantics(AffineSelect)
def affine_select(m: Interpreter, ins: AffineSelect) -> None:
    m.same_size(ins.inp, ins.out, "inp")
    if ins.cmp not in nm.COMPARISONS:
        raise ProgramError(f"affine_select compares with {ins.cmp.value}, which is not a comparison")
    expr = _affine(ins.out, ins.base, ins.channel_multiplier, ins.coefs)
    keep = nm.ALU_OPS[ins.cmp].fn_for(nm.I64)(expr, np.zeros((), np.int64)).reshape(ins.out.partitions, -1)
    dt = ins.out.dtype.np
    fill = nm.cast(nm.immediate(ins.fill), dt)
    m.write(ins.out, np.where(keep, nm.cast(m.read(ins.inp), dt), fill))


@semantics(PartitionReduce)
def partition_reduce(m: Interpreter, ins: PartitionReduce) -> None:
    if ins.out.partitions != 1 or ins.out.free_size != ins.inp.free_size:
        raise ProgramError(f"partition reduce of {list(ins.inp.shape)} writes [1, {ins.inp.free_size}]")
    m.write(ins.out, nm.reduce(ins.alu, m.read(ins.inp), axis=0))


@semantics(Gather)
def gather(m: Interpreter, ins: Gather) -> None:
    data = m.read(ins.data).reshape(ins.data.partitions, -1)
    idx = m.read(ins.index).reshape(ins.index.partitions, -1).astype(np.int64)
    bad = np.argwhere((idx < 0) | (idx >= data.shape[1]))
    if bad.size:
        p, i = (int(v) for v in bad[0])
        raise ProgramError(f"gather index {int(idx[p, i])} at partition {ins.index.start + p}, element {i} is out "
                           f"of range: each partition holds {data.shape[1]} elements")
    m.write(ins.out, np.take_along_axis(data, idx, axis=1))


@semantics(Random)
def random(m: Interpreter, ins: Random) -> None:
    # a deterministic stream per instruction: the device's own generator, not torch's
    rng = np.random.default_rng(ins.seed)
    shape = (ins.out.partitions, ins.out.free_size)
    if ins.dist == "uniform":
        v = rng.uniform(ins.a, ins.b, shape)
    elif ins.dist == "normal":
        v = rng.normal(ins.a, ins.b, shape)
    elif ins.dist == "bernoulli":
        v = (rng.random(shape) < ins.a).astype(np.float64)
    else:
        v = rng.exponential(1.0 / ins.a, shape)
    m.write(ins.out, nm.cast(v.astype(np.float32), ins.out.dtype.np))


# --- Sync ---------------------------------------------------------------------------------------------
@semantics(SemaphoreWait)
@semantics(SemaphoreSet)
def nothing(m: Interpreter, ins: Instruction) -> None:
    """Semaphores only order instructions; execution_order has already honoured them."""


# --- DMA ----------------------------------------------------------------------------------------------
@semantics(Dma)
def dma(m: Interpreter, ins: Dma) -> None:
    src, dst = ins.src, ins.dst
    values = m.read(src)
    if ins.transpose:
        if dst.partitions != src.free_size or dst.free_size != src.partitions:
            raise ProgramError(f"DMA transpose of {list(src.shape)} cannot produce {list(dst.shape)}")
        values = values.T
    elif src.num_elements != dst.num_elements:
        raise ProgramError(f"DMA moves {src.num_elements} elements into a pattern of {dst.num_elements}")
    dt = dst.dtype.np
    if ins.accumulate:
        acc = nm.binary(Alu.ADD, m.read(dst), values.reshape(dst.partitions, -1))
        m.write(dst, acc)
    else:
        m.memory.write(dst, nm.dma_cast(values, dt))


def _rows(m: Interpreter, table: AP, index: AP, tile: AP, verb: str) -> tuple[np.ndarray, np.ndarray]:
    """The table as [rows, *row] and the validated row indices of an indirect DMA."""
    if not nm.is_int_dtype(index.dtype.np):
        raise ProgramError("the index tile must be an integer tile")
    if tile.partitions != index.partitions or tile.free_size != table.free_size * index.free_size:
        raise ProgramError(f"indirect DMA moves rows of {table.free_size} elements into a {list(tile.shape)} "
                           f"tile indexed by {list(index.shape)}")
    rows = m.memory.view(table)
    idx = m.read(index).reshape(-1).astype(np.int64)
    bad = np.flatnonzero((idx < 0) | (idx >= table.partitions))
    if bad.size:
        p = int(bad[0])
        raise ProgramError(f"{verb} index {int(idx[p])} at partition {index.start + p // index.free_size} is out "
                           f"of range: the "
                           f"table has {table.partitions} rows (0..{table.partitions - 1})"
                           + (f"; {bad.size} indices are out of range" if bad.size > 1 else ""))
    return rows, idx


@semantics(DmaGather)
def dma_gather(m: Interpreter, ins: DmaGather) -> None:
    rows, idx = _rows(m, ins.table, ins.index, ins.dst, "gather")
    m.memory.write(ins.dst, nm.dma_cast(rows[idx], ins.dst.dtype.np))


@semantics(DmaScatter)
def dma_scatter(m: Interpreter, ins: DmaScatter) -> None:
    rows, idx = _rows(m, ins.table, ins.index, ins.src, "scatter")
    src = m.read(ins.src).reshape(-1, *rows.shape[1:])
    dt = ins.table.dtype.np
    if ins.accumulate:
        uniq, inverse = np.unique(idx, return_inverse=True)
        acc = nm.binary(Alu.ADD, rows[uniq], np.zeros((), dtype=src.dtype))  # in the compute domain
        np.add.at(acc, inverse, nm.to_i64(src) if acc.dtype == nm.I64 else nm.to_f32(src))
        rows[uniq] = nm.cast(acc, dt)
    else:
        # duplicate indices: the highest partition's row wins (descriptors complete in order)
        last = idx.size - 1 - np.unique(idx[::-1], return_index=True)[1]
        rows[idx[last]] = nm.dma_cast(src[last], dt)
