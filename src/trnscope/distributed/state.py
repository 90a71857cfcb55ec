"""This process's place in the run: its rank, where every rank runs, the what-ifs in force."""

from __future__ import annotations

import os

import torch

from ..hw import get_spec
from ..hw.interconnect import topology_for
from . import cost, whatif
from .topology import Placement, hop_between, place, ring_hops, shared_hops


class RankState:
    def __init__(self) -> None:
        self.spec = get_spec()
        self.topology = topology_for(self.spec, os.environ.get("TRNSCOPE_INSTANCE"))
        self.links = whatif.link_scale()
        self.sharing = whatif.link_sharing()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "-1"))
        self.node = int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0")) or 0)
        self.placements: dict[int, Placement] = {}
        self.rank = -1
        self.world_size = 1
        self.slowdown = 1.0
        self.incomplete: str | None = None   # why this rank's profile may be partial
        self._durations: dict[tuple, tuple[int, str, int]] = {}
        self.info: dict | None = None        # distributedInfo of the world group (PyTorch's keys)

    # --- set up by the first process group ------------------------------------------------------
    def join(self, gloo, rank: int, size: int) -> None:
        """Exchange (rank, node, local rank) with every rank of the world group; apply the what-ifs."""
        if self.placements:
            return
        from ..profiling import correlate

        local = self.local_rank if self.local_rank >= 0 else rank
        mine = torch.tensor([rank, self.node, local, correlate.epoch_offset_ns()], dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(size)]
        gloo.allgather([out], [mine]).wait()
        for row in out:
            g, node, lr, _ = (int(v) for v in row.tolist())
            self.placements[g] = place(lr, node, self.spec, self.topology)
        # one epoch axis for every rank's files: rank 0's (its host's boot-time offset; on one host
        # every process has the same one, give or take the reading's few ns)
        correlate.SHARED_EPOCH_OFFSET_NS = next(int(r[3]) for r in out if int(r[0]) == 0)
        self.rank, self.world_size = rank, size
        self.info = {"backend": "neuron", "rank": rank, "world_size": size, "pg_count": 1, "pg_config": []}
        factor = whatif.rank_slowdowns().get(rank)
        if factor is not None:
            from ..runtime.hostcost import host_costs, set_host_costs

            set_host_costs(host_costs().scaled(factor))
            self.slowdown = factor

    def placement(self, rank: int) -> Placement:
        return self.placements.get(rank) or Placement(0, 0, rank)

    def default_core(self) -> int:
        from ..device.neuron import current_device

        return current_device()

    # --- timing -------------------------------------------------------------------------------
    def duration(self, kind: str, nbytes: int, ranks: list[int], beside=()) -> tuple[int, str, int]:
        """(ns, algorithm, the most rings sharing one of its links) of a collective over ``ranks``
        while the groups ``beside`` run the same collective (their rings share ports with it)."""
        key = (kind, nbytes, tuple(ranks), tuple(beside))
        known = self._durations.get(key)
        if known is None:
            if len(self._durations) > 4096:
                self._durations.clear()
            known = self._durations[key] = self._duration(kind, nbytes, ranks, beside)
        return known

    def _duration(self, kind: str, nbytes: int, ranks: list[int], beside) -> tuple[int, str, int]:
        places = [self.placement(r) for r in ranks]
        if kind in ("send", "recv"):
            hops = [hop_between(places[0], places[1], self.spec, self.topology, self.links)]
        else:
            hops = ring_hops(places, self.spec, self.topology, self.links)
            if self.sharing and beside:
                hops = shared_hops(hops, [ring_hops([self.placement(r) for r in g], self.spec, self.topology,
                                                    self.links) for g in beside])
        ns, algo = cost.collective_ns(kind, nbytes, hops, len(ranks))
        return ns, algo, max((h.shared_by for h in hops), default=1)

    def metadata(self) -> dict:
        p = self.placement(self.rank)
        return {"rank": self.rank, "world_size": self.world_size, "instance": self.topology.instance,
                "node": p.node, "chip": p.chip, "neuron_core": p.core,
                "local_rank": self.local_rank if self.local_rank >= 0 else self.rank,
                "host_slowdown": self.slowdown, "link_slowdown": dict(self.links.factors),
                "link_sharing": self.sharing,
                "complete": self.incomplete is None, **({"incomplete": self.incomplete} if self.incomplete else {})}


_STATE: RankState | None = None


def rank_state() -> RankState:
    global _STATE
    if _STATE is None:
        _STATE = RankState()
    return _STATE


def reset() -> None:
    global _STATE
    _STATE = None
