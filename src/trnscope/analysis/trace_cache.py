"""A disk cache of traces in trnscope's columnar (Parquet) form.

Parsing a large Kineto JSON file is the slow part of opening it (text has to be tokenised); the
same trace saved as Parquet columns reloads in a fraction of the time. The cache keys each entry
on the source files' paths, sizes and modification times and on the trnscope version, so an
edited or re-recorded file is parsed again.

Writing an entry costs about a tenth of the parse (0.3 s for a million events), so it happens on a
background thread after the trace is returned: the first answer for a large trace does not wait
for it. An entry is written completely or not at all:

* it is built in a private ``.building-*`` folder, every file flushed to disk, then a marker
  (``complete.json``: each file's size) written last, and the folder renamed into place in one
  step. A crash or a kill mid-write leaves only a staging folder, which no lookup ever reads and a
  later write sweeps away once it is old;
* a lookup trusts an entry only when its marker is there and every file has the size the marker
  says; anything else (a copy cut short, an entry from before the marker existed, a file that will
  not load) is deleted and the trace parsed again;
* writers never overwrite: one per key in a process, and when another process got there first the
  rename fails and the staging folder is dropped, so two servers sharing a cache cannot interleave
  files of one entry.

Any failure to write only costs the speed-up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from .. import __version__
from ..trace import Trace, TraceFormatError, load_parquet, save_parquet

# Bump when the way traces are built changes (how profile files are merged, how slices nest).
_BUILD_VERSION = 2  # 2: slices nest by containment (with_stack traces), so cached depths and parents changed
MARKER = "complete.json"
STAGING_PREFIX = ".building-"
# A staging folder this old belongs to a writer that died (a live one finishes in seconds).
STALE_STAGING_S = 3600.0

log = logging.getLogger("trnscope.analysis")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trnscope" / "traces"


class TraceCache:
    """``background``: write new entries on a thread (the default); False writes them before
    :meth:`get_or_build` returns."""

    def __init__(self, directory: str | Path | None = None, max_entries: int = 64, background: bool = True) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.max_entries = max_entries
        self.background = background
        self._writing: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

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
            trace = self._load(entry)
            if trace is not None:
                return trace, True
        trace = build()
        self.store(key, trace)
        return trace, False

    def store(self, key: str, trace: Trace) -> None:
        """Write ``trace`` as entry ``key`` (on a thread unless ``background`` is off); a write of
        the same key already under way makes this one unnecessary."""
        if not self.background:
            self._store(self.directory / key, trace)
            return
        with self._lock:
            if key in self._writing:
                return
            # not a daemon: an interpreter exiting right after a load still finishes the entry
            thread = threading.Thread(target=self._store_then_forget, args=(key, trace),
                                      name=f"trnscope-cache-{key[:8]}")
            self._writing[key] = thread
        thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the writes under way; True when none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._writing.values())
            if not pending:
                return True
            for thread in pending:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline:
                with self._lock:
                    return not self._writing

    def _store_then_forget(self, key: str, trace: Trace) -> None:
        try:
            self._store(self.directory / key, trace)
        finally:
            with self._lock:
                self._writing.pop(key, None)

    def _load(self, entry: Path) -> Trace | None:
        if not _complete(entry):
            shutil.rmtree(entry, ignore_errors=True)
            return None
        try:
            trace = load_parquet(entry)
        except (TraceFormatError, OSError):
            shutil.rmtree(entry, ignore_errors=True)
            return None
        try:
            os.utime(entry)  # mark as recently used for eviction
        except OSError:
            pass
        return trace

    def _store(self, entry: Path, trace: Trace) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.directory))
        except OSError:
            return  # read-only or full disk: work uncached
        try:
            save_parquet(trace, staging)
            sizes = {}
            for path in sorted(staging.iterdir()):
                _fsync(path)
                sizes[path.name] = path.stat().st_size
            marker = staging / MARKER
            marker.write_bytes(orjson.dumps({"files": sizes}))
            _fsync(marker)
            _fsync(staging)
            # a folder only ever appears under its key complete; if another writer's entry is
            # already there the rename fails and that entry stays
            os.rename(staging, entry)
            _fsync(self.directory)
        except Exception as exc:  # noqa: BLE001 - whatever stops the save (disk, odd metadata) only costs the speed-up
            log.debug("trace cache: not keeping %s (%s)", entry.name, exc)
            shutil.rmtree(staging, ignore_errors=True)
            return
        self._evict()

    def _evict(self) -> None:
        try:
            children = list(self.directory.iterdir())
        except OSError:
            return
        now = time.time()
        entries = []
        for path in children:
            try:
                if not path.is_dir():
                    continue
                if path.name.startswith(STAGING_PREFIX):
                    if now - path.stat().st_mtime > STALE_STAGING_S:
                        shutil.rmtree(path, ignore_errors=True)
                elif not path.name.startswith("."):
                    entries.append((path.stat().st_mtime, path))
            except OSError:
                continue  # removed by another process meanwhile
        if len(entries) <= self.max_entries:
            return
        entries.sort()
        for _, old in entries[: len(entries) - self.max_entries]:
            shutil.rmtree(old, ignore_errors=True)


def _complete(entry: Path) -> bool:
    """The entry's marker is there and every file it lists has the size it says."""
    try:
        listed = orjson.loads((entry / MARKER).read_bytes())["files"]
        return bool(listed) and all((entry / name).stat().st_size == size for name, size in listed.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _fsync(path: Path) -> None:
    """Flush a file's or folder's data to disk, so a renamed entry never holds data still in
    flight when the machine goes down."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
