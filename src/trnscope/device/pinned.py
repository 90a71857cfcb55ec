"""Pinned host memory for the ``neuron`` device: ``pin_memory()``, ``is_pinned()``,
``torch.empty(..., pin_memory=True)``.

ATen gets pinned memory from ``PrivateUse1HooksInterface::getPinnedMemoryAllocator`` (C++), and
asks ``isPinnedPtr`` whether memory is pinned. The hooks class a Python backend registers
(``torch._C._acc.PrivateUse1Hooks``) cannot override either: the first raises "You should
register PrivateUse1HooksInterface ... and implement getPinnedMemoryAllocator", the second
answers False. So trnscope provides pinned memory one level up, from Python:

* ``aten::_pin_memory`` and ``aten::is_pinned`` get CPU kernels (their only kernels were
  CompositeExplicitAutograd ones, so no existing CPU kernel is replaced): ``t.pin_memory()`` copies
  into pinned memory from :func:`trnscope.device.memory.pinned_storage`, ``is_pinned()`` looks the
  storage up. DataLoader's ``pin_memory=True`` goes through ``t.pin_memory()``.
* the factories whose C++ path asks the pinned allocator directly (``empty``, ``empty_strided``,
  ``zeros``, ``ones``, ``full``, ``tensor`` and the ``*_like`` ones) are wrapped at the
  ``torch.<name>`` level: with ``pin_memory=True`` they build the tensor unpinned and move it into
  pinned memory; every other call goes straight to the original. Factories not listed here
  (``torch.rand``, ``torch.arange``...) still fail with PyTorch's error on ``pin_memory=True``.
"""

from __future__ import annotations

import functools

import torch

from . import memory

BACKEND = "neuron"
# the factories whose C++ path asks the pinned allocator directly: name -> whether it fills
FACTORIES = {**dict.fromkeys(("zeros", "ones", "full", "tensor", "zeros_like", "ones_like", "full_like"), True),
             **dict.fromkeys(("empty", "empty_strided", "empty_like"), False)}
_lib: torch.library.Library | None = None


def _check_target(device) -> None:
    if device is not None and torch.device(device).type not in (BACKEND, "cpu"):
        raise RuntimeError(f"trnscope pins host memory for the {BACKEND} device, not for {device}: "
                           f"call pin_memory() or pin_memory('{BACKEND}')")


def _pin_memory_cpu(self, device=None):
    _check_target(device)
    out = memory.pinned_empty_strided(self.size(), self.stride(), self.dtype)
    out.copy_(self)
    return out


def _is_pinned_cpu(self, device=None):
    _check_target(device)
    return memory.is_pinned(self)


def _pin_memory_device(self, device=None):
    raise RuntimeError(f"cannot pin '{self.type()}': only dense CPU tensors can be pinned "
                       f"(this tensor is on {self.device}; pinned memory is host memory)")


def _is_pinned_device(self, device=None):
    return False


def wrap_factory(original, name: str, fill: bool):
    """``torch.<name>`` that serves ``pin_memory=True`` from :mod:`.memory`'s pinned memory
    (applied by :mod:`.torch_adaptations`, "pinned_factories")."""

    @functools.wraps(original)
    def factory(*args, **kwargs):
        if not kwargs.get("pin_memory"):
            return original(*args, **kwargs)
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "cpu":
            raise RuntimeError(f"torch.{name}(..., pin_memory=True): only CPU tensors can be pinned, "
                               f"not tensors on {device}; leave out device= (pinned memory is host memory)")
        kwargs = dict(kwargs, pin_memory=False)
        requires_grad = kwargs.pop("requires_grad", False)
        t = original(*args, **kwargs)
        out = memory.pinned_empty_strided(t.size(), t.stride(), t.dtype)
        if fill:
            out.copy_(t)
        return out.requires_grad_(True) if requires_grad else out

    return factory


def kernels_registered() -> bool:
    return _lib is not None


def register_kernels() -> None:
    """The pinning kernels (once; applied by :mod:`.torch_adaptations`, "pin_kernels")."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_pin_memory", _pin_memory_cpu, "CPU")
    lib.impl("is_pinned", _is_pinned_cpu, "CPU")
    lib.impl("_pin_memory", _pin_memory_device, "PrivateUse1")
    lib.impl("is_pinned", _is_pinned_device, "PrivateUse1")
    _lib = lib
