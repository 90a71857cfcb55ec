"""``trnscope`` command line: one small class per subcommand behind a common protocol.

Start-up matters here (``trnscope --help``, ``trnscope summary``): only the chosen subcommand's
module is imported, and it imports what it needs (torch, the explorer, rich) when it runs. The table
below is all the top-level parser needs: names, modules and one-line helps.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from rich.console import Console


class Entry(NamedTuple):
    """One subcommand: where its class lives, its one-line help, and whether it only reads files."""

    module: str  # under trnscope.cli
    cls: str
    help: str
    # reads files only: ``trnscope <name>`` starts without torch (``import trnscope`` does not register
    # the device, see trnscope.__init__)
    torch_free: bool = False


# The registry: adding a command is its module and one entry here.
COMMANDS: dict[str, Entry] = {
    "run": Entry("run_cmd", "RunCommand",
                 "run a PyTorch script on the emulated NeuronCore (torch_neuronx imports resolve to trnscope)"),
    "demo": Entry("demo", "DemoCommand",
                  "the RMSNorm case study: naive ops vs torch.rms_norm vs torch.compile on the emulated NeuronCore"),
    "view": Entry("view_cmd", "ViewCommand", "open profiles and torch.profiler traces under DIR... in the browser "
                  "explorer", torch_free=True),
    "summary": Entry("analysis_cmds", "SummaryCommand",
                     "a profile's (or Kineto trace's) device use, idle time, top operators and recommendations",
                     torch_free=True),
    "diff": Entry("analysis_cmds", "DiffCommand", "compare two profiles: summary deltas and operators aligned by name",
                  torch_free=True),
    "export": Entry("analysis_cmds", "ExportCommand",
                    "write one Chrome JSON with every lane and flow of a profile (for Perfetto or chrome://tracing)",
                    torch_free=True),
    "inspect": Entry("inspect_cmd", "InspectCommand",
                     "show a NEFF's header, tensors, instruction mix and simulated time", torch_free=True),
    "retime": Entry("retime_cmd", "RetimeCommand",
                    "re-time a profile for another target (trn1, trn2, a changed spec): each NEFF lowered and "
                    "simulated again"),
    "query": Entry("query_cmd", "QueryCommand",
                   "run SQL (DuckDB, read-only) over a profile's tables: slices, ops, executions, ...",
                   torch_free=True),
}


def torch_free(argv: list[str]) -> bool:
    """Whether the command an argument list (without the program name) chooses only reads files."""
    name = chosen(argv)
    return name is not None and COMMANDS[name].torch_free


class Command(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, console: "Console") -> int: ...


class UsageError(ValueError):
    """A bad argument or file: printed as one clear line, exit status 2."""


def command(name: str) -> Command:
    """The subcommand ``name`` (its module is imported now)."""
    entry = COMMANDS[name]
    return getattr(importlib.import_module(f"{__package__}.{entry.module}"), entry.cls)()


def chosen(argv: list[str]) -> str | None:
    """The subcommand an argument list names: its first positional argument (``--instance`` takes one)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--instance":
            skip = True
        elif not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None, console: "Console | None" = None) -> int:
    """Run the CLI; ``console``: where to print (default: the terminal, 160 columns into a pipe)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="trnscope", description="Profile PyTorch for AWS Trainium on an "
                                     "emulated NeuronCore.")
    parser.add_argument("--instance", help="emulated target: trn1 or trn2 (default: $TRNSCOPE_INSTANCE or trn2)")
    sub = parser.add_subparsers(dest="command", required=True)
    name = chosen(argv)
    selected = None
    for cmd_name, entry in COMMANDS.items():
        p = sub.add_parser(cmd_name, help=entry.help, description=entry.help)
        if cmd_name == name:  # only the chosen command's arguments (and imports) are needed
            selected = command(cmd_name)
            selected.add_arguments(p)
    args = parser.parse_args(argv)
    if console is None:
        from rich.console import Console

        # tables stay readable when the output is a file or a pipe (rich would fall back to 80 columns)
        console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        if args.instance:
            from ..hw import set_instance

            set_instance(args.instance)
        return (selected or command(args.command)).run(args, console)
    except UsageError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2
    except (ValueError, OSError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
