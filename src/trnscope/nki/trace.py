"""Tracing a kernel: running its Python once and recording every ISA call as an :class:`Op`.

The :class:`Tracer` is the specialisation stage of NKI's compilation model (language guide): the
kernel's Python runs with its shapes, dtypes and constants; loops unroll and branches resolve as
Python; every ``nki.isa`` call (and every ``nki.language`` wrapper, which issues ISA calls) records
an Op with the kernel source line that made it. While recording, the tracer checks what NKI's
hardware would refuse (shapes, buffers, dtypes) and what Neuron's CPU simulator only shows as NaN
sentinels: reads of memory nothing wrote, accumulation into PSUM no matmul started. Lowering
(:mod:`.lower`) then allocates SBUF/PSUM from the ops' live ranges and emits the Program.
"""

from __future__ import annotations

import os
import sys
import threading
import types
import warnings
from math import prod

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import NkiError, NkiUninitializedError, NkiValidationError
from .tensor import NkiTensor, Storage

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_tls = threading.local()


class Op:
    """One recorded ISA call: ``kind`` names its lowering, ``reads``/``writes`` the views it touches."""

    __slots__ = ("kind", "loc", "reads", "writes", "args", "index")

    def __init__(self, kind: str, loc: int, reads: tuple, writes: tuple, args: dict, index: int) -> None:
        self.kind = kind
        self.loc = loc
        self.reads = reads
        self.writes = writes
        self.args = args
        self.index = index


def current() -> "Tracer":
    t = getattr(_tls, "tracer", None)
    if t is None:
        raise NkiError("nki.isa / nki.language operations run only inside an @nki.jit kernel while it is traced "
                       "(call the kernel; trnscope traces it)")
    return t


def active() -> "Tracer | None":
    return getattr(_tls, "tracer", None)


class Tracer:
    def __init__(self, spec, kernel_name: str, *, uninitialized: str = "error", program_id=(0,), grid=(1,),
                 legacy: bool = False) -> None:
        self.legacy = legacy  # an NKI 0.1 (neuronxcc.nki) kernel: index grids, masks, tile-returning calls
        self.spec = spec
        self.kernel_name = kernel_name
        self.ops: list[Op] = []
        self.storages: list[Storage] = []
        self.locs: list[tuple[str, int, str]] = []
        self._loc_index: dict[tuple, int] = {}
        self.uninitialized = uninitialized
        self.program_id = program_id
        self.grid = grid
        self.warned: set[str] = set()
        self.no_reorder_depth = 0
        self.shared_allocs: list = []  # shared_hbm tensors of the first SPMD program, shared by the others
        self.shared_seen = 0

    # --- context ------------------------------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        self._saved = getattr(_tls, "tracer", None)
        _tls.tracer = self
        return self

    def __exit__(self, *exc) -> None:
        _tls.tracer = self._saved

    # --- source locations -----------------------------------------------------------------------------
    def location(self) -> int:
        """Index of the innermost kernel source line outside trnscope.nki (the user's call)."""
        f: types.FrameType | None = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
            f = f.f_back
        if f is None:
            key = ("<unknown>", 0, "")
        else:
            key = (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
        idx = self._loc_index.get(key)
        if idx is None:
            idx = self._loc_index[key] = len(self.locs)
            self.locs.append(key)
        return idx

    def def_location(self, fn) -> int:
        """The location of a function's ``def`` line (where a kernel's arguments come from)."""
        code = getattr(fn, "__code__", None)
        key = (code.co_filename, code.co_firstlineno, code.co_name) if code else ("<unknown>", 0, "")
        idx = self._loc_index.get(key)
        if idx is None:
            idx = self._loc_index[key] = len(self.locs)
            self.locs.append(key)
        return idx

    def where(self, loc: int) -> str:
        if loc < 0 or loc >= len(self.locs):
            return self.kernel_name
        fname, line, func = self.locs[loc]
        return f"{os.path.basename(fname)}:{line} (in {func})"

    def error(self, cls, message: str, loc: int | None = None) -> NkiError:
        if loc is None:
            loc = self.location()
        return cls(message, self.where(loc))

    # --- storages -------------------------------------------------------------------------------------
    def new_storage(self, storage: Storage) -> Storage:
        self.storages.append(storage)
        return storage

    # --- recording ------------------------------------------------------------------------------------
    def record(self, kind: str, loc: int, reads: tuple, writes: tuple, args: dict) -> Op:
        """Check the operands (bounds, initialisation), note live ranges and append the op."""
        index = len(self.ops)
        for t in reads:
            self._bounds(t, loc)
            self.check_read(t, loc, kind)
        for t in writes:
            self._bounds(t, loc)
        for t in (*reads, *writes):
            st = t.storage
            if st.first < 0:
                st.first = index
            st.last = index
            idx = t.indirect_index
            if idx is not None:
                ist = idx.storage
                if ist.first < 0:
                    ist.first = index
                ist.last = index
        for t in writes:
            self.mark_write(t)
        op = Op(kind, loc, reads, writes, args, index)
        self.ops.append(op)
        return op

    def _bounds(self, t: NkiTensor, loc: int) -> None:
        st = t.storage
        if t.indirect_index is not None:
            return  # rows are chosen at run time; the DMA checks each index (oob_mode)
        if t.offset == 0 and t.shape == st.shape and t.strides == st.ns:
            return  # the whole storage, as allocated
        total = st.nbytes // t.dtype.itemsize
        lo = hi = t.offset
        for size, stride in zip(t.shape, t.strides):
            step = stride * (size - 1)
            if step < 0:
                lo += step
            else:
                hi += step
        if lo < 0 or hi >= total:
            raise self.error(NkiValidationError, f"the view {t.shape} (strides {t.strides}, offset {t.offset}) "
                             f"reaches elements {lo}..{hi} of {st.label()}, which has {total}", loc)
        if st.on_chip:
            ps = t.pstride
            if t.shape[0] > 1 and t.strides[0] != ps:
                raise self.error(NkiValidationError, f"the view strides the partition dim by {t.strides[0]} "
                                 f"elements: on-chip tensors cannot stride partitions (the partition dim of "
                                 f"{st.label()} moves by {ps} elements); slice partitions with step 1", loc)
            first = t.offset % ps
            last = first + sum(max(0, s * (n - 1)) for n, s in zip(t.shape[1:], t.strides[1:]))
            low = first + sum(min(0, s * (n - 1)) for n, s in zip(t.shape[1:], t.strides[1:]))
            if last >= ps or low < 0:
                raise self.error(NkiValidationError, f"the view's free dims reach outside one partition of "
                                 f"{st.label()} (elements {low}..{last} of {ps} per partition)", loc)

    # --- initialisation tracking ----------------------------------------------------------------------
    def mark_write(self, t: NkiTensor) -> None:
        st = t.storage
        st.any_write = True
        if st.written_all:
            return
        box = exact_box(t)
        if box is not None and all(lo == 0 and hi == n - 1 for (lo, hi), n in zip(box, st.shape)):
            st.written_all = True
            st.pending = []
            st.mask = None
            return
        if st.mask is not None:
            _mask_view(st, t)[...] = True
            return
        st.pending.append((box, t))

    def check_read(self, t: NkiTensor, loc: int, kind: str) -> None:
        st = t.storage
        if st.written_all or self.uninitialized == "ignore" or t.indirect_index is not None:
            return
        box = cover_box(t)
        if box is not None:
            for wbox, _ in st.pending:
                if wbox is not None and _inside(box, wbox):
                    return
        mask = st.mask
        if mask is None:
            mask = st.mask = np.zeros(st.nbytes, np.bool_)
            for _, w in st.pending:
                _mask_view(st, w)[...] = True
            st.pending = [(b, w) for b, w in st.pending if b is not None]  # boxes stay for the fast check
        view = _mask_view(st, t)
        if view.all():
            if mask.all():
                st.written_all, st.mask, st.pending = True, None, []
            return
        missing = int(view.size - np.count_nonzero(view)) // t.dtype.itemsize
        what = "never written" if not st.any_write else "partly unwritten"
        msg = (f"{kind} reads {missing} element(s) of {st.label()} that nothing has written ({what}; created at "
               f"{self.where(st.loc)}). Neuron's simulator would fill them with NaN sentinels; write the whole "
               f"region first (nisa.memset / dma_copy)")
        if self.uninitialized == "warn":
            if msg not in self.warned:
                self.warned.add(msg)
                warnings.warn(f"{self.where(loc)}: {msg}", stacklevel=4)
            return
        raise NkiUninitializedError(msg, self.where(loc))


def natural_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _box(t: NkiTensor, exact: bool):
    """The view as per-dim [lo, hi] ranges of its storage's natural index space, or None when it is not
    such a box (a reinterpreting, wrapping or merged view). ``exact``: every element of the box is in
    the view (step 1 on every dim); otherwise the box may over-cover (steps)."""
    st = t.storage
    if t.dtype.itemsize != st.itemsize:
        return None
    shape, ns = st.shape, st.ns
    off = t.offset
    if off == 0 and t.strides == ns and t.shape == shape:
        return tuple((0, n - 1) for n in shape)
    start = [(off // s) % n for n, s in zip(shape, ns)]
    total = 0
    for a, s in zip(start, ns):
        total += a * s
    if total != off:
        return None
    hi = list(start)
    used = 0
    nd = len(ns)
    for size, stride in zip(t.shape, t.strides):
        if size == 1:
            continue
        d = 0
        while d < nd:
            s = ns[d]
            if stride == s or (not exact and stride > 0 and stride % s == 0 and (d == 0 or stride < ns[d - 1])):
                break
            d += 1
        else:
            return None
        bit = 1 << d
        if used & bit:
            return None
        used |= bit
        h = start[d] + stride // ns[d] * (size - 1)
        if h >= shape[d]:
            return None
        hi[d] = h
    return tuple(zip(start, hi))


def exact_box(t: NkiTensor):
    return _box(t, True)


def cover_box(t: NkiTensor):
    return _box(t, False)


def _inside(a, b) -> bool:
    return all(bl <= al and ah <= bh for (al, ah), (bl, bh) in zip(a, b))


def boxes_overlap(a, b) -> bool:
    return all(al <= bh and bl <= ah for (al, ah), (bl, bh) in zip(a, b))


def _mask_view(st: Storage, t: NkiTensor) -> np.ndarray:
    """The written-bytes mask of ``st`` seen through view ``t`` (bounds were checked by ``_bounds``)."""
    isz = t.dtype.itemsize
    assert st.mask is not None  # made by the read check before any view of it
    return as_strided(st.mask[t.offset * isz:], (*t.shape, isz), (*(s * isz for s in t.strides), 1))


def numel(shape) -> int:
    return prod(shape)
