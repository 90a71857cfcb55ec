"""Register the PrivateUse1 backend as ``neuron`` through PyTorch's Python backend path.

The steps are those of ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``
(rename the backend, generate the ``.neuron()``/``.is_neuron`` methods, register the device
module, and the PrivateUse1 hooks and device guard: the C++ core's (:mod:`._core`), else the
Python ones), done one by one so that each failure says what went wrong, followed by the kernels
(``torch.library``), a storage deserializer for ``torch.load(..., map_location="neuron")`` and the
adaptations of torch internals the path needs (:mod:`.torch_adaptations`).
"""

from __future__ import annotations

import re

import torch

from . import _core, _devices, autocast, kernels, memory, neuron, torch_adaptations

BACKEND = _devices.BACKEND
_DEFAULT_NAME = "privateuseone"
_registered = False


class BackendConflictError(ImportError):
    """PrivateUse1 already belongs to another backend."""


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


_hooks = _Hooks()
_guard = _Guard()


def _conflict(detail: str) -> BackendConflictError:
    return BackendConflictError(
        f"trnscope cannot register the '{BACKEND}' device: {detail}. PyTorch has a single "
        "PrivateUse1 backend slot per process, and another backend took it first. Import trnscope "
        "in a process that does not load that backend (for TorchNeuron itself, set "
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0 so that torch_neuronx is not autoloaded)."
    )


def is_registered() -> bool:
    return _registered


def register() -> None:
    """Make ``neuron`` a PyTorch device backed by trnscope (idempotent)."""
    global _registered
    if _registered:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name == BACKEND and getattr(torch, BACKEND, None) is neuron:
        _registered = True
        return
    if name != _DEFAULT_NAME:
        raise _conflict(f"the PrivateUse1 backend is already registered as '{name}'")
    existing = getattr(torch, BACKEND, None)
    if existing is not None and existing is not neuron:
        raise _conflict(f"torch.{BACKEND} already exists ({existing!r})")

    if _core.CORE is not None and _core.CORE.hooks_registered():
        raise _conflict("PrivateUse1 hooks are already registered (a C++ backend is loaded)")
    torch.utils.rename_privateuse1_backend(BACKEND)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    torch._register_device_module(BACKEND, neuron)
    if _core.CORE is not None:  # guard, allocator, hooks and pinned memory registered in C++
        _core.install()
    else:
        if not torch._C._acc.register_python_privateuseone_hook(_hooks):
            raise _conflict("PrivateUse1 hooks are already registered (a C++ backend is loaded)")
        if not torch._C._acc.register_python_privateuseone_device_guard(_guard):
            raise _conflict("a PrivateUse1 device guard is already registered (a C++ backend is loaded)")
    kernels.register()
    autocast.register()
    torch.serialization.register_package(15, _location_tag, _restore_location)
    torch_adaptations.install(cpp=_core.CORE is not None)
    _registered = True


# --- torch.load(map_location="neuron") ---------------------------------------------------------


def _location_tag(obj):
    return None  # PyTorch's own PrivateUse1 tagger writes "neuron:0"


_LOCATION = re.compile(rf"^{BACKEND}(:\d+)?$")


def _restore_location(obj, location: str):
    if not _LOCATION.match(location):
        return None
    return storage_to_device(obj, location)


def storage_to_device(obj, device="neuron") -> torch.UntypedStorage:
    """A ``neuron`` copy of a CPU storage (untyped or typed)."""
    if isinstance(obj, torch.TypedStorage):
        obj = obj._untyped_storage
    index = _devices.index_of(device)
    dst = memory.allocate(obj.nbytes(), index)
    if obj.nbytes():
        src = obj if obj.device.type == "cpu" else obj.cpu()
        memory.host_bytes(dst).copy_(torch.empty(0, dtype=torch.uint8).set_(src))
    return dst


# --- torch.UntypedStorage(..., device="neuron") ------------------------------------------------

def storage_new(original):
    """``torch.UntypedStorage.__new__`` that builds ``neuron`` storages through trnscope's allocator:
    ``torch.UntypedStorage(n, device="neuron")`` asks ATen for the PrivateUse1 allocator, which a
    Python backend cannot register (applied by :mod:`.torch_adaptations`, "storage_new")."""

    def __new__(cls, *args, **kwargs):
        device = kwargs.get("device")
        if device is not None:
            dev = device if isinstance(device, torch.device) else torch.device(device)
            if dev.type == BACKEND:
                index = _devices.index_of(dev)
                if not args:
                    return memory.allocate(0, index)
                if len(args) == 1 and isinstance(args[0], int):
                    return memory.allocate(args[0], index)
                rest = {k: v for k, v in kwargs.items() if k != "device"}
                return storage_to_device(original(cls, *args, **rest), dev)
        return original(cls, *args, **kwargs)

    return __new__
