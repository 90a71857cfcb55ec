"""Turn one chunk of Kineto/Chrome event dicts into builder columns.

This loop touches every event of a trace, so it is written for speed: one pass, local names for
the list appends, args re-encoded to compact JSON right away (the dicts are dropped with the
chunk), timestamps converted per chunk with numpy. Event kinds handled: X, B/E, i/I, C, M,
s/t/f; others are counted in the trace's diagnostics and skipped.
"""

from __future__ import annotations

import numpy as np
import orjson

from .builder import TraceBuilder
from .errors import TraceFormatError
from .flows import PHASE_FINISH, PHASE_START, PHASE_STEP
from .tables import SCOPE_CODES
from .timeunits import float_us_loses_ns, parse_ns_values, us_to_ns

_FLOW_PHASES = {"s": PHASE_START, "t": PHASE_STEP, "f": PHASE_FINISH}
_TIMED_PHASES = frozenset("XBEiICstf")
_EVENT_HINT = "Every timed event needs a numeric 'ts' (microseconds); fix or remove the event, or re-export the trace"


class NeedsExactTimestamps(Exception):
    """Fractional epoch-microsecond timestamps lost their nanoseconds in float parsing."""


def collect_chunk(events: list, builder: TraceBuilder, exact_ts: bool, first_index: int) -> None:
    """Add one chunk's events to ``builder``. ``exact_ts``: the text was rewritten so that "ts"
    holds integer nanoseconds (timeunits.rewrite_ts_as_ns)."""
    try:
        _collect(events, builder, exact_ts)
    except NeedsExactTimestamps:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise _describe_bad_event(events, builder.source, first_index, exc) from None


def _collect(events: list, b: TraceBuilder, exact_ts: bool) -> None:
    x_ts, x_dur, x_track, x_name, x_cat, x_args = [], [], [], [], [], []
    i_ts, i_track, i_name, i_cat, i_scope, i_args = [], [], [], [], [], []
    c_ts, c_track, c_series, c_value = [], [], [], []
    f_ts, f_track, f_phase, f_id, f_name, f_cat, f_next = [], [], [], [], [], [], []
    tracks, track_for = b.track_keys, b.track_for
    string_ids, intern = b.strings.ids, b.strings.intern
    dumps = orjson.dumps
    add_ts, add_dur, add_track = x_ts.append, x_dur.append, x_track.append
    add_name, add_cat, add_args = x_name.append, x_cat.append, x_args.append
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
            i_track.append(track_for(event.get("pid"), event.get("tid")))
            i_ts.append(event["ts"])
            i_name.append(intern(event.get("name")))
            i_cat.append(intern(event.get("cat")))
            i_scope.append(SCOPE_CODES.get(event.get("s", "t"), 0))
            args = event.get("args")
            i_args.append(dumps(args) if args else b"")
        elif ph == "C":
            track = b.counter_track_for(event.get("pid"), str(event.get("name", "")))
            ts = event["ts"]
            for series, value in (event.get("args") or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    c_track.append(track)
                    c_ts.append(ts)
                    c_series.append(intern(series))
                    c_value.append(value)
                else:
                    skipped["non_numeric_counter_values"] += 1
        elif ph == "M":
            _metadata_event(event, b)
        elif ph == "B" or ph == "E":
            ts = event["ts"]
            ts_ns = int(parse_ns_values([ts])[0] if exact_ts else us_to_ns([ts])[0])
            b.add_begin_end(
                track_for(event.get("pid"), event.get("tid")), ts_ns, ph,
                event.get("name"), event.get("cat"), event.get("args"),
            )
        else:
            skipped[f"skipped_events_ph_{ph}"] += 1

    to_ns = parse_ns_values if exact_ts else _checked_us_to_ns
    b.add_slices(x_track, to_ns(x_ts), us_to_ns(x_dur), x_name, x_cat, x_args)
    b.add_instants(i_track, to_ns(i_ts), i_name, i_cat, i_scope, i_args)
    b.add_counter_samples(c_track, c_series, to_ns(c_ts), c_value)
    b.add_flow_events(f_track, to_ns(f_ts), f_phase, _flow_ids(f_id, b), f_name, f_cat, f_next)


def _flow_ids(ids: list, b: TraceBuilder) -> np.ndarray:
    try:
        return np.array(ids, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([b.flow_id_number(i) for i in ids], dtype=np.int64)


def _checked_us_to_ns(values: list):
    if float_us_loses_ns(values):
        raise NeedsExactTimestamps
    return us_to_ns(values)


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
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _describe_bad_event(events: list, source: str | None, first_index: int, exc: Exception) -> TraceFormatError:
    """Find the first event the fast loop choked on and say what is wrong with it."""
    source = source or "<trace>"
    for offset, event in enumerate(events):
        problem = _event_problem(event, f"event #{first_index + offset}")
        if problem:
            return TraceFormatError(source, problem, _EVENT_HINT)
    return TraceFormatError(source, f"an event could not be read ({type(exc).__name__}: {exc})", _EVENT_HINT)


def _event_problem(event: object, where: str) -> str | None:
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
            return f"{label} has 'ts' = {event['ts']!r}, not a number"
    for field in ("name", "cat"):
        if not isinstance(event.get(field), (str, int, float, type(None))):
            return f"{where} has a {field} that is a JSON {type(event[field]).__name__}"
    if ph == "X" and not _is_number(event.get("dur", 0)):
        return f"{label} has 'dur' = {event['dur']!r}, not a number"
    if ph in _FLOW_PHASES and "id" not in event:
        return f"{label} is a flow event without an 'id'"
    if event.get("args") is not None and not isinstance(event["args"], dict):
        return f"{label} has 'args' that is not an object"
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
