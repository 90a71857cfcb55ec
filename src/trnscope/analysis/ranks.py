"""A multi-rank run as one: every rank's trace on the shared clock, collectives matched across ranks.

A run folder (``trnscope run --nproc N --profile RUN``) holds ``run.json`` and one profile per rank
under ``rank_<r>/``; any folder whose traces carry PyTorch's ``distributedInfo`` works (the rank is
read from it, as HTA does). Torch-free.

* :func:`load_run` reads each rank's framework trace; its collectives (device events with a
  process-group name and sequence number) are matched across ranks by (group, kind, sequence number).
* :meth:`RunAnalysis.stragglers`: per collective the rank that arrived last and how long the others
  waited; per rank how often it was last and the waiting it caused.
* :meth:`RunAnalysis.overlap`: per rank, the share of collective time that compute kernels overlap.
* :func:`merged_trace`: one Chrome JSON with every rank's processes (named ``rank r · ...``) on one
  time axis and a flow linking each collective across its ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..formats import profile as layout
from .profile import ProfileError

RUN_FILE = "run.json"
COMPUTE_CATS = ("privateuse1_driver",)


@dataclass
class RankTrace:
    rank: int
    path: Path
    doc: dict
    complete: bool
    reason: str = ""

    @property
    def base_ns(self) -> int:
        return int(self.doc.get("baseTimeNanoseconds", 0) or 0)

    def abs_ns(self, ts_us: float) -> int:
        return self.base_ns + int(round(float(ts_us) * 1000))

    def collectives(self) -> list[dict]:
        return [e for e in self.doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "kernel"
                and "Process Group Name" in (e.get("args") or {})]

    def compute(self) -> list[dict]:
        return [e for e in self.doc.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in COMPUTE_CATS]


@dataclass
class Collective:
    key: tuple                      # (process group, kind, seq)
    name: str
    ranks: dict = field(default_factory=dict)   # rank -> its device event

    def arrivals(self) -> dict[int, int]:
        return {r: int(e["args"].get("arrival_ns", 0)) for r, e in self.ranks.items()}

    @property
    def expected(self) -> list[int]:
        e = next(iter(self.ranks.values()))
        return list(e["args"].get("Process Group Ranks") or [])

    @property
    def shared_by(self) -> int:
        return int(next(iter(self.ranks.values()))["args"].get("link_shared_by", 1) or 1)

    def transfer(self, traces: dict) -> tuple[int, int]:
        """(start, end) of the data's transfer on the shared clock: the end less the device time."""
        r, e = next(iter(self.ranks.items()))
        end = traces[r].abs_ns(float(e["ts"]) + float(e.get("dur", 0)))
        return end - int(e["args"].get("device_time_ns", 0)), end


class RunAnalysis:
    def __init__(self, root: Path, traces: dict[int, RankTrace], run: dict | None) -> None:
        self.root, self.traces, self.run = root, traces, run or {}
        groups: dict[tuple, Collective] = {}
        for r, t in sorted(traces.items()):
            for e in t.collectives():
                a = e["args"]
                kind = a.get("profiling_name", e["name"]).split(" ")[0]
                key = (a["Process Group Name"], kind, int(a["Seq"]))
                c = groups.setdefault(key, Collective(key, e["name"]))
                c.ranks[r] = e
        self.collectives = [groups[k] for k in sorted(groups, key=lambda k: (min(
            int(e["args"].get("arrival_ns", 0)) for e in groups[k].ranks.values()), k))]

    # --- completeness -------------------------------------------------------------------------
    def problems(self) -> list[str]:
        out = []
        ws = self.world_size
        missing = [r for r in range(ws) if r not in self.traces]
        if missing:
            out.append(f"no profile from rank(s) {', '.join(map(str, missing))} (of {ws}): the run is incomplete")
        for r, t in sorted(self.traces.items()):
            if not t.complete:
                out.append(f"rank {r}'s profile is partial: {t.reason or 'the rank stopped early'}")
        if self.run and not self.run.get("complete", True):
            failed = self.run.get("failed_ranks") or {}
            out.append("the launcher recorded failed ranks: " + (", ".join(f"rank {k} ({v})" for k, v in failed.items())
                                                                   or "unknown"))
        unmatched = [c for c in self.collectives if set(c.expected) - set(c.ranks) and
                     all(r in self.traces for r in c.expected)]
        if unmatched:
            c = unmatched[0]
            out.append(f"{len(unmatched)} collective(s) not seen on every rank of their group, first "
                       f"{c.key[1]} #{c.key[2]} on {c.key[0]!r}: missing on rank(s) "
                       f"{', '.join(map(str, sorted(set(c.expected) - set(c.ranks))))}")
        alone = self.unshared()
        if alone:
            c = alone[0]
            out.append(f"{len(alone)} collective(s) timed with their links shared by sibling groups that did not "
                       f"run at the same time, first {c.key[1]} #{c.key[2]} on {c.key[0]!r} (the model's SPMD "
                       f"assumption, docs/cost-model.md \"Link sharing\"; TRNSCOPE_LINK_SHARING=0 times them alone)")
        return out

    def unshared(self) -> list[Collective]:
        """Collectives timed as sharing links with their sibling groups' (same size, no common rank,
        same kind and sequence number) when none of those ran at the same time."""
        out = []
        for c in self.collectives:
            if c.shared_by <= 1:
                continue
            mine = set(c.expected)
            a, b = c.transfer(self.traces)
            beside = [o for o in self.collectives if o is not c and o.key[1:] == c.key[1:]
                      and len(o.expected) == len(mine) and not mine.intersection(o.expected)]
            if not any(x < b and a < y for x, y in (o.transfer(self.traces) for o in beside)):
                out.append(c)
        return out

    @property
    def world_size(self) -> int:
        for t in self.traces.values():
            ws = (t.doc.get("distributedInfo") or {}).get("world_size")
            if ws:
                return int(ws)
        return len(self.traces)

    # --- stragglers ---------------------------------------------------------------------------
    def straggler_rows(self) -> list[dict]:
        """One row per collective: who arrived last, by how much, and the waiting of the others."""
        rows = []
        for c in self.collectives:
            arr = c.arrivals()
            if len(arr) < 2:
                continue
            last = max(arr, key=lambda r: (arr[r], -r))
            start = max(arr.values())
            waits = {r: start - a for r, a in arr.items()}
            second = sorted(arr.values())[-2]
            e = c.ranks[last]
            rows.append({"group": c.key[0], "collective": c.key[1], "seq": c.key[2], "name": c.name,
                         "last_rank": last, "late_by_ns": start - second, "others_wait_ns": sum(waits.values()),
                         "waits_ns": waits, "duration_ns": int(e["args"].get("device_time_ns", 0)),
                         "bytes": int(e["args"].get("bytes", 0)), "algorithm": e["args"].get("algorithm", "")})
        return rows

    def stragglers(self) -> list[dict]:
        """Per rank: collectives it reached last, the waiting it caused the others, its own waiting."""
        per = {r: {"rank": r, "last_count": 0, "caused_wait_ns": 0, "own_wait_ns": 0, "collectives": 0}
               for r in self.traces}
        for row in self.straggler_rows():
            for r, w in row["waits_ns"].items():
                per.setdefault(r, {"rank": r, "last_count": 0, "caused_wait_ns": 0, "own_wait_ns": 0,
                                   "collectives": 0})
                per[r]["own_wait_ns"] += w
                per[r]["collectives"] += 1
            if row["late_by_ns"] > 0:
                per[row["last_rank"]]["last_count"] += 1
                per[row["last_rank"]]["caused_wait_ns"] += row["others_wait_ns"]
        return sorted(per.values(), key=lambda d: (-d["caused_wait_ns"], d["rank"]))

    def straggler(self) -> int | None:
        """The rank that made the others wait most (None when nobody waited)."""
        top = self.stragglers()
        return top[0]["rank"] if top and top[0]["caused_wait_ns"] > 0 else None

    # --- overlap ------------------------------------------------------------------------------
    def overlap(self) -> list[dict]:
        """Per rank: collective time, how much of it compute kernels overlap, and the share."""
        out = []
        for r, t in sorted(self.traces.items()):
            comm = _merge([(t.abs_ns(e["ts"]), t.abs_ns(e["ts"] + e.get("dur", 0))) for e in t.collectives()])
            comp = _merge([(t.abs_ns(e["ts"]), t.abs_ns(e["ts"] + e.get("dur", 0))) for e in t.compute()])
            total = sum(b - a for a, b in comm)
            both = _intersection(comm, comp)
            out.append({"rank": r, "comm_ns": total, "compute_ns": sum(b - a for a, b in comp),
                        "overlap_ns": both, "overlap_percent": round(100.0 * both / total, 2) if total else 0.0})
        return out

    def to_dict(self) -> dict:
        return {"root": str(self.root), "world_size": self.world_size, "ranks": sorted(self.traces),
                "collectives": len(self.collectives), "problems": self.problems(),
                "stragglers": self.stragglers(), "straggler": self.straggler(), "overlap": self.overlap(),
                "per_collective": self.straggler_rows()}


def _merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersection(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            total += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


# --- finding and loading -------------------------------------------------------------------------
def is_run(path: Path) -> bool:
    """A multi-rank run folder: run.json, or rank_<r>/ subfolders."""
    path = Path(path)
    return path.is_dir() and ((path / RUN_FILE).is_file() or any(path.glob("rank_*/**/trace.json")))


def load_run(root) -> RunAnalysis:
    root = Path(root)
    run = None
    if (root / RUN_FILE).is_file():
        run = orjson.loads((root / RUN_FILE).read_bytes())
    traces: dict[int, RankTrace] = {}
    for path in sorted(root.glob(f"**/{layout.FRAMEWORK_TRACE}")):
        try:
            doc = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise ProfileError(path, f"not a JSON trace ({exc})",
                               "the rank's export was cut short or the file was damaged: profile the run again") from None
        info = doc.get("distributedInfo") or {}
        if "rank" not in info:
            continue
        r = int(info["rank"])
        meta = (doc.get("trnscope") or {}).get("distributed") or {}
        manifest = path.parent / layout.MANIFEST
        complete, reason = bool(meta.get("complete", True)), meta.get("incomplete", "")
        if manifest.is_file():
            m = orjson.loads(manifest.read_bytes())
            if not m.get("complete", True):
                complete, reason = False, reason or m.get("reason", "profile export incomplete")
        else:
            complete, reason = False, reason or "no manifest.json (the export did not finish)"
        prev = traces.get(r)
        if prev is None or path.stat().st_mtime > prev.path.stat().st_mtime:  # the newest window per rank
            traces[r] = RankTrace(r, path, doc, complete, reason)
    if not traces:
        raise ProfileError(root, "no rank traces (trace.json files with distributedInfo) found",
                           "profile the run with `trnscope run --nproc N --profile RUN script.py`")
    return RunAnalysis(root, traces, run)


# --- one trace of every rank ------------------------------------------------------------------------
def merged_trace(a: RunAnalysis) -> dict:
    """Every rank's events in one Chrome JSON on the shared clock: pids renumbered per rank, process
    names prefixed ``rank r · ``, a ``collective`` flow through each collective's ranks."""
    base = min(t.base_ns for t in a.traces.values())
    events: list[dict] = []
    where: dict[tuple, tuple] = {}
    for r, t in sorted(a.traces.items()):
        shift = (t.base_ns - base) / 1000.0
        pids: dict = {}

        def pid_of(p, pids=pids, r=r):
            if p not in pids:
                pids[p] = (r + 1) * 100_000 + len(pids)
            return pids[p]
        named = set()
        for e in t.doc.get("traceEvents", []):
            e = dict(e)
            if "pid" in e:
                e["pid"] = pid_of(e["pid"])
            if "ts" in e:
                e["ts"] = round(float(e["ts"]) + shift, 3)
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": f"rank {r} · {(e.get('args') or {}).get('name', '')}"}
                named.add(e["pid"])
            elif e.get("ph") == "M" and e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": r * 10_000_000 + int((e.get("args") or {}).get("sort_index", 0)) % 10_000_000}
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
                e["id"] = e["id"] * 1024 + r  # flows stay within their rank
            events.append(e)
        for p, new in pids.items():
            if new not in named:
                events.append({"ph": "M", "name": "process_name", "pid": new, "tid": 0,
                               "args": {"name": f"rank {r} · {'host' if isinstance(p, int) and p > 10_000 else p}"}})
        for e in t.collectives():
            a_ = e["args"]
            kind = a_.get("profiling_name", e["name"]).split(" ")[0]
            where[(a_["Process Group Name"], kind, int(a_["Seq"]), r)] = (pid_of(e["pid"]), e["tid"],
                                                                          round(float(e["ts"]) + shift, 3))
    for n, c in enumerate(a.collectives):
        hops = [where[(*c.key, r)] for r in sorted(c.ranks) if (*c.key, r) in where]
        if len(hops) < 2:
            continue
        fid = (1 << 50) + n
        for i, (pid, tid, ts) in enumerate(hops):
            ph = "s" if i == 0 else ("f" if i == len(hops) - 1 else "t")
            ev = {"ph": ph, "id": fid, "pid": pid, "tid": tid, "ts": ts, "cat": "collective",
                  "name": f"{c.key[1]} #{c.key[2]} ({c.key[0]})"}
            if ph == "f":
                ev["bp"] = "e"
            events.append(ev)
    first = a.traces[min(a.traces)].doc
    return {"schemaVersion": first.get("schemaVersion", 1), "baseTimeNanoseconds": base,
            "displayTimeUnit": "ns", "traceName": f"{a.root} (all {len(a.traces)} ranks)",
            "trnscope": {"clock": "emulated", "multirank": {k: v for k, v in a.to_dict().items()
                                                            if k != "per_collective"}},
            "traceEvents": events}


def hta_dir(a: RunAnalysis, path: Path | None = None) -> Path:
    """A folder HTA reads (it takes the ``.json`` files directly in ``trace_dir``): one link per rank,
    ``RUN/hta/rank_<r>.pt.trace.json``. ``hta.trace_analysis.TraceAnalysis(trace_dir=...)``."""
    path = Path(path or a.root / "hta")
    path.mkdir(parents=True, exist_ok=True)
    for r, t in a.traces.items():
        link = path / f"rank_{r}.pt.trace.json"
        if link.is_symlink() or link.exists():
            link.unlink()
        try:
            link.symlink_to(t.path.resolve())
        except OSError:  # no symlinks here: a copy
            link.write_bytes(t.path.read_bytes())
    return path


PERFETTO_ARCHIVE = "all_ranks.perfetto.tar"


def perfetto_archive(a: RunAnalysis, path: Path | None = None) -> Path:
    """One archive Perfetto (v58.2 and later: the UI, ``trace_processor``) opens as one timeline of
    every rank: each rank's trace as it is, and a ``perfetto_manifest`` naming one machine per rank
    (so the ranks' processes stay apart) and pinning each file's clockless Chrome JSON to rank 0's
    with the offset between their time bases (0 on one run's shared clock)."""
    import io
    import tarfile

    path = Path(path or a.root / PERFETTO_ARCHIVE)
    ranks = sorted(a.traces)
    ref = a.traces[ranks[0]]
    files = []
    for r in ranks:
        entry = {"path": f"rank_{r}.json", "machine": {"name": f"rank {r}"}}
        if r != ranks[0]:
            entry["clocks"] = {"sync_to": {"file": f"rank_{ranks[0]}.json"},
                               "offset_ns": a.traces[r].base_ns - ref.base_ns}
        files.append(entry)
    manifest = {"perfetto_manifest": {"version": 1, "files": files,
                                      "attributes": {"world_size": a.world_size, "source": "trnscope"}}}
    tmp = path.with_name(f".{path.name}.tmp")
    with tarfile.open(tmp, "w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("perfetto_manifest.json", orjson.dumps(manifest))
        for r in ranks:
            add(f"rank_{r}.json", a.traces[r].path.read_bytes())
    tmp.replace(path)
    return path


def write_merged(a: RunAnalysis, path: Path | None = None) -> Path:
    path = Path(path or a.root / "all_ranks.trace.json")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(orjson.dumps(merged_trace(a)))
    tmp.replace(path)
    return path
