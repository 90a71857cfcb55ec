"""A one-time warning naming an op that keeps compiling for new keys.

Each distinct key of an op (its tensors' shapes, strides and dtypes, its attributes) is a NEFF
compiled; on Trainium a neuronx-cc run. A loop whose keys never repeat - an attribute that takes a
new value every call, a shape that grows every step - compiles forever, the costliest way to run on
the device and an easy one to miss. The runtime warns once per op when

- one op, on the same tensors, has compiled for ``TRNSCOPE_RECOMPILE_WARN_AFTER`` (default 8)
  different attribute values: a value is being compiled into the kernel (scalars a kernel takes as
  runtime operands never are, see ``compiler.scalars``); or
- one op has compiled 8 times that many keys in all: its shapes keep changing (a model's
  parameters give each op a handful of shapes, not dozens).

The warning says which part of the key changed between the op's last two compiles.
"""

from __future__ import annotations

import os
import threading
import warnings

from .. import caches
from ..frames import user_frame

DEFAULT_LIMIT = 8
SHAPE_FACTOR = 8


class RecompileWarning(UserWarning):
    """An op compiled many NEFFs: its calls keep presenting new keys."""


_lock = threading.Lock()
_ops: dict[str, dict] = {}   # op -> {"total": n, "last": OpCall, "values": {tensor key: set of attr keys}}
_warned: set[str] = set()


def limit() -> int:
    try:
        return max(2, int(os.environ.get("TRNSCOPE_RECOMPILE_WARN_AFTER", DEFAULT_LIMIT)))
    except ValueError:
        return DEFAULT_LIMIT


def compiled(call) -> None:
    """Note that ``call`` (an OpCall, runtime scalars as placeholders) was just compiled."""
    n = limit()
    with _lock:
        seen = _ops.setdefault(call.name, {"total": 0, "last": None, "values": {}})
        last, seen["last"] = seen["last"], call
        seen["total"] += 1
        tensors = (tuple(m.key() if m is not None else None for m in call.inputs),
                   tuple(m.key() for m in call.outputs))
        values = seen["values"].setdefault(tensors, set())
        values.add(call.attrs)
        if call.name in _warned or (len(values) < n and seen["total"] < n * SHAPE_FACTOR):
            return
        _warned.add(call.name)
        total = seen["total"]
    what = _difference(last, call) if last is not None else "their keys"
    filename, lineno, module = user_frame()
    warnings.warn_explicit(
        f"trnscope: {call.name} has compiled {total} NEFFs in this process, for calls that differ in {what}; "
        f"every new key is a compilation (on Trainium a neuronx-cc run). Keep {what} the same across calls "
        f"(pad or bucket shapes; pass a value that changes every call as a tensor), or expect a compile "
        f"for each new one.", RecompileWarning, filename, lineno, module=module)


def _difference(a, b) -> str:
    """What differs between two calls of one op, in words."""
    parts = []
    for label, x, y in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        for i, (m, n) in enumerate(zip(x, y)):
            if m is None or n is None or m == n:
                continue
            if m.shape != n.shape:
                parts.append(f"the shape of {label} {i}")
            elif m.dtype != n.dtype:
                parts.append(f"the dtype of {label} {i}")
            else:
                parts.append(f"the strides of {label} {i}")
    da, db = dict(a.attrs), dict(b.attrs)
    parts.extend(f"argument {k!r}" for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k))
    return ", ".join(dict.fromkeys(parts)) or "their tensors' layout"


def reset() -> None:
    with _lock:
        _ops.clear()
        _warned.clear()


# what it counts are the lowering cache's misses: emptied with that cache, it starts counting anew
caches.register("runtime.compile_watch: compiles seen", reset)
