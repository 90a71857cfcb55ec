"""Lowering of one framework op call to a Program: the registry every kernel registers into.

A lowering receives an :class:`OpCall` (the op's name, the metadata of its tensor inputs and
outputs, its non-tensor attributes) and emits instructions through a :class:`KernelBuilder` whose
HBM tensors are already bound: ``ctx.inputs[i]`` / ``ctx.outputs[i]`` are HBM tensor indices (None
for non-tensor arguments). Programs are cached by the call's key, so an op seen before with the
same shapes, strides and dtypes costs one dictionary lookup. A lowering declares the scalar
arguments it takes as runtime operands (``scalars=``, see :mod:`.scalars`): their values are not
part of the key nor of the Program, so a new value reuses the NEFF.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, SupportsIndex, TypeVar, overload

import orjson

from .. import caches
from ..hw import HardwareSpec, get_spec
from ..isa import Program
from ..isa.columns import gc_paused
from . import precision as _precision
from . import scalars as _scalars
from .builder import KernelBuilder
from .lnc import MakeBuilder, spread
from .meta import TensorMeta


class MissingInput(LookupError):
    """A kernel read an input position that holds no tensor as a required one: a kernel bug (its
    op's schema has a scalar or an absent optional tensor there), named with the op by :func:`run_lowering`."""


_T = TypeVar("_T")


class _Slots(tuple, Generic[_T]):
    """An op call's positional inputs, one slot per argument: the tensor's entry where the op takes
    a tensor, None where it takes something else (a scalar, a list, an absent optional tensor).

    Indexing returns a required tensor's entry (never None: reading an empty slot raises
    :class:`MissingInput`), so ``None`` is not every kernel's problem; :meth:`optional` is the read
    of an optional tensor (None when absent or past the end). Iterating and slicing give the slots
    as they are."""

    __slots__ = ()

    if TYPE_CHECKING:
        @overload
        def __getitem__(self, i: SupportsIndex) -> _T: ...

        @overload
        def __getitem__(self, i: slice) -> tuple[_T | None, ...]: ...

        def __getitem__(self, i): ...

        def __iter__(self) -> Iterator[_T | None]: ...
    else:
        def __getitem__(self, i):
            v = tuple.__getitem__(self, i)
            if v is None:
                raise MissingInput(f"input {i} holds no tensor (a scalar argument or an absent optional tensor); "
                                   f"a kernel reads such a slot with .optional({i})")
            return v

    def optional(self, i: int) -> _T | None:
        return tuple.__getitem__(self, i) if -len(self) <= i < len(self) else None


class TensorInputs(_Slots[TensorMeta]):
    """The :class:`TensorMeta` of each tensor input of an op call (see :class:`_Slots`)."""

    __slots__ = ()


class HbmInputs(_Slots[int]):
    """The HBM tensor index each tensor input of a lowering is bound to (see :class:`_Slots`)."""

    __slots__ = ()


@dataclass(frozen=True, init=False)
class OpCall:
    name: str
    inputs: TensorInputs
    outputs: tuple[TensorMeta, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def __init__(self, name: str, inputs: Iterable[TensorMeta | None], outputs: tuple[TensorMeta, ...],
                 attrs: tuple[tuple[str, Any], ...] = ()) -> None:
        _set = object.__setattr__  # frozen
        _set(self, "name", name)
        _set(self, "inputs", inputs if type(inputs) is TensorInputs else TensorInputs(inputs))
        _set(self, "outputs", outputs)
        _set(self, "attrs", attrs)

    @staticmethod
    def make(name: str, inputs, outputs, attrs: dict | None = None) -> "OpCall":
        """An OpCall with hashable attributes (lists become tuples)."""
        return OpCall(name, tuple(inputs), tuple(outputs),
                      tuple(sorted((k, _freeze(v)) for k, v in (attrs or {}).items())))

    def attr(self, name: str, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    def key(self) -> tuple:
        return (self.name, tuple(m.key() if m is not None else None for m in self.inputs),
                tuple(m.key() for m in self.outputs), self.attrs)


@dataclass
class LoweringContext:
    call: OpCall
    kb: KernelBuilder
    inputs: HbmInputs
    outputs: list[int]
    label: str = ""
    extra: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)  # argument name -> scalars.ScalarArg made by scalar()

    @property
    def spec(self) -> HardwareSpec:
        return self.kb.spec

    @overload
    def scalar(self, name: str, default: None = None) -> "_scalars.ScalarArg | None": ...

    @overload
    def scalar(self, name: str, default: float | int | bool) -> "_scalars.ScalarArg": ...

    def scalar(self, name: str, default: float | int | bool | None = None) -> "_scalars.ScalarArg | None":
        """Scalar argument ``name`` as an operand (a runtime scalar or a number; None when absent
        without a default): see :mod:`.scalars`."""
        return _scalars.scalar(self, name, default)

    def required_scalar(self, name: str) -> "_scalars.ScalarArg":
        """Scalar argument ``name``, which the op's schema requires, as an operand."""
        arg = _scalars.scalar(self, name)
        if arg is None:
            raise MissingInput(f"scalar argument {name!r} is missing")
        return arg

    def release_scalars(self) -> None:
        """Free the tiles the kernel's scalar operands were loaded into (the kernel is done)."""
        for arg in self.scalars.values():
            arg.release()

    @property
    def program(self) -> Program:
        return self.kb.p


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


Lowering = Callable[[LoweringContext], None]
_REGISTRY: dict[str, Lowering] = {}
_SCALARS: dict[str, _scalars.Declaration] = {}  # op -> its runtime scalars (argument -> special values)
_CACHE: "OrderedDict[tuple, Program]" = OrderedDict()
CACHE_SIZE = 8192


class NoLowering(LookupError):
    """The op has no device kernel (the device layer falls back to CPU)."""


def lowering(*names: str, scalars=()) -> Callable[[Lowering], Lowering]:
    """Register a lowering for ops ``names``. ``scalars``: the scalar arguments it takes as runtime
    operands (names, or a mapping of each name to the few values it specialises on), which it must
    read with ``ctx.scalar()``."""
    decl = _scalars.declaration(scalars)

    def register(fn: Lowering) -> Lowering:
        for n in names:
            _REGISTRY[n] = fn
            if decl:
                _SCALARS[n] = decl
            else:
                _SCALARS.pop(n, None)
        return fn
    return register


def runtime_scalars(name: str) -> _scalars.Declaration:
    """The runtime scalars of op ``name``'s lowering: argument name -> the values it specialises on."""
    _load_kernels()
    return _SCALARS.get(name, {})


def has_lowering(name: str) -> bool:
    _load_kernels()
    return name in _REGISTRY


def registered() -> list[str]:
    _load_kernels()
    return sorted(_REGISTRY)


def lower(call: OpCall, spec: HardwareSpec | None = None) -> Program:
    """The Program for ``call`` (cached). Raises :class:`NoLowering` if no kernel handles it."""
    return lower_timed(call, spec)[0]


def lower_timed(call: OpCall, spec: HardwareSpec | None = None) -> tuple[Program, int]:
    """(Program, ns spent compiling it): 0 when it came from the cache."""
    spec = spec or get_spec()
    call, key, prog = cached(call, spec)
    if prog is not None:
        return prog, 0
    return compile_call(call, spec, key)


def cached(call: OpCall, spec: HardwareSpec) -> tuple[OpCall, tuple, Program | None]:
    """(the call with its runtime scalars as placeholders, its cache key, the Program this process
    holds for it or None). The key holds the target spec's content, not only its name: a spec
    changed with ``replace()`` (a what-if study) lowers anew; and the compiler's matmul precision
    setting (:mod:`.precision`), which changes what an FP32 matmul lowers to."""
    _load_kernels()
    call = _scalars.abstract(call, _SCALARS.get(call.name, {}))
    key = (call.key(), spec_digest(spec), _precision.key())
    prog = _CACHE.get(key)
    if prog is not None:
        _CACHE.move_to_end(key)
    return call, key, prog


def compile_call(call: OpCall, spec: HardwareSpec, key: tuple | None = None) -> tuple[Program, int]:
    """Lower ``call`` (already through :func:`cached`) now: (Program, ns it took), kept in the cache."""
    t0 = time.perf_counter_ns()
    fn = _REGISTRY.get(call.name)
    if fn is None:
        raise NoLowering(call.name)
    prog = build(call, fn, spec)
    _ = prog.neff_id  # hashing the NEFF is part of compiling it
    remember(key if key is not None else (call.key(), spec_digest(spec), _precision.key()), prog)
    return prog, time.perf_counter_ns() - t0


def remember(key: tuple, prog: Program) -> None:
    """Keep ``prog`` as the Program of cache key ``key`` (one compiled here or read from disk)."""
    _CACHE[key] = prog
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)


@functools.lru_cache(maxsize=64)
def spec_digest(spec: HardwareSpec) -> str:
    """SHA-256 of a target spec's every field: what a Program compiled for it depends on."""
    text = orjson.dumps(spec.to_dict(), option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(text).hexdigest()


def build(call: OpCall, fn: Lowering, spec: HardwareSpec) -> Program:
    """The kernel of ``call``, spread over the logical core's physical cores (``compiler.lnc``)."""
    return spread(lambda make_builder: _build(call, fn, spec, make_builder), spec)


def _build(call: OpCall, fn: Lowering, spec: HardwareSpec, make_builder: MakeBuilder = KernelBuilder) -> Program:
    short = call.name.replace("aten::", "")
    shapes = "_".join("x".join(map(str, m.shape)) or "s" for m in call.inputs if m is not None)
    prog = Program(f"{short}_{shapes}"[:200], target=spec.name)
    # each HBM tensor binds its view's storage span from the view's first element, so inside the
    # Program every view starts at offset 0 (and the cached Program fits any storage offset)
    call = OpCall(call.name, tuple(_at_zero(m) if m is not None else None for m in call.inputs),
                  tuple(_at_zero(m) for m in call.outputs),
                  call.attrs)
    inputs = HbmInputs(m.bind(prog, f"in{i}", "input") if m is not None else None for i, m in enumerate(call.inputs))
    outputs = [m.bind(prog, f"out{i}", "output") for i, m in enumerate(call.outputs)]
    ctx = LoweringContext(call, make_builder(prog, spec), inputs, outputs, call.name)
    # a large kernel allocates a few objects per instruction, none in a cycle: collections during the
    # build would walk the whole heap (torch's objects included) for nothing, often
    with prog.origin(call.name), gc_paused():
        run_lowering(fn, ctx)
    prog.meta["sbuf_peak_bytes"] = ctx.kb.sbuf_peak_bytes
    prog.meta["psum_peak_bytes"] = ctx.kb.psum_peak_bytes
    return prog


def run_lowering(fn: Lowering, ctx: LoweringContext) -> None:
    """Emit lowering ``fn``'s kernel into ``ctx`` and free its scalar operands; a read of an input
    slot that holds no tensor is reported with the op's name."""
    try:
        fn(ctx)
    except MissingInput as e:
        raise MissingInput(f"{ctx.call.name}: {e}") from None
    ctx.release_scalars()


def _at_zero(meta: TensorMeta) -> TensorMeta:
    if meta.offset == 0:
        return meta
    return TensorMeta(meta.shape, meta.stride, meta.dtype, 0)


def clear_cache() -> None:
    _CACHE.clear()


caches.register("compiler.lowering: Programs", clear_cache)
caches.register("compiler.lowering: spec digests", spec_digest.cache_clear)


_loaded = False


def _load_kernels() -> None:
    """Import the kernel library once (each module registers its lowerings)."""
    global _loaded
    if not _loaded:
        _loaded = True
        from . import kernels  # noqa: F401
