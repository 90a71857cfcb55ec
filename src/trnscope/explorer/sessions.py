"""Loaded profiles, kept in memory between requests.

Opening a trace is the expensive step (parsing, then indexing on first query), so each entry is
loaded once into the columnar model and kept, least recently used first out: at most
``max_loaded`` of them, holding together at most as many events as one trace may have (the event
limit, ``TRNSCOPE_MAX_TRACE_EVENTS``, is what bounds the memory of one). Loading runs at most
once per entry at a time (concurrent requests wait for the same load). A file that fails to load
keeps its error until it changes on disk, so a broken file costs one attempt, not one per request,
and never affects other entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from ..analysis import ProfileAnalysis, ProfileError, TraceCache, load_profile
from ..analysis.device_trace import build_device_trace
from ..analysis.profile_dir import ProfileFormatError, read_ntff
from ..gcpause import gc_paused
from ..trace.builder import max_events
from .catalog import Entry
from .device_view import DeviceView
from .system_view import SystemView


class NotFound(LookupError):
    pass


@dataclass
class Session:
    entry: Entry
    analysis: ProfileAnalysis
    _system: SystemView | None = None
    _devices: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _database: object = None

    @property
    def profile(self):
        return self.analysis.profile

    @property
    def system(self) -> SystemView:
        with self._lock:
            if self._system is None:
                with gc_paused():  # a lane per thread: objects by the hundred thousand, no cycles
                    self._system = SystemView(self.profile, name=self.entry.display_name,
                                              lines=lambda: self.analysis.execution_lines)
                    self._system.describe()
            return self._system

    @property
    def database(self):
        """The profile's tables for SQL (``analysis.sql``; DuckDB is imported when first asked for)."""
        with self._lock:
            if self._database is None:
                from ..analysis.sql import ProfileDatabase

                self._database = ProfileDatabase(self.analysis)
            return self._database

    def device(self, neff_id: str, nc: int) -> DeviceView:
        files = self.profile.files
        path = files.ntffs.get((neff_id, nc)) if files is not None else None
        if path is None:
            raise NotFound(f"no device trace for NEFF {neff_id} on NeuronCore {nc} in this profile")
        with self._lock:
            view = self._devices.get((neff_id, nc))
        if view is not None:
            return view
        try:
            device = build_device_trace(read_ntff(path))
        except ProfileFormatError as exc:
            raise ProfileError(exc.path, exc.problem, exc.hint) from None
        except OSError as exc:
            raise ProfileError(path, f"cannot be read ({exc.strerror or exc})") from None
        system = self.system

        def locate(seq: int) -> dict | None:
            row = system.execution_row(seq)
            return system.slice_summary(row) if row is not None else None

        view = DeviceView(device, locate_execution=locate)
        with self._lock:
            self._devices[(neff_id, nc)] = view
        return view


class SessionStore:
    def __init__(self, cache: TraceCache | None, max_loaded: int = 8) -> None:
        self.cache = cache
        self.max_loaded = max_loaded
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._errors: dict[str, tuple[float, ProfileError]] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def status(self, entry: Entry) -> str:
        if entry.id in self._sessions:
            return "loaded"
        failed = self._errors.get(entry.id)
        if failed is not None and failed[0] == entry.mtime:
            return "error"
        return "not loaded"

    def error(self, entry: Entry) -> ProfileError | None:
        failed = self._errors.get(entry.id)
        return failed[1] if failed is not None and failed[0] == entry.mtime else None

    def get(self, entry: Entry) -> Session:
        with self._lock:
            session = self._sessions.get(entry.id)
            if session is not None and session.entry.mtime == entry.mtime:
                self._sessions.move_to_end(entry.id)
                return session
            gate = self._loading.setdefault(entry.id, threading.Lock())
        with gate:  # one load per entry; later callers find it done
            with self._lock:
                session = self._sessions.get(entry.id)
                if session is not None and session.entry.mtime == entry.mtime:
                    return session
                failed = self._errors.get(entry.id)
            if failed is not None and failed[0] == entry.mtime:
                raise failed[1]
            try:
                profile = load_profile(entry.path, cache=self.cache)
            except ProfileError as exc:
                self._errors[entry.id] = (entry.mtime, exc)
                raise
            except Exception as exc:  # noqa: BLE001 - a reader bug on one odd file must not take the server down
                error = ProfileError(entry.path, f"could not be opened ({type(exc).__name__}: {exc})",
                                     "Please report this file to the trnscope developers")
                self._errors[entry.id] = (entry.mtime, error)
                raise error from exc
            session = Session(entry=entry, analysis=ProfileAnalysis(profile))
            with self._lock:
                self._errors.pop(entry.id, None)
                self._sessions[entry.id] = session
                # at most max_loaded traces, and at most as many events in all as one trace may
                # hold (trace.builder.max_events: what bounds the memory of one), the newest kept
                budget = max_events()
                while len(self._sessions) > 1 and (len(self._sessions) > self.max_loaded or sum(
                        _events(s) for s in self._sessions.values()) > budget):
                    self._sessions.popitem(last=False)
            return session


def _events(session: Session) -> int:
    trace = session.profile.trace
    return len(trace.slices) + len(trace.instants) + len(trace.counters) + len(trace.flows)
