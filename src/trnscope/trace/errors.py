"""The one error type the trace readers raise for bad input."""

from __future__ import annotations

from os import PathLike


class TraceFormatError(ValueError):
    """A file that cannot be read as a trace.

    The message names the file, what is wrong with it and what to do, so a command-line user gets
    one readable line instead of a parser traceback.
    """

    def __init__(self, source: str | PathLike[str], problem: str, hint: str = "") -> None:
        self.source = str(source)
        self.problem = problem
        self.hint = hint
        message = f"{self.source}: {problem}"
        if hint:
            message += f". {hint}"
        super().__init__(message)
