"""ScalarE: activation functions with a fused scale, bias and add-reduction (hardware.md 2.4, S9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..ap import AP
from ..errors import ProgramError
from .base import Act, Engine, Instruction, Scalar, Streamed, check_per_partition, check_same_shape, instruction

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["Activation"]


@instruction
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

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        p = self.inp.partitions
        check_same_shape(self.inp, self.out)
        check_per_partition(self.scale, p)
        check_per_partition(self.bias, p)
        if self.accum_out is not None and (self.accum_out.partitions != p or self.accum_out.free_size != 1):
            raise ProgramError(f"accumulate output must be [{p}, 1]")

    def formula(self, spec: HardwareSpec, s: Streamed) -> tuple[float, float]:
        # activation_reduce: + MIN_II for the reduction (S9)
        return max(spec.min_ii_cycles, s.n) + (spec.min_ii_cycles if self.accum_out is not None else 0), 1.0
