"""The trace model: a Trace is a set of columnar tables plus its tracks and metadata.

Times are int64 nanoseconds on the trace's own clock (Kineto: microseconds since the epoch x 1000).
Row numbers are the only references between tables, so every lookup is an array index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .tables import CounterTable, FlowTable, InstantTable, SliceTable, SCOPE_LETTERS
from .segments import expand_ranges, searchsorted_segments
from .strings import StringTable
from .timeindex import LodResult, SliceIndex
from .tracks import Track, TrackKind

__all__ = ["Trace", "LodResult"]


class Trace:
    def __init__(
        self,
        *,
        slices: SliceTable,
        tracks: Sequence[Track],
        instants: InstantTable,
        counters: CounterTable,
        flows: FlowTable,
        strings: StringTable,
        metadata: dict | None = None,
        diagnostics: dict | None = None,
        source: str | None = None,
    ) -> None:
        self.slices = slices
        self.tracks = list(tracks)
        self.instants = instants
        self.counters = counters
        self.flows = flows
        self.strings = strings
        self.metadata = metadata if metadata is not None else {}
        # What the reader had to skip or repair (unpaired flows, unknown phases, ...), by name.
        self.diagnostics = diagnostics if diagnostics is not None else {}
        self.source = source
        self._index: SliceIndex | None = None
        # What analyses work out once per trace (the tracks' roles, ...), by the analysis's name.
        # A Trace is not changed after it is built, so nothing here goes stale.
        self.derived: dict[str, object] = {}

    def __repr__(self) -> str:
        return (
            f"Trace({self.source or 'in memory'}: {len(self.slices)} slices, {len(self.tracks)} tracks, "
            f"{len(self.instants)} instants, {len(self.counters)} counter samples, {len(self.flows)} flows)"
        )

    # --- time span -------------------------------------------------------------------------

    @property
    def start_ns(self) -> int:
        starts = [a.min() for a in (self.slices.ts_ns, self.instants.ts_ns, self.counters.ts_ns) if len(a)]
        return int(min(starts)) if starts else 0

    @property
    def end_ns(self) -> int:
        ends = [a.max() for a in (self.slices.end_ns, self.instants.ts_ns, self.counters.ts_ns) if len(a)]
        return int(max(ends)) if ends else 0

    # --- tracks ----------------------------------------------------------------------------

    def tracks_of_kind(self, *kinds: TrackKind) -> list[Track]:
        return [t for t in self.tracks if t.kind in kinds]

    def track_ids(self, *kinds: TrackKind) -> np.ndarray:
        return np.array([t.id for t in self.tracks_of_kind(*kinds)], dtype=np.int64)

    # --- queries ---------------------------------------------------------------------------

    @property
    def index(self) -> SliceIndex:
        """The per-level time index, built on first use (about a second per ten million slices)."""
        if self._index is None:
            self._index = SliceIndex(self.slices, len(self.tracks))
        return self._index

    def window(self, t0: int, t1: int, track_ids: Iterable[int] | None = None) -> np.ndarray:
        """Rows of the slices overlapping [t0, t1) ns, optionally only on some tracks, in row
        order. O(levels x log n + rows returned)."""
        return self.index.window(int(t0), int(t1), _ids(track_ids))

    def lod(self, t0: int, t1: int, buckets: int, track_ids: Iterable[int] | None = None) -> LodResult:
        """Level of detail for drawing [t0, t1) ns at ``buckets`` pixels: per track, depth and
        pixel, the longest slice starting there (slices begun before t0 count in the first pixel)
        and how many slices it stands for."""
        return self.index.lod(int(t0), int(t1), int(buckets), _ids(track_ids))

    def instant_window(self, t0: int, t1: int, track_ids: Iterable[int] | None = None) -> np.ndarray:
        """Rows of instants with t0 <= ts < t1, in row order (instants are sorted by track, ts)."""
        table = self.instants
        wanted = np.arange(len(self.tracks), dtype=np.int64) if track_ids is None else np.unique(np.asarray(_ids(track_ids)))
        wanted = wanted[(wanted >= 0) & (wanted < len(self.tracks))]
        bounds = np.searchsorted(table.track, np.arange(len(self.tracks) + 1)).astype(np.int64)
        first = searchsorted_segments(table.ts_ns, bounds, wanted, np.full(len(wanted), t0, np.int64), "left")
        stop = searchsorted_segments(table.ts_ns, bounds, wanted, np.full(len(wanted), t1, np.int64), "left")
        return expand_ranges(first, stop)

    def counter_window(self, t0: int, t1: int, series: Iterable[int] | None = None) -> np.ndarray:
        """Rows of counter samples in [t0, t1) plus, per series, the last sample before t0 (the
        value in force when the window opens)."""
        table = self.counters
        chosen = range(table.series_count) if series is None else series
        rows = []
        for s in chosen:
            lo, hi = int(table.series_offsets[s]), int(table.series_offsets[s + 1])
            ts = table.ts_ns[lo:hi]
            first = max(lo + int(np.searchsorted(ts, t0, side="right")) - 1, lo)
            stop = lo + int(np.searchsorted(ts, t1, side="left"))
            if first < stop:
                rows.append(np.arange(first, stop, dtype=np.int64))
        return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)

    # --- reading rows ----------------------------------------------------------------------

    def slice_names(self, rows: np.ndarray | None = None) -> np.ndarray:
        ids = self.slices.name if rows is None else self.slices.name[rows]
        return self.strings.lookup(ids)

    def slice_args(self, row: int) -> dict:
        return self.slices.args.get(row)

    def slice_record(self, row: int) -> dict:
        """Everything about one slice, as plain Python values (what a details pane shows)."""
        s = self.slices
        return {
            "row": int(row),
            "name": self.strings[int(s.name[row])],
            "cat": self.strings[int(s.cat[row])],
            "ts_ns": int(s.ts_ns[row]),
            "dur_ns": int(s.dur_ns[row]),
            "track": int(s.track[row]),
            "depth": int(s.depth[row]),
            "parent": int(s.parent[row]),
            "args": s.args.get(row),
        }

    def instant_record(self, row: int) -> dict:
        i = self.instants
        return {
            "row": int(row),
            "name": self.strings[int(i.name[row])],
            "cat": self.strings[int(i.cat[row])],
            "ts_ns": int(i.ts_ns[row]),
            "track": int(i.track[row]),
            "scope": SCOPE_LETTERS[int(i.scope[row])],
            "args": i.args.get(row),
        }

    def flows_from(self, row: int) -> np.ndarray:
        """Flow rows starting at slice ``row``."""
        return np.flatnonzero(self.flows.start_row == row)

    def flows_into(self, row: int) -> np.ndarray:
        """Flow rows ending at slice ``row``."""
        return np.flatnonzero(self.flows.end_row == row)

    def slice_arg_values(self, key: str, rows: np.ndarray | None = None) -> list:
        """One arg for many slices (None where absent). Decodes the rows' args (each compressed
        block once): use on selections or once per analysis, not per frame."""
        return [args.get(key) for args in self.slices.args.get_many(rows)]


def _ids(track_ids: Iterable[int] | None) -> np.ndarray | None:
    if track_ids is None or isinstance(track_ids, np.ndarray):
        return track_ids
    return np.fromiter((int(t) for t in track_ids), dtype=np.int64)
