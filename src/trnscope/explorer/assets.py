"""The front-end files, served from memory under a content-addressed prefix.

First paint in a fresh browser is bounded by how fast the page's ~20 small files arrive, so they
are read once when the app is created and answered straight from memory (no file system, no
thread hop per request). The page refers to them as ``/static/<version>/...`` where ``version``
is a digest of every file: the browser may then keep them forever (``immutable``), and relative
module imports inherit the prefix without a build step. A new version of the files gets a new
prefix, so nobody runs stale code. The unversioned ``/static/...`` paths still answer (revalidated
by ETag) for scripts and tests that name a file directly.

``index.html`` gets the version written into its asset URLs and ``js/boot.js`` inlined (told the
prefix in ``data-static`` and the explorer's pages, ``pages.manifest()``, in ``data-pages``): that
small classic script starts the first timeline request, then loads the modules. It is allowed by its SHA-256 in the Content-Security-Policy, so no other
inline script can run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".json": "application/json", ".svg": "image/svg+xml"}
BOOT_SCRIPT = "js/boot.js"
BOOT_MARKER = "<!-- boot -->"


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


class Assets:
    def __init__(self, directory: Path, pages: list[dict] | None = None) -> None:
        """``pages``: the explorer's pages as the front-end reads them (``pages.manifest()``)."""
        self.files: dict[str, Asset] = {}
        digest = hashlib.sha256()
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            rel = path.relative_to(directory).as_posix()
            body = path.read_bytes()
            digest.update(rel.encode() + b"\0" + body + b"\0")
            kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            self.files[rel] = Asset(body, kind, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
        self.version = digest.hexdigest()[:12]
        self.prefix = f"/static/{self.version}/"
        boot = self.files[BOOT_SCRIPT].body.decode() if BOOT_SCRIPT in self.files else ""
        self.boot_hash = "sha256-" + base64.b64encode(hashlib.sha256(boot.encode()).digest()).decode()
        index = self.files["index.html"].body.decode()
        missing = [p["script"] for p in pages or [] if f"js/{p['script']}" not in self.files]
        if missing:
            raise ValueError(f"explorer page module(s) not found under {directory}/js: {', '.join(missing)}")
        # an attribute, not script text: the boot script's hash (its CSP allowance) stays its own
        listed = html.escape(json.dumps(pages or [], separators=(",", ":")), quote=True)
        index = index.replace("/static/", self.prefix).replace(
            BOOT_MARKER, f'<script data-static="{self.prefix}" data-pages="{listed}">{boot}</script>')
        self.index = index.encode()

    def get(self, path: str) -> tuple[Asset, str] | None:
        """(asset, cache-control) for a path under /static/, with or without the version."""
        head, _, rest = path.partition("/")
        if head == self.version and rest in self.files:
            return self.files[rest], IMMUTABLE
        if path in self.files:
            return self.files[path], REVALIDATE
        if len(head) == len(self.version) and rest in self.files:
            return self.files[rest], REVALIDATE  # an older page asking for its version: current file, not cached
        return None
