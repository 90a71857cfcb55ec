"""``trnscope view DIR...``: browse profiles and traces in the explorer (no torch needed)."""

from __future__ import annotations

import argparse
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
        from ..explorer.server import plan, serve
        from .main import UsageError

        missing = [d for d in args.dirs if not Path(d).exists()]
        if missing:
            raise UsageError(f"no such file or directory: {', '.join(missing)}")
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port must be between 0 and 65535, got {args.port}")
        server_plan = plan(args.host, args.port, args.token)
        serve(args.dirs, server_plan, use_cache=not args.no_cache, open_browser=args.open,
              announce=lambda line: console.print(line, highlight=False, soft_wrap=True))
        return 0
