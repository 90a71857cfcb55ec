"""Run the explorer on uvicorn: ``trnscope view DIR...``."""

from __future__ import annotations

import socket
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..analysis import TraceCache
from .app import create_app
from .security import is_loopback, new_token

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


@dataclass
class ServerPlan:
    """Where and how to serve, decided before anything starts (so it can be printed and tested)."""

    host: str
    port: int
    token: str | None
    url: str


def plan(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None) -> ServerPlan:
    """A port of 0 picks a free one. A host other than loopback always gets a token: the one
    given, or a fresh random one."""
    if not is_loopback(host) and not token:
        token = new_token()
    if port == 0:
        port = free_port(host)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    return ServerPlan(host=host, port=port, token=token, url=url)


def free_port(host: str = DEFAULT_HOST) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def serve(roots: list[str | Path], server_plan: ServerPlan, *, use_cache: bool = True,
          open_browser: bool = False, announce: Callable[[str], None] = print, log_level: str = "warning") -> None:
    import uvicorn

    app = create_app(roots, token=server_plan.token, loopback_only=is_loopback(server_plan.host),
                     cache=TraceCache() if use_cache else None)
    announce(f"trnscope explorer serving {len(roots)} director{'y' if len(roots) == 1 else 'ies'} at {server_plan.url}")
    if server_plan.token:
        announce("Anyone with this URL can read these profiles; share it only with people who may.")
    if open_browser:
        webbrowser.open(server_plan.url)
    uvicorn.run(app, host=server_plan.host, port=server_plan.port, log_level=log_level)
