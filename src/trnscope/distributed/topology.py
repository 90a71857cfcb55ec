"""Where each rank runs, and the hops a collective's ring crosses.

A rank is one process driving one NeuronCore, as TorchNeuron sets it up
(``NEURON_RT_VISIBLE_CORES=LOCAL_RANK``): node = torchrun's ``GROUP_RANK`` (the instance), NeuronCore
= ``LOCAL_RANK`` numbered across the instance's chips (chip ``LOCAL_RANK // cores_per_chip``). A group's
ring visits its ranks in placement order (node, chip, core), as a topology-aware runtime orders it, so
it crosses each kind of boundary as few times as possible.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hw import HardwareSpec
from ..hw.interconnect import InstanceTopology
from .whatif import LinkScale


@dataclass(frozen=True, order=True)
class Placement:
    node: int
    chip: int
    core: int

    def to_list(self) -> list[int]:
        return [self.node, self.chip, self.core]


@dataclass(frozen=True)
class Hop:
    kind: str             # "chip" | "neuronlink" | "efa"
    latency_ns: float
    bytes_per_s: float


def place(local_rank: int, node: int, spec: HardwareSpec, topo: InstanceTopology) -> Placement:
    per_chip = spec.cores_per_chip
    if not 0 <= local_rank < per_chip * topo.chips:
        raise ValueError(f"LOCAL_RANK {local_rank} does not fit on one {topo.instance}: it has {topo.chips} chips x "
                         f"{per_chip} NeuronCores = {topo.chips * per_chip} ranks per instance; use fewer processes "
                         f"per node (--nproc) and more nodes (--nnodes)")
    return Placement(node, local_rank // per_chip, local_rank % per_chip)


def hop_between(a: Placement, b: Placement, spec: HardwareSpec, topo: InstanceTopology,
                scale: LinkScale | None = None) -> Hop:
    scale = scale or LinkScale()
    if a.node != b.node:
        kind, lat, bw = "efa", topo.efa_hop_latency_ns, topo.efa_bytes_per_s_per_instance
    elif a.chip != b.chip:
        kind, lat, bw = "neuronlink", topo.neuronlink_hop_latency_ns, topo.neuronlink_bytes_per_s_per_chip
    else:
        kind, lat, bw = "chip", topo.chip_hop_latency_ns, spec.dma_bytes_per_s_per_core
    f = scale.factor(kind)
    return Hop(kind, lat * f, bw / f)


def ring_hops(placements: list[Placement], spec: HardwareSpec, topo: InstanceTopology,
              scale: LinkScale | None = None) -> list[Hop]:
    """The hops of the ring through ``placements`` (in placement order, closing back to the first)."""
    order = sorted(placements)
    n = len(order)
    if n < 2:
        return []
    return [hop_between(order[i], order[(i + 1) % n], spec, topo, scale) for i in range(n)]
