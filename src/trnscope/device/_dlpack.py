"""Owning PrivateUse1 storages from host memory, through DLPack and ctypes (no C++ build).

PyTorch gives a Python backend no way to register an allocator for PrivateUse1, but its DLPack
importer maps DLPack's ``kDLExtDev`` device to PrivateUse1 and builds a tensor whose storage owns
the DLPack buffer: the buffer's deleter runs when the last storage reference dies. This module
builds such a ``DLManagedTensor`` in ctypes memory around a host buffer we own, so that a
``neuron`` storage is an ordinary strided ATen storage (real data pointer, real aliasing) and we
hear about its death through a ctypes callback.

Everything here is private to :mod:`trnscope.device.memory`.
"""

from __future__ import annotations

import ctypes
from typing import Callable

import torch

K_DL_EXT_DEV = 12  # DLDeviceType.kDLExtDev, which ATen maps to DeviceType::PrivateUse1
K_DL_UINT = 1


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
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]
_NULL_DELETER = ctypes.cast(None, _DELETER)

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Managed:
    """The ctypes memory one DLPack import refers to; must outlive the storage built from it."""

    __slots__ = ("struct", "shape", "strides")

    def __init__(self, ptr: int, nbytes: int, device_index: int, key: int, deleter) -> None:
        self.shape = (ctypes.c_int64 * 1)(nbytes)
        self.strides = (ctypes.c_int64 * 1)(1)
        mt = _DLManagedTensor()
        dl = mt.dl_tensor
        dl.data = ptr
        dl.device = _DLDevice(K_DL_EXT_DEV, device_index)
        dl.ndim = 1
        dl.dtype = _DLDataType(K_DL_UINT, 8, 1)
        dl.shape = self.shape
        dl.strides = self.strides
        dl.byte_offset = 0
        mt.manager_ctx = key
        mt.deleter = deleter
        self.struct = mt

    def disarm(self) -> None:
        """Stop calling back into Python when the storage dies (used at interpreter exit)."""
        self.struct.deleter = _NULL_DELETER


def make_deleter(on_free: Callable[[int], None]):
    """A C callback that calls ``on_free(manager_ctx)``; keep the returned object alive."""

    def _cb(mt_ptr):  # runs on whichever thread drops the last storage reference
        try:
            on_free(mt_ptr.contents.manager_ctx)
        except BaseException:  # never let an exception escape into C++
            pass

    return _DELETER(_cb)


def import_buffer(managed: Managed) -> torch.Tensor:
    """A 1-D uint8 ``neuron`` tensor whose storage owns ``managed`` (via its deleter)."""
    capsule = _capsule_new(ctypes.addressof(managed.struct), b"dltensor", None)
    return torch._C._from_dlpack(capsule)
