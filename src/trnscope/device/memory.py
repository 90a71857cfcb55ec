"""Device memory of the emulated NeuronCore: allocation, accounting, zero-copy host views.

A ``neuron`` tensor is an ordinary strided ATen tensor on a PrivateUse1 storage. The storage's
bytes live in host memory that this module owns (a CPU ``UntypedStorage``): they reach ATen as an
owning storage through a DLPack import (:mod:`._dlpack`), so views, strides, storage offsets and
aliasing are ATen's own, and the storage tells us when it dies. Every allocation and free is
counted per device against the HBM capacity of one NeuronCore
(:func:`trnscope.hw.get_spec`), which is what ``torch.neuron.memory_allocated()`` and friends
report; an allocation beyond it raises :class:`torch.OutOfMemoryError` without touching host
memory, and the device stays usable.

Kernels never copy to compute: :func:`host_view` gives a CPU tensor over the same bytes, with the
same sizes, strides and storage offset. Such a view does not keep the memory alive: use it only
while the ``neuron`` tensor it came from is alive.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import torch

from trnscope.hw import get_spec

from .. import caches
from . import _dlpack
from ._core import CORE as _cpp

BACKEND = "neuron"


def storages_resize_in_core() -> bool:
    """True when the C++ core is loaded: neuron storages then resize through its hooks, as ATen
    resizes CUDA's (FSDP2's frees and re-allocations need nothing more)."""
    return _cpp is not None

_CPU = torch.device("cpu")
_CPU_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
# ATen's CPU kernel for set_ only edits TensorImpl metadata and never looks at the device, so
# calling it on a neuron tensor (redispatch straight to the CPU key) is exact and allocation-free
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
# ATen's torch.empty: :mod:`.pinned` wraps torch.empty in Python (for pin_memory=), a cost every
# host view and allocation would pay
_empty = torch._C._VariableFunctions.empty


@dataclass
class DeviceMemoryStats:
    """Counters for one NeuronCore; bytes are storage bytes as requested (no rounding, no cache)."""

    allocated: int = 0
    peak: int = 0
    allocated_total: int = 0  # cumulative bytes allocated
    freed_total: int = 0
    num_allocs: int = 0
    num_frees: int = 0
    num_ooms: int = 0
    blocks: int = 0
    peak_blocks: int = 0
    peak_reserved: int = 0  # allocated + cached for reuse, at its highest


class _Block:
    """One device allocation: the host bytes behind one neuron storage."""

    __slots__ = ("ptr", "nbytes", "device", "host", "ref", "holder", "views")

    def __init__(self, ptr, nbytes, device, host, holder=None):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.host = host  # non-owning, non-resizable CPU UntypedStorage over the same bytes
        self.ref = None  # weak reference whose death means the neuron storage died
        self.holder = holder  # the CPU buffer behind it, returned to the cache when the storage dies
        self.views: dict = {}  # geometry -> a host view read by kernels (see read_view)


_lock = threading.RLock()
_blocks: dict[int, _Block] = {}
_stats: dict[int, DeviceMemoryStats] = {}
_capacity_override: int | None = None


def _device_stats(index: int) -> DeviceMemoryStats:
    st = _stats.get(index)
    if st is None:
        st = _stats[index] = DeviceMemoryStats()
    return st


# Freed buffers are cached by size and reused, like a device caching allocator: returning tens of
# MiB to the OS (munmap) and faulting fresh pages in again costs the host milliseconds that are an
# emulation artefact. What the cache holds counts as reserved memory; empty_cache() returns it.
# Buffers are reused only at their exact size, so the cache is bounded by what it can be expected to
# serve: no more than the memory in use (a loop frees and reallocates at most about what it holds)
# or POOL_FLOOR when that is less, and never more than POOL_BYTES; past that the buffers cached
# longest ago go first (the sizes of a shape a program has moved on from).
POOL_BYTES = int(os.environ.get("TRNSCOPE_HOST_CACHE_BYTES", str(4 << 30)))
POOL_FLOOR = int(os.environ.get("TRNSCOPE_HOST_CACHE_FLOOR", str(64 << 20)))
# (device, size) -> cached (sequence, holder, host storage) entries, oldest first: the CPU storage
# over a buffer is kept with it, so reusing a buffer builds no new storage object
_pool: dict[tuple[int, int], list[tuple[int, torch.Tensor, torch.UntypedStorage]]] = {}
_pooled: dict[int, int] = {}
_pooled_total = 0
_pool_seq = 0


def _on_free(key: int) -> None:
    global _pooled_total, _pool_seq
    dropped = None
    with _lock:
        blk = _blocks.pop(key, None)
        if blk is None:
            return
        st = _stats[blk.device]
        st.allocated -= blk.nbytes
        st.freed_total += blk.nbytes
        st.num_frees += 1
        st.blocks -= 1
        holder = blk.holder
        if holder is not None:
            blk.holder = None
            size = holder.numel()
            free = _pool.get((blk.device, size))
            if free is None:
                free = _pool[(blk.device, size)] = []
            _pool_seq += 1
            free.append((_pool_seq, holder, blk.host))
            _pooled[blk.device] = _pooled.get(blk.device, 0) + size
            _pooled_total += size
            budget = min(POOL_BYTES, max(POOL_FLOOR, sum(s.allocated for s in _stats.values())))
            if _pooled_total > budget:
                dropped = _evict(budget)
    if dropped:
        _release(dropped)


def _take_pooled(size: int, device: int):
    """A cached (holder, host storage) pair of ``size`` bytes for ``device``, or None (on the C++
    path: True, the buffer being taken out of the cache and dropped)."""
    global _pooled_total
    if _cpp is not None:
        return True if _cpp.take_pooled(size, device) else None
    with _lock:
        free = _pool.get((device, size))
        if not free:
            return None
        _pooled[device] -= size
        _pooled_total -= size
        _, holder, host = free.pop()
        return holder, host


def _evict(budget: int) -> list:
    """Take the buffers cached longest ago out of the cache until it holds ``budget`` bytes (lock held)."""
    global _pooled_total
    out: list[tuple] = []
    while _pooled_total > budget:
        key = min((k for k, v in _pool.items() if v), key=lambda k: _pool[k][0][0])
        _, holder, host = _pool[key].pop(0)
        _pooled[key[0]] -= key[1]
        _pooled_total -= key[1]
        out.append((holder, host))
    return out


def _drain(device: int | None = None) -> list:
    """Take every cached buffer (of ``device``) out of the cache (lock held by the caller)."""
    global _pooled_total
    out: list[tuple] = []
    for key in [k for k in _pool if device is None or k[0] == device]:
        entries = _pool.pop(key)
        out.extend((holder, host) for _, holder, host in entries)
        _pooled[key[0]] -= key[1] * len(entries)
        _pooled_total -= key[1] * len(entries)
    return out


def _release(buffers: list) -> None:
    """Give cached buffers back to the OS: emulator work, cut from the emulated clock."""
    if not buffers:
        return
    from .. import runtime

    with runtime.CLOCK.emulation():
        buffers.clear()


def empty_cache(device: int | None = None) -> None:
    if _cpp is not None:
        _cpp.empty_cache(-1 if device is None else device)
        return
    with _lock:
        dropped = _drain(device)
    _release(dropped)


caches.register("device.memory: freed buffers", empty_cache)


def cached_bytes(device: int = 0) -> int:
    if _cpp is not None:
        return _cpp.cached_bytes(device)
    with _lock:
        return _pooled.get(device, 0)


# --------------------------------------------------------------------------------------------
# capacity and statistics


def capacity(device: int = 0) -> int:
    """HBM bytes of one NeuronCore of the target in force (or the :func:`set_capacity` override)."""
    if _capacity_override is not None:
        return _capacity_override
    return int(get_spec().hbm_bytes_per_core)


def set_capacity(nbytes: int | None) -> int | None:
    """Override the device capacity (``None`` restores the hardware spec's). Returns the old one."""
    global _capacity_override
    old = _capacity_override
    _capacity_override = None if nbytes is None else int(nbytes)
    if _cpp is not None:  # the C++ eager path allocates too
        _cpp.set_capacity_override(-1 if nbytes is None else int(nbytes))
    return old


def stats(device: int = 0) -> DeviceMemoryStats:
    """A copy of the counters of ``device``."""
    if _cpp is not None:
        return DeviceMemoryStats(*_cpp.stats(device))
    with _lock:
        s = _device_stats(device)
        return DeviceMemoryStats(**{k: getattr(s, k) for k in s.__dataclass_fields__})


def allocated_bytes(device: int = 0) -> int:
    """Bytes allocated to live tensors on ``device``: one counter, read without copying the
    others (the profiler samples it at every execution)."""
    if _cpp is not None:
        return _cpp.allocated(device)
    st = _stats.get(device)
    return st.allocated if st is not None else 0


def reset_peak(device: int = 0) -> None:
    if _cpp is not None:
        _cpp.reset_peak(device)
        return
    with _lock:
        s = _device_stats(device)
        s.peak = s.allocated
        s.peak_blocks = s.blocks
        s.peak_reserved = s.allocated + _pooled.get(device, 0)


def nested_stats(device: int = 0) -> dict:
    """The counters of ``device`` nested as CUDA's allocator reports them
    (``stats["allocated_bytes"]["all"]["current"]``); "reserved" counts cached buffers too."""
    with _lock:
        s = stats(device)
        cached = cached_bytes(device)
        bytes_ = {"current": s.allocated, "peak": s.peak, "allocated": s.allocated_total, "freed": s.freed_total}
        blocks = {"current": s.blocks, "peak": s.peak_blocks, "allocated": s.num_allocs, "freed": s.num_frees}
        reserved = dict(bytes_, current=s.allocated + cached, peak=max(s.peak_reserved, s.allocated + cached))
        out: dict = {}
        for metric, values in (("allocated_bytes", bytes_), ("active_bytes", bytes_), ("requested_bytes", bytes_),
                               ("reserved_bytes", reserved), ("allocation", blocks), ("active", blocks),
                               ("segment", blocks)):
            out[metric] = {"all": dict(values)}
        out["num_alloc_retries"] = 0
        out["num_ooms"] = s.num_ooms
        out["num_device_alloc"] = s.num_allocs
        out["num_device_free"] = s.num_frees
        out["capacity_bytes"] = capacity(device)
        return out


def reset_accumulated(device: int = 0) -> None:
    if _cpp is not None:
        _cpp.reset_accumulated(device)
        return
    with _lock:
        s = _device_stats(device)
        s.allocated_total = s.freed_total = s.num_allocs = s.num_frees = s.num_ooms = 0


def _fmt(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


def _reserve(nbytes: int, device: int) -> None:
    """Account ``nbytes`` on ``device`` or raise OutOfMemoryError (lock held by the caller)."""
    global _multicore
    if device and not _multicore:
        _multicore = True
    st = _device_stats(device)
    cap = capacity(device)
    free = cap - st.allocated
    if nbytes > free:
        st.num_ooms += 1
        raise torch.OutOfMemoryError(
            f"NEURON out of memory. Tried to allocate {_fmt(nbytes)} ({nbytes} bytes) on "
            f"{BACKEND}:{device}. The NeuronCore has a total HBM capacity of {_fmt(cap)} "
            f"({cap} bytes) of which {_fmt(free)} ({free} bytes) is free; {_fmt(st.allocated)} "
            f"({st.allocated} bytes) is allocated to live tensors."
        )
    st.allocated += nbytes
    st.peak = max(st.peak, st.allocated)
    st.allocated_total += nbytes
    st.num_allocs += 1
    st.blocks += 1
    st.peak_blocks = max(st.peak_blocks, st.blocks)
    # reserved after this allocation: a cached buffer of the size will be reused, not added
    size = nbytes if nbytes > 0 else 1
    reserved = st.allocated + _pooled.get(device, 0) - (size if _pool.get((device, size)) else 0)
    if reserved > st.peak_reserved:
        st.peak_reserved = reserved


# --------------------------------------------------------------------------------------------
# allocation


def _import(holder: torch.Tensor, nbytes: int, device: int, host=None) -> torch.UntypedStorage:
    """Make the memory of ``holder`` (a 1-D CPU uint8 tensor of max(nbytes, 1) bytes nobody
    else uses) a neuron storage of ``nbytes`` bytes; ``nbytes`` is already reserved. ``host``:
    the CPU storage over the buffer if the caller has one already."""
    ptr = holder.data_ptr()
    if host is None or host.nbytes() != nbytes:
        host = torch._C._construct_storage_from_data_pointer(ptr, _CPU, nbytes)
    blk = _Block(ptr, nbytes, device, host, holder)
    with _lock:
        if ptr in _blocks:  # pragma: no cover - would mean two storages over one buffer
            _unreserve(nbytes, device)
            raise RuntimeError(f"trnscope: host buffer {ptr:#x} is already a neuron storage")
        _blocks[ptr] = blk
    try:
        tensor, blk.ref = _dlpack.import_host(holder, nbytes, device, partial(_on_free, ptr))
    except BaseException:
        with _lock:  # unless the export's deleter already returned it, undo the reservation
            if _blocks.pop(ptr, None) is not None:
                _unreserve(nbytes, device)
        raise
    return tensor.untyped_storage()


def _unreserve(nbytes: int, device: int) -> None:
    st = _device_stats(device)
    st.allocated -= nbytes
    st.blocks -= 1
    st.num_allocs -= 1
    st.allocated_total -= nbytes


def allocate(nbytes: int, device: int = 0) -> torch.UntypedStorage:
    """A new, uninitialised neuron storage of ``nbytes`` bytes on ``device``."""
    nbytes = int(nbytes)
    if _cpp is not None:
        return _cpp.allocate(nbytes, device, capacity(device))
    if nbytes < 0:
        raise RuntimeError(f"trnscope: negative allocation size {nbytes}")
    size = nbytes if nbytes > 0 else 1  # so that every live block has a distinct, non-null address
    with _lock:  # account first: an oversize request must not touch host memory
        _reserve(nbytes, device)
        cached = _take_pooled(size, device)
    host = None
    try:
        if cached is None:
            holder = _empty(size, dtype=torch.uint8)
        else:
            holder, host = cached
    except BaseException:
        with _lock:
            _unreserve(nbytes, device)
        raise
    return _import(holder, nbytes, device, host)


def adopt(cpu_storage: torch.UntypedStorage, device: int = 0) -> torch.UntypedStorage:
    """Turn a CPU storage nobody else holds into a neuron storage without copying its bytes."""
    if _cpp is not None:
        return _cpp.adopt(cpu_storage, device, capacity(device))
    nbytes = cpu_storage.nbytes()
    if nbytes == 0:
        return allocate(0, device)
    with _lock:
        _reserve(nbytes, device)
    holder = _empty(0, dtype=torch.uint8).set_(cpu_storage, 0, [nbytes], [1])
    return _import(holder, nbytes, device)


def storage_nbytes(size: Sequence[int], stride: Sequence[int], itemsize: int, offset: int = 0) -> int:
    """Bytes a storage needs to hold a tensor of this geometry (ATen's computeStorageNbytes)."""
    n = 1
    for s, st in zip(size, stride):
        if s == 0:
            return 0
        n += (s - 1) * st
    return (n + offset) * itemsize


def contiguous_strides(size: Sequence[int]) -> list[int]:
    strides = [1] * len(size)
    acc = 1
    for i in range(len(size) - 1, -1, -1):
        strides[i] = acc
        acc *= max(int(size[i]), 1)
    return strides


_set_storage_boxed = _SET_STORAGE._handle.redispatch_boxed


def set_metadata(t: torch.Tensor, storage, offset: int, size, stride) -> torch.Tensor:
    """Point ``t`` (a neuron tensor) at ``storage`` with this geometry; metadata only."""
    if _cpp is not None:
        return _cpp.set_metadata(t, storage, offset, list(size), list(stride))
    return _set_storage_boxed(_CPU_KEYSET, t, storage, offset, list(size), list(stride))


_view_dtype_boxed = torch.ops.aten.view.dtype._handle.redispatch_boxed
_templates: dict[int, torch.Tensor] = {}
_template_refs: list = []


def _template(device: int) -> torch.Tensor:
    """A 0-byte uint8 tensor on ``neuron:device``, to make new tensors of that device from.

    ``torch._C._acc.create_empty_tensor`` only makes ``neuron:0`` tensors, and ``set_`` refuses
    a storage of another device, so a tensor for ``neuron:k`` starts as a dtype view of this one
    (ATen's CPU kernel: a new TensorImpl, nothing allocated) and is then re-pointed. Its buffer
    is not device memory: it is never accounted."""
    t = _templates.get(device)
    if t is None:
        holder = torch.empty(1, dtype=torch.uint8)
        t, ref = _dlpack.import_host(holder, 0, device, lambda: None)
        _template_refs.append(ref)
        _templates[device] = t
    return t


def wrap(storage, dtype: torch.dtype, size, stride, offset: int = 0, device: int | None = None) -> torch.Tensor:
    """A new neuron tensor over ``storage`` (a neuron UntypedStorage; ``device``: its index, if
    the caller knows it)."""
    if _cpp is not None:
        return _cpp.wrap(storage, dtype, list(size), list(stride), offset)
    if device is None:
        device = storage.device.index
    if not device:
        t = torch._C._acc.create_empty_tensor([0], dtype)
    else:
        t = _view_dtype_boxed(_CPU_KEYSET, _template(device), dtype)
    return set_metadata(t, storage, offset, size, stride)


def empty_strided(size, stride, dtype: torch.dtype, device: int = 0) -> torch.Tensor:
    if type(size) is not list or type(stride) is not list:
        size = [int(s) for s in size]
        stride = [int(s) for s in stride]
    if _cpp is not None:
        return _cpp.empty_strided(size, stride, dtype, device, capacity(device))
    return wrap(allocate(storage_nbytes(size, stride, dtype.itemsize), device), dtype, size, stride, 0, device)


def empty(size, dtype: torch.dtype, device: int = 0) -> torch.Tensor:
    return empty_strided(size, contiguous_strides(size), dtype, device)


def host_storage(storage: torch.UntypedStorage) -> torch.UntypedStorage:
    """The CPU storage (non-owning, not resizable) over a neuron storage's bytes."""
    if _cpp is not None:
        host = _cpp.host_storage(storage)
        if host is not None:
            return host
    blk = _blocks.get(storage.data_ptr())
    if blk is None:
        if storage.nbytes() == 0:
            return torch.UntypedStorage(0)
        raise RuntimeError("trnscope: this neuron storage was not allocated by trnscope.device")
    return blk.host


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same bytes as neuron tensor ``t``: same dtype, sizes, strides, offset.

    Writes through it are writes to ``t`` (and every alias of ``t``). It does not keep ``t``'s
    memory alive.
    """
    if _cpp is not None:
        return _cpp.host_view(t)
    blk = _blocks.get(t.untyped_storage().data_ptr())
    if blk is None:
        if t.untyped_storage().nbytes() == 0:  # nothing to alias: any storage will do
            return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
        raise RuntimeError("trnscope: tensor storage was not allocated by trnscope.device")
    return _new_view(t, blk)


def _new_view(t: torch.Tensor, blk: _Block) -> torch.Tensor:
    v = _empty(0, dtype=t.dtype).set_(blk.host, t.storage_offset(), t.size(), t.stride())
    if t.is_conj():  # lazy conjugate / negative bits travel with the view
        v = torch._conj(v)
    if t.is_neg():
        v = torch._neg_view(v)
    return v


READ_VIEWS_PER_BLOCK = 8


def read_view(t: torch.Tensor) -> torch.Tensor:
    """:func:`host_view` for an argument a kernel only reads: one view per geometry of a storage,
    kept with its block and handed to every such read (a weight read by every step's matmul,
    an activation read by the next op). A kernel never changes the metadata of an argument it
    does not write, so a shared view keeps its geometry; arguments that are written (in-place,
    ``out=``, which a kernel may resize) take a fresh :func:`host_view`. (On the C++ path a fresh
    view costs less than the lookup, and every read takes one.)"""
    if _cpp is not None:
        return _cpp.host_view(t)
    blk = _blocks.get(t.untyped_storage().data_ptr())
    if blk is None:
        return host_view(t)
    key = (t.dtype, t.shape, t.stride(), t.storage_offset(), t.is_conj(), t.is_neg())
    views = blk.views
    v = views.get(key)
    if v is None:
        if len(views) >= READ_VIEWS_PER_BLOCK:  # a storage read through many geometries (slices)
            views.clear()
        v = views[key] = _new_view(t, blk)
    return v


def host_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A CPU uint8 tensor over every byte of a neuron storage."""
    hs = host_storage(storage)
    return _empty(0, dtype=torch.uint8).set_(hs, 0, [hs.nbytes()], [1])


def live_blocks(device: int | None = None) -> list[tuple[int, int, int]]:
    """(address, nbytes, device) of every live allocation, for snapshots and tests."""
    if _cpp is not None:
        return [tuple(b) for b in _cpp.live_blocks(-1 if device is None else device)]
    with _lock:
        return [(b.ptr, b.nbytes, b.device) for b in _blocks.values() if device is None or b.device == device]


# --------------------------------------------------------------------------------------------
# several NeuronCores


_multicore = False


def multicore() -> bool:
    """True once memory has been allocated on a NeuronCore other than 0."""
    if _cpp is not None:
        return _cpp.multicore()
    return _multicore


# --------------------------------------------------------------------------------------------
# pinned (page-locked) host memory
#
# On Trainium, as with CUDA, host memory the DMA engines may read directly is pinned; a copy from
# it to the device can overlap with host work (non_blocking=True). Here pinned memory is ordinary
# host memory that trnscope allocated and remembers as pinned: ``is_pinned()`` is True for it, and
# copies between it and the device with ``non_blocking=True`` do not make the host wait.

_pinned: dict[int, tuple[int, object]] = {}  # buffer address -> (bytes, weak reference)
_pinned_stats = {"current": 0, "peak": 0, "allocated": 0, "freed": 0, "count": 0}


def _unpin(ptr: int) -> None:
    with _lock:
        entry = _pinned.pop(ptr, None)
        if entry is not None:
            _pinned_stats["current"] -= entry[0]
            _pinned_stats["freed"] += entry[0]
            _pinned_stats["count"] -= 1


def pinned_storage(nbytes: int) -> torch.UntypedStorage:
    """A CPU storage of ``nbytes`` bytes in pinned host memory (freed when the storage dies)."""
    import weakref

    import numpy as np

    nbytes = int(nbytes)
    if _cpp is not None:  # ATen's pinned allocator: the C++ core's (PrivateUse1 hooks)
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).untyped_storage()
    # NumPy owns the buffer: torch.from_numpy keeps the array alive exactly as long as the
    # storage, and a weak reference to the array says when that was
    array = np.empty(max(nbytes, 1), dtype=np.uint8)
    storage = torch.from_numpy(array)[:nbytes].untyped_storage()
    ptr = array.ctypes.data
    def unpin(_ref: object, ptr: int = ptr) -> None:
        _unpin(ptr)

    ref = weakref.ref(array, unpin)
    with _lock:
        _pinned[ptr] = (nbytes, ref)
        _pinned_stats["current"] += nbytes
        _pinned_stats["allocated"] += nbytes
        _pinned_stats["count"] += 1
        _pinned_stats["peak"] = max(_pinned_stats["peak"], _pinned_stats["current"])
    return storage


def pinned_empty_strided(size, stride, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in pinned memory with this geometry."""
    size = [int(s) for s in size]
    stride = [int(s) for s in stride]
    if _cpp is not None:
        return torch.empty_strided(size, stride, dtype=dtype, pin_memory=True)
    st = pinned_storage(storage_nbytes(size, stride, dtype.itemsize))
    return torch.empty(0, dtype=dtype).set_(st, 0, size, stride)


def is_pinned(t: torch.Tensor) -> bool:
    """True if CPU tensor ``t`` lives in pinned memory trnscope allocated."""
    if t.device.type != "cpu":
        return False
    if _cpp is not None:
        return _cpp.is_pinned(t)
    return t.untyped_storage().data_ptr() in _pinned


def pinned_stats() -> dict[str, int]:
    if _cpp is not None:
        return dict(zip(("current", "peak", "allocated", "freed", "count"), _cpp.pinned_stats()))
    with _lock:
        return dict(_pinned_stats)


def empty_host_cache() -> None:
    """Pinned buffers are returned to the host as soon as their tensors die: nothing is cached."""
    return None
