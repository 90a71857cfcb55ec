"""How long a collective runs on the collective engines, from the ring's hops (docs/cost-model.md,
"Collectives").

A step of a ring algorithm moves one chunk across every hop at once, so it lasts as long as the
slowest hop: ``step(c) = max over hops of (latency + c / bandwidth)``. With p ranks and S bytes:

* all_reduce, ring: 2(p-1) steps of S/p (reduce-scatter then all-gather);
  tree: 2*ceil(log2 p) steps of S (reduce up a binary tree, broadcast down); the shorter is taken,
  as NCCL's and the Neuron runtime's tuners choose per size;
* all_gather (S = the gathered output), reduce_scatter (S = the whole input), all_to_all
  (S = the whole input, pairwise exchange), gather, scatter: p-1 steps of S/p;
* broadcast, reduce: min(tree: ceil(log2 p) steps of S, pipeline: p-1 latencies + S at the
  slowest hop's bandwidth, the chunked chain's limit);
* barrier: 2*ceil(log2 p) steps of 0 bytes;
* send/recv: one step of S over the hop between the two ranks.

The reduction arithmetic runs on the CC-cores at link rate (assumption: 20 CC-cores per Trainium2
chip [S2] keep up with the links; none of the sources gives their throughput).
"""

from __future__ import annotations

import math

from .topology import Hop

RING, TREE, PIPELINE, PAIRWISE, DIRECT = "ring", "tree", "pipeline", "pairwise", "direct"


def step_ns(hops: list[Hop], nbytes: float) -> float:
    if not hops:
        return 0.0
    return max(h.latency_ns + nbytes / h.bytes_per_s * 1e9 for h in hops)


def _log2(p: int) -> int:
    return max(1, math.ceil(math.log2(p))) if p > 1 else 0


def collective_ns(kind: str, nbytes: int, hops: list[Hop], p: int) -> tuple[int, str]:
    """(duration ns, algorithm) of collective ``kind`` over ``p`` ranks joined by ``hops``."""
    if p <= 1 or not hops:
        return 0, DIRECT
    if kind == "all_reduce":
        ring = 2 * (p - 1) * step_ns(hops, nbytes / p)
        tree = 2 * _log2(p) * step_ns(hops, nbytes)
        return (int(round(ring)), RING) if ring <= tree else (int(round(tree)), TREE)
    if kind in ("all_gather", "reduce_scatter", "gather", "scatter"):
        return int(round((p - 1) * step_ns(hops, nbytes / p))), RING
    if kind == "all_to_all":
        return int(round((p - 1) * step_ns(hops, nbytes / p))), PAIRWISE
    if kind in ("broadcast", "reduce"):
        tree = _log2(p) * step_ns(hops, nbytes)
        slow = min(h.bytes_per_s for h in hops)
        pipe = (p - 1) * max(h.latency_ns for h in hops) + nbytes / slow * 1e9
        return (int(round(tree)), TREE) if tree < pipe else (int(round(pipe)), PIPELINE)
    if kind == "barrier":
        return int(round(2 * _log2(p) * step_ns(hops, 0))), TREE
    if kind in ("send", "recv"):
        return int(round(step_ns(hops, nbytes))), DIRECT
    raise ValueError(f"no cost formula for collective {kind!r}")
