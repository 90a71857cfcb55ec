"""A compiled graph that calls collectives: NEFF segments around them, in one compiled call.

A functional collective (``torch.ops._c10d_functional.*``: all_reduce, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single, broadcast, wait_tensor) cannot live inside a NEFF: it runs
on the collective engines, through the process group. The graph is split at each collective node
(``torch.fx.passes.split_module``, the original node order kept): every stretch of compute between
two collectives becomes its own NEFF (compiled and cached as any graph is), every collective node
runs through the ``neuron`` process group, which queues it on the collective engines; its
``wait_tensor`` orders the next NEFF after it on the device. Compute placed between a collective
and its wait overlaps it, as on a device.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.fx as fx

NAMESPACE = "_c10d_functional"


def is_collective(n: fx.Node) -> bool:
    return n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) \
        and n.target.namespace == NAMESPACE


def has_collectives(gm: fx.GraphModule) -> bool:
    return any(is_collective(n) for n in gm.graph.nodes)


class _Segment(torch.nn.Module):
    """A compute stretch as the split graph's submodule: its compiled callable."""

    def __init__(self, run: Callable) -> None:
        super().__init__()
        self.run = run

    def forward(self, *args):
        return self.run(*args)


def split(gm: fx.GraphModule, label: str, compile_segment: Callable) -> tuple[fx.GraphModule, int, int]:
    """``gm`` split at its collectives; ``compile_segment(sub_gm, example_inputs, label)`` compiles each
    compute stretch. Returns (the split graph, compute segments, collective nodes)."""
    from torch.fx.passes.split_module import split_module

    part: dict[fx.Node, int] = {}
    k = 0
    collectives = 0
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        if is_collective(n):
            collectives += 1
            k += 1
            part[n] = k
            k += 1
        else:
            part[n] = k
    parts = split_module(gm, gm, lambda n: part[n], keep_original_order=True)
    segments = 0
    for name, sub in list(parts.named_children()):
        if has_collectives(sub):
            continue  # runs op by op: the collective goes to the process group
        inputs = [n.meta.get("val") for n in sub.graph.nodes if n.op == "placeholder"]
        segments += 1
        setattr(parts, name, _Segment(compile_segment(sub, inputs, f"{label}_seg{segments}")))
    parts.recompile()
    return parts, segments, collectives
