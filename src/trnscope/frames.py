"""Where a warning about the user's program should point: the innermost frame outside trnscope and torch."""

from __future__ import annotations

import os
import sys
from types import FrameType

_TRNSCOPE = os.path.dirname(os.path.abspath(__file__))


def _internal() -> tuple[str, ...]:
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None)
    return (_TRNSCOPE,) + ((os.path.dirname(where),) if where else ())


def user_frame() -> tuple[str, int, str]:
    """(file, line, module) of the innermost caller outside trnscope and torch."""
    internal = _internal()
    f: FrameType | None = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(internal) or f.f_code.co_filename.startswith("<")):
        f = f.f_back
    if f is None:
        return "<unknown>", 0, "trnscope"
    return f.f_code.co_filename, f.f_lineno, f.f_globals.get("__name__", "")


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the caller point at the innermost frame
    outside trnscope and torch."""
    internal = _internal()
    f: FrameType | None = sys._getframe(1)
    level = 1
    while f is not None and f.f_code.co_filename.startswith(internal):
        f, level = f.f_back, level + 1
    return level
