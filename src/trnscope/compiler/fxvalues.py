"""The tensor value an FX graph node computes (its ``meta["val"]``), as the graph compiler and its
epilogue planner read it."""

from __future__ import annotations

import torch
import torch.fx as fx


class GraphCompileError(RuntimeError):
    pass


def tensor_of(node) -> torch.Tensor | None:
    """The tensor ``node`` computes; None for a non-node argument or a node without one."""
    v = node.meta.get("val") if isinstance(node, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def required_tensor(node) -> torch.Tensor:
    """The tensor ``node`` computes, which the compiler needs here."""
    v = tensor_of(node)
    if v is None:
        raise GraphCompileError(f"{getattr(node, 'name', node)}: no tensor value in the node's meta['val'] "
                                "(trace the graph with fake tensors, as torch.compile does)")
    return v
