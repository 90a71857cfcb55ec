"""Open anything the explorer and the analyses work on as a :class:`Profile`.

Three kinds of input:

* a trnscope (Neuron-style) profile directory: its framework trace and system trace merged into
  one timeline, plus the NEFF/NTFF files for device-level views;
* a Kineto / Chrome trace file (``.json`` or ``.json.gz``) from torch.profiler on CPU or CUDA;
* a folder written by ``trnscope.trace.save_parquet``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..trace import Trace, TraceFormatError, load_parquet, parse_kineto, read_kineto
from ..trace.parquet import is_parquet_trace
from .profile_dir import ProfileFiles, ProfileFormatError, is_profile_dir, merged_trace_document, scan_profile_dir
from .trace_cache import TraceCache

NEURON = "neuron"  # a trnscope profile directory
KINETO = "kineto"  # a torch.profiler / Chrome trace file
PARQUET = "parquet"  # a saved trnscope trace folder


class ProfileError(ValueError):
    """Input that cannot be opened; ``problem`` and ``hint`` are shown to the user as they are."""

    def __init__(self, path: str | Path, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        super().__init__(f"{path}: {problem}" + (f". {hint}" if hint else ""))


class IncompleteProfile(ProfileError):
    """A profile directory whose export stopped before its framework trace: ``problems`` says what
    is missing, ``files`` what is there."""

    def __init__(self, path: str | Path, files: ProfileFiles) -> None:
        self.files = files
        self.problems = files.problems()
        super().__init__(path, "an incomplete profile: " + "; ".join(self.problems), "Record the profile again")


@dataclass
class Profile:
    path: Path
    kind: str
    trace: Trace
    files: ProfileFiles | None = None  # Neuron profiles only
    warnings: list[str] = field(default_factory=list)
    from_cache: bool = False

    @property
    def name(self) -> str:
        if self.kind == NEURON:
            # <out>/<host>_pid_<pid>/<timestamp>: the last three parts say what it is
            return "/".join(self.path.parts[-3:])
        return self.path.name

    @property
    def neuron(self) -> dict:
        """The system trace's description (NEFFs, NeuronCores, lanes), {} for other inputs."""
        data = self.trace.metadata.get("neuron")
        return data if isinstance(data, dict) else {}

    @property
    def recording(self) -> dict:
        """What trnscope wrote about the recording window (framework trace's ``trnscope`` object,
        else the manifest's window), {} for other inputs."""
        data = self.trace.metadata.get("trnscope")
        if isinstance(data, dict) and data:
            return data
        window = (self.files.manifest or {}).get("window") if self.files is not None else None
        return window if isinstance(window, dict) else {}

    @property
    def host_time(self) -> str | None:
        """The host-time mode the profile was recorded in (``real``, ``modelled``, ``mixed``), None
        when unknown (other traces, profiles written before modes)."""
        value = self.recording.get("host_time")
        if isinstance(value, dict):
            value = value.get("mode")
        return value if isinstance(value, str) else None

    @property
    def retimed(self) -> dict | None:
        """For a ``trnscope retime`` copy: ``{from, recorded: {target, ...}, target, overrides}``."""
        value = self.recording.get("retimed")
        if not isinstance(value, dict) and self.files is not None:
            value = (self.files.manifest or {}).get("retimed")
        return value if isinstance(value, dict) else None

    @property
    def target(self) -> str | None:
        """The emulated target (``trn2``, ``trn1``), None when unknown."""
        value = self.recording.get("target")
        return value if isinstance(value, str) else None


def detect_kind(path: str | Path) -> str | None:
    path = Path(path)
    if path.is_dir():
        if is_profile_dir(path):
            return NEURON
        if is_parquet_trace(path):
            return PARQUET
        return None
    return KINETO if path.is_file() else None


def load_profile(path: str | Path, cache: TraceCache | None = None) -> Profile:
    """Open a profile directory, a Kineto trace file or a saved trace folder. Raises
    :class:`ProfileError` with a readable message for anything it cannot open."""
    path = Path(path)
    kind = detect_kind(path)
    try:
        if kind == NEURON:
            return _load_neuron(path, cache)
        if kind == KINETO:
            trace, cached = _cached(cache, [path], "kineto", lambda: read_kineto(path))
            return Profile(path, KINETO, trace, warnings=_diagnostics(trace), from_cache=cached)
        if kind == PARQUET:
            trace = load_parquet(path)
            return Profile(path, PARQUET, trace, warnings=_diagnostics(trace))
    except TraceFormatError as exc:
        raise ProfileError(exc.source, exc.problem, exc.hint) from None
    except ProfileFormatError as exc:
        raise ProfileError(exc.path, exc.problem, exc.hint) from None
    except MemoryError:
        raise ProfileError(path, "too large to load into memory") from None
    raise ProfileError(path, "not a profile directory, trace file or saved trace folder",
                       "Pass a trnscope profile directory, a torch.profiler trace (.json/.json.gz) or a "
                       "folder written by save_parquet")


def _load_neuron(path: Path, cache: TraceCache | None) -> Profile:
    files = scan_profile_dir(path)
    if files.framework_trace is None:  # an export that stopped early: say what is there and missing
        raise IncompleteProfile(path, files)
    sources = [p for p in (files.framework_trace, files.system_trace, files.cpu_util) if p is not None]

    def build() -> Trace:
        document = merged_trace_document(files)
        try:
            text = orjson.dumps(document)
        except orjson.JSONEncodeError as exc:  # args nested past what any reader writes back
            raise ProfileError(path, f"an event of the profile cannot be written again ({exc})",
                               "Its args nest too deep (more than 254 levels); record the profile again") from None
        return parse_kineto(text, source=str(files.framework_trace))

    trace, cached = _cached(cache, sources, "neuron-profile", build)
    return Profile(path, NEURON, trace, files=files, warnings=files.problems() + _diagnostics(trace),
                   from_cache=cached)


def _cached(cache: TraceCache | None, sources: list[Path], flavour: str, build) -> tuple[Trace, bool]:
    if cache is None:
        return build(), False
    return cache.get_or_build(sources, flavour, build)


# Reader diagnostics worth telling a user about (the rest are routine repairs).
_NOTABLE = {
    "unpaired_flow_events": "flow events without their other end",
    "flows_without_slice": "flow arrows pointing at no event",
    "begin_events_without_end": "events still open when the trace stopped",
    "end_events_without_begin": "end events without a begin",
}


def _diagnostics(trace: Trace) -> list[str]:
    return [f"{count:,} {_NOTABLE[key]}" for key, count in trace.diagnostics.items() if key in _NOTABLE and count]
