"""The Sync engine: instructions that only wait on and write semaphores (hardware.md 2.4, S1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .base import Engine, Instruction, instruction

if TYPE_CHECKING:
    from ...hw import HardwareSpec

__all__ = ["SemaphoreSet", "SemaphoreWait"]


class _SyncOnly(Instruction):
    __slots__ = ()

    def cycles(self, spec: HardwareSpec) -> float:
        return spec.min_ii_cycles


@instruction
class SemaphoreWait(_SyncOnly):
    """A Sync-engine instruction that only waits (its ``waits``) and then signals (EVENT_SEMAPHORE)."""
    ENGINE: ClassVar[Engine] = Engine.SYNC
    OPCODE: ClassVar[str] = "EVENT_SEMAPHORE"


@instruction
class SemaphoreSet(_SyncOnly):
    """Write an immediate value into a semaphore (sem_wr_imm)."""
    ENGINE: ClassVar[Engine] = Engine.SYNC
    OPCODE: ClassVar[str] = "SEMAPHORE_SET"
    sem: int
    value: int
