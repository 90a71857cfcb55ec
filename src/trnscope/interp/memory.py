"""The NeuronCore's memories as NumPy arrays, and access patterns as strided views of them.

HBM holds one flat array per bound tensor, in the tensor's dtype. SBUF and PSUM are byte arrays
``uint8[partitions, bytes_per_partition]``: an on-chip access pattern is a view of the bytes at
``offset`` of partitions ``start..start+partitions-1``, reinterpreted as the pattern's dtype with
the partition stride of one row and element strides times the itemsize
(``numpy.lib.stride_tricks.as_strided``). Every view is bounds-checked first, so a bad pattern is a
:class:`ProgramError`, never a read or write outside the arrays.

Uninitialised state is poisoned by default: SBUF and PSUM start as 0xFF bytes, which read as NaN
in every float dtype (and -1 in signed integers), and HBM scratch/output tensors start as NaN
(float) or 0 (integer), so reading something nobody wrote shows up in the results.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..isa import AP, ProgramError, Space
from ..isa.program import Program, TensorDecl

POISON_BYTE = 0xFF


class Memory:
    def __init__(self, program: Program, spec, *, poison: bool = True) -> None:
        self.partitions = spec.partitions
        # np.zeros maps fresh zero pages lazily; only the bytes some access pattern can reach need the
        # poison written (filling all 28 MiB of SBUF costs more than many small programs take to run).
        self.sbuf = np.zeros((spec.partitions, spec.sbuf_bytes_per_partition), dtype=np.uint8)
        self.psum = np.zeros((spec.partitions, spec.psum_bytes_per_partition), dtype=np.uint8)
        if poison:
            reach = _on_chip_reach(program)
            for mem, space in ((self.sbuf, Space.SBUF), (self.psum, Space.PSUM)):
                mem[:, :reach[space]] = POISON_BYTE
        self.decls: list[TensorDecl] = list(program.tensors)
        self.hbm: list[np.ndarray] = [_blank(d, poison) for d in self.decls]
        # AP -> (view, [P, F] view or None). The arrays never move, so a view stays valid until an
        # HBM tensor is replaced (load_tensor clears the cache); programs reuse few distinct patterns.
        self._views: dict[AP, tuple[np.ndarray, np.ndarray | None]] = {}

    # --- views ---------------------------------------------------------------------------------------
    def view(self, ap: AP) -> np.ndarray:
        """A writable view with shape ``(partitions, *free_shape)`` of the memory ``ap`` addresses."""
        hit = self._views.get(ap)
        if hit is None:
            hit = self._views[ap] = self._make_views(ap)
        return hit[0]

    def _make_views(self, ap: AP) -> tuple[np.ndarray, np.ndarray | None]:
        v = self._make_view(ap)
        flat = v.reshape(ap.partitions, -1)
        return v, (flat if np.may_share_memory(flat, v) else None)  # else reshape had to copy

    def _make_view(self, ap: AP) -> np.ndarray:
        dt = ap.dtype.np
        isz = dt.itemsize
        if ap.partitions < 1 or any(size < 1 for _, size in ap.dims):
            raise ProgramError(f"access pattern {ap.describe()} has an empty dimension")
        shape = (ap.partitions, *(size for _, size in ap.dims))
        free_strides = tuple(stride * isz for stride, _ in ap.dims)
        if ap.space is Space.HBM:
            if not 0 <= ap.tensor < len(self.hbm):
                raise ProgramError(f"HBM tensor {ap.tensor} is not bound (program has {len(self.hbm)})")
            flat = self.hbm[ap.tensor]
            name = self.decls[ap.tensor].name
            if flat.dtype != dt:
                raise ProgramError(f"dtype mismatch: pattern reads {name!r} ({self.decls[ap.tensor].dtype.value}) "
                                   f"as {ap.dtype.value}")
            lo, hi = ap.element_span()
            if lo < 0 or hi >= flat.size:
                raise ProgramError(f"access pattern {ap.describe()} reaches elements {lo}..{hi} of HBM tensor "
                                   f"{name!r} which has {flat.size}")
            return as_strided(flat[ap.offset:ap.offset + 1], shape, (ap.pstride * isz, *free_strides))
        mem = self.sbuf if ap.space is Space.SBUF else self.psum
        parts, row = mem.shape
        where = "SBUF" if ap.space is Space.SBUF else "PSUM"
        if ap.start < 0 or ap.start + ap.partitions > parts:
            raise ProgramError(f"access pattern {ap.describe()} spans partitions {ap.start}.."
                               f"{ap.start + ap.partitions - 1}; {where} has {parts}")
        below = sum(min(stride, 0) * (size - 1) for stride, size in ap.dims) * isz
        above = sum(max(stride, 0) * (size - 1) for stride, size in ap.dims) * isz
        if ap.offset + below < 0 or ap.offset + above + isz > row:
            raise ProgramError(f"access pattern {ap.describe()} reaches bytes {ap.offset + below}.."
                               f"{ap.offset + above + isz} of each partition; {where} has {row}")
        base = mem[ap.start:ap.start + 1, ap.offset:ap.offset + isz].view(dt)  # one element, shape (1, 1)
        return as_strided(base, shape, (row, *free_strides))

    def read(self, ap: AP) -> np.ndarray:
        """The values ``ap`` addresses, shape ``(partitions, free_size)``. A view where possible: read only."""
        hit = self._views.get(ap)
        if hit is None:
            hit = self._views[ap] = self._make_views(ap)
        return hit[1] if hit[1] is not None else hit[0].reshape(ap.partitions, -1)

    def write(self, ap: AP, values: np.ndarray) -> None:
        """Store values (already in ``ap``'s dtype) in element order (partition-major, row-major free)."""
        v = self.view(ap)
        v[...] = np.reshape(values, v.shape)

    # --- HBM tensors ---------------------------------------------------------------------------------
    def load_tensor(self, index: int, value) -> None:
        decl = self.decls[index]
        arr = _as_numpy(value)
        if tuple(arr.shape) != decl.shape:
            raise ValueError(f"tensor {decl.name!r} has shape {decl.shape}, got an array of shape {arr.shape}")
        self.hbm[index] = np.array(arr, dtype=decl.dtype.np, copy=True).reshape(-1)
        self._views.clear()

    def tensor(self, index: int) -> np.ndarray:
        decl = self.decls[index]
        return self.hbm[index].reshape(decl.shape).copy()


def _on_chip_reach(program: Program) -> dict[Space, int]:
    """Per space, one past the highest byte offset any on-chip access pattern of the program can touch."""
    reach = {Space.SBUF: 0, Space.PSUM: 0}
    seen: set[AP] = set()
    for ins in program.instructions:
        for ap in (*ins.reads(), *ins.writes()):
            if ap.space is Space.HBM or ap in seen:
                continue
            seen.add(ap)
            isz = ap.dtype.itemsize
            end = ap.offset + sum(max(stride, 0) * (size - 1) for stride, size in ap.dims) * isz + isz
            if end > reach[ap.space]:
                reach[ap.space] = end
    return reach


def _blank(decl: TensorDecl, poison: bool) -> np.ndarray:
    dt = decl.dtype.np
    if poison and decl.dtype.is_float:
        return np.full(decl.numel, np.nan, dtype=dt)
    return np.zeros(decl.numel, dtype=dt)


def _as_numpy(value) -> np.ndarray:
    """NumPy arrays as they are; CPU torch tensors without importing torch (bf16 through float32)."""
    if type(value).__module__.split(".")[0] == "torch":
        t = value.detach().cpu()
        if str(t.dtype) in ("torch.bfloat16", "torch.float8_e4m3fn"):
            t = t.float()
        return t.numpy()
    return np.asarray(value)
