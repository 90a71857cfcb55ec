"""Teaching what-ifs for multi-rank runs, from the environment.

* ``TRNSCOPE_RANK_SLOWDOWN=3:1.25[,5:2]``: rank 3's host is 25% slower: every modelled host cost of
  that rank (dispatch, submit, copies, compiles) is multiplied by 1.25. In ``real`` host-time mode
  the user's own Python is measured and is not scaled.
* ``TRNSCOPE_LINK_SLOWDOWN=2`` (every link) or ``efa:4,neuronlink:1.5,chip:1``: that kind of link is so
  many times slower (its bandwidth divided, its latency multiplied).
* ``TRNSCOPE_LINK_SHARING=0``: a collective has its links to itself, even when the other groups of its
  split run theirs at the same time (by default they share them, docs/cost-model.md "Link sharing").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

RANK_ENV = "TRNSCOPE_RANK_SLOWDOWN"
LINK_ENV = "TRNSCOPE_LINK_SLOWDOWN"
SHARING_ENV = "TRNSCOPE_LINK_SHARING"
LINK_KINDS = ("chip", "neuronlink", "efa")


class WhatIfError(ValueError):
    pass


def _factor(text: str, what: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise WhatIfError(f"{what}: {text!r} is not a number") from None
    if not f > 0:
        raise WhatIfError(f"{what}: the factor must be > 0 (got {text})")
    return f


def rank_slowdowns(raw: str | None = None) -> dict[int, float]:
    raw = os.environ.get(RANK_ENV, "") if raw is None else raw
    out: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        rank, sep, fac = part.partition(":")
        if not sep or not rank.strip().isdigit():
            raise WhatIfError(f"{RANK_ENV}={raw!r}: write RANK:FACTOR pairs, e.g. {RANK_ENV}=3:1.25")
        out[int(rank)] = _factor(fac, f"{RANK_ENV} rank {rank}")
    return out


@dataclass(frozen=True)
class LinkScale:
    factors: dict = field(default_factory=dict)

    def factor(self, kind: str) -> float:
        return self.factors.get(kind, 1.0)


def link_scale(raw: str | None = None) -> LinkScale:
    raw = os.environ.get(LINK_ENV, "") if raw is None else raw
    raw = raw.strip()
    if not raw:
        return LinkScale()
    if ":" not in raw:
        f = _factor(raw, LINK_ENV)
        return LinkScale({k: f for k in LINK_KINDS})
    out = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        kind, _, fac = part.partition(":")
        kind = kind.strip().lower()
        if kind not in LINK_KINDS:
            raise WhatIfError(f"{LINK_ENV}={raw!r}: unknown link {kind!r}; use {', '.join(LINK_KINDS)}")
        out[kind] = _factor(fac, f"{LINK_ENV} {kind}")
    return LinkScale(out)


def link_sharing(raw: str | None = None) -> bool:
    raw = (os.environ.get(SHARING_ENV, "1") if raw is None else raw).strip().lower()
    if raw in ("1", "on", "true", "yes", ""):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise WhatIfError(f"{SHARING_ENV}={raw!r}: write 1 (collectives of sibling groups share links) or 0")
