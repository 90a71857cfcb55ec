"""Prove a lowering computes what PyTorch computes: run the op on CPU, lower it, execute the
Program in the interpreter on the same inputs, compare. Used by the kernel tests."""

from __future__ import annotations

import numpy as np
import torch

from ..hw import HardwareSpec
from ..isa import Program
from .lowering import lower, runtime_scalars
from .opcall import from_aten
from .scalars import runtime_values, scalar_inputs

TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (5e-3, 5e-3)}


def span_array(t: torch.Tensor) -> np.ndarray:
    """The storage span a view covers, as the flat array a Program's HBM tensor binds."""
    span = 1 + sum(st * (sz - 1) for st, sz in zip(t.stride(), t.shape) if st > 0) if t.numel() else 0
    flat = torch.as_strided(t, (max(span, 1),), (1,), t.storage_offset())
    return _np(flat)


def _np(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return t.detach().numpy().copy()


def run_lowered(op, args: tuple, kwargs: dict | None = None, spec: HardwareSpec | None = None):
    """(program, expected outputs, interpreted outputs as tensors shaped like the expected ones)."""
    from .. import interp

    kwargs = kwargs or {}
    cloned = tuple(a.clone() if isinstance(a, torch.Tensor) and op._schema.is_mutable else a for a in args)
    expected = op(*cloned, **kwargs)
    outs = expected if isinstance(expected, (tuple, list)) else (expected,)
    call = from_aten(op, args, kwargs, outs)
    program: Program = lower(call, spec)
    feeds = {}
    k = 0
    flat_tensors = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            flat_tensors.append(a)
        elif isinstance(a, (list, tuple)):
            flat_tensors.extend(x for x in a if isinstance(x, torch.Tensor))
    for meta, t in zip([m for m in call.inputs], _aligned(call, flat_tensors)):
        if meta is not None:
            feeds[f"in{k}"] = span_array(t)
        k += 1
    feeds.update(scalar_inputs(program, runtime_values(call, runtime_scalars(call.name))))
    got = interp.run(program, feeds, spec=spec)
    results = []
    for i, ref in enumerate(o for o in outs if isinstance(o, torch.Tensor)):
        flat = torch.from_numpy(np.asarray(got[f"out{i}"]).astype(np.float32) if ref.dtype == torch.bfloat16
                                else np.asarray(got[f"out{i}"]))
        view = torch.as_strided(flat, ref.shape, ref.stride(), 0).to(ref.dtype)
        results.append(view)
    return program, [o for o in outs if isinstance(o, torch.Tensor)], results


def _aligned(call, tensors):
    """Pair each OpCall input slot with its tensor (None slots consume a wrapped number)."""
    it = iter(tensors)
    out = []
    for meta in call.inputs:
        if meta is None:
            out.append(None)
            continue
        t = next(it)
        while t.dim() == 0 and t.device.type == "cpu" and meta.shape != ():
            t = next(it)
        out.append(t)
    return out


def assert_lowering_matches(op, args: tuple, kwargs: dict | None = None, spec: HardwareSpec | None = None,
                            rtol: float | None = None, atol: float | None = None) -> Program:
    program, expected, got = run_lowered(op, args, kwargs, spec)
    for ref, out in zip(expected, got):
        r, a = TOLERANCES.get(ref.dtype, (0, 0))
        torch.testing.assert_close(out, ref, rtol=rtol if rtol is not None else r,
                                   atol=atol if atol is not None else a, equal_nan=True,
                                   msg=lambda m: f"{program.name}: {m}")
    return program
