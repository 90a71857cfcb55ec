"""The one error a format reader raises: it names the file, what is wrong and what to do."""

from __future__ import annotations

from pathlib import Path


class FormatError(ValueError):
    """A file that cannot be read as the format it claims; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        super().__init__(f"{path}: {problem}" + (f". {hint}" if hint else ""))
