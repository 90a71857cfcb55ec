"""What the explorer may show: the profiles and traces under the directories it was given.

The catalog is the explorer's only way to the file system. Entries are found by walking the roots
(bounded depth and count, hidden and environment folders skipped, only regular files opened: a
FIFO named like a trace would block the scan forever); each gets an opaque id derived from its root
and relative path, and the API addresses entries by id only. Raw files are served only through
:meth:`Catalog.resolve_file`: a file the catalog lists (a trace entry, or one of a profile's own
files), never a dot-file, never anything but a regular file, never anything that resolves
(symlinks included) outside a root.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import stat as stat_kind
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.profile import KINETO, NEURON, PARQUET, detect_kind
from ..analysis.profile_dir import scan_profile_dir
from ..formats.profile import is_profile_file
from ..trace.parquet import is_parquet_trace

MAX_DEPTH = 8
MAX_ENTRIES = 5000
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", ".git", ".venv", "venv"}
_TRACE_SUFFIXES = (".json", ".json.gz")
_SNIFF_BYTES = 64 * 1024


class OutsideRoots(PermissionError):
    """A path that is not inside any directory the explorer was given."""


@dataclass
class Entry:
    id: str
    root: int  # index into Catalog.roots
    path: Path  # absolute
    relpath: str  # relative to its root, "/"-separated ("." for the root itself)
    kind: str  # NEURON, KINETO or PARQUET
    size: int
    mtime: float
    manifest: dict = field(default_factory=dict)  # Neuron profiles: what their manifest says
    name: str = ""  # what the pages call it: short, unique among the entries (set by the catalog)

    def describe(self) -> dict:
        return {"id": self.id, "root": self.root, "relpath": self.relpath, "name": self.display_name,
                "kind": self.kind, "size": self.size, "mtime": self.mtime, "manifest": self.manifest}

    @property
    def display_name(self) -> str:
        return self.name or self.long_name

    @property
    def long_name(self) -> str:
        if self.kind == NEURON:
            parts = Path(self.relpath).parts
            return "/".join(parts[-3:]) if parts and self.relpath != "." else self.path.name
        return self.path.name

    @property
    def short_name(self) -> str:
        """A Neuron profile directory is <out>/<host>_pid_<pid>/<timestamp>: the folder the user
        chose (``naive``, ``runs/fused``) says which run it is, the rest is the same for every run.
        Other entries: the file or folder name."""
        if self.kind == NEURON:
            parts = Path(self.relpath).parts if self.relpath != "." else ()
            if len(parts) >= 3 and _PID_DIR.fullmatch(parts[-2]) and _STAMP_DIR.fullmatch(parts[-1]):
                return "/".join(parts[:-2])
        return self.long_name

    @property
    def stamp(self) -> str:
        """The recording time a profile directory is named by, readable ("" when it has none)."""
        match = _STAMP_DIR.fullmatch(self.path.name) if self.kind == NEURON else None
        if not match:
            return ""
        d, t = match.group(1), match.group(2)
        return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]}:{t[4:]}"


class Catalog:
    def __init__(self, roots: list[str | Path]) -> None:
        if not roots:
            raise ValueError("the explorer needs at least one directory to serve")
        self.roots = [Path(r).resolve() for r in roots]
        for root in self.roots:
            if not root.exists():
                raise FileNotFoundError(f"{root}: no such file or directory")
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._scanned_at = 0.0
        self.truncated = False

    # --- discovery ---------------------------------------------------------------------------

    def entries(self, max_age_s: float = 5.0) -> list[Entry]:
        """All entries, rescanning when the last scan is older than ``max_age_s`` (new profiles
        written while the explorer runs show up on the next listing)."""
        with self._lock:
            if time.monotonic() - self._scanned_at > max_age_s:
                self._entries = self._scan()
                self._scanned_at = time.monotonic()
            return sorted(self._entries.values(), key=lambda e: (e.root, e.relpath))

    def get(self, entry_id: str) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None:
            self.entries(max_age_s=0.0)
            entry = self._entries.get(entry_id)
        return entry

    def _scan(self) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        self.truncated = False
        for index, root in enumerate(self.roots):
            for path, kind in self._walk(root):
                if len(found) >= MAX_ENTRIES:
                    self.truncated = True
                    return found
                entry = self._entry(index, root, path, kind)
                if entry is not None:
                    found[entry.id] = entry
        _name(found.values())
        return found

    def _walk(self, root: Path):
        if _is_regular(root):
            yield root, KINETO
            return
        kind = detect_kind(root)
        if kind in (NEURON, PARQUET):
            yield root, kind
            return
        stack = [(root, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                children = sorted(directory.iterdir())
            except OSError:
                continue
            for child in children:
                if child.name.startswith(".") or child.name in _SKIP_DIRS:
                    continue
                if child.is_dir():
                    if not self._inside(child):
                        continue  # a symlink out of the roots
                    kind = detect_kind(child)
                    if kind in (NEURON, PARQUET):
                        yield child, kind
                    elif depth + 1 < MAX_DEPTH:
                        stack.append((child, depth + 1))
                elif (child.name.endswith(_TRACE_SUFFIXES) and _is_regular(child) and _looks_like_trace(child)
                      and self._inside(child)):
                    yield child, KINETO

    def _entry(self, index: int, root: Path, path: Path, kind: str) -> Entry | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        rel = "." if path == root else path.relative_to(root).as_posix()
        digest = hashlib.sha1(f"{index}:{rel}".encode()).hexdigest()[:12]
        manifest = {}
        size = stat.st_size
        if kind == NEURON:
            files = scan_profile_dir(path)
            size = sum(_size(p) for p in path.iterdir())
            manifest = _manifest_digest(files)
        elif kind == PARQUET and is_parquet_trace(path):
            size = sum(_size(p) for p in path.iterdir())
        return Entry(id=digest, root=index, path=path, relpath=rel, kind=kind, size=size, mtime=stat.st_mtime,
                     manifest=manifest)

    # --- raw files ---------------------------------------------------------------------------

    def _inside(self, path: Path) -> bool:
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            return False
        return any(resolved == root or resolved.is_relative_to(root) for root in self.roots)

    def resolve_file(self, root_index: int, relpath: str) -> Path:
        """The listed file ``relpath`` under root ``root_index``. Raises OutsideRoots for anything
        that escapes the root (``..``, absolute paths, symlinks pointing out) and FileNotFoundError
        for a file that is missing or that the catalog does not list (dot-files, FIFOs, notes,
        pages: a served folder's other files are not the explorer's to hand out)."""
        if not 0 <= root_index < len(self.roots):
            raise FileNotFoundError(relpath)
        root = self.roots[root_index]
        if len(relpath) > 4096:
            raise FileNotFoundError("path too long")
        if root.is_file():
            base = root.parent
            if relpath not in ("", ".", root.name):
                raise OutsideRoots(relpath)
            candidate = root
        else:
            base = root
            if "\x00" in relpath or os.path.isabs(relpath) or any(part == ".." for part in Path(relpath).parts):
                raise OutsideRoots(relpath)
            if any(part.startswith(".") for part in Path(relpath).parts):
                raise FileNotFoundError(relpath)
            candidate = root / relpath
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):  # a name too long, a symlink loop
            raise FileNotFoundError(relpath) from None
        if not (resolved == base or resolved.is_relative_to(base)) or not self._inside(resolved):
            raise OutsideRoots(relpath)
        if not _is_regular(resolved) or not self._lists(resolved):
            raise FileNotFoundError(relpath)
        return resolved

    def _lists(self, path: Path) -> bool:
        """Whether ``path`` is a trace entry or a profile's (or saved trace's) own file."""
        entries = self.entries()
        for entry in entries:
            if entry.path == path and entry.kind == KINETO:
                return True
            if entry.path == path.parent and entry.kind == NEURON:
                return is_profile_file(path.name)
            if entry.path == path.parent and entry.kind == PARQUET:
                return not path.name.startswith(".")
        return False


def _is_regular(path: Path) -> bool:
    """A regular file (after symlinks); a FIFO, socket or device is never opened."""
    try:
        return stat_kind.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _manifest_digest(files) -> dict:
    m = files.manifest or {}
    window = m.get("window") or {}
    return {
        "complete": files.complete,
        "problems": files.problems(),
        "created": m.get("created"),
        "instance_id": m.get("instance_id"),
        "process_id": m.get("process_id"),
        "executions": window.get("executions"),
        "kernels": window.get("kernels"),
        "neuron_cores": window.get("neuron_cores"),
        "host_time": window.get("host_time"),
        "target": window.get("target"),
        "modes": (m.get("config") or {}).get("modes"),
        "neffs": len(files.neffs),
        "ntffs": len(files.ntffs),
    }


def _looks_like_trace(path: Path) -> bool:
    """Chrome/Kineto trace files by name or content; other JSON (configs, package files) is not
    listed. A damaged trace still qualifies by its name or its first bytes, so the user sees why
    it does not open."""
    name = path.name
    if name.endswith((".pt.trace.json", ".pt.trace.json.gz")) or "trace" in name.lower():
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as zipped:
                head = zipped.read(_SNIFF_BYTES)
    except (OSError, EOFError):
        return name.endswith(".json.gz")  # a damaged archive: list it, so opening it explains the damage
    return b'"traceEvents"' in head or (head.lstrip()[:1] == b"[" and b'"ph"' in head)


_PID_DIR = re.compile(r".+_pid_\d+")
_STAMP_DIR = re.compile(r"(\d{8})_(\d{6})(?:_\d+)?")


def _name(entries) -> None:
    """Short names where they are unique; runs sharing one get their recording time added, and
    anything still ambiguous keeps its longer path."""
    entries = list(entries)
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.short_name, []).append(entry)
    for short, members in groups.items():
        for entry in members:
            if len(members) == 1:
                entry.name = short
            elif entry.stamp:
                entry.name = f"{short} · {entry.stamp}" if short else entry.stamp
            else:
                entry.name = entry.long_name if entry.long_name != short else entry.relpath
    taken: dict[str, int] = {}
    for entry in entries:
        taken[entry.name] = taken.get(entry.name, 0) + 1
    for entry in entries:
        if taken[entry.name] > 1:
            entry.name = entry.relpath
