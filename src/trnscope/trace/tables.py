"""The columnar tables of a Trace. Plain numpy columns; every row reference is a row number."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .args import ArgsColumn

# Instant scopes as Chrome writes them in "s": thread (default), process, global.
SCOPE_CODES = {"t": 0, "p": 1, "g": 2}
SCOPE_LETTERS = "tpg"


@dataclass(frozen=True, eq=False)
class SliceTable:
    """Complete events, sorted by (track, ts, longest first): a parent precedes its children and
    each track's rows are contiguous, ``track_offsets[t]:track_offsets[t+1]``."""

    ts_ns: np.ndarray  # int64
    dur_ns: np.ndarray  # int64, >= 0
    track: np.ndarray  # int32
    name: np.ndarray  # int32 id in Trace.strings
    cat: np.ndarray  # int32 id in Trace.strings
    depth: np.ndarray  # int32 nesting level within the track, 0 = outermost
    parent: np.ndarray  # int64 row of the enclosing slice, -1 at depth 0
    args: ArgsColumn
    track_offsets: np.ndarray  # int64, one more than the number of tracks

    def __len__(self) -> int:
        return len(self.ts_ns)

    @property
    def end_ns(self) -> np.ndarray:
        return self.ts_ns + self.dur_ns

    def rows_of_track(self, track_id: int) -> range:
        return range(int(self.track_offsets[track_id]), int(self.track_offsets[track_id + 1]))


@dataclass(frozen=True, eq=False)
class InstantTable:
    """Instant events (ph i/I), sorted by (track, ts)."""

    ts_ns: np.ndarray  # int64
    track: np.ndarray  # int32
    name: np.ndarray  # int32
    cat: np.ndarray  # int32
    scope: np.ndarray  # uint8 index into SCOPE_LETTERS
    args: ArgsColumn

    def __len__(self) -> int:
        return len(self.ts_ns)


@dataclass(frozen=True, eq=False)
class CounterTable:
    """Counter samples. A counter track holds one series per key of its events' args; samples are
    sorted by (series, ts) and series s owns rows ``series_offsets[s]:series_offsets[s+1]``."""

    series_track: np.ndarray  # int32, per series
    series_name: np.ndarray  # int32 string id, per series
    series: np.ndarray  # int32, per sample
    ts_ns: np.ndarray  # int64, per sample
    value: np.ndarray  # float64, per sample
    series_offsets: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.ts_ns)

    @property
    def series_count(self) -> int:
        return len(self.series_track)


@dataclass(frozen=True, eq=False)
class FlowTable:
    """Arrows between slices (CPU launch -> GPU kernel, forward -> backward), bound at load time
    to slice rows so following one is an array lookup."""

    flow_id: np.ndarray  # int64 id from the trace (unique per category and chain)
    name: np.ndarray  # int32
    cat: np.ndarray  # int32
    start_row: np.ndarray  # int64 slice row
    end_row: np.ndarray  # int64 slice row
    start_ts_ns: np.ndarray  # int64 where the trace put the endpoints
    end_ts_ns: np.ndarray  # int64
    end_next_slice: np.ndarray  # bool: end bound to the next slice, not the enclosing one (no bp "e")

    def __len__(self) -> int:
        return len(self.flow_id)
