"""Timeline views: a trace plus its lane layout, answering the browser's questions about it.

A :class:`TimelineView` serves both the system trace of a profile (or any Kineto trace) and the
device trace of one NEFF execution; they differ in layout and in what a slice's details add
(links to device traces, instruction dependencies). All times crossing the API are ns relative to
``origin``.
"""

from __future__ import annotations

import re
import threading
from operator import attrgetter
from typing import Callable

import numpy as np

from ..analysis.lanes import RUNTIME_CATEGORIES, extent
from ..trace import Trace
from .details import slice_details
from .layout import COUNTER, Layout, Lane
from .lod import RuntimeRows, counter_columns, instant_columns, series_columns, slice_columns, strings_for

MAX_PX = 8192
SELECTION_NAMES = 200
SEARCH_LIMIT = 5000  # matches returned at most (all are counted)
MAX_PATTERN = 500
# Lanes in the first level of detail sent with the layout: more than three screens of the
# smallest lanes (one nesting level, 22 px) on a 2160-px display.
INITIAL_LANES = 300
_TRACK = attrgetter("track")


class BadRequest(ValueError):
    """A query the API refuses (the message says which parameter and why)."""


class TimelineView:
    def __init__(self, trace: Trace, layout: Layout, origin: int | None = None,
                 series: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """``series``: values of counter lanes that are not counter tracks of the trace (memory
        lanes derived by the analyses), by series id: (ts_ns, value), time-sorted."""
        self.trace = trace
        self.layout = layout
        self.series = series or {}
        self.origin = int(trace.start_ns if origin is None else origin)
        self.lanes = {lane.id: lane for lane in layout.lanes}
        self._runtime: dict[int, RuntimeRows] = {}
        self._lock = threading.Lock()
        self._described: dict | None = None

    # --- layout ------------------------------------------------------------------------------

    def describe(self) -> dict:
        # the trace and its layout never change: worked out once (the span scans every event)
        if self._described is None:
            trace = self.trace
            start = trace.start_ns - self.origin if len(trace.slices) or len(trace.counters) else 0
            end = trace.end_ns - self.origin
            # the window a view opens on (and "Fit" returns to): what the expanded lanes hold. The
            # collapsed groups are the profiler's bookkeeping, whose session span starts with the
            # schedule's warm-up steps and whose stop marker can lie far after the last event
            # Counters are left out too: host CPU and memory are sampled for the whole session.
            collapsed = {g.id for g in self.layout.groups if g.collapsed}
            shown = extent(trace, {lane.track for lane in self.layout.lanes
                                   if lane.group not in collapsed and lane.kind != COUNTER})
            focus = (shown[0] - self.origin, shown[1] - self.origin) if shown else (start, end)
            self._described = {
                "color_order": self.color_order(),
                "origin_ns": str(self.origin),
                "start": start,
                "end": end,
                "focus_start": focus[0],
                "focus_end": focus[1],
                **self.layout.to_dict(),
            }
        return dict(self._described)

    def color_order(self, count: int = 64) -> list[str]:
        """The names slices are coloured by, most total time first: the browser gives them its
        distinct colours in this order, so the names that fill the screen never share one."""
        s = self.trace.slices
        if not len(s):
            return []
        key = s.cat if self.layout.color_by == "cat" else s.name
        total = np.bincount(key, weights=s.dur_ns.astype(np.float64), minlength=len(self.trace.strings))
        top = np.argsort(-total, kind="stable")[:count]
        return [self.trace.strings[int(i)] for i in top.tolist() if total[i] > 0 and self.trace.strings[int(i)]]

    def initial_lod(self, px: int) -> dict:
        """What the browser draws first: the focus window (with the 1% margin the timeline shows
        around it) at ``px`` pixels, for the first INITIAL_LANES lanes of groups shown expanded.
        Sent with the layout, it saves the first page load a round trip."""
        layout = self.describe()
        span = max(layout["focus_end"] - layout["focus_start"], 1000)
        shown = {g.id for g in self.layout.groups if not g.collapsed}
        # the lanes the first screens can show: the browser asks for the others as they scroll
        # into view (a trace with a thread per event has 200k lanes)
        lanes = [lane.id for lane in self.layout.lanes if lane.group in shown][:INITIAL_LANES]
        return self.lod(layout["focus_start"] - span * 0.01, layout["focus_end"] + span * 0.01, px, lanes)

    # --- level of detail ---------------------------------------------------------------------

    def lod(self, t0: float, t1: float, px: int, lane_ids: list[str] | None) -> dict:
        if not (t1 > t0):
            raise BadRequest("t1 must be greater than t0")
        if not 1 <= px <= MAX_PX:
            raise BadRequest(f"px must be between 1 and {MAX_PX}")
        a, b = self.origin + int(np.floor(t0)), self.origin + int(np.ceil(t1))
        lanes = self._lanes(lane_ids)
        plain = [lane for lane in lanes if lane.kind != COUNTER and not lane.runtime_only]
        out: dict[str, dict] = {}
        name_ids: list[list] = []
        if plain:
            tracks = np.fromiter(map(_TRACK, plain), dtype=np.int64, count=len(plain))
            result = self.trace.lod(a, b, px, track_ids=tracks)
            # the representatives come ordered by track: each lane's are one run of them, so the
            # columns are made once and cut per lane (no pass over all rows per lane)
            columns = slice_columns(self.trace, result.rows, result.merged, self.origin, self.layout.color_by)
            name_ids += [columns["name"], columns["color"]]
            by_track = self.trace.slices.track[result.rows]
            cuts = np.searchsorted(by_track, tracks, side="left").tolist()
            ends = np.searchsorted(by_track, tracks, side="right").tolist()
            for lane, lo, hi in zip(plain, cuts, ends):
                out[lane.id] = {key: column[lo:hi] for key, column in columns.items()}
        for lane in lanes:
            if lane.runtime_only:
                rows, merged = self._runtime_rows(lane.track).lod(a, b, px)
                columns = slice_columns(self.trace, rows, merged, self.origin, self.layout.color_by)
                columns["depth"] = np.zeros(len(rows), dtype=np.int32)  # runtime calls are leaves: one row
                out[lane.id] = columns
                name_ids += [columns["name"], columns["color"]]
            elif lane.kind == COUNTER and lane.source:
                out[lane.id] = {"series": {s["id"]: series_columns(*self.series[s["id"]], a, b, px, self.origin)
                                           for s in lane.series if s["id"] in self.series}}
            elif lane.kind == COUNTER:
                out[lane.id] = {"series": counter_columns(self.trace, [s["id"] for s in lane.series], a, b, px,
                                                          self.origin)}
        instants = instant_columns(self.trace, [lane.track for lane in plain], a, b, px, self.origin)
        for lane in plain:
            if lane.track in instants:
                out[lane.id]["instants"] = instants[lane.track]
                name_ids.append(instants[lane.track]["name"])
        return {"t0": t0, "t1": t1, "px": px, "lanes": out, "strings": strings_for(self.trace, *name_ids)}

    def _lanes(self, lane_ids: list[str] | None) -> list[Lane]:
        if lane_ids is None:
            return list(self.lanes.values())
        unknown = [i for i in lane_ids if i not in self.lanes]
        if unknown:
            raise BadRequest(f"unknown lane(s): {', '.join(unknown[:5])}")
        return [self.lanes[i] for i in lane_ids]

    def _runtime_rows(self, track: int) -> RuntimeRows:
        with self._lock:
            rows = self._runtime.get(track)
            if rows is None:
                ids = np.array([i for i in (self.trace.strings.id_of(c) for c in RUNTIME_CATEGORIES) if i is not None],
                               dtype=np.int32)
                rows = self._runtime[track] = RuntimeRows(self.trace, track, ids)
            return rows

    # --- search ------------------------------------------------------------------------------

    def search(self, text: str, regex: bool, lane_ids: list[str] | None, limit: int = SEARCH_LIMIT) -> dict:
        """Slices whose name matches ``text`` (a case-insensitive substring, or a regular
        expression when ``regex``), on the given lanes, in time order: the timeline steps through
        them with next/previous. The name table is matched once (a trace repeats few names), then
        the rows are a vectorised lookup."""
        if not text:
            raise BadRequest("search needs ?q=<text>")
        if len(text) > MAX_PATTERN:
            raise BadRequest(f"the search text is longer than {MAX_PATTERN} characters")
        if regex:
            try:
                pattern = re.compile(text, re.IGNORECASE)
            except re.error as exc:
                raise BadRequest(f"not a valid regular expression: {exc}") from None
            matches: Callable[[str], object] = pattern.search
        else:
            needle = text.lower()
            matches = lambda name: needle in name.lower()  # noqa: E731
        strings = self.trace.strings
        ids = np.array([i for i, name in enumerate(strings) if name and matches(name)], dtype=np.int64)
        lanes = [lane for lane in self._lanes(lane_ids) if lane.kind != COUNTER and not lane.runtime_only]
        tracks = np.array(sorted({lane.track for lane in lanes}), dtype=np.int64)
        s = self.trace.slices
        hit = np.isin(s.name, ids) & np.isin(s.track, tracks) if len(ids) and len(tracks) else np.zeros(len(s), bool)
        rows = np.flatnonzero(hit)
        rows = rows[np.argsort(s.ts_ns[rows], kind="stable")]
        shown = rows[:max(0, int(limit))]
        return {
            "query": text, "regex": bool(regex), "count": int(len(rows)), "truncated": bool(len(rows) > len(shown)),
            "names": int(len(ids)),
            "matches": {
                "row": shown, "ts": s.ts_ns[shown] - self.origin, "dur": s.dur_ns[shown],
                "depth": s.depth[shown], "lane": [f"t{t}" for t in s.track[shown].tolist()],
                "name": [strings[i] for i in s.name[shown].tolist()],
            },
        }

    # --- one slice ---------------------------------------------------------------------------

    def check_row(self, row: int) -> int:
        if not 0 <= row < len(self.trace.slices):
            raise BadRequest(f"no slice {row}")
        return row

    def slice_summary(self, row: int) -> dict:
        """What a details table lists about a slice (no args)."""
        s = self.trace.slices
        track = int(s.track[row])
        name, cat = self.trace.strings[int(s.name[row])], self.trace.strings[int(s.cat[row])]
        return {
            "row": int(row), "name": name, "cat": cat, "color_key": cat if self.layout.color_by == "cat" else name,
            "ts": int(s.ts_ns[row]) - self.origin, "dur": int(s.dur_ns[row]), "depth": int(s.depth[row]),
            "lane": f"t{track}", "lane_title": self.lane_title(track),
        }

    def lane_title(self, track: int) -> str:
        lane = self.lanes.get(f"t{track}")
        return lane.title if lane else self.trace.tracks[track].label

    def details(self, row: int) -> dict:
        return slice_details(self, self.check_row(row))

    def extra_details(self, row: int, details: dict) -> dict:
        """What a kind of view adds to a slice's details (overridden by subclasses)."""
        return {}

    # --- a time range ------------------------------------------------------------------------

    def select(self, t0: float, t1: float, lane_ids: list[str] | None) -> dict:
        if not (t1 > t0):
            raise BadRequest("t1 must be greater than t0")
        a, b = self.origin + int(np.floor(t0)), self.origin + int(np.ceil(t1))
        lanes = [lane for lane in self._lanes(lane_ids) if lane.kind != COUNTER and not lane.runtime_only]
        tracks = sorted({lane.track for lane in lanes})
        s = self.trace.slices
        rows = self.trace.window(a, b, tracks) if tracks else np.zeros(0, dtype=np.int64)
        clipped = np.minimum(s.ts_ns[rows] + s.dur_ns[rows], b) - np.maximum(s.ts_ns[rows], a)
        clipped = np.maximum(clipped, 0)
        own = _self_time(rows, clipped, s.parent[rows])
        names, inverse = np.unique(s.name[rows], return_inverse=True)
        total = np.bincount(inverse, weights=clipped, minlength=len(names))
        self_total = np.bincount(inverse, weights=own, minlength=len(names))
        count = np.bincount(inverse, minlength=len(names))
        # shares of the selected lanes' self time: nested slices are not counted twice (a thread
        # 37 levels deep once summed to 222%), so the shares of all names add up to 100%
        all_self = float(self_total.sum())
        order = np.argsort(-self_total, kind="stable")[:SELECTION_NAMES]
        lane_stats = []
        for lane in lanes:
            mine = rows[(s.track[rows] == lane.track) & (s.depth[rows] == 0)]
            busy = _union(np.maximum(s.ts_ns[mine], a), np.minimum(s.ts_ns[mine] + s.dur_ns[mine], b))
            lane_stats.append({"lane": lane.id, "title": lane.title, "slices": int(np.count_nonzero(s.track[rows] == lane.track)),
                               "busy_ns": busy, "busy_share": busy / (b - a)})
        return {
            "t0": t0, "t1": t1, "duration_ns": b - a, "slices": int(len(rows)),
            "self_ns": int(all_self),
            "names": [{"name": self.trace.strings[int(names[i])], "count": int(count[i]), "time_ns": int(total[i]),
                       "self_ns": int(self_total[i]), "share": float(self_total[i] / all_self) if all_self else 0.0}
                      for i in order.tolist()],
            "lanes": lane_stats,
        }


def _self_time(rows: np.ndarray, clipped: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each slice's time inside the window minus its children's (``rows`` sorted; a child
    overlapping the window means its parent, which contains it, does too)."""
    own = clipped.astype(np.float64).copy()
    if len(rows):
        at = np.searchsorted(rows, parents)
        inside = (parents >= 0) & (at < len(rows))
        inside &= rows[np.minimum(at, len(rows) - 1)] == parents
        np.subtract.at(own, at[inside], clipped[inside])
    return np.maximum(own, 0)


def _union(starts: np.ndarray, ends: np.ndarray) -> int:
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    gaps = np.maximum(0, s[1:] - reach[:-1]).sum()
    return int(max(0, reach[-1] - s[0] - gaps))
