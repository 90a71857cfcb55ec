"""A disk cache of traces in trnscope's columnar (Parquet) form.

Parsing a large Kineto JSON file is the slow part of opening it (text has to be tokenised); the
same trace saved as Parquet columns reloads in a fraction of the time. The cache keys each entry
on the source files' paths, sizes and modification times and on the trnscope version, so an
edited or re-recorded file is parsed again. Entries are written to a temporary folder and renamed
into place: a crash leaves no half-written entry. Any failure to write only costs the speed-up.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import __version__
from ..trace import Trace, TraceFormatError, load_parquet, save_parquet

# Bump when the way the analysis layer builds traces changes (e.g. how profile files are merged).
_BUILD_VERSION = 1


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trnscope" / "traces"


class TraceCache:
    def __init__(self, directory: str | Path | None = None, max_entries: int = 64) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_entries = max_entries

    def key(self, sources: Sequence[Path], flavour: str) -> str:
        digest = hashlib.sha256(f"{__version__}/{_BUILD_VERSION}/{flavour}".encode())
        for path in sources:
            stat = path.stat()
            digest.update(f"|{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:32]

    def get_or_build(self, sources: Sequence[Path], flavour: str, build: Callable[[], Trace]) -> tuple[Trace, bool]:
        """(trace, came from the cache)."""
        try:
            key = self.key(sources, flavour)
        except OSError:
            return build(), False
        entry = self.directory / key
        if entry.is_dir():
            try:
                trace = load_parquet(entry)
                os.utime(entry)  # mark as recently used for eviction
                return trace, True
            except (TraceFormatError, OSError):
                shutil.rmtree(entry, ignore_errors=True)
        trace = build()
        self._store(entry, trace)
        return trace, False

    def _store(self, entry: Path, trace: Trace) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".building-", dir=self.directory))
        except OSError:
            return  # read-only or full disk: work uncached
        try:
            save_parquet(trace, staging)
            os.replace(staging, entry)
        except Exception:  # noqa: BLE001 - whatever stops the save (disk, odd metadata) only costs the speed-up
            shutil.rmtree(staging, ignore_errors=True)
            return
        self._evict()

    def _evict(self) -> None:
        entries = [p for p in self.directory.iterdir() if p.is_dir() and not p.name.startswith(".")]
        if len(entries) <= self.max_entries:
            return
        entries.sort(key=lambda p: p.stat().st_mtime)
        for old in entries[: len(entries) - self.max_entries]:
            shutil.rmtree(old, ignore_errors=True)
