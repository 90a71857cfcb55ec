"""FSDP2 on ``neuron`` tensors.

FSDP2 frees an unsharded parameter's memory after use and brings it back before the next
all-gather with ``UntypedStorage.resize_`` (``free_storage`` / ``alloc_storage`` in
``torch.distributed.fsdp._fully_shard._fsdp_param``). For a PrivateUse1 storage, ``resize_`` calls
``PrivateUse1HooksInterface::resizePrivateUse1Bytes``: the device's C++ core implements it as ATen
resizes a CUDA storage (a new block, counted by the device's memory statistics; the old one
freed), so ``torch.neuron.memory_allocated()`` follows FSDP2's frees and re-allocations.

Without the C++ core (a machine that cannot build it) Python cannot provide that hook: there,
for neuron tensors, those two functions keep the bytes where they are (FSDP2 writes every
unsharded byte from the all-gather before reading it), and the memory statistics keep counting
a "freed" unsharded parameter.
"""

from __future__ import annotations

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    from ..device.memory import storages_resize_in_core

    if storages_resize_in_core():
        return
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    except ImportError:  # an older or newer torch without FSDP2 at this path
        return
    orig_alloc, orig_free = _fsdp_param.alloc_storage, _fsdp_param.free_storage

    def alloc_storage(tensor) -> None:
        if tensor.device.type != "neuron":
            orig_alloc(tensor)

    def free_storage(tensor) -> None:
        if tensor.device.type != "neuron":
            orig_free(tensor)

    _fsdp_param.alloc_storage = alloc_storage
    _fsdp_param.free_storage = free_storage
    _fsdp_param_group.alloc_storage = alloc_storage
