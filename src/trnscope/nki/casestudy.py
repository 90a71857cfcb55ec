"""The NKI variant of the RMSNorm case study (``trnscope demo``): examples/nki/rmsnorm.py's kernel as a
PyTorch custom op, next to the naive, ``torch.rms_norm`` and ``torch.compile`` variants."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "nki"


def load_example(name: str):
    """Import examples/nki/<name>.py (with ``import nki`` resolving to trnscope.nki); None when the
    examples are not next to the package (an installed wheel)."""
    path = EXAMPLES / f"{name}.py"
    if not path.is_file():
        return None
    from . import install_aliases

    install_aliases()
    mod_name = f"trnscope_nki_example_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the NKI example {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


_OP = None


def rmsnorm_variants() -> dict:
    """{"nki.rmsnorm": fn(x, w)} running the example kernel through ``nki_op``, or {} without examples."""
    global _OP
    mod = load_example("rmsnorm")
    if mod is None:
        return {}
    if _OP is None:
        from .torch_ops import nki_op

        def nki_rmsnorm(x, w):
            return mod.rmsnorm(x, w, 1e-6)
        # the schema is given: this module's annotations are strings (from __future__ import annotations)
        _OP = nki_op("trnscope_casestudy::nki_rmsnorm", nki_rmsnorm, mutates_args=(),
                     schema="(Tensor x, Tensor w) -> Tensor")
    return {"nki.rmsnorm": _OP}
