"""Matmul precision as neuronx-cc sets it: ``--auto-cast`` and ``--auto-cast-type``.

By default the Neuron compiler casts FP32 matrix multiplications to BF16 and leaves every other op
in the model's dtype (neuronx-cc mixed-precision app note; CLI reference: ``--auto-cast matmult``,
``--auto-cast-type bf16``). TensorE runs FP32 at a quarter of its BF16 rate (S1), so an FP32
``torch.mm`` compiled this way costs what a BF16 one does, plus the cast. ``--auto-cast none``
keeps FP32 matmuls in FP32.

The setting is read like the real compiler's options: from ``NEURON_CC_FLAGS`` (how TorchNeuron
users pass compiler flags), or set with :func:`set_auto_cast`. It is part of every lowering's cache
key, and a Program whose matmuls were cast records it in ``program.meta["auto_cast"]`` (the NTFF
header and the summary show it).

Only ``none`` and ``matmult`` are modelled (``all`` would cast every FP32 op; trnscope's kernels do
not) and casts to BF16 or FP16 (``tf32`` and ``fp8_e4m3`` have no TensorE rate in the spec).
"""

from __future__ import annotations

import os
import shlex
from contextlib import contextmanager
from dataclasses import dataclass

from ..isa import DType, Program

ENV_VAR = "NEURON_CC_FLAGS"
MODES = ("none", "matmult")
TYPES = {"bf16": DType.bfloat16, "fp16": DType.float16}


class AutoCastError(ValueError):
    pass


@dataclass(frozen=True)
class AutoCast:
    mode: str = "matmult"
    type: str = "bf16"

    def __post_init__(self):
        if self.mode not in MODES:
            raise AutoCastError(f"--auto-cast {self.mode!r} is not modelled: use one of {', '.join(MODES)} "
                                f"(in {ENV_VAR} or trnscope.compiler.precision.set_auto_cast)")
        if self.type not in TYPES:
            raise AutoCastError(f"--auto-cast-type {self.type!r} is not modelled: use one of {', '.join(TYPES)}")

    def describe(self) -> str:
        return "none" if self.mode == "none" else f"{self.mode}/{self.type}"


_override: AutoCast | None = None


def parse_flags(flags: str) -> AutoCast:
    """The auto-cast options in a neuronx-cc flag string (``--auto-cast=none``, ``--auto-cast none``)."""
    values = {"--auto-cast": "matmult", "--auto-cast-type": "bf16"}
    words = shlex.split(flags or "")
    for i, w in enumerate(words):
        name, eq, val = w.partition("=")
        if name in values:
            if not eq:
                if i + 1 >= len(words):
                    raise AutoCastError(f"{ENV_VAR}: {name} needs a value")
                val = words[i + 1]
            values[name] = val.strip().lower()
    return AutoCast(values["--auto-cast"], values["--auto-cast-type"])


def current() -> AutoCast:
    """The setting in force: :func:`set_auto_cast`'s, else ``$NEURON_CC_FLAGS``'s, else neuronx-cc's default."""
    return _override if _override is not None else parse_flags(os.environ.get(ENV_VAR, ""))


def set_auto_cast(mode: str | None = "matmult", type: str = "bf16") -> AutoCast:
    """Override the setting (``mode=None`` returns to ``$NEURON_CC_FLAGS``). Returns the setting in force."""
    global _override
    _override = None if mode is None else AutoCast(mode, type)
    return current()


@contextmanager
def auto_cast(mode: str, type: str = "bf16"):
    """The setting ``mode``/``type`` inside the block, the previous one after it."""
    global _override
    before = _override
    _override = AutoCast(mode, type)
    try:
        yield _override
    finally:
        _override = before


def key() -> str:
    """What a lowering's cache key holds of the setting."""
    return current().describe()


def matmul_dtype(*operands: DType) -> DType | None:
    """The dtype TensorE reads FP32 matmul operands in under the setting; None when nothing is cast."""
    ac = current()
    if ac.mode == "none" or not any(d == DType.float32 for d in operands):
        return None
    return TYPES[ac.type]


def note_cast(program: Program, dtype: DType) -> None:
    """Record in the Program that its FP32 matmuls ran in ``dtype``."""
    program.meta["auto_cast"] = current().describe()
    program.meta["auto_cast_matmuls"] = int(program.meta.get("auto_cast_matmuls", 0)) + 1
