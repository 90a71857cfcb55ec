"""The explorer's page of a multi-rank run (``#/run/<id>``): every rank on the shared clock, each
collective linked across its ranks, who arrived last and how long the others waited, and the
compute/communication overlap of each rank. The numbers are :mod:`trnscope.analysis.ranks`'s, so
the page and ``trnscope summary RUN`` agree.

Runs are the folders under the explorer's roots that :func:`~trnscope.analysis.ranks.is_run`
recognises (``run.json`` from ``trnscope run --nproc N --profile RUN``, or ``rank_<r>/``
subfolders); the API names them by an opaque id, as it names entries.

``GET /api/runs``: the runs found; ``GET /api/runs/{id}``: one run's page data (:func:`payload`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from ..analysis.ranks import RUN_FILE, RunAnalysis, is_run, load_run
from .sessions import NotFound

MAX_DEPTH = 6
MAX_RUNS = 500
MAX_SLICES_PER_LANE = 20_000  # beyond this, neighbouring compute kernels are drawn as one
_SKIP = {"node_modules", "__pycache__", "site-packages", ".git", ".venv", "venv", "hta"}


class RunNotFound(NotFound):
    """No multi-rank run has this id (a 404, as for an unknown entry)."""


class Runs:
    """The multi-rank runs under the explorer's roots, and their page data (cached per run while
    none of its files changes)."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self._lock = threading.Lock()
        self._found: dict[str, Path] = {}
        self._payloads: dict[str, tuple[tuple, dict]] = {}

    def list(self) -> list[dict]:
        found: dict[str, Path] = {}
        for index, root in enumerate(self.roots):
            for path in _walk(root):
                if len(found) >= MAX_RUNS:
                    break
                found[run_id(index, path.relative_to(root).as_posix() if path != root else ".")] = path
        with self._lock:
            self._found = found
        return [{"id": rid, "name": _name(path, self.roots)} for rid, path in found.items()]

    def get(self, rid: str) -> dict:
        with self._lock:
            path = self._found.get(rid)
        if path is None:
            self.list()
            with self._lock:
                path = self._found.get(rid)
        if path is None:
            raise RunNotFound(f"no multi-rank run with id {rid!r}")
        stamp = _stamp(path)
        with self._lock:
            cached = self._payloads.get(rid)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        data = payload(load_run(path), _name(path, self.roots))  # a ProfileError says what is wrong (422)
        with self._lock:
            self._payloads[rid] = (stamp, data)
        return data


def run_id(root_index: int, relpath: str) -> str:
    """The opaque id of the run at ``relpath`` ("." for the root itself) under root ``root_index``."""
    return hashlib.sha256(f"{root_index}:{relpath}".encode()).hexdigest()[:16]


def _walk(root: Path, depth: int = 0):
    if not root.is_dir() or depth > MAX_DEPTH:
        return
    if is_run(root):
        yield root
        return  # a run's rank folders are not runs of their own
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return
    for child in children:
        if child.name.startswith(".") or child.name in _SKIP:
            continue
        yield from _walk(child, depth + 1)


def _name(path: Path, roots: list[Path]) -> str:
    for root in roots:
        if path == root:
            return path.name
        if path.is_relative_to(root):
            return path.relative_to(root.parent).as_posix()
    return path.name


def _stamp(path: Path) -> tuple:
    """What changes when any of the run's traces is rewritten."""
    out = []
    for p in sorted([path / RUN_FILE, *path.glob("**/trace.json")]):
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(out)


def payload(a: RunAnalysis, name: str) -> dict:
    """The page's data. Times are ns from the earliest event of any rank (the shared clock).

    * ``ranks``: per rank its placement and two lanes: ``compute`` ([start, duration, name index])
      and ``collectives`` ([arrival, transfer start, end, collective index]: the rank waits from its
      arrival until the last rank arrives, then the data moves);
    * ``collectives``: per collective its group, kind, sequence number, bytes, algorithm, device time,
      every rank's arrival and wait, the last rank and by how much it was late;
    * ``stragglers``, ``straggler``, ``overlap``, ``problems``: :class:`RunAnalysis`'s."""
    base = min(t.base_ns for t in a.traces.values())
    starts = []
    for t in a.traces.values():
        for e in t.doc.get("traceEvents", []):
            if e.get("ph") == "X" and "ts" in e:
                starts.append(t.abs_ns(e["ts"]))
    origin = min(starts) if starts else base
    names: dict[str, int] = {}
    index = {c.key: i for i, c in enumerate(a.collectives)}
    ranks = []
    end = origin
    for r, t in sorted(a.traces.items()):
        compute = _thin(sorted((t.abs_ns(e["ts"]) - origin, max(1, int(round(float(e.get("dur", 0)) * 1000))),
                                names.setdefault(e.get("name", "?"), len(names))) for e in t.compute()))
        coll = []
        for e in t.collectives():
            args = e["args"]
            kind = args.get("profiling_name", e["name"]).split(" ")[0]
            key = (args["Process Group Name"], kind, int(args["Seq"]))
            arrive = t.abs_ns(e["ts"]) - origin
            finish = t.abs_ns(float(e["ts"]) + float(e.get("dur", 0))) - origin
            transfer = arrive + max(0, int(args.get("transfer_start_ns", 0)) - int(args.get("arrival_ns", 0)))
            coll.append([arrive, min(transfer, finish), finish, index.get(key, -1)])
        coll.sort()
        for lane in (compute, coll):
            if lane:
                end = max(end, origin + max(x[0] + x[1] if lane is compute else x[2] for x in lane))
        meta = (t.doc.get("trnscope") or {}).get("distributed") or {}
        ranks.append({"rank": r, "complete": t.complete, "reason": t.reason,
                      "placement": {k: meta.get(k) for k in ("instance", "node", "chip", "neuron_core", "local_rank")},
                      "host_slowdown": meta.get("host_slowdown", 1.0), "compute": compute, "collectives": coll})
    rows = {(row["group"], row["collective"], row["seq"]): row for row in a.straggler_rows()}
    collectives = []
    for i, c in enumerate(a.collectives):
        first = next(iter(c.ranks.values()))["args"]
        arrivals = {}
        for r, e in c.ranks.items():
            arrivals[r] = a.traces[r].abs_ns(e["ts"]) - origin
        row = rows.get(c.key) or {}
        collectives.append({
            "id": i, "group": c.key[0], "kind": c.key[1].removeprefix("nccl:"), "seq": c.key[2], "name": c.name,
            "bytes": int(first.get("bytes", 0)), "algorithm": first.get("algorithm", ""),
            "duration_ns": int(first.get("device_time_ns", 0)), "group_ranks": c.expected,
            "link_shared_by": int(first.get("link_shared_by", 1)),
            "arrivals": {str(r): v for r, v in sorted(arrivals.items())},
            "waits": {str(r): int(w) for r, w in sorted((row.get("waits_ns") or {}).items())},
            "last_rank": row.get("last_rank"), "late_by_ns": int(row.get("late_by_ns", 0)),
            "others_wait_ns": int(row.get("others_wait_ns", 0)),
            "missing": sorted(set(c.expected) - set(c.ranks))})
    run = a.run or {}
    return {"name": name, "world_size": a.world_size, "origin_ns": str(origin), "span_ns": end - origin,
            "instance": next((rk["placement"]["instance"] for rk in ranks if rk["placement"].get("instance")), ""),
            "whatif": run.get("whatif") or {}, "script": run.get("script", ""), "problems": a.problems(),
            "names": list(names), "ranks": ranks, "collectives": collectives, "stragglers": a.stragglers(),
            "straggler": a.straggler(), "overlap": a.overlap()}


def _thin(slices: list[tuple]) -> list[list]:
    """At most :data:`MAX_SLICES_PER_LANE` slices: past that, neighbours closer than the lane's
    span over that count are drawn as one (named by the first)."""
    out = [list(s) for s in slices]
    if len(out) <= MAX_SLICES_PER_LANE:
        return out
    span = out[-1][0] + out[-1][1] - out[0][0]
    gap = span / MAX_SLICES_PER_LANE
    merged = [out[0]]
    for s in out[1:]:
        last = merged[-1]
        if s[0] - (last[0] + last[1]) <= gap:
            last[1] = max(last[1], s[0] + s[1] - last[0])
        else:
            merged.append(s)
    return merged
