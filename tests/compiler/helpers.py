"""Shared helpers of the kernel-library tests: seeded inputs, the lowering check, simulated time."""

from __future__ import annotations

import torch

from trnscope.compiler import lower
from trnscope.compiler.opcall import from_aten
from trnscope.compiler.verify import assert_lowering_matches
from trnscope.isa import Program
from trnscope.sim import simulate

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16]


def rand(*shape, dtype=torch.float32, seed=0, lo=-2.0, hi=2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g) * (hi - lo) + lo).to(dtype)


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def randint(lo, hi, shape, seed=0, dtype=torch.int64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=dtype)


def check(op, *args, rtol=None, atol=None, **kwargs) -> Program:
    """The op lowered and run in the interpreter matches PyTorch on CPU (verify's dtype tolerances)."""
    return assert_lowering_matches(op, args, kwargs, rtol=rtol, atol=atol)


def meta(*shape, dtype=torch.bfloat16) -> torch.Tensor:
    """A shape-only tensor: programs for timing need no data (and no CPU time computing it)."""
    return torch.empty(*shape, dtype=dtype, device="meta")


def program_for(op, *args, **kwargs) -> Program:
    out = op(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return lower(from_aten(op, args, kwargs, tuple(o for o in outs if isinstance(o, torch.Tensor))))


def sim_ns(op, *args, **kwargs) -> float:
    return simulate(program_for(op, *args, **kwargs)).total_ns


def summary(op, *args, **kwargs) -> dict:
    return simulate(program_for(op, *args, **kwargs)).summary


def run_call(call, inputs: list, outputs_like: list) -> list[torch.Tensor]:
    """Lower an OpCall built by hand and interpret it; ``inputs`` align with ``call.inputs``."""
    import numpy as np

    from trnscope import interp
    from trnscope.compiler.verify import span_array

    prog = lower(call)
    feeds = {f"in{i}": span_array(t) for i, t in enumerate(inputs) if t is not None}
    got = interp.run(prog, feeds)
    outs = []
    for i, ref in enumerate(outputs_like):
        arr = np.asarray(got[f"out{i}"])
        flat = torch.from_numpy(arr.astype(np.float32) if ref.dtype == torch.bfloat16 else arr)
        outs.append(torch.as_strided(flat, ref.shape, ref.stride(), 0).to(ref.dtype))
    return outs
