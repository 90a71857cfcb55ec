"""VectorE (and GpSimdE, which can run the same element-wise ops): element-wise, reductions, scans,
statistics, copies (hardware.md 2.4; costs from the NKI "estimated instruction cost" table, S9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..ap import AP, Space
from ..errors import ProgramError
from .base import (
    BITVEC_ALU, Alu, Engine, Instruction, Scalar, Streamed, check_per_partition, check_same_shape, instruction,
    same_shape,
)

if TYPE_CHECKING:
    from ...hw import HardwareSpec

# max8 / nc_find_index8 take 8 to 16,384 elements per partition (S9)
MAX8_FMAX = 16384

__all__ = ["BnAggr", "BnStats", "FindIndex8", "Max8", "Memset", "ScalarTensorTensor", "Select", "TensorCopy", "TensorReduce",
    "TensorScalar", "TensorScalarReduce", "TensorScan", "TensorTensor"]


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if not (same_shape(self.in0, self.out) and same_shape(self.in1, self.out)):
            raise ProgramError(f"shape mismatch {self.in0.shape}, {self.in1.shape} -> {self.out.shape} "
                               f"(broadcast with zero strides)")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        spaces = {self.in0.space, self.in1.space}
        fast = spaces == {Space.SBUF, Space.PSUM} or (
            s.all_sbuf and s.half and self.alu in (Alu.ADD, Alu.MULTIPLY, Alu.SUBTRACT) and s.contiguous)
        perf = 2.0 if spec.vector_perf_mode and s.all_sbuf and s.half else 1.0
        return max(spec.min_ii_cycles, s.n if fast else 2 * s.n), perf


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        check_same_shape(self.inp, self.out)
        check_per_partition(self.scalar0, self.inp.partitions)
        check_per_partition(self.scalar1, self.inp.partitions)

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        perf = 1.0
        if spec.vector_perf_mode and s.half:
            perf = 4.0 if s.all_sbuf and s.contiguous else 2.0
        return max(spec.min_ii_cycles, s.n), perf


@instruction
class TensorScalarReduce(Instruction):
    """out = inp <alu0> scalar0, and ``reduce_res`` = reduce_alu over out's free dims (negated with
    ``negate``): nki.isa.tensor_scalar_reduce, one VectorE pass that also reduces its result (one
    arithmetic op; ``reduce_res_negate`` in the 2.33 API). A PSUM tile's copy out, scaled, with its
    row max, is one such pass."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "TENSOR_SCALAR_REDUCE"
    READS: ClassVar[tuple[str, ...]] = ('inp', 'scalar0')
    WRITES: ClassVar[tuple[str, ...]] = ('out', 'reduce_res')
    inp: AP
    out: AP
    alu0: Alu
    scalar0: Scalar
    reduce_alu: Alu
    reduce_res: AP
    reverse0: bool = False
    negate: bool = False

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        check_same_shape(self.inp, self.out)
        check_per_partition(self.scalar0, self.inp.partitions)
        if self.alu0 in BITVEC_ALU:
            raise ProgramError(f"tensor_scalar_reduce takes an arithmetic op, got {self.alu0.value}")
        if self.reduce_alu not in (Alu.ADD, Alu.SUBTRACT, Alu.MULTIPLY, Alu.MAX, Alu.MIN):
            raise ProgramError(f"tensor_scalar_reduce reduces with add, subtract, multiply, max or min, not "
                               f"{self.reduce_alu.value}")
        if self.reduce_res.partitions != self.inp.partitions or self.reduce_res.free_size != 1:
            raise ProgramError(f"reduce_res must be [{self.inp.partitions}, 1], got {self.reduce_res.shape}")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        # nki.isa.tensor_scalar_reduce, "Estimated instruction cost: max(MIN_II, N) + MIN_II Vector
        # Engine cycles" (S47); no performance mode is documented for it
        return max(spec.min_ii_cycles, s.n) + spec.min_ii_cycles, 1.0


@instruction
class ScalarTensorTensor(Instruction):
    """out = (inp <alu0> scalar0) <alu1> in1 (nki.isa.scalar_tensor_tensor): a tensor_scalar and a
    tensor_tensor in one VectorE pass. ``scalar0`` is an immediate or a [P, 1] vector, ``in1`` a tile
    of inp's shape; ``reverse0``/``reverse1`` swap each op's operands. Arithmetic ops only."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "SCALAR_TENSOR_TENSOR"
    READS: ClassVar[tuple[str, ...]] = ('inp', 'scalar0', 'in1')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    scalar0: Scalar
    in1: AP
    out: AP
    alu0: Alu
    alu1: Alu
    reverse0: bool = False
    reverse1: bool = False

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if not (same_shape(self.inp, self.out) and same_shape(self.in1, self.out)):
            raise ProgramError(f"shape mismatch {self.inp.shape}, {self.in1.shape} -> {self.out.shape}")
        check_per_partition(self.scalar0, self.inp.partitions)
        if self.inp.space is Space.PSUM and self.in1.space is Space.PSUM:
            raise ProgramError("scalar_tensor_tensor reads at most one tile from PSUM; copy one to SBUF first")
        if self.alu0 in BITVEC_ALU or self.alu1 in BITVEC_ALU:
            raise ProgramError(f"scalar_tensor_tensor takes arithmetic ops only, got {self.alu0.value}, "
                               f"{self.alu1.value}")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        # S9: N for BF16 inputs, subtract then multiply, N even; 2N otherwise (floored at MIN_II as
        # every other VectorE formula)
        fast = (self.inp.dtype.value == self.in1.dtype.value == "bfloat16" and self.alu0 is Alu.SUBTRACT
                and self.alu1 is Alu.MULTIPLY and s.n % 2 == 0)
        return max(spec.min_ii_cycles, s.n if fast else 2 * s.n), 1.0


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        inp, out = self.inp, self.out
        reduced = 1
        for _, size in inp.dims[len(inp.dims) - self.axes:]:
            reduced *= size
        if self.axes < 1 or self.axes > len(inp.dims) or out.free_size * reduced != inp.free_size \
                or out.partitions != inp.partitions:
            raise ProgramError(f"reducing {self.axes} innermost dims of {inp.shape} cannot give {out.shape}")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        fast = self.inp.dtype.value == "bfloat16" and self.out.dtype.value == "bfloat16" and \
            self.alu in (Alu.ADD, Alu.MAX)
        return max(spec.min_ii_cycles, s.n / 2 if fast else s.n), 1.0


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        check_same_shape(self.inp, self.out)
        if self.in1 is not None:
            if not same_shape(self.in1, self.out) or self.alu0 is None:
                raise ProgramError(f"a two-input scan needs in1 of shape {self.out.shape} and alu0")
            if isinstance(self.initial, AP) and (self.initial.partitions != self.inp.partitions
                                                 or self.initial.free_size != 1):
                raise ProgramError(f"the scan's initial value must be [{self.inp.partitions}, 1]")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return max(spec.min_ii_cycles, 2 * s.n), 1.0


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if self.inp.free_size > spec.bn_stats_fmax or self.out.free_size not in (3, 6):
            raise ProgramError(f"bn_stats takes at most {spec.bn_stats_fmax} elements per partition and "
                               f"writes 3 (count, mean, M2) or 6 (those of the even and of the odd elements)")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return max(spec.min_ii_cycles, s.n), 1.0


@instruction
class BnAggr(Instruction):
    """Combine k bn_stats triples inp [P, 3k] into out [P, 2] = (mean, population variance)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "BN_AGGR"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if self.inp.free_size % 3 or self.out.free_size != 2:
            raise ProgramError("bn_aggr reads bn_stats triples and writes 2 values (mean, var)")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return max(spec.min_ii_cycles, 13 * s.n / 3), 1.0


@instruction
class Max8(Instruction):
    """The 8 largest values of each partition of inp [P, 8..16384], largest first (nki.isa.max8).

    A NaN counts as larger than every number (its place is undocumented; this is PyTorch's order,
    docs/cost-model.md, Numerics)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "MAX8"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    inp: AP
    out: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if not 8 <= self.inp.free_size <= MAX8_FMAX or self.out.free_size != 8 \
                or self.out.partitions != self.inp.partitions:
            raise ProgramError(f"max8 reads 8 to {MAX8_FMAX} elements per partition and writes 8, "
                               f"not {self.inp.shape} -> {self.out.shape}")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return max(spec.min_ii_cycles, s.n), 1.0   # S9: N


@instruction
class FindIndex8(Instruction):
    """out [P, 8] = the position of the first element of data [P, 8..16384] equal to each of vals
    [P, 8] (nki.isa.nc_find_index8); a NaN value finds the first NaN, an absent one gives the
    all-ones sentinel (-1 in an int32 tile, 0xFFFFFFFF as the NKI's uint32)."""
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "FIND_INDEX8"
    READS: ClassVar[tuple[str, ...]] = ('data', 'vals')
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    data: AP
    vals: AP
    out: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        p = self.data.partitions
        if not 8 <= self.data.free_size <= MAX8_FMAX or self.vals.free_size != 8 or self.out.free_size != 8 \
                or self.vals.partitions != p or self.out.partitions != p:
            raise ProgramError(f"find_index8 reads 8 to {MAX8_FMAX} data elements and 8 values per partition "
                               f"and writes 8 positions, not {self.data.shape}, {self.vals.shape} -> {self.out.shape}")
        if self.out.dtype.is_float:
            raise ProgramError("find_index8 writes positions into an integer tile (int32)")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        # S9: N, N the data's elements per partition (the 8 values load first)
        return max(spec.min_ii_cycles, self.data.free_size), 1.0


@instruction
class TensorCopy(Instruction):
    """out = inp with a cast to out's dtype; runs on VectorE, ScalarE or GpSimdE (``on``)."""
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        check_same_shape(self.inp, self.out)

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        perf = 1.0
        if spec.vector_perf_mode and s.half and self.on.value == "vector":
            perf = 4.0 if s.all_sbuf and s.contiguous else 2.0
        return max(spec.min_ii_cycles, s.n), perf


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if not all(same_shape(a, self.out) for a in (self.pred, self.on_true, self.on_false)):
            raise ProgramError(f"select operands must all have shape {self.out.shape}")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        mixed = len({ap.space for ap in s.aps}) > 1
        return max(spec.min_ii_cycles, s.n if mixed else 2 * s.n), 1.0


@instruction
class Memset(Instruction):
    ENGINE: ClassVar[Engine] = Engine.VECTOR
    OPCODE: ClassVar[str] = "MEMSET"
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    out: AP
    value: float = 0.0

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        zero_half = self.value == 0 and self.out.dtype.value in ("bfloat16", "float16")
        return max(spec.min_ii_cycles, s.n / 2 if zero_half else s.n), 1.0
