"""No part of trnscope reads another part's private names.

What counts (docs/architecture.md, "Seams"):

* a *part* is a top-level subpackage of trnscope (``trnscope.device``, ``trnscope.runtime``, ...) or a
  module directly under trnscope (``trnscope.metrics``); the root package itself (``trnscope/__init__``)
  is a part of its own;
* a *private name* is any ``_``-prefixed component of a dotted name (a module, a function, a class, an
  attribute) that is not a dunder; it belongs to the part that defines it: ``trnscope.X._y...`` to X,
  ``trnscope._y`` to the root package;
* a part may use its own private names and never another part's.

The check is static (the AST of every module under src/trnscope), in two ways:

1. exactly: every import (``from ..device._core import CORE``, ``from ..runtime import _cores``) and
   every attribute chain rooted at a name an import bound (``memory._stats``, ``runtime.CLOCK._cut``,
   ``getattr(memory, "_stats")``), resolved to its full dotted name;
2. by name: an attribute read or written through any other object (``self.clock._cut_depth``,
   ``getattr(rt, "_lock")``), when the name is a private name that only other parts define (as a
   function, method, class, class attribute, ``__slots__`` entry or assigned attribute). A private
   name that the part defines itself, or that no part of trnscope defines (a private of torch), is
   not reported: the check knows names, not types.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "trnscope"
PKG = "trnscope"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name != "_"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The part a module belongs to: the component after ``trnscope`` ("" for the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def owner_violations(dotted: str, part: str) -> list[str]:
    """The private components of ``dotted`` (a trnscope name) that belong to a part other than ``part``."""
    parts = dotted.split(".")
    if parts[0] != PKG:
        return []
    bad = []
    for i in range(1, len(parts)):
        if _private(parts[i]):
            owner = parts[1] if i >= 2 else ""
            if owner != part:
                bad.append(".".join(parts[: i + 1]))
            break  # past a private component, the rest belongs to it
    return bad


class _Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = module_name(path)
        self.part = part_of(self.name)
        self.is_package = path.name == "__init__.py"
        self.tree = ast.parse(path.read_text(), str(path))

    def resolve(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.name.split(".")
        if not self.is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))


def _chain(node: ast.AST) -> tuple[str, list[str]] | None:
    """``a.b.c`` -> ("a", ["b", "c"]); None when the chain is not rooted at a plain name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, attrs[::-1]
    return None


def _defined_privates(mod: _Module) -> set[str]:
    names = set()
    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            for elt in ast.walk(node.value):
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                    names.add(elt.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            names.add(node.args[1].value)
    return {n for n in names if _private(n)}


def modules() -> list[_Module]:
    return [_Module(p) for p in sorted(ROOT.rglob("*.py"))]


def violations() -> list[str]:
    mods = modules()
    defined: dict[str, set[str]] = defaultdict(set)  # private name -> parts that define it
    for m in mods:
        for n in _defined_privates(m):
            defined[n].add(m.part)
    found = []
    for m in mods:
        where = str(m.path.relative_to(ROOT.parent.parent))
        bound: dict[str, str] = {}  # local name -> the trnscope name an import bound to it
        foreign: set[str] = set()  # names bound to another package's modules (torch._C is torch's business)
        for node in ast.walk(m.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != PKG:
                        foreign.add(a.asname or a.name.split(".")[0])
                    else:
                        bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else PKG
                        for bad in owner_violations(a.name, m.part):
                            found.append(f"{where}:{node.lineno}: imports {bad}")
            elif isinstance(node, ast.ImportFrom):
                base = m.resolve(node)
                if base.split(".")[0] != PKG:
                    foreign.update(a.asname or a.name for a in node.names)
                    continue
                for bad in owner_violations(base, m.part):
                    found.append(f"{where}:{node.lineno}: imports {bad}")
                for a in node.names:
                    full = f"{base}.{a.name}"
                    bound[a.asname or a.name] = full
                    if not owner_violations(base, m.part):
                        for bad in owner_violations(full, m.part):
                            found.append(f"{where}:{node.lineno}: imports {bad}")
        for node in ast.walk(m.tree):  # aten = torch.ops.aten: a name for another package's object
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                chain = _chain(node.value)
                if chain is not None and chain[0] in foreign:
                    foreign.add(node.targets[0].id)
        checked: set[int] = set()
        for node in ast.walk(m.tree):
            target = None
            if isinstance(node, ast.Attribute):
                target = node
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                target = ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Load())
                ast.copy_location(target, node)
            if target is None or id(node) in checked:
                continue
            # only the outermost attribute of a chain: mark the inner ones as seen
            inner = target.value
            while isinstance(inner, ast.Attribute):
                checked.add(id(inner))
                inner = inner.value
            chain = _chain(target)
            if chain is not None and chain[0] in bound:
                dotted = ".".join([bound[chain[0]], *chain[1]])
                for bad in owner_violations(dotted, m.part):
                    found.append(f"{where}:{node.lineno}: uses {bad}")
                continue
            if chain is not None and chain[0] in foreign:
                continue
            # through any other object: the private names along the chain, by who defines them
            node_ = target
            while isinstance(node_, ast.Attribute):
                name = node_.attr
                base = node_.value
                if _private(name) and not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                    owners = defined.get(name, set())
                    if owners and m.part not in owners:
                        found.append(f"{where}:{node.lineno}: uses .{name} (private to {', '.join(sorted(owners))})")
                node_ = base
    return sorted(set(found))


def test_no_part_reads_another_parts_private_names():
    found = violations()
    assert not found, (f"{len(found)} use(s) of another part's private names (make the name public where it is "
                       f"a seam, or move the code to the part that owns it):\n" + "\n".join(found))


def test_the_check_sees_each_kind_of_access(tmp_path):
    """The checker itself: each way of reaching a private name is reported, and only across parts."""
    global ROOT
    pkg = tmp_path / "src" / PKG
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_util.py").write_text("def helper(): pass\n")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "_impl.py").write_text("X = 1\n")
    (pkg / "a" / "mod.py").write_text(
        "class Clock:\n    def __init__(self):\n        self._depth = 0\n\n_table = {}\n"
        "from . import _impl\nfrom ._impl import X\n")
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "user.py").write_text(
        "from ..a import mod, _impl\n"          # line 1: imports trnscope.a._impl
        "from ..a.mod import _table\n"          # line 2: imports trnscope.a.mod._table
        "from .. import _util\n"                # line 3: imports trnscope._util
        "import trnscope.a.mod\n"
        "mod._table.clear()\n"                  # line 5: uses trnscope.a.mod._table
        "trnscope.a.mod._table\n"               # line 6
        "getattr(mod, '_table')\n"              # line 7
        "def f(clock):\n    return clock._depth\n"   # line 9: by name
        "def g(t):\n    return t._untyped_storage, mod.__name__, mod.Clock\n"  # torch's and dunders: fine
        # a chain rooted in another package (or a name for one of its objects): not trnscope's name
        "import torch\ntorch._depth\naten = torch.ops.aten\naten._depth\n")
    saved = ROOT
    ROOT = pkg
    try:
        found = violations()
    finally:
        ROOT = saved
    lines = sorted(int(f.split(":")[1]) for f in found if "b/user.py" in f)
    assert lines == [1, 2, 3, 5, 6, 7, 9], found
    assert not [f for f in found if "a/mod.py" in f]
