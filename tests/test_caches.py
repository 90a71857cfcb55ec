"""One reset for every in-memory cache: ``trnscope.reset_caches()`` (trnscope.caches)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "trnscope"

# module-level values that look like caches by name but are not (and why)
NOT_CACHES = {
    ("trnscope/trace/parquet.py", "_numpy_types"): "a constant table built once (@cache defers pyarrow's import)",
}


def _cache_names(tree: ast.Module) -> list[str]:
    """Module-level caches by their look: a name with "cache" in it bound to a dict-like container, or
    a function memoised with functools' lru_cache/cache."""
    names = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            container = isinstance(value, (ast.Dict, ast.Set, ast.List)) or (
                isinstance(value, ast.Call) and (getattr(value.func, "id", None) or getattr(value.func, "attr", ""))
                in ("dict", "OrderedDict", "WeakKeyDictionary", "WeakValueDictionary", "set", "defaultdict"))
            for t in targets:
                if isinstance(t, ast.Name) and container and "cache" in t.id.lower():
                    names.append(t.id)
        elif isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                if (getattr(d, "attr", None) or getattr(d, "id", None)) in ("lru_cache", "cache"):
                    names.append(node.name)
    return names


def _registered_names(tree: ast.Module) -> set[str]:
    """Every name that appears in a ``caches.register(...)`` call's arguments, or in the body of a
    function such a call registers."""
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    seen = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register" \
                and getattr(node.func.value, "id", None) == "caches":
            for arg in node.args[1:]:
                for n in ast.walk(arg):
                    if isinstance(n, ast.Name):
                        seen.add(n.id)
                        if n.id in funcs:
                            seen.update(m.id for m in ast.walk(funcs[n.id]) if isinstance(m, ast.Name))
    return seen


def test_every_module_level_cache_is_registered():
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        tree = ast.parse(path.read_text())
        registered = _registered_names(tree)
        for name in _cache_names(tree):
            if name not in registered and (rel, name) not in NOT_CACHES:
                missing.append(f"{rel}: {name}")
    assert not missing, ("caches that trnscope.reset_caches() does not empty (register each with "
                         "trnscope.caches.register):\n" + "\n".join(missing))


def test_reset_empties_the_caches_and_results_stay_the_same(fresh_caches):
    import torch

    from trnscope import hw, reset_caches, runtime
    from trnscope.caches import registered
    from trnscope.compiler import OpCall
    from trnscope.compiler.meta import TensorMeta
    from trnscope.runtime import neff_cache
    from trnscope.sim import simulate

    x = torch.arange(64.0).reshape(8, 8).to("neuron")
    first = (x * x + 1).cpu()
    assert runtime.core(0).plans  # the eager path planned its kernels
    meta = TensorMeta.contiguous((8, 8), "float32")
    call = OpCall.make("aten::exp", (meta,), (meta,))
    spec = hw.get_spec()
    lowered = neff_cache.lower(call, spec)
    assert neff_cache.lower(call, spec).source == "memory"
    timeline = simulate(lowered.program, spec)
    assert simulate(lowered.program, spec) is timeline  # the simulator's cache

    names = reset_caches()
    assert names == registered() and "compiler.lowering: Programs" in names and "sim: timelines" in names
    assert not runtime.core(0).plans
    assert neff_cache.lower(call, spec).source != "memory"  # from disk, or compiled again
    assert simulate(lowered.program, spec) is not timeline
    assert simulate(lowered.program, spec).total_ns == timeline.total_ns
    assert torch.equal((x * x + 1).cpu(), first)


def test_reset_caches_needs_neither_torch_nor_the_device():
    code = "import sys, trnscope\ntrnscope.reset_caches()\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(SRC)), check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "False"
