"""Build an :class:`OpCall` from a real ATen call: the one convention every lowering relies on.

- ``name``: ``aten::<op>`` plus ``.<overload>`` unless the overload is ``default``.
- ``inputs``: the call's tensor arguments in schema order (a Tensor[] argument contributes each of
  its tensors); an absent optional tensor, and a 0-dim CPU tensor in a call on device tensors (a
  Python number such as the ``1.0`` in ``x + 1.0``), contribute ``None``.
- ``attrs``: every non-tensor argument by its schema name (defaults filled in), such 0-dim CPU
  tensors by name as Python scalars, and ``<name>_count`` for each Tensor[] argument.
- ``outputs``: the tensors the op returns (for in-place and out= ops, the tensor it writes).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import caches
from ..isa import DType
from .lowering import OpCall
from .meta import TensorMeta

_TORCH_DTYPES = {
    torch.float32: DType.float32, torch.bfloat16: DType.bfloat16, torch.float16: DType.float16,
    torch.int32: DType.int32, torch.int64: DType.int64, torch.int16: DType.int16, torch.int8: DType.int8,
    torch.uint8: DType.uint8, torch.bool: DType.bool_, torch.float8_e4m3fn: DType.float8_e4m3,
}


class UnsupportedDtype(TypeError):
    pass


def device_dtype(dtype: torch.dtype) -> DType:
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise UnsupportedDtype(f"dtype {dtype} has no NeuronCore equivalent") from None


def meta_of(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(t.shape), tuple(t.stride()), device_dtype(t.dtype), t.storage_offset())


def op_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


_FUNCTIONAL: dict = {}
caches.register("compiler.opcall: functional names", _FUNCTIONAL.clear)


def functional_name(op: torch._ops.OpOverload) -> str:
    """The name of the functional overload an ``out=`` variant computes (``aten::add.out`` ->
    ``aten::add.Tensor``): the overload whose arguments are the same minus the out tensors.
    Kernels register under functional names; structured ops reach the device as out= calls."""
    cached = _FUNCTIONAL.get(op)
    if cached is not None:
        return cached
    schema = op._schema
    name = op_name(op)
    outs = [a for a in schema.arguments if a.is_out]
    if outs:
        want = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
        packet = getattr(torch.ops.aten, schema.name.split("::")[-1], None)
        for overload in (packet.overloads() if packet is not None else ()):
            cand = getattr(packet, overload)._schema
            if any(a.is_out for a in cand.arguments) or cand.is_mutable:
                continue
            if [(a.name, str(a.type)) for a in cand.arguments] == want:
                name = op_name(getattr(packet, overload))
                break
    _FUNCTIONAL[op] = name
    return name


_PLANS: dict = {}
caches.register("compiler.opcall: argument plans", _PLANS.clear)


def _plan(op: torch._ops.OpOverload) -> tuple:
    """Per-op schema facts, computed once: (position, name, is_tensor_typed, default or _NO_DEFAULT)."""
    plan = _PLANS.get(op)
    if plan is None:
        plan = _PLANS[op] = tuple(
            (i, a.name, "Tensor" in str(a.type), a.default_value if a.has_default_value() else None)
            for i, a in enumerate(op._schema.arguments) if not a.is_out)
    return plan


def from_aten(op: torch._ops.OpOverload, args: tuple, kwargs: dict, outputs) -> OpCall:
    inputs: list[TensorMeta | None] = []
    attrs: dict[str, Any] = {}
    # A 0-dim CPU tensor next to device tensors is a value (PyTorch allows it, e.g. `x + 1.0`);
    # in an all-CPU call (the kernel tests) it is a tensor like any other.
    on_device = any(t.device.type != "cpu" for t in _flat_tensors(args) + _flat_tensors(list(kwargs.values())))
    nargs = len(args)
    for i, name, tensor_typed, default in _plan(op):  # out= tensors are outputs, not inputs
        v = args[i] if i < nargs else kwargs.get(name, default)
        if isinstance(v, torch.Tensor):
            if on_device and v.dim() == 0 and v.device.type == "cpu":
                inputs.append(None)
                attrs[name] = v.item()
            else:
                inputs.append(meta_of(v))
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) or x is None for x in v):
            attrs[f"{name}_count"] = len(v)
            inputs.extend(meta_of(x) if x is not None else None for x in v)
        else:
            if tensor_typed:
                inputs.append(None)
            attrs[name] = _plain(v)
    outs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    out_metas = tuple(meta_of(o) for o in outs if isinstance(o, torch.Tensor))
    return OpCall.make(functional_name(op), inputs, out_metas, attrs)


def _flat_tensors(values) -> list[torch.Tensor]:
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, torch.Tensor))
    return out




def _plain(v: Any) -> Any:
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, (torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v
