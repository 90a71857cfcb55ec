"""``NkiTensor``: a strided view of a storage (SBUF, PSUM or HBM), with NKI 0.5+'s view algebra.

A storage is one allocation (``nl.ndarray``) or one kernel argument. A view is a shape, strides and
an offset in elements of the view's dtype: element ``(i0, ..., in)`` sits at ``offset + sum(strides[k]
* i_k)`` of the storage (language guide, "Anatomy of a tensor"). On-chip storages are partition-major:
the partition dim (dim 0) strides by the storage's free size, so the partition of element ``e`` is
``e // pstride`` and its place inside the partition ``e % pstride``; views keep the partition dim at
position 0 and cannot stride it. Views cost nothing: every method returns a new NkiTensor over the
same storage, and only the ISA call that consumes a view turns it into an access pattern.
"""

from __future__ import annotations

import builtins
import itertools
from math import prod
from typing import TYPE_CHECKING

from .dtypes import NkiDType, as_nki_dtype
from .errors import NkiLegacyError, NkiUnsupportedError, NkiValidationError

if TYPE_CHECKING:
    import numpy as np

SBUF, PSUM, PRIVATE_HBM, SHARED_HBM = "sbuf", "psum", "private_hbm", "shared_hbm"
ON_CHIP = (SBUF, PSUM)
MAX_DIMS = 5  # a view has at most 5 dims (language guide)

_ids = itertools.count()


class MemoryRegion(str):
    """``nl.sbuf``, ``nl.psum``, ``nl.private_hbm`` (= ``nl.hbm``), ``nl.shared_hbm``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"nl.{str.__str__(self)}"


REGIONS = {n: MemoryRegion(n) for n in (SBUF, PSUM, PRIVATE_HBM, SHARED_HBM)}


def region(buffer) -> MemoryRegion:
    if isinstance(buffer, MemoryRegion):
        return buffer
    if isinstance(buffer, str):
        raise TypeError(f"buffer={buffer!r}: memory regions are nl.sbuf, nl.psum, nl.hbm, nl.private_hbm or "
                        f"nl.shared_hbm, not strings (strings were rejected in NKI 0.3)")
    name = getattr(buffer, "value", None) or getattr(buffer, "name", None)
    if name == "hbm":
        name = PRIVATE_HBM
    if name in REGIONS:
        return REGIONS[name]
    if type(buffer).__name__ == "par_dim" or type(buffer).__module__.endswith("legacy"):
        raise NkiLegacyError("nl.par_dim is NKI 0.1 (neuronxcc.nki); in nki.* the partition dim is always dim 0 of "
                             "an on-chip tensor: allocate nl.ndarray((P, ...), dtype, buffer=nl.sbuf)")
    raise TypeError(f"buffer={buffer!r} is not a memory region (nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm)")


class Storage:
    """One allocation or kernel argument. ``kind``: on-chip ``sbuf``/``psum``, or an HBM tensor of the
    Program: ``input`` (argument), ``output`` (returned), ``scratch`` (private HBM), ``const``."""

    __slots__ = ("id", "buffer", "shape", "dtype", "name", "address", "loc", "kind", "value", "first", "last",
                 "written_all", "any_write", "mask", "pending", "mm_mask", "arg_index", "mutated", "placed",
                 "itemsize", "free", "ns")

    def __init__(self, buffer: MemoryRegion, shape: tuple[int, ...], dtype: NkiDType, name: str = "",
                 address=None, loc: int = -1, kind: str | None = None, value=None) -> None:
        self.id = next(_ids)
        self.buffer = buffer
        self.shape = shape
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.free = prod(shape[1:]) if len(shape) > 1 else 1   # elements per partition (on chip)
        self.ns = _contiguous_strides(shape)                     # natural strides of the storage
        self.name = name
        self.address = address
        self.loc = loc
        self.kind = kind or (buffer if buffer in ON_CHIP else "scratch")
        self.value = value
        self.first = -1           # first and last op touching the storage: its live range
        self.last = -1
        self.written_all = kind in ("input", "const")
        self.any_write = self.written_all
        self.mask: np.ndarray | None = None  # bytes written, materialised only when a partial write is read
        self.pending: list = []   # partial writes not yet applied to the mask
        self.mm_mask: list | None = None  # PSUM bytes a matmul has written (accumulate=None inference)
        self.arg_index = -1
        self.mutated = False      # an argument the kernel writes (returned to the caller updated)
        self.placed = None        # (byte offset, bytes per partition) once allocated

    @property
    def on_chip(self) -> bool:
        return self.buffer in ON_CHIP

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def free_elems(self) -> int:
        return self.free

    @property
    def bytes_per_partition(self) -> int:
        return self.free_elems * self.itemsize

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.itemsize

    def label(self) -> str:
        name = self.name or f"t{self.id}"
        return f"{name}{list(self.shape)} {self.dtype} in {self.buffer}"


def _contiguous_strides(shape) -> tuple[int, ...]:
    out = []
    acc = 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


class DynamicSlice:
    """``nl.ds(start, size)``: a slice of ``size`` elements from ``start``."""

    __slots__ = ("start", "size")

    def __init__(self, start, size) -> None:
        if not isinstance(start, int) or not isinstance(size, int):
            raise NkiUnsupportedError("nl.ds with a runtime (register) start is not emulated: trnscope specialises "
                                      "every index at trace time; use integer starts")
        self.start, self.size = start, size

    def __repr__(self) -> str:
        return f"nl.ds({self.start}, {self.size})"


class NkiTensor:
    __slots__ = ("storage", "shape", "strides", "offset", "dtype", "indirect_index", "indirect_rows")

    def __init__(self, shape, dtype, storage: Storage | None = None, buffer=None, name: str = "",
                 strides=None, offset: int = 0) -> None:
        # the documented constructor NkiTensor(shape, dtype, storage, buffer, name); kernels normally use
        # nl.ndarray, and trnscope builds views through _view
        if storage is None:
            storage = Storage(region(buffer) if buffer is not None else REGIONS[SBUF], tuple(shape),
                              as_nki_dtype(dtype), name)
        self.storage = storage
        self.shape = tuple(int(s) for s in shape)
        self.dtype = as_nki_dtype(dtype)
        self.strides = tuple(strides) if strides is not None else _contiguous_strides(self.shape)
        self.offset = offset
        self.indirect_index: NkiTensor | None = None  # vector_offset index tile (per-partition gather/scatter rows)
        self.indirect_rows = 0

    @staticmethod
    def _view(storage: Storage, shape: tuple, strides: tuple, offset: int, dtype: NkiDType) -> "NkiTensor":
        t = object.__new__(NkiTensor)
        t.storage = storage
        t.shape = shape
        t.strides = strides
        t.offset = offset
        t.dtype = dtype
        t.indirect_index = None
        t.indirect_rows = 0
        return t

    def _derive(self, shape, strides, offset) -> "NkiTensor":
        if len(shape) > MAX_DIMS:
            raise NkiValidationError(f"a tensor view has at most {MAX_DIMS} dims, this one would have {len(shape)}")
        if self.indirect_index is not None:
            raise NkiValidationError("an indirect view (vector_offset) cannot be viewed again: index the tensor "
                                     "first, then call .ap(..., vector_offset=...)")
        return NkiTensor._view(self.storage, tuple(shape), tuple(strides), offset, self.dtype)

    # --- attributes ---------------------------------------------------------------------------------
    @property
    def buffer(self) -> MemoryRegion:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def on_chip(self) -> bool:
        return self.storage.buffer in ON_CHIP

    @property
    def pstride(self) -> int:
        """Elements (of this view's dtype) per partition of the storage: the partition dim's stride."""
        st = self.storage
        if self.dtype is st.dtype:
            return st.free
        return st.free * st.itemsize // self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"NkiTensor(shape={self.shape}, dtype={self.dtype}, buffer={self.buffer!r}, "
                f"name={self.name!r}, strides={self.strides}, offset={self.offset})")

    def __len__(self) -> int:
        return self.shape[0]

    def __bool__(self) -> bool:
        raise NkiUnsupportedError("a tensor's values are not known while the kernel is traced: `if tensor:` and "
                                  "comparisons of tensor contents cannot steer the trace (use nisa.affine_select or "
                                  "nisa.tensor_copy_predicated on the device)")

    def __iter__(self):
        raise NkiUnsupportedError("iterating over a tensor is not an NKI operation: index it (t[i]) in a loop "
                                  "over range(t.shape[0])")

    def is_contiguous(self) -> bool:
        dims = list(zip(self.shape, self.strides))
        if self.on_chip:
            dims = dims[1:]
        acc = 1
        for size, stride in reversed(dims):
            if size == 1:
                continue
            if stride != acc:
                return False
            acc *= size
        return True

    def get_pattern(self) -> list[list[int]]:
        return [[st, sz] for sz, st in zip(self.shape, self.strides)]

    def is_indirect(self) -> bool:
        return self.indirect_index is not None

    # --- indexing -----------------------------------------------------------------------------------
    def __getitem__(self, key) -> "NkiTensor":
        if not isinstance(key, tuple):
            key = (key,)
        if any(type(k).__name__ == "IndexExpr" for k in key):
            from . import trace as _trace

            tr = _trace.active()
            if tr is not None and tr.legacy:
                from .legacy import legacy_index

                return legacy_index(self, key)
        nd = len(self.shape)
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            if any(k is Ellipsis for k in key[i + 1:]):
                raise IndexError("an index can only have a single ellipsis ('...')")
            fill = nd - (len(key) - 1)
            key = key[:i] + (slice(None),) * builtins.max(fill, 0) + key[i + 1:]
        if len(key) > nd:
            raise IndexError(f"too many indices: tensor of shape {self.shape} indexed with {len(key)}")
        on_chip = self.on_chip
        shape, strides, offset = [], [], self.offset
        dropped_last = None
        for d, k in enumerate(key):
            size, stride = self.shape[d], self.strides[d]
            if type(k) is int or (isinstance(k, int) and not isinstance(k, bool)):
                if k < 0:
                    k += size
                if not 0 <= k < size:
                    raise IndexError(f"index {k} is out of bounds for dim {d} of size {size} (shape {self.shape})")
                offset += k * stride
                if on_chip and d == 0:
                    shape.append(1)
                    strides.append(stride)
                else:
                    dropped_last = (1, stride)
                continue
            if isinstance(k, slice):
                start, stop, step = k.indices(size)
                if step < 1:
                    raise NkiValidationError(f"slice step {step} on dim {d}: NKI slices need a positive step")
                n = len(range(start, stop, step))
                if n == 0:
                    raise IndexError(f"slice {start}:{stop}:{step} of dim {d} (size {size}) is empty")
                offset += start * stride
                shape.append(n)
                strides.append(stride * step)
                continue
            if isinstance(k, DynamicSlice):
                if k.start < 0 or k.start + k.size > size or k.size < 1:
                    raise IndexError(f"nl.ds({k.start}, {k.size}) is out of bounds for dim {d} of size {size}")
                offset += k.start * stride
                shape.append(k.size)
                strides.append(stride)
                continue
            raise _bad_index(k)
        for d in range(len(key), nd):
            shape.append(self.shape[d])
            strides.append(self.strides[d])
        if on_chip and len(shape) < 2 and dropped_last is not None:
            shape.append(1)  # on-chip views stay at least 2-D: the last dropped dim is kept at size 1
            strides.append(dropped_last[1])
        if not shape:  # an HBM scalar view stays 1-D of one element
            shape, strides = [1], [1]
        return self._derive(shape, strides, offset)

    def __setitem__(self, key, value) -> None:
        from . import trace as _trace

        tr = _trace.active()
        if tr is not None and tr.legacy:  # 0.1: tile[...] = value copies into the tile
            from .legacy import _operand
            from . import isa as _isa

            dst = self[key]
            dst = _operand(dst, None)
            src = _operand(value, None)
            if dst.on_chip:
                _isa.tensor_copy(dst, src)
            else:
                _isa.dma_copy(dst, src)
            return
        raise NkiLegacyError("assigning into a tile (t[...] = value) is NKI 0.1 style; in nki.* write through an "
                             "instruction: nisa.tensor_copy(dst=t[...], src=value) on chip, or "
                             "nisa.dma_copy(dst=hbm_tensor[...], src=tile) / nl.store")

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "NkiTensor":
        dim = self._dim(dim)
        if not 0 <= start < end <= self.shape[dim] or step < 1:
            raise NkiValidationError(f"slice({dim}, {start}, {end}, {step}) needs 0 <= start < end <= "
                                     f"{self.shape[dim]} and step >= 1")
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim: int, index) -> "NkiTensor":
        if not isinstance(index, int):
            raise NkiUnsupportedError("select with a runtime (tensor) index is not emulated: trnscope specialises "
                                      "indices at trace time; use .ap(..., vector_offset=idx) for a DMA gather")
        dim = self._dim(dim)
        if not 0 <= index < self.shape[dim]:
            raise IndexError(f"select({dim}, {index}): index out of bounds for size {self.shape[dim]}")
        shape = list(self.shape)
        strides = list(self.strides)
        offset = self.offset + index * strides[dim]
        if self.on_chip and dim == 0:
            shape[0] = 1
        else:
            del shape[dim], strides[dim]
            if self.on_chip and len(shape) < 2:
                shape.append(1)
                strides.append(1)
        return self._derive(shape, strides, offset)

    # --- reshaping ----------------------------------------------------------------------------------
    def _dim(self, dim: int) -> int:
        nd = self.ndim
        if dim < 0:
            dim += nd
        if not 0 <= dim < nd:
            raise IndexError(f"dim {dim} out of range for a {nd}-D tensor")
        return dim

    def _not_partition(self, dim: int, what: str) -> None:
        if self.on_chip and dim == 0:
            raise NkiValidationError(f"{what} cannot act on the partition dim (dim 0) of an on-chip tensor; data "
                                     f"moves across partitions only through an instruction (nc_transpose, matmul)")

    def permute(self, dims) -> "NkiTensor":
        dims = tuple(self._dim(d) for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise NkiValidationError(f"permute{dims} is not a permutation of range({self.ndim})")
        if self.on_chip and dims[0] != 0:
            raise NkiValidationError(f"permute{dims}: on-chip tensors keep the partition dim first (dims[0] == 0)")
        return self._derive([self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset)

    def broadcast(self, dim: int, size: int) -> "NkiTensor":
        dim = self._dim(dim)
        self._not_partition(dim, "broadcast")
        if self.shape[dim] != 1:
            raise NkiValidationError(f"broadcast({dim}, {size}): dim {dim} has size {self.shape[dim]}, not 1")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = int(size), 0
        return self._derive(shape, strides, self.offset)

    def expand_dim(self, dim: int) -> "NkiTensor":
        if dim < 0:
            dim += self.ndim + 1
        if not 0 <= dim <= self.ndim:
            raise IndexError(f"expand_dim({dim}) out of range for a {self.ndim}-D tensor")
        self._not_partition(dim, "expand_dim")
        shape, strides = list(self.shape), list(self.strides)
        shape.insert(dim, 1)
        strides.insert(dim, 0)
        return self._derive(shape, strides, self.offset)

    def squeeze_dim(self, dim: int) -> "NkiTensor":
        dim = self._dim(dim)
        self._not_partition(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            raise NkiValidationError(f"squeeze_dim({dim}): dim {dim} has size {self.shape[dim]}, not 1")
        shape, strides = list(self.shape), list(self.strides)
        del shape[dim], strides[dim]
        return self._derive(shape, strides, self.offset)

    def reshape_dim(self, dim: int, shape) -> "NkiTensor":
        dim = self._dim(dim)
        sizes = list(shape)
        if sizes.count(-1) > 1:
            raise NkiValidationError("reshape_dim: at most one size may be -1")
        if -1 in sizes:
            known = prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = self.shape[dim] // known if known else 0
        if prod(sizes) != self.shape[dim]:
            raise NkiValidationError(f"reshape_dim({dim}, {tuple(shape)}): sizes multiply to {prod(sizes)}, "
                                     f"dim {dim} has {self.shape[dim]}")
        if self.on_chip and dim == 0 and len(sizes) != 1:
            raise NkiValidationError("reshape_dim cannot split the partition dim (dim 0) of an on-chip tensor")
        inner = []
        acc = self.strides[dim]
        for s in reversed(sizes):
            inner.append(acc)
            acc *= s
        new_shape = list(self.shape[:dim]) + sizes + list(self.shape[dim + 1:])
        new_strides = list(self.strides[:dim]) + list(reversed(inner)) + list(self.strides[dim + 1:])
        return self._derive(new_shape, new_strides, self.offset)

    def flatten_dims(self, start_dim: int, end_dim: int) -> "NkiTensor":
        a, b = self._dim(start_dim), self._dim(end_dim)
        if a > b:
            raise NkiValidationError(f"flatten_dims({start_dim}, {end_dim}): start after end")
        if self.on_chip and a == 0 and b > 0:
            raise NkiValidationError("flatten_dims cannot merge the partition dim (dim 0) of an on-chip tensor")
        for d in range(a, b):
            if self.shape[d + 1] != 1 and self.shape[d] != 1 and self.strides[d] != self.strides[d + 1] * self.shape[d + 1]:
                raise NkiValidationError(f"flatten_dims({a}, {b}): dims {d} and {d + 1} are not contiguous in memory "
                                         f"(strides {self.strides}); copy the data into a contiguous tile first")
        inner = [d for d in range(a, b + 1) if self.shape[d] != 1]
        stride = self.strides[inner[-1]] if inner else 1
        shape = list(self.shape[:a]) + [prod(self.shape[a:b + 1])] + list(self.shape[b + 1:])
        strides = list(self.strides[:a]) + [stride] + list(self.strides[b + 1:])
        return self._derive(shape, strides, self.offset)

    def reshape(self, shape) -> "NkiTensor":
        if isinstance(shape, int):
            shape = (shape,)
        shape = [int(s) for s in shape]
        if shape.count(-1) == 1:
            known = prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.size // known if known else 0
        if prod(shape) != self.size:
            raise NkiValidationError(f"reshape{tuple(shape)}: {prod(shape)} elements, the tensor has {self.size} "
                                     f"(shape {self.shape})")
        if self.on_chip and shape[0] != self.shape[0]:
            raise NkiValidationError(f"reshape{tuple(shape)}: on-chip tensors keep the partition dim "
                                     f"({self.shape[0]}); reshape the free dims only")
        strides = _reshape_strides(self.shape, self.strides, shape)
        if strides is None:
            raise NkiValidationError(f"reshape{tuple(shape)} is incompatible with this view's layout (shape "
                                     f"{self.shape}, strides {self.strides}): copy it into a contiguous tile first")
        return self._derive(shape, strides, self.offset)

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> "NkiTensor":
        fixed = dict(fixed_sizes or {})
        src = [p if isinstance(p, (tuple, list)) else (p,) for p in src_pattern]
        if len(src) != self.ndim:
            raise NkiValidationError(f"rearrange: source pattern has {len(src)} groups, the tensor {self.ndim} dims")
        names, sizes = [], {}
        t = self
        split_shape = []
        for d, group in enumerate(src):
            known = prod(fixed.get(n, 1) for n in group)
            unknown = [n for n in group if n not in fixed]
            if len(unknown) > 1:
                raise NkiValidationError(f"rearrange: give the sizes of all but one of {group} in fixed_sizes")
            for n in group:
                sizes[n] = fixed[n] if n in fixed else self.shape[d] // known
                names.append(n)
            split_shape.append(tuple(sizes[n] for n in group))
        for d in reversed(range(self.ndim)):
            if len(split_shape[d]) != 1:
                t = t.reshape_dim(d, split_shape[d])
        dst = [p if isinstance(p, (tuple, list)) else (p,) for p in dst_pattern]
        flat = [n for g in dst for n in g]
        if sorted(flat) != sorted(names):
            raise NkiValidationError(f"rearrange: {dst_pattern} does not use the same names as {src_pattern}")
        t = t.permute([names.index(n) for n in flat])
        pos = 0
        merges = []
        for g in dst:
            merges.append((pos, pos + len(g) - 1))
            pos += len(g)
        for a, b in reversed(merges):
            if b > a:
                t = t.flatten_dims(a, b)
        return t

    def view(self, dtype) -> "NkiTensor":
        dt = as_nki_dtype(dtype)
        old, new = self.dtype.itemsize, dt.itemsize
        if old == new:
            return NkiTensor._view(self.storage, self.shape, self.strides, self.offset, dt)
        if self.strides[-1] != 1 and self.shape[-1] != 1:
            raise NkiValidationError("view(dtype) needs the last dim contiguous (stride 1)")
        shape, strides = list(self.shape), list(self.strides)
        if new < old:
            r = old // new
            shape[-1] *= r
            strides = [s * r for s in strides[:-1]] + [1]
            offset = self.offset * r
        else:
            r = new // old
            if shape[-1] % r or self.offset % r or any(s % r for s in strides[:-1]):
                raise NkiValidationError(f"view({dt}): the last dim ({shape[-1]}) and the layout must be divisible "
                                         f"by {r} to reinterpret {self.dtype} as {dt}")
            shape[-1] //= r
            strides = [s // r for s in strides[:-1]] + [1]
            offset = self.offset // r
        return NkiTensor._view(self.storage, tuple(shape), tuple(strides), offset, dt)

    reinterpret_cast = view

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim: int = 0,
           dtype=None) -> "NkiTensor":
        """A raw access pattern over the storage (not composable: the view's own layout is ignored)."""
        if scalar_offset is not None:
            raise NkiUnsupportedError("ap(scalar_offset=...) (a runtime offset) is not emulated: trnscope "
                                      "specialises every offset at trace time; pass the offset as an integer")
        pattern = [tuple(int(x) for x in p) for p in pattern]
        if not pattern or builtins.any(len(p) != 2 for p in pattern):
            raise NkiValidationError("ap(pattern=...) takes a list of [stride, count] pairs")
        dt = as_nki_dtype(dtype) if dtype is not None else self.dtype
        base = NkiTensor._view(self.storage, self.shape, self.strides, self.offset, self.dtype)
        if dt != self.dtype:
            base = base.view(dt) if self.is_contiguous() else base
        shape = tuple(c for _, c in pattern)
        strides = tuple(s for s, _ in pattern)
        off = base.offset if offset is None else int(offset)
        if self.on_chip and shape[0] > 1 and strides[0] != base.pstride:
            raise NkiValidationError(f"ap(): on-chip patterns must stride the partition dim by the storage's free "
                                     f"size ({base.pstride} elements), got {strides[0]}")
        t = NkiTensor._view(self.storage, shape, strides, off, dt)
        if vector_offset is not None:
            if self.on_chip:
                raise NkiValidationError("ap(vector_offset=...) indexes HBM tensors only (per-partition gather or "
                                         "scatter by DMA)")
            if indirect_dim != 0:
                raise NkiUnsupportedError("vector_offset with indirect_dim != 0 is not emulated (rows are dim 0)")
            if not isinstance(vector_offset, NkiTensor) or not vector_offset.on_chip:
                raise NkiValidationError("vector_offset must be an SBUF tensor of shape (P, 1) holding row indices")
            if vector_offset.shape[0] != shape[0] or prod(vector_offset.shape[1:]) != 1:
                raise NkiValidationError(f"vector_offset has shape {vector_offset.shape}; it must be "
                                         f"({shape[0]}, 1): one row index per partition of the pattern")
            st = self.storage
            row = prod(st.shape[1:]) * st.itemsize // dt.itemsize if len(st.shape) > 1 else 1
            t.indirect_index = vector_offset
            t.indirect_rows = st.shape[0] if len(st.shape) > 1 else st.shape[0] * st.itemsize // dt.itemsize
            t.strides = (row,) + strides[1:]
        return t

    def indirect(self, index, num_elem=None) -> "NkiTensor":
        raise NkiUnsupportedError("tensor indirection (.indirect) is a NeuronCore-v4 (trn3) feature; trnscope "
                                  "emulates trn1 and trn2")

    def vector_select(self, dim: int, vector_offset) -> "NkiTensor":
        if dim != 0:
            raise NkiValidationError("vector_select works on dim 0 only")
        pattern = [[self.strides[0], vector_offset.shape[0]]] + [[st, sz] for sz, st in
                                                                 zip(self.shape[1:], self.strides[1:])]
        return self.ap(pattern, offset=self.offset, vector_offset=vector_offset)

    def broadcast_to(self, shape) -> "NkiTensor":
        """A new tile of ``shape`` holding this one repeated (nl.broadcast_to; the NKI 0.1 tile method)."""
        from . import language as nl

        return nl.broadcast_to(self, shape)

    # --- arithmetic sugar (nl element-wise ops) -----------------------------------------------------
    def _binary(self, other, name: str, reverse: bool = False):
        from . import language as nl

        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        return self._binary(o, "add")

    def __radd__(self, o):
        return self._binary(o, "add", True)

    def __sub__(self, o):
        return self._binary(o, "subtract")

    def __rsub__(self, o):
        return self._binary(o, "subtract", True)

    def __mul__(self, o):
        return self._binary(o, "multiply")

    def __rmul__(self, o):
        return self._binary(o, "multiply", True)

    def __truediv__(self, o):
        return self._binary(o, "divide")

    def __neg__(self):
        from . import language as nl

        return nl.negative(self)

    def __eq__(self, o):  # identity, so tensors can live in sets and dicts (NKI compares contents with nl.equal)
        return self is o

    def __hash__(self) -> int:
        return id(self)


def _bad_index(k) -> Exception:
    kind = type(k).__name__
    if kind in ("IndexExpr", "Arange") or type(k).__module__.endswith("legacy"):
        return NkiLegacyError("indexing with nl.arange / nl.mgrid index grids is NKI 0.1 (neuronxcc.nki); in nki.* "
                              "index with integers, slices (t[i*128:(i+1)*128, :]) or nl.ds(start, size)")
    if isinstance(k, NkiTensor):
        return NkiUnsupportedError("indexing a tensor with a tensor is not an NKI view; use .ap(..., vector_offset=idx) "
                                   "for a DMA gather/scatter")
    if k is None:
        return NkiValidationError("indexing with None (a new axis) is not supported: use .expand_dim(dim)")
    return TypeError(f"cannot index an NkiTensor with {kind} {k!r}")


def _reshape_strides(shape, strides, new_shape):
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy, or None (NumPy's rule)."""
    old = [(s, st) for s, st in zip(shape, strides) if s != 1]
    new = list(new_shape)
    out = [0] * len(new)
    oi = ni = 0
    nold, nnew = len(old), len(new)
    while ni < nnew and new[ni] == 1:
        out[ni] = 1
        ni += 1
    while oi < nold and ni < nnew:
        np_, op_ = new[ni], old[oi][0]
        nj, oj = ni + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= new[nj]
                nj += 1
            else:
                op_ *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
        while ni < nnew and new[ni] == 1:
            out[ni] = out[ni - 1] if ni else 1
            ni += 1
    if oi != nold:
        return None
    while ni < nnew:
        out[ni] = 1
        ni += 1
    return tuple(out)
