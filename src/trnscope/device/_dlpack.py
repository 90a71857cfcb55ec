"""Owning PrivateUse1 storages over host memory, through DLPack (no C++ build).

PyTorch gives a Python backend no way to register an allocator for PrivateUse1, but its DLPack
importer maps DLPack's ``kDLExtDev`` device to PrivateUse1 and builds a tensor whose storage owns
the DLPack buffer: the producer's deleter runs when the last storage reference dies. So a host
buffer becomes device memory like this:

1. a CPU uint8 tensor over the buffer (64-byte aligned, from PyTorch's CPU allocator) is viewed
   as a NumPy array (zero copy) and exported with NumPy's ``__dlpack__``;
2. the exported ``DLManagedTensor``'s device is relabelled ``kDLExtDev`` (ctypes, in place);
3. ``torch._C._from_dlpack`` imports it: a ``neuron`` storage with the buffer's address.

NumPy's deleter is C code: it drops the array (and with it the buffer) when the storage dies, and
leaks instead if the interpreter is gone. We hear of the death through a weak reference to the
array, whose callback CPython runs with any pending exception saved and restored, so a storage
freed while an exception unwinds through C++ does not disturb that exception (a ctypes callback
as deleter would: it cannot run while an error is set).

Everything here is private to :mod:`trnscope.device.memory`.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Callable

import torch

K_DL_EXT_DEV = 12  # DLDeviceType.kDLExtDev, which ATen maps to DeviceType::PrivateUse1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


_DEVICE_OFFSET = _DLManagedTensor.dl_tensor.offset + _DLTensor.device.offset
_devices: dict[int, ctypes.Array] = {}


def _device_bytes(device_index: int) -> ctypes.Array:
    """The DLDevice (kDLExtDev, index) as raw bytes, built once per index."""
    raw = _devices.get(device_index)
    if raw is None:
        raw = _devices[device_index] = (ctypes.c_int32 * 2)(K_DL_EXT_DEV, device_index)
    return raw


def import_host(
    holder: torch.Tensor, nbytes: int, device_index: int, on_free: Callable[[], None]
) -> tuple[torch.Tensor, weakref.ref]:
    """A 1-D uint8 ``neuron`` tensor of ``nbytes`` bytes over the memory of ``holder``.

    ``holder`` is a contiguous 1-D CPU uint8 tensor of at least max(nbytes, 1) bytes; the neuron
    storage keeps its memory alive. ``on_free()`` runs once that storage has died. Keep the
    returned weak reference alive for as long as you want to hear about it.
    """
    array = holder.numpy()
    capsule = array.__dlpack__()
    address = _capsule_pointer(capsule, b"dltensor")
    # every allocation passes here: write the device with one memmove rather than through
    # ctypes field descriptors
    ctypes.memmove(address + _DEVICE_OFFSET, _device_bytes(device_index), 8)
    if nbytes != holder.shape[0]:
        dl = _DLManagedTensor.from_address(address).dl_tensor
        if dl.ndim != 1 or dl.data != holder.data_ptr() or dl.byte_offset != 0:  # pragma: no cover
            raise RuntimeError("trnscope: unexpected DLPack export from NumPy")
        dl.shape[0] = nbytes

    def _dead(_ref, on_free=on_free):
        try:
            on_free()
        except BaseException:  # never let bookkeeping fail a deallocation
            pass

    ref = weakref.ref(array, _dead)
    del array
    return torch._C._from_dlpack(capsule), ref
