"""``trnscope view DIR...``: browse profiles and traces in the explorer (no torch needed)."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


class ViewCommand:
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dirs", nargs="+", metavar="DIR",
                            help="profile directories, folders holding them, or trace files (.json / .json.gz)")
        parser.add_argument("--host", default="127.0.0.1",
                            help="address to bind (default 127.0.0.1: this machine only). Any other address "
                                 "requires a token on every request")
        parser.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
        parser.add_argument("--token", help="access token to require (generated when --host is not loopback)")
        parser.add_argument("--no-cache", action="store_true",
                            help="do not keep parsed traces in ~/.cache/trnscope/traces (re-parse every start)")
        parser.add_argument("--open", action="store_true", help="open the explorer in a web browser")

    def run(self, args: argparse.Namespace, console: Console) -> int:
        from ..explorer.security import check_token
        from ..explorer.server import plan, serve
        from .main import UsageError

        missing = [d for d in args.dirs if not Path(d).exists()]
        if missing:
            raise UsageError(f"no such file or directory: {', '.join(missing)}")
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
        try:
            check_token(args.token)
        except ValueError as exc:
            raise UsageError(f"--token: {exc}") from None
        from ..analysis.ranks import is_run

        dirs = []
        page = ""
        for d in args.dirs:  # a multi-rank run opens on its page of all ranks (each rank's profile and the
            if is_run(Path(d)):  # merged all-ranks trace are entries too)
                from ..explorer.ranks_view import run_id
                from .ranks_cmd import merged_for_view

                dirs.append(str(merged_for_view(Path(d))))
                page = page or f"#/run/{run_id(len(dirs), '.')}"
            dirs.append(d)
        args.dirs = dirs
        server_plan = plan(args.host, args.port, args.token)
        if page:
            server_plan = dataclasses.replace(server_plan, url=server_plan.url + page)
        _check_can_bind(server_plan.host, server_plan.port)
        serve(args.dirs, server_plan, use_cache=not args.no_cache, open_browser=args.open,
              announce=lambda line: console.print(line, highlight=False, soft_wrap=True))
        return 0


def _check_can_bind(host: str, port: int) -> None:
    """Fail before anything is printed as served: a port another server holds, a privileged port,
    an address this machine does not have. (uvicorn binds with SO_REUSEADDR too, so a port left in
    TIME_WAIT by an explorer that just stopped is not refused here.)"""
    from .main import UsageError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except socket.gaierror:
        raise UsageError(f"--host {host}: not an address of this machine") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} on {host} is already in use (another `trnscope view`?): pick another "
                             f"with --port N, or --port 0 for a free one") from None
        if exc.errno == errno.EACCES:
            raise UsageError(f"port {port} needs administrator rights: use a port above 1023 (--port 8080), "
                             f"or --port 0 for a free one") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--host {host}: not an address of this machine") from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
