"""``trnscope`` command line: one small class per subcommand behind a common protocol."""

from __future__ import annotations

import argparse
import sys
from typing import Protocol

from rich.console import Console


class Command(Protocol):
    name: str
    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, console: Console) -> int: ...


class UsageError(ValueError):
    """A bad argument or file: printed as one clear line, exit status 2."""


def commands() -> list[Command]:
    from .demo import DemoCommand
    from .inspect_cmd import InspectCommand
    from .run_cmd import RunCommand
    from .analysis_cmds import DiffCommand, ExportCommand, SummaryCommand
    from .view_cmd import ViewCommand

    return [RunCommand(), DemoCommand(), ViewCommand(), SummaryCommand(), DiffCommand(), ExportCommand(),
            InspectCommand()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trnscope", description="Profile PyTorch for AWS Trainium on an "
                                     "emulated NeuronCore.")
    parser.add_argument("--instance", help="emulated target: trn1 or trn2 (default: $TRNSCOPE_INSTANCE or trn2)")
    sub = parser.add_subparsers(dest="command", required=True)
    table = {}
    for cmd in commands():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        table[cmd.name] = cmd
    args = parser.parse_args(argv)
    # tables stay readable when the output is a file or a pipe (rich would fall back to 80 columns)
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        if args.instance:
            from ..hw import set_instance

            set_instance(args.instance)
        return table[args.command].run(args, console)
    except UsageError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2
    except (ValueError, OSError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
