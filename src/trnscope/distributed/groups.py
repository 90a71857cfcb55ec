"""Every process group of the run, known to every rank: the groups whose collectives run beside a
group's own and share its links (docs/cost-model.md, "Link sharing").

``new_group`` is entered by every rank of the world, and its store barrier releases them only after
each member has built its backend: the member of group rank 0 announces the group's global ranks in
the run's store while it builds it, so once ``new_group`` returns every rank can read every group
made so far. A group reads them at its first collective.
"""

from __future__ import annotations

import torch.distributed as dist

KEY = "trnscope/process_groups"


def _root(store):
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return store


def announce(store, ranks: list[int]) -> None:
    try:
        _root(store).append(KEY, ",".join(map(str, ranks)) + ";")
    except (RuntimeError, NotImplementedError, AttributeError):
        pass  # a store without append (a user's own): its groups' collectives share no links


def known(store) -> list[tuple[int, ...]]:
    root = _root(store)
    try:
        if not root.check([KEY]):
            return []
        raw = root.get(KEY).decode()
    except (RuntimeError, NotImplementedError, AttributeError):
        return []
    return [tuple(int(r) for r in g.split(",")) for g in raw.split(";") if g]


def siblings(groups: list[tuple[int, ...]], mine: list[int]) -> list[tuple[int, ...]]:
    """The groups of ``mine``'s split: as many ranks, none in common with it (the other rows of one
    DeviceMesh dimension, the other groups of one ``new_subgroups``). A program that runs the same
    code on every rank (SPMD) runs their collectives at the same time as ``mine``'s."""
    me = set(mine)
    out: list[tuple[int, ...]] = []
    for g in groups:
        if len(g) == len(me) and not me.intersection(g) and g not in out:
            out.append(g)
    return out
