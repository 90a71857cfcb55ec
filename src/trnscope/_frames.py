"""Where a warning about the user's program should point: the innermost frame outside trnscope and torch."""

from __future__ import annotations

import os
import sys
import types

_TRNSCOPE = os.path.dirname(os.path.abspath(__file__))


def user_frame() -> tuple[str, int, str]:
    """(file, line, module) of the innermost caller outside trnscope and torch."""
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    internal = (_TRNSCOPE,) + ((os.path.dirname(torch_file),) if torch_file else ())
    f: types.FrameType | None = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(internal) or f.f_code.co_filename.startswith("<")):
        f = f.f_back
    if f is None:
        return "<unknown>", 0, "trnscope"
    return f.f_code.co_filename, f.f_lineno, f.f_globals.get("__name__", "")
