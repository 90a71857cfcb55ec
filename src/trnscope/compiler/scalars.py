"""Scalar arguments as runtime operands: one NEFF per op whatever its scalars' values.

A scalar that changes from call to call (an optimizer's learning rate and bias corrections, a step
count, ``x * 0.5`` vs ``x * 0.25``) must not be compiled into the kernel, or every new value is a new
NEFF: on Trainium a recompilation, here a new Program, simulation and NEFF. So a lowering declares
the scalar arguments it takes as *runtime scalars* (``lowering(..., scalars=...)``), and before it
runs their values are replaced by :class:`RuntimeScalar` placeholders: the Program it emits cannot
depend on the value, and the lowering cache's key does not hold it.

Each runtime scalar the kernel reads becomes an HBM tensor of kind ``"scalar"`` (shape ``(1,)``,
named after the argument) that the runtime fills with the call's value when it submits the NEFF;
the kernel loads it once, where it first uses it, into a ``[128, 1]`` SBUF tile (one broadcast DMA,
:func:`_load_broadcast`) and uses that tile as a per-partition operand (``TensorScalar``'s scalars, ``Activation``'s scale and bias, a ``Select``
branch read with a zero stride). Derived values (``1 - weight``, ``other * alpha``) are computed on
that tile by one instruction. The interpreter reads the value like any input
(:func:`scalar_inputs`), so one Program computes the right numbers for every value.

A lowering may specialise on a few values that change its instruction stream (``alpha == 1`` skips
a multiply, ``pow`` by 2 is a square): those are the ``special`` values of its declaration. A call
with a special value gets its own Program (the placeholder carries the value); every other value
shares one. The number of NEFFs per op is then bounded by the declaration, never by the values seen.
Graphs compiled whole (``compiler.graph``) keep their scalars as immediates: their values are
constants of the traced graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from ..isa import AP, Alu, DType, Memset, TensorScalar, TensorTensor, hbm

if TYPE_CHECKING:
    from .builder import KernelBuilder
    from .lowering import LoweringContext, OpCall

F32 = DType.float32
SCALAR_KIND = "scalar"       # the HBM tensor kind of a runtime scalar (isa.program.TENSOR_KINDS)
QUEUE = "qRuntimeScalars"    # the DMA queue their loads go on: beside the input queues, so they overlap

# op name -> {argument name: values the lowering specialises on}
Declaration = dict[str, tuple]


def declaration(scalars) -> Declaration:
    """``scalars=`` of :func:`lowering`: names, or a mapping of names to their special values."""
    if isinstance(scalars, dict):
        return {str(k): tuple(v) for k, v in scalars.items()}
    return {str(k): () for k in scalars}


def kind_of(value) -> str | None:
    """"float" or "int" for a value that can be a runtime scalar; None for anything else (bools,
    None, strings, sequences and complex numbers are part of the kernel)."""
    t = type(value)
    if t is float:
        return "float"
    if t is int:
        return "int"
    return None


def special_of(value, specials: tuple):
    """``value`` when the lowering specialises on it, else None."""
    for s in specials:
        if type(s) in (int, float) and value == s and not (value == 0 and np.signbit(value) != np.signbit(s)):
            return value
    return None


_REFUSED = "the value of {name!r} is a runtime scalar (it reaches the device as data): read it with " \
           "ctx.scalar({name!r}) and use .operand()/.broadcast()/.known instead of the number"


@dataclass(frozen=True)
class RuntimeScalar:
    """What a lowering sees in place of a runtime scalar's value: its name, the kind of its value
    (``"float"``/``"int"``, which PyTorch's type promotion depends on) and, when the value is one
    the lowering specialises on, that value (``special``). Using it as a number raises."""

    name: str
    kind: str
    special: float | int | None = None
    # -0.0 == 0.0 (and hashes alike): the sign of a special zero is part of the Program's cache key
    negative: bool = False

    def _refuse(self, *_):
        raise TypeError(_REFUSED.format(name=self.name))

    __float__ = __int__ = __index__ = __bool__ = __neg__ = __pos__ = __abs__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __pow__ = __rpow__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse


def abstract(call: "OpCall", decl: Declaration) -> "OpCall":
    """``call`` with the values of its declared runtime scalars replaced by placeholders."""
    if not decl:
        return call
    attrs = []
    changed = False
    for k, v in call.attrs:
        specials = decl.get(k)
        if specials is not None and (kind := kind_of(v)) is not None:
            sp = special_of(v, specials)
            v = RuntimeScalar(k, kind, sp, negative=sp is not None and bool(np.signbit(sp)))
            changed = True
        attrs.append((k, v))
    if not changed:
        return call
    from .lowering import OpCall

    return OpCall(call.name, call.inputs, call.outputs, tuple(attrs))


def runtime_values(call: "OpCall", decl: Declaration) -> dict[str, float | int]:
    """The values of ``call``'s runtime scalars: what the runtime writes into their tensors."""
    return {k: v for k, v in call.attrs if k in decl and kind_of(v) is not None}


def scalar_inputs(program, values: dict) -> dict[str, np.ndarray]:
    """The arrays that bind ``program``'s runtime-scalar tensors to ``values`` (argument name ->
    number), by tensor name, for the interpreter. Raises when a value is missing."""
    out = {}
    for t in program.tensors:
        if t.kind != SCALAR_KIND:
            continue
        arg = t.name.split(".")[0]
        if arg not in values:
            raise ValueError(f"program {program.name!r} reads runtime scalar {arg!r}: pass its value")
        out[t.name] = np.asarray([values[arg]]).astype(t.dtype.np)
    return out


def operand_dtype(kind: str, like: DType) -> DType:
    """The dtype a runtime scalar is loaded in to be used with tiles of ``like``: FP32 next to floats
    (the engines compute in FP32), an integer next to integers when the value is an integer (so
    integer arithmetic stays exact, as PyTorch keeps it)."""
    if like.is_float or kind == "float":
        return F32
    return like if like.itemsize > 4 else DType.int32


class ScalarArg:
    """A scalar argument as a kernel uses it. ``known`` is its value when the kernel may depend on it
    (a number the call carries - a compiled graph's constant, a default - or a runtime scalar's
    special value), else None; :meth:`operand` gives what an instruction's scalar field takes (the
    number, or the [rows, 1] tile the value is loaded into); :meth:`broadcast` a [rows, free] read of
    it. Tiles are made on first use, once per kernel and dtype, and freed by :meth:`release`."""

    def __init__(self, kb: "KernelBuilder", value, name: str = "", parents: tuple = (), make=None) -> None:
        self.kb = kb
        self.value = value          # a number, a RuntimeScalar, or None for a derived runtime value
        self.name = name
        self.kind = value.kind if isinstance(value, RuntimeScalar) else (
            "float" if any(p.kind == "float" for p in parents) else (kind_of(value) or "float"))
        self._parents = parents
        self._make = make           # (kb, dtype, parent tiles, out tile) -> None, for derived runtime values
        self._tiles: dict[DType, AP] = {}
        self._filled: dict[DType, AP] = {}
        self._derived: list[ScalarArg] = []

    @property
    def known(self):
        v = self.value
        if isinstance(v, RuntimeScalar):
            return v.special
        return v

    @property
    def runtime(self) -> bool:
        return self.known is None

    # --- what instructions take ---------------------------------------------------------------------
    def operand(self, like: AP):
        """An instruction's scalar operand next to tile ``like``: the number, or the value's tile rows
        ``like`` covers ([like.partitions, 1], read once per partition)."""
        if not self.runtime:
            return float(self.known)
        return self._tile(operand_dtype(self.kind, like.dtype)).rows(like.start, like.partitions)

    def broadcast(self, like: AP, dtype: DType | None = None) -> AP:
        """The value as a [like.partitions, like.free_size] pattern (zero free stride) in ``dtype``
        (default ``like``'s): a Memset tile for a known value, the loaded tile otherwise."""
        dtype = dtype or like.dtype
        if self.runtime:
            tile = self._tile(dtype)
        else:
            filled = self._filled.get(dtype)
            if filled is None:
                filled = self._filled[dtype] = self.kb.tile(self.kb.spec.partitions, (1,), dtype)
                self.kb.emit(Memset(out=filled, value=float(self.known)))
            tile = filled
        return tile.rows(like.start, like.partitions).view(0, [(0, like.free_size)])

    # --- derived values -------------------------------------------------------------------------------
    def affine(self, scale: float = 1.0, bias: float = 0.0) -> "ScalarArg":
        """``scale * value + bias`` (``1 - w`` is ``affine(-1, 1)``)."""
        return self.apply(Alu.MULTIPLY, scale, Alu.ADD, bias,
                          known=lambda v: scale * v + bias if bias else scale * v)

    def apply(self, alu0: Alu, s0: float, alu1: Alu | None = None, s1: float | None = None, *, known) -> "ScalarArg":
        """``(value <alu0> s0) <alu1> s1``: for a runtime value one TensorScalar on its tile, for a
        known one ``known(value)`` (the same arithmetic in Python)."""
        if not self.runtime:
            return self._child(known(self.known))

        def make(kb, dtype, tiles, out):
            kb.emit(TensorScalar(inp=tiles[0], out=out, alu0=alu0, scalar0=float(s0), alu1=alu1,
                                 scalar1=None if s1 is None else float(s1)))
        return self._child(None, (self,), make)

    def derive(self, make, *, known) -> "ScalarArg":
        """A value computed from this one: for a runtime value ``make(kb, tile, out)`` emits the
        instructions on its [P, 1] tile (``out`` is the child's tile of the same dtype), for a known
        one ``known(value)``."""
        if not self.runtime:
            return self._child(known(self.known))
        return self._child(None, (self,), lambda kb, dtype, tiles, out: make(kb, tiles[0], out))

    def times(self, other: "ScalarArg") -> "ScalarArg":
        """``value * other.value``."""
        if not other.runtime:
            return self if other.known == 1 else self.affine(float(other.known))
        if not self.runtime:
            return other if self.known == 1 else other.affine(float(self.known))

        def make(kb, dtype, tiles, out):
            kb.emit(TensorTensor(alu=Alu.MULTIPLY, in0=tiles[0], in1=tiles[1], out=out))
        return self._child(None, (self, other), make)

    def _child(self, value, parents: tuple = (), make=None) -> "ScalarArg":
        child = ScalarArg(self.kb, value, self.name, parents, make)
        self._derived.append(child)
        return child

    # --- tiles ---------------------------------------------------------------------------------------------
    def _tile(self, dtype: DType) -> AP:
        tile = self._tiles.get(dtype)
        if tile is not None:
            return tile
        kb = self.kb
        tile = kb.tile(kb.spec.partitions, (1,), dtype)
        if self._make is not None:
            self._make(kb, dtype, [p._tile(dtype) for p in self._parents], tile)
        else:
            p = kb.p
            name = self.name if not any(t.name == self.name for t in p.tensors) else f"{self.name}.{dtype.value}"
            idx = p.tensor(name, (1,), dtype, SCALAR_KIND)
            _load_broadcast(kb, hbm(idx, 1, 0, [(1, 1)], dtype), tile)
        self._tiles[dtype] = tile
        return tile

    def release(self) -> None:
        for child in self._derived:
            child.release()
        self.kb.release(*self._tiles.values(), *self._filled.values())
        self._tiles.clear()
        self._filled.clear()


def _load_broadcast(kb: "KernelBuilder", src: AP, tile: AP) -> None:
    """One HBM element into every partition of ``tile`` [128, 1]: one DMA with partition stride 0
    (128 descriptors of one element, docs/cost-model.md). Exact for every value: a broadcast through
    TensorE (``ones.T @ value``, one descriptor) would be cheaper in the model but turns -0.0 into
    +0.0 (the product is added to a zero accumulator), which copysign and division can see."""
    kb.dma(kb.queue(QUEUE, "input"), src.view(0, [(1, 1)], partitions=tile.partitions), tile)


@overload
def scalar(ctx: "LoweringContext", name: str, default: None = None) -> ScalarArg | None: ...


@overload
def scalar(ctx: "LoweringContext", name: str, default: float | int | bool) -> ScalarArg: ...


def scalar(ctx: "LoweringContext", name: str, default: float | int | bool | None = None) -> ScalarArg | None:
    """The call's scalar argument ``name`` (``default`` when absent) as a :class:`ScalarArg`, one per
    argument and kernel; None when it is absent and there is no default (an optional Scalar left
    out: that is part of the kernel)."""
    cache = ctx.scalars
    hit = cache.get(name)
    if hit is not None:
        return hit
    value = ctx.call.attr(name)
    if value is None:
        if default is None:
            return None
        value = default
    arg = cache[name] = ScalarArg(ctx.kb, value, name)
    return arg
