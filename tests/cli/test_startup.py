"""Start-up pays only for what runs: the CLI imports a subcommand's module (and its dependencies)
only when that subcommand is chosen, and ``import trnscope`` with torch leaves the simulator (numba)
and the kernel library for the first op that needs them. Checked by which modules a fresh process
has loaded, never by time (benchmarks/bench_startup.py measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _modules_after(code: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def _cli_modules(*argv: str) -> set[str]:
    code = ("import sys\nfrom trnscope.cli.main import main\nsys.argv = ['trnscope', *%r]\n"
            "try:\n    main(list(sys.argv[1:]))\nexcept SystemExit:\n    pass\n" % (argv,))
    return _modules_after(code)


HEAVY = {"torch", "numpy", "numba", "rich", "pyarrow", "ml_dtypes", "starlette"}


def test_help_imports_no_subcommand_and_nothing_heavy():
    mods = _cli_modules("--help")
    assert not HEAVY & mods
    assert not {m for m in mods if m.startswith("trnscope.cli.") and m != "trnscope.cli.main"}


def test_a_subcommands_help_imports_only_that_subcommand():
    mods = _cli_modules("summary", "--help")
    assert "trnscope.cli.analysis_cmds" in mods
    assert not {"trnscope.cli.demo", "trnscope.cli.run_cmd", "trnscope.cli.view_cmd", "trnscope.cli.inspect_cmd"} & mods
    assert not HEAVY & mods


def test_import_trnscope_with_torch_defers_the_simulator_and_kernels():
    mods = _modules_after("import torch, trnscope")
    assert "trnscope.device.runtime_bridge" in mods  # the device is registered
    assert "numba" not in mods and "trnscope.sim" not in mods
    assert "trnscope.compiler.kernels" not in mods


def test_the_torch_free_commands_come_from_the_registry():
    from trnscope.cli.main import COMMANDS, torch_free

    free = {name for name, entry in COMMANDS.items() if entry.torch_free}
    assert {"view", "summary", "diff", "export", "inspect", "query"} <= free and not {"run", "demo", "retime"} & free
    assert torch_free(["--instance", "trn1", "summary", "x"]) and not torch_free(["run", "x.py"])
    assert not torch_free([]) and not torch_free(["nosuchcommand"])


def test_a_torch_free_command_starts_without_torch_or_the_device():
    """``trnscope query`` (and every command the registry marks torch-free) imports trnscope as the
    console script does, without registering the device: no torch in the process."""
    from trnscope.cli.main import COMMANDS

    for name in (n for n, e in COMMANDS.items() if e.torch_free):
        code = ("import sys\nsys.argv = ['trnscope', %r, '--help']\nimport trnscope\n"
                "from trnscope.cli.main import main\n"
                "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n" % name)
        mods = _modules_after(code)
        assert "torch" not in mods and "trnscope.device" not in mods, name
