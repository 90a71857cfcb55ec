"""Errors a kernel gets while it is traced, each naming the line of kernel source at fault.

Neuron's own checks raise ``NkiValidationError`` (nki.isa) for hardware constraints; trnscope adds
the checks its simulator-less counterpart lacks (SBUF/PSUM capacity, overlapping placements,
uninitialised reads). Every message names the kernel source line (``file:line``) and how to fix it.
"""

from __future__ import annotations


class NkiError(Exception):
    """Base class of every error raised while tracing or running an NKI kernel."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        self.detail = message
        super().__init__(f"{where}: {message}" if where else message)


class NkiValidationError(NkiError, ValueError):
    """A hardware constraint is violated (the name nki.isa uses)."""


class NkiAllocationError(NkiError, MemoryError):
    """The kernel's live tiles do not fit SBUF or PSUM, or two ``address=`` placements overlap."""


class NkiUninitializedError(NkiError, ValueError):
    """An instruction reads on-chip or HBM memory that nothing has written."""


class NkiUnsupportedError(NkiError, NotImplementedError):
    """A construct trnscope does not emulate (with the reason and the nearest supported one)."""


class NkiLegacyError(NkiError, TypeError):
    """An NKI 0.1 (``neuronxcc.nki``) construct used inside an ``nki.*`` kernel; names the replacement."""
