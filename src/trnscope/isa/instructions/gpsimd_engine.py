"""GpSimdE: eight general-purpose SIMD cores, each serving 16 partitions (hardware.md 2.4): index
generators, affine masks, cross-partition reductions, random numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..ap import AP, Space
from ..errors import ProgramError
from .base import Alu, Engine, Instruction, Streamed, instruction

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["GATHER_GROUP_ELEMENTS", "PARTITION_REDUCE_CYCLES_PER_ELEMENT", "RANDOM_DISTRIBUTIONS", "AffineSelect",
    "Gather", "Iota", "PartitionReduce", "Random"]

RANDOM_DISTRIBUTIONS = ("uniform", "normal", "bernoulli", "exponential")
# A GpSimd core serves 16 partitions with a 512-bit SIMD unit (S1): a cross-partition reduction
# walks N elements on each core and then combines the 8 cores' partials, ~1.5 N cycles (derived).
PARTITION_REDUCE_CYCLES_PER_ELEMENT = 1.5
# GpSimdE's gather within a partition (nc_n_gather) runs as ceil(elements per partition of the data /
# 512) groups of ISA instructions (its NKI docstring). Assumption: each group walks every index once
# and costs what GpSimdE's other per-element instructions cost, GPSIMD_START + N (iota, affine_select, S9).
GATHER_GROUP_ELEMENTS = 512


class _Generator(Instruction):
    """GPSIMD_START + N cycles (S9: iota, affine_select)."""

    __slots__ = ()

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return spec.gpsimd_start_cycles + s.n, 1.0


@instruction
class Iota(_Generator):
    """out[p, i...] = base + channel_multiplier * p + sum_j coef_j * i_j (coefs per free dim)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "IOTA"
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    out: AP
    base: int = 0
    channel_multiplier: int = 0
    coefs: tuple[int, ...] = ()


@instruction
class AffineSelect(_Generator):
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


@instruction
class PartitionReduce(Instruction):
    """Reduce across partitions: out[0, f] = <alu>_p inp[p, f] (tensor_partition_reduce)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "PARTITION_REDUCE"
    READS: ClassVar[tuple[str, ...]] = ('inp',)
    WRITES: ClassVar[tuple[str, ...]] = ('out',)
    alu: Alu
    inp: AP
    out: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if self.out.partitions != 1 or self.out.free_size != self.inp.free_size:
            raise ProgramError(f"partition reduce of {self.inp.shape} writes [1, {self.inp.free_size}]")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        return spec.gpsimd_start_cycles + PARTITION_REDUCE_CYCLES_PER_ELEMENT * s.n, 1.0


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        """nc_n_gather's rules: SBUF tiles of one partition count, an integer index tile as large as
        the output, the data's dtype out (it moves elements, it does not cast)."""
        if any(ap.space is not Space.SBUF for ap in (self.data, self.index, self.out)):
            raise ProgramError("GpSimdE gathers between SBUF tiles only")
        if not self.index.dtype.name.startswith(("int", "uint")):
            raise ProgramError(f"the gather index must be an integer tile, got {self.index.dtype.value}")
        if not self.data.partitions == self.index.partitions == self.out.partitions or \
                self.out.free_size != self.index.free_size or self.out.dtype != self.data.dtype:
            raise ProgramError(f"a gather writes one {self.data.dtype.value} element per index on each partition: "
                               f"data {self.data.shape}, index {self.index.shape}, out {self.out.shape} "
                               f"{self.out.dtype.value}")

    def cycles(self, spec: HardwareSpec) -> float:
        # one pass over the indices per 512-element group of the data (no stride penalty: the
        # engine addresses each element itself)
        groups = -(-self.data.free_size // GATHER_GROUP_ELEMENTS)
        return groups * (spec.gpsimd_start_cycles + self.index.free_size)


@instruction
class Random(_Generator):
    """Fill ``out`` with random numbers (the NKI ``rng`` family) drawn from ``dist``:
    uniform [a, b), normal (mean a, std b), bernoulli (p = a), exponential (rate a).

    No published cost: a generator like iota, GPSIMD_START + N (derived)."""
    ENGINE: ClassVar[Engine] = Engine.GPSIMD
    OPCODE: ClassVar[str] = "RNG"
    WRITES: ClassVar[tuple[str, ...]] = ("out",)
    out: AP
    dist: str = "uniform"
    a: float = 0.0
    b: float = 1.0
    seed: int = 0

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if self.dist not in RANDOM_DISTRIBUTIONS or not self.out.dtype.is_float:
            raise ProgramError(f"rng draws {', '.join(RANDOM_DISTRIBUTIONS)} into a float tile, got "
                               f"{self.dist!r} into {self.out.dtype.value}")
