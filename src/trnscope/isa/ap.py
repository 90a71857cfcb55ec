"""Access patterns: how an instruction addresses a tile of SBUF, PSUM or an HBM tensor.

A tile has a partition dimension (at most 128, the parallel axis) and up to four free dimensions,
each a (stride, size) pair in elements, outermost first (hardware.md 2.3). On-chip tiles address
``partitions`` consecutive partitions starting at ``start`` and a byte ``offset`` inside every
partition. HBM patterns address a bound tensor by element ``offset``; their partition dimension has
an element stride ``pstride`` (0 broadcasts one row to every partition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from itertools import count
from math import prod

import orjson

from .. import caches
from .dtypes import DType


class Space(str, Enum):
    __hash__ = str.__hash__  # C-level hash: patterns are hashed on hot paths (cost memo keys)

    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


Dims = tuple[tuple[int, int], ...]

# Content ids: every pattern gets an int ``_sid`` shared by all patterns with the same serialisation
# (``orjson.dumps`` of its fields, which is also its NEFF text) made since the table was last cleared,
# so per-instruction keys (columns, NEFF hashing) hash and compare plain ints instead of calling
# AP.__hash__/__eq__ in Python. Interning on the bytes rather than on the field tuple keeps an id
# exact for serialisation: offset 256 and 256.0 are equal tuples but different NEFF text. Ids come
# from one counter and are never reused, so two different patterns never share one; clearing the
# bounded table only means a later equal pattern gets a fresh id (a memo miss, never a wrong hit); a
# pattern orjson cannot serialise (NumPy scalars in its fields) gets an id of its own. ``_fid`` does
# the same for the pattern's form (space, dtype, partitions, dims) without its placement, interned on
# the tuple: what costs depend on.
_SIDS: dict[bytes, int] = {}
_FIDS: dict[tuple, int] = {}
caches.register("isa.ap: interned pattern ids", _SIDS.clear)  # ids are never reused: see above
caches.register("isa.ap: interned form ids", _FIDS.clear)
_ID_COUNTER = count()
SID_TABLE_LIMIT = 1 << 17
_dumps = orjson.dumps


def _intern(table: dict, key: tuple | bytes) -> int:
    sid = table.get(key)
    if sid is None:
        if len(table) >= SID_TABLE_LIMIT:
            table.clear()
        sid = table[key] = next(_ID_COUNTER)
    return sid


@dataclass(frozen=True, slots=True, eq=False)
class AP:
    space: Space
    dtype: DType
    partitions: int
    dims: Dims
    start: int = 0
    offset: int = 0
    tensor: int = -1
    pstride: int = 0
    _key: tuple = field(default=(), init=False, repr=False, compare=False)
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _sid: int = field(default=-1, init=False, repr=False, compare=False)
    _fid: int = field(default=-1, init=False, repr=False, compare=False)
    # derived patterns already made from this one (view/rows/with_dtype arguments -> pattern): kernels
    # address the same windows of a buffer over and over (a matmul's K-tiles once per output block),
    # and a pattern is immutable, so the same arguments can return the same object
    _derived: dict | None = field(default=None, init=False, repr=False, compare=False)

    # Patterns are hashed and compared on hot paths (cost memo keys): both work on one cached tuple.
    def __post_init__(self) -> None:
        _finish(self, (self.space, self.dtype, self.partitions, self.dims, self.start, self.offset, self.tensor,
                       self.pstride))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, AP) and (self._sid == other._sid or (
            self._hash == other._hash and self._key == other._key)))

    def __reduce__(self):
        # rebuild through the constructor: _hash (str hashes are per process) and _sid (a counter
        # of this process) must never travel to another process or be copied verbatim
        return (AP, (self.space, self.dtype, self.partitions, self.dims, self.start, self.offset, self.tensor,
                     self.pstride))

    @property
    def sid(self) -> int:
        """The pattern's content id: equal for patterns with the same serialisation (see ``_SIDS``)."""
        return self._sid

    # --- shape ------------------------------------------------------------------------------
    @property
    def free_shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *self.free_shape)

    @property
    def free_size(self) -> int:
        """N in the cost formulas: elements per partition."""
        return prod(self.free_shape) if self.dims else 1

    @property
    def num_elements(self) -> int:
        return self.partitions * self.free_size

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.itemsize

    @property
    def on_chip(self) -> bool:
        return self.space is not Space.HBM

    # --- layout -----------------------------------------------------------------------------
    @property
    def minor_stride_bytes(self) -> int:
        if not self.dims:
            return self.dtype.itemsize
        return abs(self.dims[-1][0]) * self.dtype.itemsize

    def contiguous_run(self) -> int:
        """Elements per contiguous run: the innermost dims that are dense, merged."""
        run = 1
        for stride, size in reversed(self.dims):
            if size == 1:
                continue
            if stride != run:
                break
            run *= size
        return run

    def extent_bytes(self) -> int:
        """Bytes spanned inside one partition (on-chip) from ``offset``: the allocation it needs."""
        last = sum(max(stride, 0) * (size - 1) for stride, size in self.dims)
        return (last + 1) * self.dtype.itemsize

    def element_span(self) -> tuple[int, int]:
        """(lowest, highest) element index an HBM pattern touches, relative to the tensor start."""
        lo = hi = self.offset
        for stride, size in ((self.pstride, self.partitions), *self.dims):
            step = stride * (size - 1)
            if step < 0:
                lo += step
            else:
                hi += step
        return lo, hi

    def describe(self) -> str:
        """Operand text in the style of neuron-profile: ``bf16@sb[0:128]+0x100[1,512]``."""
        dt = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(self.dtype.value, self.dtype.value)
        dims = ",".join(f"{st}x{sz}" for st, sz in self.dims)
        if self.space is Space.HBM:
            return f"{dt}@hbm:t{self.tensor}+{self.offset}[{self.pstride}x{self.partitions};{dims}]"
        loc = "sb" if self.space is Space.SBUF else "ps"
        return f"{dt}@{loc}[{self.start}:{self.start + self.partitions}]+{self.offset:#x}[{dims}]"

    # --- derived patterns ---------------------------------------------------------------------
    def with_dtype(self, dtype: DType) -> "AP":
        return _replace(self, dtype=dtype)

    def view(self, offset_elems: int, dims, partitions: int | None = None, start: int | None = None) -> "AP":
        """A pattern inside this one: ``offset_elems`` further in, with new free ``dims`` (stride, size).

        On-chip the offset moves the byte address within each partition; in HBM it moves the element
        offset. ``partitions``/``start`` narrow the partition range (HBM: rows keep ``pstride``).
        """
        memo = self._derived
        key = hit = None
        # remembered only for plain int arguments: 256 and 256.0 are equal keys but different NEFF text
        if type(offset_elems) is int and (partitions is None or type(partitions) is int) and (
                start is None or type(start) is int):
            try:
                key = (offset_elems, *dims, partitions, start)
                hit = memo.get(key) if memo is not None else None
            except TypeError:  # unhashable arguments (lists inside dims): made, not remembered
                key = None
        if hit is not None:
            return hit
        dims = tuple((int(a), int(b)) for a, b in dims)
        if self.on_chip:
            made = _make(self.space, self.dtype, self.partitions if partitions is None else partitions, dims,
                         self.start if start is None else start, self.offset + offset_elems * self.dtype.itemsize,
                         self.tensor, self.pstride)
        else:
            made = _make(self.space, self.dtype, self.partitions if partitions is None else partitions, dims,
                         self.start, self.offset + offset_elems, self.tensor, self.pstride)
        if key is not None:
            _remember(self, key, made)
        return made

    def rows(self, first: int, count: int) -> "AP":
        """Partitions ``first .. first+count-1`` (HBM: rows of the partition dim)."""
        if self.on_chip:
            return _replace(self, start=self.start + first, partitions=count)
        return _replace(self, offset=self.offset + first * self.pstride, partitions=count)

    def to_list(self) -> list:
        return [self.space.value, self.dtype.value, self.partitions, [list(d) for d in self.dims],
                self.start, self.offset, self.tensor, self.pstride]

    @staticmethod
    def from_list(v: list) -> "AP":
        space, dtype, parts, dims, start, offset, tensor, pstride = v
        return AP(Space(space), DType(dtype), parts, tuple((int(a), int(b)) for a, b in dims),
                  start, offset, tensor, pstride)


_FIELDS = ("space", "dtype", "partitions", "dims", "start", "offset", "tensor", "pstride")
_set = object.__setattr__
_new = object.__new__
_dumps_key = orjson.dumps
_DERIVED_LIMIT = 256  # derived patterns remembered per pattern


def _finish(ap: AP, key: tuple) -> None:
    """Set a pattern's cached key, hash and content ids (the constructor's work after the fields)."""
    _set(ap, "_key", key)
    _set(ap, "_hash", hash(key))
    try:
        text = _dumps_key(key)
    except TypeError:
        sid = next(_ID_COUNTER)
    else:
        known = _SIDS.get(text)
        sid = _intern(_SIDS, text) if known is None else known
    _set(ap, "_sid", sid)
    form = key[:4]
    fid = _FIDS.get(form)
    _set(ap, "_fid", _intern(_FIDS, form) if fid is None else fid)
    _set(ap, "_derived", None)


def _make(space, dtype, partitions, dims, start, offset, tensor, pstride) -> AP:
    """``AP(...)`` without the generated ``__init__``'s per-field frozen-dataclass assignments (the
    fields are already the right types: this is how derived patterns are made)."""
    ap = _new(AP)
    _set(ap, "space", space)
    _set(ap, "dtype", dtype)
    _set(ap, "partitions", partitions)
    _set(ap, "dims", dims)
    _set(ap, "start", start)
    _set(ap, "offset", offset)
    _set(ap, "tensor", tensor)
    _set(ap, "pstride", pstride)
    _finish(ap, (space, dtype, partitions, dims, start, offset, tensor, pstride))
    return ap


def _remember(ap: AP, key: tuple, made: AP) -> None:
    memo = ap._derived
    if memo is None:
        memo = {}
        _set(ap, "_derived", memo)
    elif len(memo) >= _DERIVED_LIMIT:
        memo.clear()
    memo[key] = made


def _replace(ap: AP, **kw) -> AP:
    values = [kw.pop(name) if name in kw else getattr(ap, name) for name in _FIELDS]
    if kw:
        raise TypeError(f"AP has no field {next(iter(kw))!r}")
    return AP(*values)


def dense_dims(shape: tuple[int, ...] | list[int]) -> Dims:
    """Row-major (stride, size) pairs for a dense free shape."""
    dims = []
    stride = 1
    for size in reversed(shape):
        dims.append((stride, int(size)))
        stride *= int(size)
    return tuple(reversed(dims))


def sbuf(start: int, partitions: int, free_shape, dtype: DType | str, offset: int = 0,
         space: Space = Space.SBUF) -> AP:
    """A dense on-chip tile: ``partitions`` partitions from ``start``, ``offset`` bytes in."""
    return AP(space, DType.parse(dtype), partitions, dense_dims(tuple(free_shape)), start, offset)


def psum(start: int, partitions: int, free_shape, dtype: DType | str = DType.float32, offset: int = 0) -> AP:
    return sbuf(start, partitions, free_shape, dtype, offset, space=Space.PSUM)


def hbm(tensor: int, partitions: int, pstride: int, dims, dtype: DType | str, offset: int = 0) -> AP:
    """An HBM pattern over bound tensor ``tensor``: partition rows ``pstride`` elements apart."""
    return AP(Space.HBM, DType.parse(dtype), partitions, tuple((int(a), int(b)) for a, b in dims),
              0, offset, tensor, pstride)
