"""Where each rank runs, and the hops a collective's ring crosses.

A rank is one process driving one NeuronCore, as TorchNeuron sets it up
(``NEURON_RT_VISIBLE_CORES=LOCAL_RANK``): node = torchrun's ``GROUP_RANK`` (the instance), NeuronCore
= ``LOCAL_RANK`` numbered across the instance's chips (chip ``LOCAL_RANK // cores_per_chip``). A group's
ring visits its ranks in placement order (node, chip, core), as a topology-aware runtime orders it, so
it crosses each kind of boundary as few times as possible.

Links several rings cross at once share their bandwidth (docs/cost-model.md, "Link sharing"): a
hop is sent through a *port* (the sending core's DMA engines, the sending chip's NeuronLink, the
sending instance's EFA), and a port that ``k`` concurrent rings send through gives each ``1/k`` of
its bandwidth (:func:`shared_hops`).
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
    port: tuple = ()      # what sends it: ("chip", node, chip, core) | ("neuronlink", node, chip) | ("efa", node)
    shared_by: int = 1    # concurrent rings sending through the same port (bytes_per_s is this ring's share)


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
    port: tuple[str | int, ...]
    if a.node != b.node:
        kind, lat, bw, port = "efa", topo.efa_hop_latency_ns, topo.efa_bytes_per_s_per_instance, ("efa", a.node)
    elif a.chip != b.chip:
        kind, lat, bw = "neuronlink", topo.neuronlink_hop_latency_ns, topo.neuronlink_bytes_per_s_per_chip
        port = ("neuronlink", a.node, a.chip)
    else:
        kind, lat, bw = "chip", topo.chip_hop_latency_ns, spec.dma_bytes_per_s_per_core
        port = ("chip", a.node, a.chip, a.core)
    f = scale.factor(kind)
    return Hop(kind, lat * f, bw / f, port)


def ring_hops(placements: list[Placement], spec: HardwareSpec, topo: InstanceTopology,
              scale: LinkScale | None = None) -> list[Hop]:
    """The hops of the ring through ``placements`` (in placement order, closing back to the first)."""
    order = sorted(placements)
    n = len(order)
    if n < 2:
        return []
    return [hop_between(order[i], order[(i + 1) % n], spec, topo, scale) for i in range(n)]


def shared_hops(mine: list[Hop], others: list[list[Hop]]) -> list[Hop]:
    """``mine`` with each hop's bandwidth divided among the rings (``mine`` and ``others``, running at
    the same time) that send through its port."""
    users: dict[tuple, int] = {}
    for ring in [mine, *others]:
        for port in {h.port for h in ring}:
            users[port] = users.get(port, 0) + 1
    return [Hop(h.kind, h.latency_ns, h.bytes_per_s / users[h.port], h.port, users[h.port])
            if users[h.port] > 1 else h for h in mine]
