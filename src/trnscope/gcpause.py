"""Holding the cyclic garbage collector while a pass makes many objects that form no cycles.

Reference counting frees everything such a pass makes; the cycle collector, triggered by the
allocations, would only walk the whole heap (a Program's instructions, a trace's tracks, torch's
objects) for nothing, several times the cost of the pass itself. Used by the trace reader, the
explorer's layout, the compiler's builder, the shape index and the NTFF writer.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
