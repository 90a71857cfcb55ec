"""The compiler's structure: one registry of kernel modules, names that mean one thing, and the graph
compiler's interface to its epilogues declared."""

from __future__ import annotations

import ast
import pkgutil
import sys
import types
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "trnscope"


def test_compiler_lowering_is_the_registry_module():
    from trnscope.compiler import lowering

    assert isinstance(lowering, types.ModuleType)
    assert callable(lowering.lowering) and callable(lowering.lower)


def test_the_registry_loads_every_kernel_module():
    from trnscope.compiler import kernels, registered

    names = {m.name for m in pkgutil.iter_modules(kernels.__path__)}
    assert {"loss", "random_fill", "view_backward", "matmul"} <= names
    registered()
    assert all(f"trnscope.compiler.kernels.{n}" in sys.modules for n in names)


def _classes_named(name: str) -> list[str]:
    found = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(SRC)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def test_one_class_is_named_opcall():
    found = _classes_named("OpCall")
    assert len(found) == 1, found


def test_epilogues_use_only_the_declared_graph_compiler_interface():
    from trnscope.compiler.epilogue import EpilogueHost

    declared = set(EpilogueHost.__annotations__) | {n for n in vars(EpilogueHost) if not n.startswith("__")}
    tree = ast.parse((SRC / "compiler" / "epilogue.py").read_text())
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "gc"}
    assert used and used <= declared, sorted(used - declared)
