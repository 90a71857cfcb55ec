"""Kernel registrations for the PrivateUse1 (``neuron``) dispatch key.

All of them forward to :func:`trnscope.device.dispatch.execute`: a boxed fallback catches every
op that has no PrivateUse1 kernel and no composite kernel, and explicit registrations cover the
ops that must be special (see :data:`trnscope.device.host.SPECIAL`) because ATen has no generic
kernel for them that could reach the fallback.

A handful of ATen ops have both a CPU kernel and a composite "math" kernel: CompositeExplicit
(``native_layer_norm``, ``native_group_norm``, ``addr``, ``any.dims``...), which the dispatcher
prefers to a backend fallback, or CompositeImplicit with an autograd formula (``silu_backward``,
``mish_backward``), which autograd uses for a backend without a kernel of its own. Either way they
would decompose on ``neuron`` into other ops, with numbers that differ from CPU in the last bit.
Like CUDA, which has its own kernels for them, ``neuron`` takes them whole: they are registered
explicitly too (:func:`host_backed_composites`).

Structured ops (``add.Tensor``, ``exp``, ``sum.dim_IntList``, ``mm``...) have a generated
CompositeExplicitAutogradNonFunctional kernel that a backend without a kernel of its own gets:
it allocates the output (``aten::empty``/``empty_strided``) and calls the ``out=`` variant, so
each functional op would cost two Python kernel calls (and two trips through :func:`execute`).
``neuron`` registers the functional overloads of these ops itself (:func:`functional_structured`):
one call of ``execute`` per op, whose host side allocates the output from device memory and runs
the ``out=`` kernel (:mod:`.host`), as the composite would have. In-place variants keep the
composite, which is already a single ``out=`` call.

With the C++ core these Python kernels are registered for PrivateUse2 instead, and the C++ core's
kernel takes PrivateUse1 (device/csrc/eager.cpp): it serves a call with a dispatch plan, an
allocation or a view itself, and redispatches every other call to PrivateUse2, where these
kernels take it as they would on the Python path.

Two registrations do not call ``execute`` themselves: ``_to_copy`` on PrivateUse1 is a Python
copy of ATen's composite (which would ask for pinned memory), so its pieces reach ``execute``;
and ``_copy_from`` is also taken on the Conjugate/Negative keys, where it does call ``execute``.
"""

from __future__ import annotations

import traceback

import torch

from . import _core, dispatch, host, memory

KEY = "PrivateUse1"
COLD_KEY = "PrivateUse2"  # the Python kernels' key on the C++ path (the C++ kernel redispatches to it)

_fallback_lib: torch.library.Library | None = None
_impl_lib: torch.library.Library | None = None


def _release(exc: BaseException) -> None:
    """After an out-of-memory error, drop the device tensors our frames hold (as the exception's
    traceback would keep them alive), so that freeing the user's tensors frees the device."""
    traceback.clear_frames(exc.__traceback__)


def _fallback(op, *args, **kwargs):
    try:
        return dispatch.execute(op, args, kwargs)
    except torch.OutOfMemoryError as exc:
        del args, kwargs
        _release(exc)
        raise


def _forward(op):
    def kernel(*args, **kwargs):
        try:
            return dispatch.execute(op, args, kwargs)
        except torch.OutOfMemoryError as exc:
            del args, kwargs
            _release(exc)
            raise

    kernel.__name__ = f"neuron_{op.name().replace('::', '_').replace('.', '_')}"
    return kernel


_BIT_AWARE = (torch.ops.aten._copy_from.default, torch.ops.aten._copy_from_and_resize.default)


def _to_copy(self, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    """ATen's CompositeExplicitAutograd ``_to_copy``, with the pinned host memory of
    :mod:`.pinned` where ATen would ask the C++ pinned allocator a Python backend cannot register:
    like ATen, a non-blocking copy from the device to the CPU lands in pinned memory (so the host
    need not wait for it). A decomposition, like the composite it replaces: its allocation and copy
    reach ``execute``."""
    if layout is not None and layout != torch.strided:
        raise RuntimeError(f"neuron tensors cannot be copied to layout {layout}")
    dtype = self.dtype if dtype is None else dtype
    device = self.device if device is None else torch.device(device)
    pin = (bool(pin_memory) or bool(non_blocking)) and device.type == "cpu"
    if memory_format is None or memory_format == torch.preserve_format:
        out = torch.empty_like(self, dtype=dtype, device=device, memory_format=torch.preserve_format)
    else:
        out = torch.empty(self.size(), dtype=dtype, device=device, memory_format=memory_format)
    if pin:
        out = memory.pinned_empty_strided(out.size(), out.stride(), out.dtype)
    out.copy_(self, non_blocking=non_blocking)
    return out


def register() -> None:
    """Install the kernels (once); the libraries live as long as the process."""
    global _fallback_lib, _impl_lib
    if _fallback_lib is not None:
        return
    cpp = _core.CORE
    key = KEY if cpp is None else COLD_KEY
    fb = torch.library.Library("_", "IMPL")
    fb.fallback(_fallback, key)
    impl = torch.library.Library("aten", "IMPL")
    names = [op.name()[len("aten::"):] for op in
             dict.fromkeys(list(host.SPECIAL) + host_backed_composites() + functional_structured())]
    for name in names:
        impl.impl(name, _forward(_overload("aten::" + name)), key)
    if cpp is not None:
        cpp.register_kernels(names)
    # ATen's conjugate/negative fallbacks would materialise a lazily conjugated source before
    # _copy_from, by a clone that copies through _copy_from again: endless recursion. The host
    # copy handles the bits itself (host views carry them), so take these copies as they are.
    for op in _BIT_AWARE:
        for key in ("Conjugate", "Negative"):
            impl.impl(op.name()[len("aten::"):], _forward(op), key)
    if _core.CORE is None:  # with the C++ core's pinned allocator, ATen's own _to_copy serves
        impl.impl("_to_copy", _to_copy, KEY)
    _fallback_lib, _impl_lib = fb, impl


def _overload(name: str):
    packet, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def host_backed_composites() -> list:
    """ATen ops with a CPU kernel that would otherwise decompose on PrivateUse1 (see above)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    ops = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not has(name, "CPU"):
            continue
        if has(name, "CompositeExplicitAutograd") or (
            has(name, "CompositeImplicitAutograd") and has(name, "Autograd")
        ):
            op = _overload(name)
            if op not in host.SPECIAL:
                ops.append(op)
    return sorted(ops, key=lambda o: o.name())


def functional_structured() -> list:
    """Functional ATen ops (no out=, no mutation, no aliased result) with a CPU kernel that would
    reach PrivateUse1 through their CompositeExplicitAutogradNonFunctional wrapper (see above)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    ops = []
    for name in torch._C._dispatch_get_all_op_names():
        if not (name.startswith("aten::") and has(name, "CPU")
                and has(name, "CompositeExplicitAutogradNonFunctional")):
            continue
        op = _overload(name)
        schema = op._schema
        if schema.is_mutable or any(a.is_out for a in schema.arguments) or any(
                r.alias_info is not None for r in schema.returns) or op in host.SPECIAL:
            continue
        ops.append(op)
    return sorted(ops, key=lambda o: o.name())


def registered_ops() -> list[str]:
    """Names of the ops with an explicit PrivateUse1 kernel of ours."""
    return sorted({op.name() for op in list(host.SPECIAL) + host_backed_composites() + functional_structured()})
