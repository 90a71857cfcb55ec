"""Details of one slice: its record, its call stack, and the dependency chain through flows.

The chain is what Neuron Explorer's Dependency Chain Viewer shows: following flow arrows
upstream (framework op -> runtime call -> hardware execution, read backwards) and downstream. A
framework op does not start a flow itself (its runtime call, a child, does), so downstream starts
from the slice and everything nested in it; upstream ends report the op enclosing the first
runtime call, since that is the op a user recognises.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..analysis.lanes import FRAME_CATEGORIES, RUNTIME_CATEGORIES

MAX_CHAIN = 200


def slice_details(view, row: int) -> dict:
    trace = view.trace
    record = trace.slice_record(row)
    summary = view.slice_summary(row)
    out = {
        **summary,
        "args": record["args"],
        "stack": _stack(view, row),
        "upstream": _chain(view, [row], upstream=True),
        "downstream": _chain(view, _subtree(trace, row), upstream=False),
    }
    out.update(view.extra_details(row, out))
    return out


def _stack(view, row: int) -> list[dict]:
    """Enclosing slices, outermost first."""
    s = view.trace.slices
    chain: list[dict] = []
    parent = int(s.parent[row])
    while parent >= 0 and len(chain) < 64:
        chain.append(view.slice_summary(parent))
        parent = int(s.parent[parent])
    return chain[::-1]


def _subtree(trace, row: int) -> list[int]:
    s = trace.slices
    track_rows = s.rows_of_track(int(s.track[row]))
    end = int(s.ts_ns[row] + s.dur_ns[row])
    lo = row
    hi = int(np.searchsorted(s.ts_ns[track_rows.start:track_rows.stop], end, side="right")) + track_rows.start
    candidates = np.arange(lo, hi, dtype=np.int64)
    inside = (s.depth[candidates] > s.depth[row]) & (s.ts_ns[candidates] + s.dur_ns[candidates] <= end)
    return [row, *candidates[inside].tolist()[:2000]]


def _chain(view, seeds: list[int], upstream: bool) -> list[dict]:
    """Slices reached by following flows from ``seeds`` (breadth first), each with the op that
    encloses it when that differs (so a runtime call is shown with its framework op)."""
    f = view.trace.flows
    if not len(f):
        return []
    here, there = (f.end_row, f.start_row) if upstream else (f.start_row, f.end_row)
    seen = set(seeds)
    queue = deque(seeds)
    out: list = []
    while queue and len(out) < MAX_CHAIN:
        current = queue.popleft()
        for k in np.flatnonzero(here == current).tolist():
            nxt = int(there[k])
            if nxt in seen:
                continue
            seen.add(nxt)
            queue.append(nxt)
            item = view.slice_summary(nxt)
            item["flow"] = view.trace.strings[int(f.cat[k])]
            item["from_row"] = int(current)
            item["from"] = view.slice_summary(int(current))
            op = _enclosing_op(view, nxt)
            if op is not None:
                item["op"] = op
            out.append(item)
    return out


def _enclosing_op(view, row: int) -> dict | None:
    """The nearest enclosing slice that is neither a runtime call nor a Python frame."""
    trace = view.trace
    s = trace.slices
    skip = {i for i in (trace.strings.id_of(c) for c in RUNTIME_CATEGORIES | FRAME_CATEGORIES) if i is not None}
    if int(s.cat[row]) not in skip:
        return None
    parent = int(s.parent[row])
    while parent >= 0 and int(s.cat[parent]) in skip:
        parent = int(s.parent[parent])
    return view.slice_summary(parent) if parent >= 0 else None
