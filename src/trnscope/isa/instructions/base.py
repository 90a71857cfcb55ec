"""What every instruction is: the engines, the ALU and activation tables, and the ``Instruction`` base.

An instruction class is the one place that says everything about its instruction (docs/architecture.md,
"Adding an instruction"):

- **fields**: a frozen dataclass made by :func:`instruction` (which also registers the class by name
  in ``INSTRUCTION_TYPES``, what the NEFF reader decodes by); ``ENGINE``/``OPCODE``; ``READS`` and
  ``WRITES`` name the access-pattern fields, which is all the builder's dependency tracking, the
  traffic counters and the display need;
- **validation**: :meth:`Instruction.check`, the rules of its form (shapes, dtypes, spaces); where the
  patterns lie is checked for every instruction alike (``isa.validate``), and ``ONE_BANK`` names the
  outputs that must also stay within one PSUM bank;
- **cost form**: :meth:`Instruction.cycles` (compute engines: the published formula, hardware.md 3.3)
  or ``transfer`` (DMA: descriptors and rate), :meth:`Instruction.flops`, ``SIM_KIND`` (how the
  event-driven core treats it on TensorE);
- **display**: :meth:`Instruction.describe_operands` (the ``operands`` column of the device trace);
- **interpretation**: the function registered for the class with ``@semantics(Class)`` in
  ``interp.semantics`` (numerics belong to the interpreter's layer, which isa does not import).

Each instruction belongs to one engine stream (or a DMA queue), may wait on semaphores before it
starts (``waits``: (semaphore, value) pairs, satisfied when the semaphore is >= value) and updates
semaphores when it completes (``signals``: (semaphore, delta) increments). ``op`` indexes the
Program's list of framework ops, so every instruction knows which PyTorch op produced it.

Instructions are frozen: a Program indexes each one as it is added (``Program.add``, which also
completes it with the builder's waits and signals and the current framework op), and that index,
the timeline cache and the NEFF hash all stand for the instruction as it was added. To change an
instruction, build a new one (``dataclasses.replace``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar, Union

from ..ap import AP, Space
from ..errors import ProgramError

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["BITVEC_ALU", "COMPUTE_ENGINES", "INSTRUCTION_TYPES", "Act", "Alu", "Engine", "Instruction",
    "Scalar", "Streamed", "instruction"]

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: the decorator only informs type checkers
    def dataclass_transform(**_kw):
        return lambda f: f


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
    """Binary ALU operations of VectorE/GpSimdE (nki.language arithmetic and comparison ops)."""

    __hash__ = str.__hash__

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


# the bit-vector ALU ops (nki.isa's "bitvec operators"), which some instructions do not take
BITVEC_ALU = frozenset({Alu.BITWISE_AND, Alu.BITWISE_OR, Alu.BITWISE_XOR, Alu.LEFT_SHIFT, Alu.RIGHT_SHIFT})


class Act(str, Enum):
    """ScalarE activation functions: out = func(in * scale + bias)."""

    __hash__ = str.__hash__

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
    GELU_DX = "gelu_dx"      # d/dx gelu (nl.gelu_dx)
    SILU = "silu"
    SILU_DX = "silu_dx"      # d/dx silu (nl.silu_dx)
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

# Every instruction class by name: what a NEFF's ``type`` field names (filled by @instruction).
INSTRUCTION_TYPES: dict[str, type[Instruction]] = {}

_C = TypeVar("_C", bound=type)


@dataclass_transform(frozen_default=True, kw_only_default=True)
def instruction(cls: _C) -> _C:
    """Make ``cls`` an instruction: a frozen, slotted, keyword-only dataclass, registered by name."""
    made: Any = dataclass(frozen=True, slots=True, kw_only=True)(cls)
    if made.__name__ in INSTRUCTION_TYPES:
        raise TypeError(f"two instruction classes are named {made.__name__}")
    INSTRUCTION_TYPES[made.__name__] = made
    return made


class Streamed(NamedTuple):
    """What a compute instruction's cost formula needs of its operands (hardware.md 3.3)."""

    n: int                  # elements per partition of the main input (else of the first output)
    aps: tuple[AP, ...]     # the streamed tiles: per-partition [P, 1] scalar operands are read once
    all_sbuf: bool
    half: bool              # every streamed tile is BF16/FP16
    contiguous: bool
    strided: bool           # some tile's innermost stride exceeds 16 bytes: the stride penalty applies


@dataclass(frozen=True, slots=True, kw_only=True)
class Instruction:
    ENGINE: ClassVar[Engine]
    OPCODE: ClassVar[str]
    READS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ()
    # outputs that must lie within one PSUM bank (TensorE's): checked with the other placement rules
    ONE_BANK: ClassVar[tuple[str, ...]] = ()
    # how the event-driven core treats it: "compute", or TensorE's "load_weights" / "matmul" /
    # "transpose", or "dma" (``sim.encode``)
    SIM_KIND: ClassVar[str] = "compute"

    waits: tuple[tuple[int, int], ...] = ()
    signals: tuple[tuple[int, int], ...] = ()
    op: int = -1

    @property
    def engine(self) -> Engine:
        return self.ENGINE

    def reads(self) -> tuple[AP, ...]:
        """Access patterns this instruction reads (for validation, traffic and the interpreter)."""
        return tuple(v for name in self.READS if isinstance(v := getattr(self, name), AP))

    def writes(self) -> tuple[AP, ...]:
        return tuple(v for name in self.WRITES if isinstance(v := getattr(self, name), AP))

    def main_input(self) -> AP | None:
        r = self.reads()
        return r[0] if r else None

    # --- validation ---------------------------------------------------------------------------------
    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        """Raise :class:`ProgramError` (the message without the instruction's name, which
        ``isa.validate`` adds) when this instruction's form breaks one of its rules. ``stationary``:
        the pattern the last LDWEIGHTS before it loaded (a MATMUL's operand)."""

    # --- cost form ----------------------------------------------------------------------------------
    def cycles(self, spec: HardwareSpec) -> float:
        """Engine cycles before any dependency overhead: :meth:`formula` over the streamed operands,
        times the stride penalty when a tile is strided (hardware.md 3.3)."""
        s = self.streamed()
        cycles, perf = self.formula(spec, s)
        if s.strided:
            cycles *= spec.stride_penalty
        return cycles / perf

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        """(cycles, performance-mode speed-up) of a compute instruction on its engine."""
        raise TypeError(f"no cost formula for {type(self).__name__}")

    def streamed(self) -> Streamed:
        inp = self.main_input()
        writes = self.writes()
        n = inp.free_size if inp is not None else writes[0].free_size
        # per-partition scalar operands ([P, 1] scale/bias/scalar vectors) are read once per partition:
        # the streamed tiles decide the engine's mode
        aps = tuple(ap for ap in (*self.reads(), *writes) if ap is inp or ap.free_size > 1 or ap in writes)
        return Streamed(
            n=n, aps=aps,
            all_sbuf=all(ap.space is Space.SBUF for ap in aps),
            half=all(ap.dtype.is_half for ap in aps),
            contiguous=all(ap.contiguous_run() == ap.free_size for ap in aps),
            strided=any(ap.minor_stride_bytes > 16 for ap in aps),
        )

    def flops(self) -> tuple[float, float]:
        """(model FLOPs, hardware FLOPs) on TensorE, which MFU/HFU measure (S25)."""
        return 0.0, 0.0

    def onchip_bytes(self) -> tuple[int, int, int, int]:
        """(SBUF read, SBUF write, PSUM read, PSUM write) bytes of a compute instruction."""
        sr = sw = pr = pw = 0
        for ap in self.reads():
            if ap.space is Space.SBUF:
                sr += ap.nbytes
            elif ap.space is Space.PSUM:
                pr += ap.nbytes
        for ap in self.writes():
            if ap.space is Space.SBUF:
                sw += ap.nbytes
            elif ap.space is Space.PSUM:
                pw += ap.nbytes
        return sr, sw, pr, pw

    # --- display ------------------------------------------------------------------------------------
    def describe_operands(self) -> str:
        """The operands as the device trace shows them: read patterns, then written ones."""
        return " ".join(ap.describe() for ap in (*self.reads(), *self.writes()))


def same_shape(a: AP, b: AP) -> bool:
    return a.partitions == b.partitions and a.free_size == b.free_size


def check_same_shape(inp: AP, out: AP) -> None:
    if not same_shape(inp, out):
        raise ProgramError(f"shape mismatch {inp.shape} -> {out.shape}")


def check_per_partition(s: Scalar | None, partitions: int) -> None:
    """A scalar operand is an immediate or a [partitions, 1] vector."""
    if isinstance(s, AP) and (s.partitions != partitions or s.free_size != 1):
        raise ProgramError(f"per-partition operand must be [{partitions}, 1], got {s.shape}")
