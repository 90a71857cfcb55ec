"""Execute a Program's instructions on NumPy, one at a time, in ``execution_order``.

One handler per instruction class (``Interpreter._HANDLERS``); the numeric rules (FP32 compute,
casts, integer ops) live in :mod:`.numerics`, the memories and access-pattern views in
:mod:`.memory`. Errors raised while executing an instruction are :class:`ProgramError` naming it
(``program.label(i)``).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ..isa import (
    AP, Activation, Alu, AffineSelect, BnAggr, BnStats, Dma, DmaGather, DmaScatter, Gather, Instruction, Iota, Random,
    LoadStationary, Memset, MultiplyMoving, PartitionReduce, Program, ProgramError, Select, SemaphoreSet,
    SemaphoreWait, TensorCopy, TensorReduce, TensorScalar, TensorScan, TensorTensor, TensorTranspose,
    execution_order, validate,
)
from ..isa.program import BOUND_KINDS
from . import numerics as nm
from .memory import Memory

F32 = nm.F32


class Interpreter:
    """The state of one NeuronCore running one Program: memories plus TensorE's stationary operand.

    ``run()`` does everything; ``load()`` + ``step()`` let a caller (a debugger, a test) execute
    instruction by instruction and inspect ``memory`` in between.
    """

    def __init__(self, program: Program, spec=None, *, poison: bool = True) -> None:
        from ..hw import get_spec, resolve

        self.program = program
        # a program runs on the target it was built for unless told otherwise
        self.spec = resolve(spec) if spec is not None else (resolve(program.target) if program.target else get_spec())
        self.memory = Memory(program, self.spec, poison=poison)
        self.stationary: np.ndarray | None = None  # FP32 weights held by LDWEIGHTS, as stationary.T [M, K]
        self.executed = 0
        # a Program spread over a logical core's physical cores (LNC=2): each core has its own SBUF,
        # PSUM and TensorE weights; HBM is shared. ``memory``/``stationary`` are the current core's.
        self._poison = poison
        self._pcore = program.physical_cores()[1]
        self._core = 0
        self._cores: dict[int, tuple[Memory, np.ndarray | None]] = {}

    # --- inputs and outputs --------------------------------------------------------------------------
    def load(self, inputs: Mapping[str, object] | Sequence[object] | None) -> None:
        """Bind input tensors and runtime scalars (by name, or positionally in the order the program
        declares them) and consts."""
        prog = self.program
        input_ids = [i for i, t in enumerate(prog.tensors) if t.kind in BOUND_KINDS]
        if inputs is None:
            inputs = {}
        if isinstance(inputs, Mapping):
            by_name = {prog.tensors[i].name: i for i in input_ids}
            unknown = [k for k in inputs if k not in by_name]
            if unknown:
                raise ValueError(f"program {prog.name!r} has no input tensor named {', '.join(map(repr, unknown))} "
                                 f"(inputs: {', '.join(by_name) or 'none'})")
            missing = [k for k in by_name if k not in inputs]
            if missing:
                raise ValueError(f"program {prog.name!r} needs input {', '.join(map(repr, missing))}")
            for name, value in inputs.items():
                self.memory.load_tensor(by_name[name], value)
        else:
            values = list(inputs)
            if len(values) != len(input_ids):
                raise ValueError(f"program {prog.name!r} takes {len(input_ids)} inputs "
                                 f"({', '.join(prog.tensors[i].name for i in input_ids)}), got {len(values)}")
            for idx, value in zip(input_ids, values):
                self.memory.load_tensor(idx, value)
        for idx in prog.tensors_of_kind("const"):
            if idx not in prog.constants:
                raise ValueError(f"const tensor {prog.tensors[idx].name!r} has no value in program.constants")
            self.memory.load_tensor(idx, prog.constants[idx])

    def outputs(self) -> dict[str, np.ndarray]:
        return {self.program.tensors[i].name: self.memory.tensor(i) for i in self.program.tensors_of_kind("output")}

    # --- execution -----------------------------------------------------------------------------------
    def step(self, index: int) -> None:
        """Execute instruction ``index`` of the program."""
        ins = self.program.instructions[index]
        if self._pcore is not None and self._pcore[index] != self._core:
            self._enter_core(int(self._pcore[index]))
        handler = self._HANDLERS.get(type(ins))
        try:
            if handler is None:
                raise ProgramError(f"the interpreter has no semantics for {type(ins).__name__}")
            with np.errstate(all="ignore"):  # the hardware makes inf/NaN silently
                handler(self, ins)
        except ProgramError as exc:
            raise ProgramError(f"{self.program.label(index)}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - any failure is reported against the instruction
            raise ProgramError(f"{self.program.label(index)}: could not execute: {type(exc).__name__}: {exc}") from exc
        self.executed += 1

    def _enter_core(self, core: int) -> None:
        """Make physical core ``core``'s SBUF, PSUM and weights current (its memory shares HBM)."""
        self._cores[self._core] = (self.memory, self.stationary)
        if core not in self._cores:
            hbm_of = self._cores[0][0]
            mem = Memory(self.program, self.spec, poison=self._poison)
            mem.hbm, mem.decls = hbm_of.hbm, hbm_of.decls
            self._cores[core] = (mem, None)
        self.memory, self.stationary = self._cores[core]
        self._core = core

    def run(self, inputs=None, *, check: bool = True) -> dict[str, np.ndarray]:
        if check:
            validate(self.program, self.spec)
        self.load(inputs)
        for i in execution_order(self.program):
            self.step(i)
        return self.outputs()

    # --- operand helpers -----------------------------------------------------------------------------
    def _read(self, ap: AP) -> np.ndarray:
        return self.memory.read(ap)

    def _write(self, ap: AP, values: np.ndarray) -> None:
        self.memory.write(ap, nm.cast(values, ap.dtype.np))

    def _scalar(self, s, partitions: int) -> np.ndarray:
        """An immediate, or a per-partition [P, 1] vector, shaped to broadcast against [P, F]."""
        if isinstance(s, AP):
            if s.partitions != partitions or s.free_size != 1:
                raise ProgramError(f"per-partition operand must be [{partitions}, 1], got {list(s.shape)}")
            return self._read(s)
        if s is None:
            raise ProgramError("a scalar operand is missing")
        return nm.immediate(s)

    @staticmethod
    def _same_size(a: AP, b: AP, what: str) -> None:
        if a.partitions != b.partitions or a.free_size != b.free_size:
            raise ProgramError(f"{what}: shape mismatch {list(a.shape)} -> {list(b.shape)}")

    # --- TensorE ---------------------------------------------------------------------------------------
    def _load_stationary(self, ins: LoadStationary) -> None:
        # a snapshot (later SBUF writes do not change loaded weights), held as stationary.T [M, K] contiguous
        self.stationary = np.array(nm.to_f32(self._read(ins.src)).T, order="C", copy=True)

    def _multiply_moving(self, ins: MultiplyMoving) -> None:
        if self.stationary is None:
            raise ProgramError("MATMUL with no LDWEIGHTS before it on TensorE")
        stat_t = self.stationary
        moving = nm.to_f32(self._read(ins.moving))
        if moving.shape[0] != stat_t.shape[1]:
            raise ProgramError(f"contraction mismatch: moving has {moving.shape[0]} partitions, "
                               f"stationary {stat_t.shape[1]}")
        if ins.dst.partitions != stat_t.shape[0] or ins.dst.free_size != moving.shape[1]:
            raise ProgramError(f"output tile {list(ins.dst.shape)} does not match stationary.T @ moving "
                               f"[{stat_t.shape[0]}, {moving.shape[1]}]")
        result = stat_t @ moving  # FP32 products and FP32 accumulation
        if ins.dst.dtype.np != F32:  # validate() requires FP32 PSUM; be exact anyway
            if ins.accumulate:
                result += nm.to_f32(self._read(ins.dst))
            self._write(ins.dst, result)
            return
        dst = self.memory.view(ins.dst)
        if ins.accumulate:
            dst += result.reshape(dst.shape)  # read-accumulate-write of PSUM in FP32
        else:
            dst[...] = result.reshape(dst.shape)

    def _transpose(self, ins: TensorTranspose) -> None:
        src = self._read(ins.src)
        if ins.dst.partitions != src.shape[1] or ins.dst.free_size != src.shape[0]:
            raise ProgramError(f"transpose of {list(ins.src.shape)} cannot produce {list(ins.dst.shape)}")
        self._write(ins.dst, nm.dma_cast(src.T, ins.dst.dtype.np))

    # --- VectorE / GpSimdE element-wise ------------------------------------------------------------------
    def _tensor_tensor(self, ins: TensorTensor) -> None:
        self._same_size(ins.in0, ins.out, "in0")
        self._same_size(ins.in1, ins.out, "in1")
        self._write(ins.out, nm.binary(ins.alu, self._read(ins.in0), self._read(ins.in1)))

    def _tensor_scalar(self, ins: TensorScalar) -> None:
        self._same_size(ins.inp, ins.out, "inp")
        p = ins.inp.partitions
        x = self._read(ins.inp)
        s0 = self._scalar(ins.scalar0, p)
        r = nm.binary(ins.alu0, s0, x) if ins.reverse0 else nm.binary(ins.alu0, x, s0)
        if ins.alu1 is not None:
            s1 = self._scalar(ins.scalar1, p)
            r = nm.binary(ins.alu1, s1, r) if ins.reverse1 else nm.binary(ins.alu1, r, s1)
        self._write(ins.out, np.broadcast_to(r, x.shape))

    def _tensor_reduce(self, ins: TensorReduce) -> None:
        inp = ins.inp
        if not 1 <= ins.axes <= len(inp.dims):
            raise ProgramError(f"cannot reduce {ins.axes} innermost dims of {list(inp.shape)}")
        outer = inp.shape[:len(inp.shape) - ins.axes]
        reduced = int(np.prod(inp.shape[len(outer):]))
        if ins.out.partitions != inp.partitions or ins.out.free_size * reduced != inp.free_size:
            raise ProgramError(f"reducing {ins.axes} innermost dims of {list(inp.shape)} cannot give "
                               f"{list(ins.out.shape)}")
        r = nm.reduce(ins.alu, self.memory.view(inp).reshape(*outer, reduced), axis=-1)
        self._write(ins.out, -r if ins.negate else r)

    def _tensor_scan(self, ins: TensorScan) -> None:
        self._same_size(ins.inp, ins.out, "inp")
        if ins.in1 is not None:
            self._tensor_tensor_scan(ins)
            return
        x = self.memory.view(ins.inp)
        if x.ndim == 1:
            x = x.reshape(-1, 1)
        self._write(ins.out, nm.scan(ins.alu, x, axis=-1))

    def _tensor_tensor_scan(self, ins: TensorScan) -> None:
        """out[i] = (inp[i] <alu0> out[i-1]) <alu> in1[i] in FP32, out[-1] = initial (per partition)."""
        self._same_size(ins.in1, ins.out, "in1")
        p = ins.inp.partitions
        x0 = nm.to_f32(self._read(ins.inp))
        x1 = nm.to_f32(self._read(ins.in1))
        prev = np.broadcast_to(nm.to_f32(self._scalar(ins.initial, p)), (p, 1)).reshape(p)
        out = np.empty_like(x0)
        for i in range(x0.shape[1]):
            a = nm.binary(ins.alu0, prev, x0[:, i]) if ins.reverse0 else nm.binary(ins.alu0, x0[:, i], prev)
            prev = nm.to_f32(nm.binary(ins.alu, x1[:, i], a) if ins.reverse1 else nm.binary(ins.alu, a, x1[:, i]))
            out[:, i] = prev
        self._write(ins.out, out)

    def _bn_stats(self, ins: BnStats) -> None:
        if ins.out.free_size not in (3, 6):
            raise ProgramError(f"bn_stats writes 3 values (count, mean, M2) or 6 (even and odd elements) per "
                               f"partition, not {ins.out.free_size}")
        x = nm.to_f32(self._read(ins.inp))
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
        self._write(ins.out, np.concatenate(stats, axis=1))

    def _bn_aggr(self, ins: BnAggr) -> None:
        """Chan et al.'s parallel combination of (count, mean, M2) triples, then var = M2 / count."""
        x = nm.to_f32(self._read(ins.inp))
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
        self._write(ins.out, np.stack([mean, var], axis=1))

    def _tensor_copy(self, ins: TensorCopy) -> None:
        self._same_size(ins.inp, ins.out, "inp")
        self._write(ins.out, self._read(ins.inp))

    def _select(self, ins: Select) -> None:
        for name in ("pred", "on_true", "on_false"):
            self._same_size(getattr(ins, name), ins.out, name)
        dt = ins.out.dtype.np
        pred = self._read(ins.pred) != 0
        on_true, on_false = nm.cast(self._read(ins.on_true), dt), nm.cast(self._read(ins.on_false), dt)
        self._write(ins.out, np.where(pred, on_true, on_false))

    def _memset(self, ins: Memset) -> None:
        value = nm.immediate(ins.value)
        self._write(ins.out, np.broadcast_to(nm.cast(value, ins.out.dtype.np), ins.out.shape))

    # --- ScalarE ------------------------------------------------------------------------------------------
    def _activation(self, ins: Activation) -> None:
        self._same_size(ins.inp, ins.out, "inp")
        p = ins.inp.partitions
        x = self._read(ins.inp)
        identity = not isinstance(ins.scale, AP) and ins.scale == 1 and not isinstance(ins.bias, AP) and ins.bias == 0
        if not (identity and ins.func in nm.INT_ONLY_ACTS):
            x = nm.to_f32(x)
            if not identity:
                x = x * nm.to_f32(self._scalar(ins.scale, p)) + nm.to_f32(self._scalar(ins.bias, p))
        r = nm.activate(ins.func, x)
        total = None
        if ins.accum_out is not None:  # before writing out: r may be a view of memory that out overlaps
            if ins.accum_out.partitions != p or ins.accum_out.free_size != 1:
                raise ProgramError(f"accumulate output must be [{p}, 1], got {list(ins.accum_out.shape)}")
            total = np.sum(nm.to_f32(r), axis=1, dtype=F32, keepdims=True)
        self._write(ins.out, r)
        if total is not None:
            self._write(ins.accum_out, total)

    # --- GpSimdE ------------------------------------------------------------------------------------------
    def _affine(self, ap: AP, base: int, channel_multiplier: int, coefs: tuple[int, ...]) -> np.ndarray:
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

    def _iota(self, ins: Iota) -> None:
        self._write(ins.out, self._affine(ins.out, ins.base, ins.channel_multiplier, ins.coefs))

    def _affine_select(self, ins: AffineSelect) -> None:
        self._same_size(ins.inp, ins.out, "inp")
        if ins.cmp not in nm.COMPARISONS:
            raise ProgramError(f"affine_select compares with {ins.cmp.value}, which is not a comparison")
        expr = self._affine(ins.out, ins.base, ins.channel_multiplier, ins.coefs)
        keep = nm.ALU_OPS[ins.cmp].int_fn(expr, np.int64(0)).reshape(ins.out.partitions, -1)
        dt = ins.out.dtype.np
        fill = nm.cast(nm.immediate(ins.fill), dt)
        self._write(ins.out, np.where(keep, nm.cast(self._read(ins.inp), dt), fill))

    def _partition_reduce(self, ins: PartitionReduce) -> None:
        if ins.out.partitions != 1 or ins.out.free_size != ins.inp.free_size:
            raise ProgramError(f"partition reduce of {list(ins.inp.shape)} writes [1, {ins.inp.free_size}]")
        self._write(ins.out, nm.reduce(ins.alu, self._read(ins.inp), axis=0))

    def _gather(self, ins: Gather) -> None:
        data = self._read(ins.data).reshape(ins.data.partitions, -1)
        idx = self._read(ins.index).reshape(ins.index.partitions, -1).astype(np.int64)
        bad = np.argwhere((idx < 0) | (idx >= data.shape[1]))
        if bad.size:
            p, i = (int(v) for v in bad[0])
            raise ProgramError(f"gather index {int(idx[p, i])} at partition {ins.index.start + p}, element {i} is out "
                               f"of range: each partition holds {data.shape[1]} elements")
        if ins.out.dtype != ins.data.dtype:
            raise ProgramError(f"a gather moves {ins.data.dtype.value} elements; it cannot write {ins.out.dtype.value}")
        self._write(ins.out, np.take_along_axis(data, idx, axis=1))

    def _random(self, ins: Random) -> None:
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
        self._write(ins.out, nm.cast(v.astype(np.float32), ins.out.dtype.np))

    # --- Sync ---------------------------------------------------------------------------------------------
    def _nothing(self, ins: Instruction) -> None:
        """Semaphores only order instructions; execution_order has already honoured them."""

    # --- DMA ----------------------------------------------------------------------------------------------
    def _dma(self, ins: Dma) -> None:
        src, dst = ins.src, ins.dst
        values = self._read(src)
        if ins.transpose:
            if dst.partitions != src.free_size or dst.free_size != src.partitions:
                raise ProgramError(f"DMA transpose of {list(src.shape)} cannot produce {list(dst.shape)}")
            values = values.T
        elif src.num_elements != dst.num_elements:
            raise ProgramError(f"DMA moves {src.num_elements} elements into a pattern of {dst.num_elements}")
        dt = dst.dtype.np
        if ins.accumulate:
            acc = nm.binary(Alu.ADD, self._read(dst), values.reshape(dst.partitions, -1))
            self._write(dst, acc)
        else:
            self.memory.write(dst, nm.dma_cast(values, dt))

    def _rows(self, table: AP, index: AP, tile: AP, verb: str) -> tuple[np.ndarray, np.ndarray]:
        """The table as [rows, *row] and the validated row indices of an indirect DMA."""
        if not nm.is_int_dtype(index.dtype.np):
            raise ProgramError("the index tile must be an integer tile")
        if tile.partitions != index.partitions or tile.free_size != table.free_size * index.free_size:
            raise ProgramError(f"indirect DMA moves rows of {table.free_size} elements into a {list(tile.shape)} "
                               f"tile indexed by {list(index.shape)}")
        rows = self.memory.view(table)
        idx = self._read(index).reshape(-1).astype(np.int64)
        bad = np.flatnonzero((idx < 0) | (idx >= table.partitions))
        if bad.size:
            p = int(bad[0])
            raise ProgramError(f"{verb} index {int(idx[p])} at partition {index.start + p // index.free_size} is out "
                               f"of range: the "
                               f"table has {table.partitions} rows (0..{table.partitions - 1})"
                               + (f"; {bad.size} indices are out of range" if bad.size > 1 else ""))
        return rows, idx

    def _dma_gather(self, ins: DmaGather) -> None:
        rows, idx = self._rows(ins.table, ins.index, ins.dst, "gather")
        self.memory.write(ins.dst, nm.dma_cast(rows[idx], ins.dst.dtype.np))

    def _dma_scatter(self, ins: DmaScatter) -> None:
        rows, idx = self._rows(ins.table, ins.index, ins.src, "scatter")
        src = self._read(ins.src).reshape(-1, *rows.shape[1:])
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

    _HANDLERS: dict[type, Callable] = {
        LoadStationary: _load_stationary,
        MultiplyMoving: _multiply_moving,
        TensorTranspose: _transpose,
        TensorTensor: _tensor_tensor,
        TensorScalar: _tensor_scalar,
        TensorReduce: _tensor_reduce,
        TensorScan: _tensor_scan,
        BnStats: _bn_stats,
        BnAggr: _bn_aggr,
        TensorCopy: _tensor_copy,
        Select: _select,
        Memset: _memset,
        Activation: _activation,
        Iota: _iota,
        AffineSelect: _affine_select,
        PartitionReduce: _partition_reduce,
        Gather: _gather,
        Random: _random,
        SemaphoreWait: _nothing,
        SemaphoreSet: _nothing,
        Dma: _dma,
        DmaGather: _dma_gather,
        DmaScatter: _dma_scatter,
    }


def run(program: Program, inputs: Mapping[str, object] | Sequence[object] | None = None, *, spec=None,
        check: bool = True, poison: bool = True) -> dict[str, np.ndarray]:
    """Execute ``program`` and return its output tensors by name.

    ``inputs``: arrays by tensor name, or in the order of the program's input tensors (NumPy arrays,
    or CPU torch tensors; values are converted to each tensor's dtype, shapes must match).
    ``spec``: a HardwareSpec or target name (default: the program's target).
    ``check``: run :func:`trnscope.isa.validate` first (a :class:`ProgramError` names the instruction).
    ``poison``: start SBUF/PSUM as 0xFF bytes (NaN in float dtypes) and HBM scratch/output tensors as
    NaN, so reading what nobody wrote is visible; ``False`` starts everything at zero.
    """
    return Interpreter(program, spec, poison=poison).run(inputs, check=check)
