"""TensorE: the 128x128 PE array (hardware.md 2.4): load the stationary matrix, stream the moving one."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..ap import AP, Space
from ..errors import ProgramError
from .base import Engine, Instruction, instruction

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["LoadStationary", "MultiplyMoving", "TensorTranspose"]


def _check_psum_out(ap: AP, fp32: bool = True) -> None:
    """TensorE writes PSUM (within one bank: ``ONE_BANK``, a placement rule)."""
    if ap.space is not Space.PSUM:
        raise ProgramError("TensorE writes only PSUM")
    if fp32 and ap.dtype.value != "float32":
        raise ProgramError(f"dtype mismatch: matmul results accumulate in FP32 PSUM, got {ap.dtype.value}")


@instruction
class LoadStationary(Instruction):
    """Load the stationary matrix [K partitions x M <= 128] into the PE array (LDWEIGHTS)."""
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "LDWEIGHTS"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    SIM_KIND: ClassVar[str] = "load_weights"
    src: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        if self.src.space is not Space.SBUF:
            raise ProgramError("the stationary operand must be in SBUF")
        if self.src.free_size > spec.gemm_stationary_fmax:
            raise ProgramError(f"stationary free size {self.src.free_size} > {spec.gemm_stationary_fmax}")

    def cycles(self, spec: HardwareSpec) -> float:
        cycles = self.src.free_size / spec.ls_speedup
        return cycles * (spec.fp32_matmul_factor if self.src.dtype.itemsize == 4 else 1)


@instruction
class MultiplyMoving(Instruction):
    """Stream moving [K x N <= 512] through the array: dst[M, N] (+)= stationary.T @ moving (MATMUL).

    ``accumulate=False`` starts a new accumulation group (overwrites PSUM); True adds to it.
    """
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "MATMUL"
    READS: ClassVar[tuple[str, ...]] = ('moving',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    ONE_BANK: ClassVar[tuple[str, ...]] = ('dst',)
    SIM_KIND: ClassVar[str] = "matmul"
    moving: AP
    dst: AP
    accumulate: bool = False

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        moving = self.moving
        if stationary is None:
            raise ProgramError("MATMUL with no LDWEIGHTS before it on TensorE")
        if moving.space is not Space.SBUF:
            raise ProgramError("the moving operand must be in SBUF")
        if moving.free_size > spec.gemm_moving_fmax:
            raise ProgramError(f"moving free size {moving.free_size} > {spec.gemm_moving_fmax} "
                               f"(one PSUM bank holds 512 FP32 per partition)")
        if moving.partitions != stationary.partitions:
            raise ProgramError(f"contraction mismatch: moving has {moving.partitions} partitions, "
                               f"stationary {stationary.partitions}")
        if (moving.dtype.itemsize == 4) != (stationary.dtype.itemsize == 4) or not moving.dtype.is_float:
            raise ProgramError(f"dtype mismatch: moving {moving.dtype.value} with stationary "
                               f"{stationary.dtype.value}; cast both to bf16 or both to fp32")
        _check_psum_out(self.dst)
        if self.dst.partitions != stationary.free_size or self.dst.free_size != moving.free_size:
            raise ProgramError(f"output tile {self.dst.shape} does not match stationary.T @ moving "
                               f"[{stationary.free_size}, {moving.free_size}]")

    def cycles(self, spec: HardwareSpec) -> float:
        # max(min(64, N_stationary), N_moving): the stationary free size is the output partitions.
        cycles = max(min(spec.mm_init_latency_cycles, self.dst.partitions), self.moving.free_size)
        return cycles * (spec.fp32_matmul_factor if self.moving.dtype.itemsize == 4 else 1)

    def flops(self) -> tuple[float, float]:
        """Matmuls count 2*K*M*N (S25)."""
        f = 2.0 * self.moving.partitions * self.dst.partitions * self.moving.free_size
        return f, f

    def onchip_bytes(self) -> tuple[int, int, int, int]:
        sr, sw, pr, pw = Instruction.onchip_bytes(self)
        if self.accumulate:  # a read-accumulate-write of the PSUM bank
            pr += self.dst.nbytes
        return sr, sw, pr, pw


@instruction
class TensorTranspose(Instruction):
    """Transpose src [P, F] into PSUM dst [F, P] on TensorE (matmul with identity)."""
    ENGINE: ClassVar[Engine] = Engine.TENSOR
    OPCODE: ClassVar[str] = "TRANSPOSE"
    READS: ClassVar[tuple[str, ...]] = ('src',)
    WRITES: ClassVar[tuple[str, ...]] = ('dst',)
    ONE_BANK: ClassVar[tuple[str, ...]] = ('dst',)
    SIM_KIND: ClassVar[str] = "transpose"
    src: AP
    dst: AP

    def check(self, spec: HardwareSpec, stationary: AP | None) -> None:
        _check_psum_out(self.dst, fp32=False)
        if self.dst.partitions != self.src.free_size or self.dst.free_size != self.src.partitions:
            raise ProgramError(f"transpose of {self.src.shape} cannot produce {self.dst.shape}")

    def cycles(self, spec: HardwareSpec) -> float:
        return max(self.src.partitions, min(spec.mm_init_latency_cycles, self.src.free_size))

    def flops(self) -> tuple[float, float]:
        """A matmul against the identity: hardware FLOPs only (S25)."""
        return 0.0, 2.0 * self.src.partitions * self.src.partitions * self.src.free_size
