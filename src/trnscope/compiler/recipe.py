"""Recipes: what re-lowering a NEFF for another target needs, as JSON.

An eager NEFF is ``lower(OpCall, spec)``: its recipe is the OpCall (op name, the inputs' and
outputs' shapes, strides, dtypes and offsets, and its attributes — runtime scalars as their
placeholders, so the recipe never holds a value the NEFF does not depend on). The runtime notes the
recipe of every NEFF it lowers (:func:`note`, bounded); the profiler writes the recipes of a
window's NEFFs beside them (``recipes.json``), and ``trnscope retime`` lowers each again for another
target (:func:`decode`, then ``lowering.lower``). A NEFF without a recipe (a compiled graph's, one
whose attributes have no JSON form) can only be re-simulated as recorded on the new target.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from ..isa.dtypes import DType
from .lowering import OpCall
from .meta import TensorMeta
from .scalars import RuntimeScalar

VERSION = 1
KEPT = 8192  # recipes remembered per process (one per distinct NEFF)
_recipes: OrderedDict[int, OpCall] = OrderedDict()


class NoRecipe(ValueError):
    """An OpCall (or recipe document) that has no faithful JSON form."""


def note(neff_id: int, call: OpCall) -> None:
    """Remember the call NEFF ``neff_id`` was lowered from (the last of the process's KEPT)."""
    if neff_id in _recipes:
        _recipes.move_to_end(neff_id)
        return
    _recipes[neff_id] = call
    if len(_recipes) > KEPT:
        _recipes.popitem(last=False)


def recipe_of(neff_id: int) -> dict | None:
    """The JSON recipe of a NEFF this process lowered, or None."""
    call = _recipes.get(neff_id)
    if call is None:
        return None
    try:
        return encode(call)
    except NoRecipe:
        return None


def encode(call: OpCall) -> dict:
    return {"version": VERSION, "kind": "op", "name": call.name,
            "inputs": [_meta(m) for m in call.inputs], "outputs": [_meta(m) for m in call.outputs],
            "attrs": [[k, _value(v)] for k, v in call.attrs]}


def decode(doc: dict) -> OpCall:
    if not isinstance(doc, dict) or doc.get("kind") != "op" or doc.get("version") != VERSION:
        raise NoRecipe(f"not a version-{VERSION} op recipe")
    try:
        return OpCall(str(doc["name"]), tuple(_unmeta(m) for m in doc["inputs"]),
                      tuple(_unmeta(m) for m in doc["outputs"]),
                      tuple((str(k), _unvalue(v)) for k, v in doc["attrs"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise NoRecipe(f"damaged recipe ({exc})") from None


def _meta(m: TensorMeta | None):
    if m is None:
        return None
    return {"shape": list(m.shape), "stride": list(m.stride), "dtype": m.dtype.value, "offset": m.offset}


def _unmeta(d):
    if d is None:
        return None
    return TensorMeta(tuple(int(s) for s in d["shape"]), tuple(int(s) for s in d["stride"]), DType(d["dtype"]),
                      int(d.get("offset", 0)))


def _value(v: Any):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"$float": repr(v)}
    if isinstance(v, DType):
        return {"$dtype": v.value}
    if isinstance(v, RuntimeScalar):
        return {"$scalar": [v.name, v.kind, _value(v.special)]}
    if isinstance(v, TensorMeta):
        return {"$meta": _meta(v)}
    if isinstance(v, (tuple, list)):
        return {"$tuple": [_value(x) for x in v]}
    raise NoRecipe(f"attribute value of type {type(v).__name__} has no JSON form")


def _unvalue(v):
    if not isinstance(v, dict):
        return v
    if "$float" in v:
        return float(v["$float"])
    if "$dtype" in v:
        return DType(v["$dtype"])
    if "$scalar" in v:
        name, kind, special = v["$scalar"]
        return RuntimeScalar(name, kind, _unvalue(special))
    if "$meta" in v:
        return _unmeta(v["$meta"])
    if "$tuple" in v:
        return tuple(_unvalue(x) for x in v["$tuple"])
    raise NoRecipe(f"unknown value {v}")
