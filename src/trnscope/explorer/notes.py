"""Flags and notes a user puts on a profile's timelines, saved in a file beside the profile.

The file is ``<profile>.trnscope-notes`` next to the profile directory or trace file (JSON; the
suffix is not ``.json`` so the catalog never takes it for a trace). A profile that is itself a
served root keeps it inside (``<root>/trnscope.trnscope-notes``), since next to it is outside what
the explorer serves; there the folder's modification time is put back after the write, because a
profile directory's mtime is what tells the explorer it changed and must be reloaded.

A flag: ``{"id", "view", "ts", "note", "row"?}`` — ``view`` is ``system`` or
``device/<neff>/<nc>``, ``ts`` ns on that view's axis (as the API's times), ``row`` the slice it
was put on, if any. Writes are atomic (a temporary file renamed over the old one).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import orjson

SUFFIX = ".trnscope-notes"
INSIDE_NAME = "trnscope" + SUFFIX
MAX_BODY = 512 * 1024
MAX_FLAGS = 2000
MAX_NOTE = 4000
VERSION = 1
_VIEW = re.compile(r"system|device/[A-Za-z0-9_.:-]{1,120}/\d{1,4}")
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class NotesError(ValueError):
    """A notes document the explorer refuses (the message says which flag and field)."""


def notes_path(path: Path, is_root: bool) -> Path:
    if is_root and path.is_dir():
        return path / INSIDE_NAME
    return path.with_name(path.name + SUFFIX)


def read_notes(path: Path) -> dict:
    """The saved flags, or none yet. A damaged file is reported, not overwritten silently."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {"version": VERSION, "flags": [], "file": path.name, "saved": False}
    except (OSError, orjson.JSONDecodeError) as exc:
        raise NotesError(f"{path.name} cannot be read ({exc}); move it away to start new notes") from None
    flags = validate(data)
    return {"version": VERSION, "flags": flags, "file": path.name, "saved": True}


def validate(data) -> list[dict]:
    if not isinstance(data, dict) or not isinstance(data.get("flags"), list):
        raise NotesError('notes must be a JSON object {"flags": [...]}')
    flags = data["flags"]
    if len(flags) > MAX_FLAGS:
        raise NotesError(f"at most {MAX_FLAGS} flags per profile")
    out = []
    for i, flag in enumerate(flags):
        if not isinstance(flag, dict):
            raise NotesError(f"flag {i} is not an object")
        fid, view, ts, note, row = (flag.get(k) for k in ("id", "view", "ts", "note", "row"))
        if not isinstance(fid, str) or not _ID.fullmatch(fid):
            raise NotesError(f"flag {i}: id must be 1-64 letters, digits, '-' or '_'")
        if not isinstance(view, str) or not _VIEW.fullmatch(view):
            raise NotesError(f"flag {i}: view must be 'system' or 'device/<neff>/<nc>'")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts != ts or abs(ts) > 1e18:
            raise NotesError(f"flag {i}: ts must be a finite number of ns")
        if not isinstance(note, str) or len(note) > MAX_NOTE:
            raise NotesError(f"flag {i}: note must be text of at most {MAX_NOTE} characters")
        if row is not None and (isinstance(row, bool) or not isinstance(row, int) or row < 0):
            raise NotesError(f"flag {i}: row must be a slice row (a non-negative integer) or null")
        out.append({"id": fid, "view": view, "ts": ts, "note": note, "row": row})
    return out


def write_notes(path: Path, body: bytes, keep_mtime_of: Path | None = None) -> dict:
    """Validate ``body`` and save it atomically; ``keep_mtime_of``: a folder whose modification
    time the write must not change."""
    if len(body) > MAX_BODY:
        raise NotesError(f"notes are limited to {MAX_BODY // 1024} KiB")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotesError(f"the notes are not valid JSON ({exc})") from None
    flags = validate(data)
    before = keep_mtime_of.stat() if keep_mtime_of is not None else None
    text = orjson.dumps({"version": VERSION, "flags": flags}, option=orjson.OPT_INDENT_2)
    fd, tmp = tempfile.mkstemp(prefix=".notes-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if before is not None and keep_mtime_of is not None:
        os.utime(keep_mtime_of, ns=(before.st_atime_ns, before.st_mtime_ns))
    return {"version": VERSION, "flags": flags, "file": path.name, "saved": True}
