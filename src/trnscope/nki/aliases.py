"""``import nki`` / ``nki.language`` / ``nki.isa`` (NKI 0.6/0.7) and ``neuronxcc.nki`` (NKI 0.1) naming trnscope's.

Installed by ``trnscope run`` (next to the ``torch_neuronx`` alias) and by
:func:`trnscope.nki.install_aliases`; a kernel file then runs unchanged. Modules are registered in
``sys.modules``, so ``import nki.isa as nisa`` and ``from nki import language`` resolve the usual way.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def _module(name: str, doc: str, **attrs) -> Any:  # a module whose names are set at run time
    m = types.ModuleType(name, doc)
    m.__dict__.update(attrs)
    return m


def install(force: bool = True) -> None:
    """Register the aliases; ``force=False`` leaves a real ``nki`` / ``neuronxcc`` package in place."""
    from . import isa, language
    import trnscope.nki as nki

    def put(name, module):
        if force or name not in sys.modules:
            sys.modules[name] = module

    typing_mod = _module("nki.typing", "NKI type hints (trnscope: annotations only)", tensor=_TensorHint())
    collectives = _module("nki.collectives", "nki.collectives: not emulated (CC-cores are not modelled)",
                          __getattr__=_collective)
    compiler = _module("nki.compiler", "nki.compiler (trnscope: configuration objects accepted and ignored)",
                       CompileConfig=_Config, SpecializationConfig=_Config)
    nki_any: Any = nki
    nki_any.typing, nki_any.collectives, nki_any.compiler = typing_mod, collectives, compiler
    put("nki", nki)
    put("nki.language", language)
    put("nki.isa", isa)
    put("nki.typing", typing_mod)
    put("nki.collectives", collectives)
    put("nki.compiler", compiler)
    from . import legacy

    neuronxcc = _module("neuronxcc", "trnscope standing in for the Neuron compiler package (neuronxcc.nki only)")
    neuronxcc.__path__ = []
    neuronxcc.nki = legacy.nki_module
    put("neuronxcc", neuronxcc)
    put("neuronxcc.nki", legacy.nki_module)
    put("neuronxcc.nki.language", legacy.language)
    put("neuronxcc.nki.isa", legacy.isa)


class _TensorHint:
    """``nt.tensor[128, 512]``: a type annotation, nothing to check at run time."""

    def __getitem__(self, item):
        return self


class _Config:
    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs


def _collective(name: str):
    from .errors import NkiUnsupportedError

    def fn(*args, **kwargs):
        raise NkiUnsupportedError(f"nki.collectives.{name} is not emulated: trnscope does not model the CC-cores or "
                                  f"collective communication (docs/nki.md)")
    if name.startswith("__"):
        raise AttributeError(name)
    return fn
