"""Turn one chunk of Kineto/Chrome events into builder columns.

This touches every event of a trace, so the common chunk (events decoded by eventschema.py into
slotted objects) is handled column-wise: each field is pulled out with ``map`` over the whole chunk
(a C loop, no Python frame per event), events are split by phase with numpy, names, categories and
tracks are interned with one dict lookup each, args are kept as the raw JSON text the file holds,
and timestamps are converted with numpy. Phases other than X and flows (B/E, i/I, C, M: rare in
real traces) go through the per-event dict loop, which is also what reads chunks that did not
decode into the schema. Event kinds handled: X, B/E, i/I, C, M, s/t/f; others are counted in the
trace's diagnostics and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from itertools import repeat
from operator import attrgetter, eq, itemgetter

import numpy as np
import orjson

from .args import MAX_ARGS_DEPTH, JoinedJSON
from .builder import TraceBuilder
from .errors import TraceFormatError
from .eventschema import UNSET, Event, as_dict
from .flows import PHASE_FINISH, PHASE_START, PHASE_STEP
from .tables import SCOPE_CODES
from .timeunits import TIME_LIMIT_US, as_times, float_us_loses_ns, parse_ns_values, us_to_ns

_FLOW_PHASES = {"s": PHASE_START, "t": PHASE_STEP, "f": PHASE_FINISH}
_TIMED_PHASES = frozenset("XBEiICstf")
_EVENT_HINT = "Fix or remove that event, or re-export the trace"

# Phase codes for splitting a chunk: flows are PHASE_* + 1, so code - 1 is the flow phase.
_SLICE, _OTHER = 0, 4
_PHASE_CODE = {"X": _SLICE, **{ph: phase + 1 for ph, phase in _FLOW_PHASES.items()}}
_PH, _TS, _DUR, _PID, _TID = (attrgetter(f) for f in ("ph", "ts", "dur", "pid", "tid"))
_NAME, _CAT, _ARGS, _ID, _BP = (attrgetter(f) for f in ("name", "cat", "args", "id", "bp"))


class NeedsExactTimestamps(Exception):
    """Fractional epoch-microsecond timestamps (``durations``: durations) lost their nanoseconds
    in float parsing."""

    def __init__(self, durations: bool = False) -> None:
        super().__init__()
        self.durations = durations


def collect_chunk(events: list, builder: TraceBuilder, exact_ts: bool, first_index: int,
                  exact_dur: bool = False) -> None:
    """Add one chunk's events (eventschema.Event objects or dicts) to ``builder``. ``exact_ts``:
    the text was rewritten so that "ts" holds integer nanoseconds (timeunits.rewrite_ts_as_ns);
    ``exact_dur``: "dur" too (timeunits.rewrite_ts_and_dur_as_ns)."""
    decoded = bool(events) and type(events[0]) is Event
    try:
        if decoded:
            _collect_decoded(events, builder, exact_ts, exact_dur)
        else:
            _collect(events, builder, exact_ts, exact_dur)
    except (NeedsExactTimestamps, TraceFormatError):  # the builder's own refusal names the file already
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        if decoded:
            events = [as_dict(event) for event in events]
        raise _describe_bad_event(events, builder.source, first_index, exc, exact_ts, exact_dur) from None


def _collect_decoded(events: list[Event], b: TraceBuilder, exact_ts: bool, exact_dur: bool) -> None:
    count = len(events)
    codes = np.fromiter(map(_PHASE_CODE.get, map(_PH, events), repeat(_OTHER)), dtype=np.int8, count=count)
    if codes.any():
        others = np.flatnonzero(codes == _OTHER)
        if len(others):
            _collect([as_dict(events[i]) for i in others.tolist()], b, exact_ts, exact_dur)
        flow_rows = np.flatnonzero((codes != _SLICE) & (codes != _OTHER))
        if len(flow_rows):
            _collect_flows(_take(events, flow_rows), codes[flow_rows] - 1, b, exact_ts)
        slices = _take(events, np.flatnonzero(codes == _SLICE))
    else:
        slices = events
    if not slices:
        return
    b.add_slices(
        _track_ids(slices, b),
        _ts_ns(slices, exact_ts),
        _dur_ns(slices, exact_dur),
        _string_ids(slices, _NAME, b),
        _string_ids(slices, _CAT, b),
        JoinedJSON.of_objects(list(map(_ARGS, slices))),
    )


def _collect_flows(flows, phases: np.ndarray, b: TraceBuilder, exact_ts: bool) -> None:
    bound_to_enclosing = np.fromiter(map(eq, map(_BP, flows), repeat("e")), dtype=bool, count=len(flows))
    b.add_flow_events(
        _track_ids(flows, b),
        _ts_ns(flows, exact_ts),
        phases,
        _flow_ids(list(map(_ID, flows)), b),
        _string_ids(flows, _NAME, b),
        _string_ids(flows, _CAT, b),
        (phases == PHASE_FINISH) & ~bound_to_enclosing,
    )


def _take(items: list, rows: np.ndarray):
    if len(rows) == len(items):
        return items
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return itemgetter(*rows.tolist())(items) if len(rows) else []


# The helpers below chain C-level maps straight into numpy: no Python frame and no intermediate
# list per event. When something is new or unusual (a string or track not seen yet, a huge
# integer) the chain fails as a whole and the column is redone the slow way.


def _ts_ns(events, exact_ts: bool) -> np.ndarray:
    if exact_ts:  # integer nanoseconds after the text rewrite: keep them exact
        return parse_ns_values(list(map(_TS, events)))
    return _checked_us_to_ns(_us_values(events, _TS))


def _dur_ns(events, exact_dur: bool) -> np.ndarray:
    if exact_dur:  # rewritten as integer nanoseconds too
        return parse_ns_values(list(map(_DUR, events)))
    return _checked_us_to_ns(_us_values(events, _DUR), durations=True)


def _us_values(events, field: attrgetter) -> np.ndarray:
    """float64 microseconds (the schema has made them numbers; UNSET raises TypeError)."""
    values = np.fromiter(map(field, events), dtype=np.float64, count=len(events))
    if len(values) and np.abs(values).max() >= _FLOAT_EXACT_INTEGERS:
        return np.asarray(list(map(field, events)))  # integers past 2**53 stay exact as int64
    return values


_FLOAT_EXACT_INTEGERS = float(2**53)


def _track_ids(events, b: TraceBuilder) -> np.ndarray:
    def ids():
        keys = zip(map(_PID, events), map(_TID, events))
        return np.fromiter(map(b.track_keys.get, keys), dtype=np.int32, count=len(events))

    try:
        return ids()
    except TypeError:  # a (pid, tid) seen for the first time: add the new ones, then look up again
        b.add_tracks(dict.fromkeys(zip(map(_PID, events), map(_TID, events))))  # in order: deterministic ids
        return ids()


def _string_ids(events, field: attrgetter, b: TraceBuilder) -> np.ndarray:
    table = b.strings

    def ids():
        return np.fromiter(map(table.ids.get, map(field, events)), dtype=np.int32, count=len(events))

    try:
        return ids()
    except TypeError:  # strings new to the table (a ProfilerStep#n in most chunks)
        for value in dict.fromkeys(map(field, events)):  # in order of appearance: deterministic ids
            if value not in table.ids:
                table.intern(value)
        return ids()


@dataclass
class _Columns:
    """The builder columns one chunk of dict events fills, by kind: slices (X), flows, instants,
    counter samples, and the B/E events (matched by the builder, after their times are converted
    with the rest)."""

    x_ts: list = dc_field(default_factory=list)
    x_dur: list = dc_field(default_factory=list)
    x_track: list = dc_field(default_factory=list)
    x_name: list = dc_field(default_factory=list)
    x_cat: list = dc_field(default_factory=list)
    x_args: list = dc_field(default_factory=list)
    f_ts: list = dc_field(default_factory=list)
    f_track: list = dc_field(default_factory=list)
    f_phase: list = dc_field(default_factory=list)
    f_id: list = dc_field(default_factory=list)
    f_name: list = dc_field(default_factory=list)
    f_cat: list = dc_field(default_factory=list)
    f_next: list = dc_field(default_factory=list)
    i_ts: list = dc_field(default_factory=list)
    i_track: list = dc_field(default_factory=list)
    i_name: list = dc_field(default_factory=list)
    i_cat: list = dc_field(default_factory=list)
    i_scope: list = dc_field(default_factory=list)
    i_args: list = dc_field(default_factory=list)
    c_ts: list = dc_field(default_factory=list)
    c_track: list = dc_field(default_factory=list)
    c_series: list = dc_field(default_factory=list)
    c_value: list = dc_field(default_factory=list)
    be_ts: list = dc_field(default_factory=list)
    be_events: list = dc_field(default_factory=list)

    def add_instant(self, event: dict, b: TraceBuilder) -> None:
        intern = b.strings.intern
        self.i_track.append(b.track_for(event.get("pid"), event.get("tid")))
        self.i_ts.append(event["ts"])
        self.i_name.append(intern(event.get("name")))
        self.i_cat.append(intern(event.get("cat")))
        self.i_scope.append(SCOPE_CODES.get(event.get("s", "t"), 0))
        args = event.get("args")
        if args is not None and type(args) is not dict:
            raise TypeError("'args' is not an object")
        self.i_args.append(orjson.dumps(args) if args else b"")

    def add_counter(self, event: dict, b: TraceBuilder) -> None:
        """One sample per numeric series of the counter event; other values are counted as skipped."""
        track = b.counter_track_for(event.get("pid"), str(event.get("name", "")))
        ts = event["ts"]
        for series, value in (event.get("args") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.c_track.append(track)
                self.c_ts.append(ts)
                self.c_series.append(b.strings.intern(series))
                self.c_value.append(value)
            else:
                b.diagnostics["non_numeric_counter_values"] += 1

    def add_to(self, b: TraceBuilder, exact_ts: bool, exact_dur: bool) -> None:
        """Every column to the builder, times converted to nanoseconds."""
        # Converted with the other times, so fractional epoch stamps here also ask for the exact re-read.
        to_ns = parse_ns_values if exact_ts else _checked_us_to_ns
        for event, ts_ns in zip(self.be_events, to_ns(self.be_ts).tolist()):
            args = event.get("args")
            if args is not None and type(args) is not dict:
                raise TypeError("'args' is not an object")
            b.add_begin_end(
                b.track_for(event.get("pid"), event.get("tid")), ts_ns, event["ph"],
                event.get("name"), event.get("cat"), args,
            )
        dur_ns = parse_ns_values(self.x_dur) if exact_dur else _checked_us_to_ns(self.x_dur, durations=True)
        b.add_slices(self.x_track, to_ns(self.x_ts), dur_ns, self.x_name, self.x_cat, self.x_args)
        b.add_instants(self.i_track, to_ns(self.i_ts), self.i_name, self.i_cat, self.i_scope, self.i_args)
        b.add_counter_samples(self.c_track, self.c_series, to_ns(self.c_ts), self.c_value)
        b.add_flow_events(self.f_track, to_ns(self.f_ts), self.f_phase, _flow_ids(self.f_id, b), self.f_name,
                          self.f_cat, self.f_next)


def _collect(events: list, b: TraceBuilder, exact_ts: bool, exact_dur: bool) -> None:
    cols = _Columns()
    tracks, track_for = b.track_keys, b.track_for
    string_ids, intern = b.strings.ids, b.strings.intern
    dumps = orjson.dumps
    # slices and flows are most of a trace: their appends are bound once, out of the loop
    add_ts, add_dur, add_track = cols.x_ts.append, cols.x_dur.append, cols.x_track.append
    add_name, add_cat, add_args = cols.x_name.append, cols.x_cat.append, cols.x_args.append
    f_ts, f_track, f_phase, f_id = cols.f_ts, cols.f_track, cols.f_phase, cols.f_id
    f_name, f_cat, f_next = cols.f_name, cols.f_cat, cols.f_next
    skipped = b.diagnostics

    for event in events:
        ph = event["ph"]
        if ph == "X":
            try:  # Kineto always writes these; subscripts are faster than .get()
                key = (event["pid"], event["tid"])
                name, cat, dur = event["name"], event["cat"], event["dur"]
            except KeyError:
                key = (event.get("pid"), event.get("tid"))
                name, cat, dur = event.get("name"), event.get("cat"), event.get("dur", 0)
            add_ts(event["ts"])
            add_dur(dur)
            track = tracks.get(key)
            add_track(track if track is not None else track_for(*key))
            name_id = string_ids.get(name)
            add_name(name_id if name_id is not None else intern(name))
            cat_id = string_ids.get(cat)
            add_cat(cat_id if cat_id is not None else intern(cat))
            args = event.get("args")
            if args is not None and type(args) is not dict:
                raise TypeError("'args' is not an object")
            add_args(dumps(args) if args else b"")
        elif ph in _FLOW_PHASES:
            key = (event.get("pid"), event.get("tid"))
            track = tracks.get(key)
            f_track.append(track if track is not None else track_for(*key))
            f_ts.append(event["ts"])
            f_phase.append(_FLOW_PHASES[ph])
            f_id.append(event["id"])
            name, cat = event.get("name"), event.get("cat")
            name_id, cat_id = string_ids.get(name), string_ids.get(cat)
            f_name.append(name_id if name_id is not None else intern(name))
            f_cat.append(cat_id if cat_id is not None else intern(cat))
            f_next.append(ph == "f" and event.get("bp") != "e")
        elif ph == "i" or ph == "I":
            cols.add_instant(event, b)
        elif ph == "C":
            cols.add_counter(event, b)
        elif ph == "M":
            _metadata_event(event, b)
        elif ph == "B" or ph == "E":
            cols.be_ts.append(event["ts"])
            cols.be_events.append(event)
        else:
            skipped[f"skipped_events_ph_{ph}"] += 1
    cols.add_to(b, exact_ts, exact_dur)


def _flow_ids(ids: list, b: TraceBuilder) -> np.ndarray:
    try:
        return np.array(ids, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        if any(i is UNSET for i in ids):
            raise KeyError("id") from None
        return np.array([b.flow_id_number(i) for i in ids], dtype=np.int64)


def _checked_us_to_ns(values: list | np.ndarray, durations: bool = False) -> np.ndarray:
    array = as_times(values)
    if float_us_loses_ns(array):
        raise NeedsExactTimestamps(durations)
    return us_to_ns(array)


def _metadata_event(event: dict, b: TraceBuilder) -> None:
    name = event.get("name")
    args = event.get("args") or {}
    pid = event.get("pid")
    if name == "process_name":
        b.process(pid).name = str(args.get("name", ""))
    elif name == "process_labels":
        b.process(pid).labels = str(args.get("labels", ""))
    elif name == "process_sort_index":
        b.process(pid).sort_index = _int_or_none(args.get("sort_index"))
    elif name == "thread_name":
        b.thread(pid, event.get("tid")).name = str(args.get("name", ""))
    elif name == "thread_sort_index":
        b.thread(pid, event.get("tid")).sort_index = _int_or_none(args.get("sort_index"))
    else:
        b.diagnostics[f"skipped_metadata_{name}"] += 1


def _int_or_none(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _describe_bad_event(
    events: list, source: str | None, first_index: int, exc: Exception, exact_ts: bool, exact_dur: bool
) -> TraceFormatError:
    """Find the first event the fast loop choked on and say what is wrong with it."""
    source = source or "<trace>"
    for offset, event in enumerate(events):
        problem = _event_problem(event, f"event #{first_index + offset}", exact_ts, exact_dur)
        if problem:
            return TraceFormatError(source, problem, _EVENT_HINT)
    return TraceFormatError(source, f"an event could not be read ({type(exc).__name__}: {exc})", _EVENT_HINT)


def _event_problem(event: object, where: str, exact_ts: bool = False, exact_dur: bool = False) -> str | None:
    if not isinstance(event, dict):
        return f"{where} is a JSON {type(event).__name__}, not an object"
    ph = event.get("ph")
    if not isinstance(ph, str):
        return f"{where} has no 'ph' (event type)"
    label = f"{where} (ph '{ph}', name {str(event.get('name'))[:60]!r})"
    if ph in _TIMED_PHASES:
        if "ts" not in event:
            return f"{label} has no 'ts'"
        if not _is_number(event["ts"]):
            return f"{label} has 'ts' = {_short(event['ts'])}, not a number"
        ts = event["ts"]
        if exact_ts and type(ts) is int:  # rewritten as nanoseconds (timeunits.rewrite_ts_as_ns)
            ts = ts / 1000
        if not abs(ts) < TIME_LIMIT_US:
            return f"{label} has 'ts' = {ts!r} us, outside the +-{TIME_LIMIT_US} us trnscope can hold"
    for field in ("name", "cat"):
        if not isinstance(event.get(field), (str, int, float, type(None))):
            return f"{where} has a {field} that is a JSON {type(event[field]).__name__}"
    for field in ("pid", "tid"):
        if not _is_track_key(event.get(field)):
            return f"{label} has '{field}' = {_short(event[field])}: not a string or an integer of at most 64 bits"
    if ph == "X" and not _is_number(event.get("dur", 0)):
        return f"{label} has 'dur' = {_short(event['dur'])}, not a number"
    if ph == "X":
        dur = event.get("dur", 0)
        if exact_dur and type(dur) is int:  # rewritten as nanoseconds
            dur = dur / 1000
        if not abs(dur) < TIME_LIMIT_US:
            return f"{label} has 'dur' = {dur!r} us, outside the +-{TIME_LIMIT_US} us trnscope can hold"
    if ph in _FLOW_PHASES and "id" not in event:
        return f"{label} is a flow event without an 'id'"
    if event.get("args") is not None and not isinstance(event["args"], dict):
        return f"{label} has 'args' that is not an object"
    if event.get("args"):
        try:
            orjson.dumps(event["args"])
        except orjson.JSONEncodeError:
            return f"{label} has 'args' nested more than {MAX_ARGS_DEPTH} levels deep"
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_track_key(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**64  # what JSON writers (orjson) can write back
    return value is None or isinstance(value, (str, float))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
