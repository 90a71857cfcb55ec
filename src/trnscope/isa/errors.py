"""Errors raised for programs the device cannot run. Each names the instruction at fault."""


class ProgramError(ValueError):
    """An invalid Program: the message names the instruction, what is wrong and how to fix it."""


class DeadlockError(ProgramError):
    """Semaphore waits that can never be satisfied."""


# A file that is not a valid trnscope NEFF: defined with the NEFF header, in trnscope.formats.
from ..formats.neff import NeffFormatError  # noqa: E402,F401
