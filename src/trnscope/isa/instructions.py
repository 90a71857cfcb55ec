"""The instructions the NeuronCore engines execute, at tile level (hardware.md 2.4 and 3.1).

Each instruction belongs to one engine stream (or a DMA queue), may wait on semaphores before it
starts (``waits``: (semaphore, value) pairs, satisfied when the semaphore is >= value) and updates
semaphores when it completes (``signals``: (semaphore, delta) increments). ``op`` indexes the
Program's list of framework ops, so every instruction knows which PyTorch op produced it.

Instructions are frozen: a Program indexes each one as it is added (``Program.add``, which also
completes it with the builder's waits and signals and the current framework op), and that index,
the timeline cache and the NEFF hash all stand for the instruction as it was added. To change an
instruction, build a new one (``dataclasses.replace``).

The opcodes are the names Neuron's profiler shows (glossary S29): MATMUL, LDWEIGHTS, TENSOR_TENSOR,
ACTIVATE, DMA_DIRECT2D, EVENT_SEMAPHORE, ...
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Union

from .ap import AP


class Engine(str, Enum):
    __hash__ = str.__hash__

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    SYNC = "sync"
    DMA = "dma"


COMPUTE_ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.SYNC)


class Alu(str, Enum):
    __hash__ = str.__hash__

    """Binary ALU operations of VectorE/GpSimdE (nki.language arithmetic and comparison ops)."""
    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    DIVIDE = "divide"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    MOD = "mod"
    ABS_MAX = "abs_max"
    BYPASS = "bypass"  # result = first operand
    IS_EQUAL = "is_equal"
    NOT_EQUAL = "not_equal"
    IS_GT = "is_gt"
    IS_GE = "is_ge"
    IS_LT = "is_lt"
    IS_LE = "is_le"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    LEFT_SHIFT = "left_shift"
    RIGHT_SHIFT = "right_shift"
    ATAN2 = "atan2"


class Act(str, Enum):
    __hash__ = str.__hash__

    """ScalarE activation functions: out = func(in * scale + bias)."""
    COPY = "copy"
    EXP = "exp"
    EXPM1 = "expm1"
    LOG = "log"
    LOG1P = "log1p"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    SOFTPLUS = "softplus"
    SQUARE = "square"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    ABS = "abs"
    SIGN = "sign"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    ERF = "erf"
    ERFINV = "erfinv"
    FLOOR = "floor"
    CEIL = "ceil"
    TRUNC = "trunc"
    ROUND = "round"
    LOG2 = "log2"
    EXP2 = "exp2"
    NEG = "neg"
    LOGICAL_NOT = "logical_not"
    BITWISE_NOT = "bitwise_not"
    IS_NAN = "isnan"
    IS_INF = "isinf"
    IS_FINITE = "isfinite"


Scalar = Union[float, AP]  # an immediate or a per-partition [P, 1] vector


@dataclass(frozen=True, slots=True, kw_only=True)
class Instruction:
    ENGINE: ClassVar[Engine]
    OPCODE: ClassVar[str]

    waits: tuple[tuple[int, int], ...] = ()
    signals: tuple[tuple[int, int], ...] = ()
    op: int = -1

    @property
    def engine(self) -> Engine:
        return self.ENGINE

    READS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ()

    def reads(self) -> tuple[AP, ...]:
        """Access patterns this instruction reads (for validation, traffic and the interpreter)."""
        return tuple(v for name in self.READS if isinstance(v := getattr(self, name), AP))

    def writes(self) -> tuple[AP, ...]:
        return tuple(v for name in self.WRITES if isinstance(v := getattr(self, name), AP))

    def main_input(self) -> AP | None:
        r = self.reads()
        return r[0] if r else None




# --- TensorE -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class LoadStationary(Instruction):
    """Load the stationary matrix [K partitions x M <= 128] into the PE array (LDWEIGHTS)."""
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "LDWEIGHTS"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    WRITES: ClassVar[tuple[str, ...]] = ()
    src: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class MultiplyMoving(Instruction):
    """Stream moving [K x N <= 512] through the array: dst[M, N] (+)= stationary.T @ moving (MATMUL).

    ``accumulate=False`` starts a new accumulation group (overwrites PSUM); True adds to it.
    """
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "MATMUL"
    READS: ClassVar[tuple[str, ...]] = ('moving',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    moving: AP
    dst: AP
    accumulate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorTranspose(Instruction):
    """Transpose src [P, F] into PSUM dst [F, P] on TensorE (matmul with identity)."""
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "TRANSPOSE"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    src: AP
    dst: AP


# --- VectorE (and GpSimdE, which can run the same element-wise ops) ----------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class TensorTensor(Instruction):
    """out = in0 <op> in1, element-wise (broadcast by zero strides in the access patterns)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_TENSOR"
    READS: ClassVar[tuple[str, ...]] = ('in0', 'in1')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    alu: Alu
    in0: AP
    in1: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorScalar(Instruction):
    """out = (inp <op0> scalar0) <op1> scalar1; scalars are immediates or [P, 1] vectors.

    ``reverse0``/``reverse1`` swap the operands of a non-commutative op (scalar - x, scalar / x).
    """
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_SCALAR"
    READS: ClassVar[tuple[str, ...]] = ('inp', 'scalar0', 'scalar1')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP
    alu0: Alu
    scalar0: Scalar
    alu1: Alu | None = None
    scalar1: Scalar | None = None
    reverse0: bool = False
    reverse1: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorReduce(Instruction):
    """Reduce the innermost ``axes`` free dimensions of inp into out with ``alu`` (add/max/min/...)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_REDUCE"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    alu: Alu
    inp: AP
    out: AP
    axes: int = 1
    negate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorScan(Instruction):
    """Inclusive scan along the innermost free dimension: out[i] = out[i-1] <alu> inp[i].

    With ``in1`` it is the two-input scan (nki.isa.tensor_tensor_scan): out[i] =
    (inp[i] <alu0> out[i-1]) <alu> in1[i], out[-1] being ``initial`` (an immediate or a [P, 1]
    vector); ``reverse0`` swaps alu0's operands (out[i-1] <alu0> inp[i]), ``reverse1`` alu's
    (in1[i] <alu> ...).
    """
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_SCAN"
    READS: ClassVar[tuple[str, ...]] = ('inp', 'in1', 'initial')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    alu: Alu
    inp: AP
    out: AP
    in1: AP | None = None
    alu0: Alu | None = None
    initial: Scalar = 0.0
    reverse0: bool = False
    reverse1: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BnStats(Instruction):
    """Per-partition statistics of inp [P, N <= 512]: out [P, 3] = (count, mean, M2), or with
    out [P, 6] those of the even elements followed by those of the odd ones (nki.isa.bn_stats's
    layout); M2 is variance * count."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "BN_STATS"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class BnAggr(Instruction):
    """Combine k bn_stats triples inp [P, 3k] into out [P, 2] = (mean, population variance)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "BN_AGGR"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorCopy(Instruction):
    """out = inp with a cast to out's dtype; runs on VectorE, ScalarE or GpSimdE (``engine_name``)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_COPY"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP
    on: Engine = Engine.VECTOR

    @property
    def engine(self) -> Engine:
        return self.on


@dataclass(frozen=True, slots=True, kw_only=True)
class Select(Instruction):
    """out = pred ? on_true : on_false (tensor_copy_predicated)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "SELECT"
    READS: ClassVar[tuple[str, ...]] = ('pred', 'on_true', 'on_false')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    pred: AP
    on_true: AP
    on_false: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class Memset(Instruction):
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "MEMSET"
    READS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    out: AP
    value: float = 0.0


# --- ScalarE ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Activation(Instruction):
    """out = func(inp * scale + bias); with ``accum_out`` [P, 1] the results are also add-reduced."""
    ENGINE: ClassVar[Engine] = Engine.SCALAR
    OPCODE: ClassVar[str] = "ACTIVATE"
    READS: ClassVar[tuple[str, ...]] = ('inp', 'scale', 'bias')
    WRITES: ClassVar[tuple[str, ...]] = ('out', 'accum_out')
    func: Act
    inp: AP
    out: AP
    scale: Scalar = 1.0
    bias: Scalar = 0.0
    accum_out: AP | None = None


# --- GpSimdE ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Iota(Instruction):
    """out[p, i...] = base + channel_multiplier * p + sum_j coef_j * i_j (coefs per free dim)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "IOTA"
    READS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    out: AP
    base: int = 0
    channel_multiplier: int = 0
    coefs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AffineSelect(Instruction):
    """out = inp where (base + channel_multiplier*p + sum_j coef_j*i_j) <cmp> 0, else fill."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "AFFINE_SELECT"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP
    cmp: Alu = Alu.IS_GE
    base: int = 0
    channel_multiplier: int = 0
    coefs: tuple[int, ...] = ()
    fill: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReduce(Instruction):
    """Reduce across partitions: out[0, f] = <alu>_p inp[p, f] (tensor_partition_reduce)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "PARTITION_REDUCE"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    alu: Alu
    inp: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class Gather(Instruction):
    """out[p, i] = data[p, index[p, i]], ``data``'s free dims flattened: GpSimdE's gather within each
    partition (``nki.isa.nc_n_gather``), all three tiles in SBUF, moving no bytes through the DMA engines."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "GATHER"
    READS: ClassVar[tuple[str, ...]] = ("index", "data")
    WRITES: ClassVar[tuple[str, ...]] = ("out",)
    data: AP
    index: AP
    out: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class Random(Instruction):
    """Fill ``out`` with random numbers (the NKI ``rng`` family) drawn from ``dist``:
    uniform [a, b), normal (mean a, std b), bernoulli (p = a), exponential (rate a)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "RNG"
    READS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ("out",)
    out: AP
    dist: str = "uniform"
    a: float = 0.0
    b: float = 1.0
    seed: int = 0


# --- Sync engine -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class SemaphoreWait(Instruction):
    """A Sync-engine instruction that only waits (its ``waits``) and then signals (EVENT_SEMAPHORE)."""
    ENGINE: ClassVar[Engine] = Engine.SYNC
    OPCODE: ClassVar[str] = "EVENT_SEMAPHORE"


@dataclass(frozen=True, slots=True, kw_only=True)
class SemaphoreSet(Instruction):
    """Write an immediate value into a semaphore (sem_wr_imm)."""
    ENGINE: ClassVar[Engine] = Engine.SYNC
    OPCODE: ClassVar[str] = "SEMAPHORE_SET"
    sem: int
    value: int


# --- DMA -----------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Dma(Instruction):
    """Copy src to dst on DMA ``queue`` (HBM<->SBUF, SBUF<->SBUF); casts through FP32 when dtypes differ.

    ``transpose`` moves src [P, F] to dst [F, P] (DMA transpose, S2). ``accumulate`` adds into dst
    (dma_compute) instead of overwriting.
    """
    ENGINE: ClassVar[Engine] = Engine.DMA
    OPCODE: ClassVar[str] = "DMA_DIRECT2D"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    queue: int
    src: AP
    dst: AP
    transpose: bool = False
    accumulate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DmaGather(Instruction):
    """Indirect DMA: dst[p, f*R:(f+1)*R] = table row index[p, f] (descriptors built by the DMA generation
    engine), R = a row's elements; an index tile of one column gathers one row per partition.

    ``table`` is an HBM pattern whose partition dim walks rows (``pstride`` = row stride in
    elements, ``partitions`` = number of rows) and whose free dims describe one row.
    """
    ENGINE: ClassVar[Engine] = Engine.DMA
    OPCODE: ClassVar[str] = "DMA_GATHER"
    READS: ClassVar[tuple[str, ...]] = ("table", "index")
    WRITES: ClassVar[tuple[str, ...]] = ("dst",)
    queue: int
    table: AP
    index: AP
    dst: AP


@dataclass(frozen=True, slots=True, kw_only=True)
class DmaScatter(Instruction):
    """Indirect DMA the other way: table row index[p, f] (+)= src[p, f*R:(f+1)*R] (added when
    ``accumulate``); rows are written in (partition, column) order, so of two writes to one row the
    later one stays."""
    ENGINE: ClassVar[Engine] = Engine.DMA
    OPCODE: ClassVar[str] = "DMA_SCATTER"
    READS: ClassVar[tuple[str, ...]] = ("src", "index")
    WRITES: ClassVar[tuple[str, ...]] = ("table",)
    queue: int
    src: AP
    index: AP
    table: AP
    accumulate: bool = False


INSTRUCTION_TYPES: dict[str, type[Instruction]] = {
    cls.__name__: cls
    for cls in (LoadStationary, MultiplyMoving, TensorTranspose, TensorTensor, TensorScalar, TensorReduce,
                TensorScan, BnStats, BnAggr, TensorCopy, Select, Memset, Activation, Iota, AffineSelect,
                PartitionReduce, Gather, Random, SemaphoreWait, SemaphoreSet, Dma, DmaGather, DmaScatter)
}
