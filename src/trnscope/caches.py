"""The process's in-memory caches, registered in one place so that one call empties them all.

Each module that keeps a cache registers, when it is imported, a function that empties it
(``caches.register("lowering: Programs", clear_cache)``); :func:`reset_caches` (also
``trnscope.reset_caches()``) calls every registered one. A cache of a module that was never
imported is empty anyway, so nothing here imports the modules (or torch): this module has no
dependencies.

What counts as a cache: what a module keeps only to avoid computing it again, so that emptying it
changes how fast the next call is and never what it returns. Not caches, and not reset: state
(the runtime's queues and clocks, memory accounting, the current device and target, RNG
generators, collective records), registries (lowerings, NKI kernels, custom ops) and what lives
on disk (the persistent NEFF cache, the explorer's trace cache).
"""

from __future__ import annotations

import threading
from typing import Callable

_clearers: dict[str, Callable[[], object]] = {}
_lock = threading.Lock()


def register(name: str, clear: Callable[[], object]) -> Callable[[], object]:
    """Have :func:`reset_caches` call ``clear`` (no arguments; it empties the cache ``name``).
    Registering a name again replaces its function (a module reloaded). Returns ``clear``."""
    with _lock:
        _clearers[name] = clear
    return clear


def registered() -> list[str]:
    """The names of the caches registered so far (those of the modules imported)."""
    with _lock:
        return sorted(_clearers)


def reset_caches() -> list[str]:
    """Empty every registered cache; returns their names. Safe at any time: a cache emptied is
    filled again by the next call that needs it."""
    with _lock:
        clearers = dict(_clearers)
    for clear in clearers.values():
        clear()
    return sorted(clearers)
