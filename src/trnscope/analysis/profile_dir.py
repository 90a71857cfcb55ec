"""Everything trnscope knows about the files of a profile directory, in one place.

A Neuron-style profile directory (written by ``trnscope.profiling``, see docs/profiling.md and
docs/file-formats.md) is ``<out>/<host>_pid_<pid>/<timestamp>/`` holding

    trace.json                     framework trace: Kineto JSON with NeuronCore device lanes
    system_trace.json              runtime (neuron_rt) and hardware (neuron_hw) lanes, flows, HBM usage
    neff_<id>.neff                 each executed NEFF
    <id>_instid_0_vnc_<nc>.ntff    its instruction trace on NeuronCore <nc>
    cpu_util.json, host_mem.json   host samples (optional)
    manifest.json                  written last: every file, and whether the profile is complete

The files' formats (names, manifest, NTFF) are defined in :mod:`trnscope.formats`, which the writer
uses too; this module is what the analyses and the explorer know about a directory of them: which
files it holds, what a user should be told about it, and its traces merged into one timeline.
Reading never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..formats import ntff as ntff_format
from ..formats.errors import FormatError
from ..formats.profile import (CPU_UTIL, FRAMEWORK_TRACE, HOST_MEM, MANIFEST, NEFF_NAME, NTFF_NAME, SYSTEM_TRACE,
                               is_profile_file, looks_like_manifest)
from ..trace.arrow import pa

# A profile file that cannot be read; the message names the file and what is wrong.
ProfileFormatError = FormatError

__all__ = ["ProfileFiles", "ProfileFormatError", "Ntff", "is_profile_dir", "is_profile_file", "merged_trace_document",
           "read_ntff", "read_ntff_header", "scan_profile_dir"]


@dataclass
class ProfileFiles:
    """The files found in one profile directory (paths absolute; absent files are None/empty)."""

    directory: Path
    manifest: dict | None = None
    manifest_error: str | None = None
    framework_trace: Path | None = None
    system_trace: Path | None = None
    cpu_util: Path | None = None
    host_mem: Path | None = None
    neffs: dict[str, Path] = field(default_factory=dict)  # neff id -> .neff
    ntffs: dict[tuple[str, int], Path] = field(default_factory=dict)  # (neff id, NeuronCore) -> .ntff

    @property
    def complete(self) -> bool:
        return bool(self.manifest and self.manifest.get("complete"))

    def problems(self) -> list[str]:
        """What a user should know before trusting this profile (empty when all is well)."""
        out = []
        if self.manifest_error:
            out.append(self.manifest_error)
        elif self.manifest is None:
            out.append("no manifest.json: the profile did not finish writing (or was copied partly)")
        elif not self.manifest.get("complete"):
            out.append(f"the profile is marked incomplete: {self.manifest.get('reason') or 'no reason given'}")
        if self.manifest:
            window = self.manifest.get("window")
            ended = window.get("ended_on_exception") if isinstance(window, dict) else None
            if ended:
                out.append(f"the recording window ended on an exception ({ended})")
            warnings = self.manifest.get("warnings")
            if isinstance(warnings, list):
                out.extend(str(w).strip().splitlines()[0] for w in warnings if str(w).strip())
            out.extend(self._size_mismatches())
        if self.framework_trace is None:
            out.append("no trace.json (framework trace) in the directory")
        return out


    def _size_mismatches(self) -> list[str]:
        """Files whose size differs from what the manifest recorded (cheap: no hashing)."""
        out = []
        listed = (self.manifest or {}).get("files")
        for item in listed if isinstance(listed, list) else []:
            if not isinstance(item, dict):
                continue
            name, expected = item.get("path"), item.get("bytes")
            if not isinstance(name, str) or not isinstance(expected, int) or "/" in name or "\\" in name:
                continue
            path = self.directory / name
            try:
                actual = path.stat().st_size
            except OSError:
                out.append(f"{name} is listed in the manifest but missing")
                continue
            if actual != expected:
                out.append(f"{name} has {actual} bytes, the manifest recorded {expected} (damaged or rewritten)")
        return out


def is_profile_dir(path: Path) -> bool:
    """A directory with a profile manifest, or with a framework trace beside a system trace, or
    with NTFF files named as a profile names them (an export that was killed before its manifest:
    listed, as incomplete, rather than ignored). NEFFs alone do not make one: a NEFF cache
    directory holds ``neff_<id>.neff`` files too."""
    if not path.is_dir():
        return False
    if (path / MANIFEST).is_file():
        if looks_like_manifest(_head(path / MANIFEST, 512)):
            return True
    if (path / FRAMEWORK_TRACE).is_file() and (path / SYSTEM_TRACE).is_file():
        return True
    try:
        return any(NTFF_NAME.match(p.name) for p in path.iterdir())
    except OSError:
        return False


def scan_profile_dir(path: str | Path) -> ProfileFiles:
    directory = Path(path)
    files = ProfileFiles(directory=directory)
    manifest_path = directory / MANIFEST
    if manifest_path.is_file():  # is_file: regular files only (a FIFO named manifest.json blocks)
        try:
            manifest = orjson.loads(manifest_path.read_bytes())
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
            files.manifest = manifest
        except (ValueError, OSError) as exc:
            files.manifest_error = f"manifest.json is unreadable ({exc})"
    for name, attr in ((FRAMEWORK_TRACE, "framework_trace"), (SYSTEM_TRACE, "system_trace"),
                       (CPU_UTIL, "cpu_util"), (HOST_MEM, "host_mem")):
        if (directory / name).is_file():  # regular files only: a FIFO would block its reader
            setattr(files, attr, directory / name)
    for item in sorted(directory.iterdir()):
        if not item.is_file():
            continue
        if match := NTFF_NAME.match(item.name):
            files.ntffs[(match["neff"], int(match["nc"]))] = item
        elif match := NEFF_NAME.match(item.name):
            files.neffs[match["neff"]] = item
    return files


def _head(path: Path, size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


# --- the merged timeline ---------------------------------------------------------------------

# System-trace events that repeat what the framework trace already holds: the ops on the
# framework threads (trace.json has them with their whole call tree) and the fallback markers.
_DUPLICATE_SYSTEM_CATEGORIES = frozenset({"framework", "cpu_fallback"})


def merged_trace_document(files: ProfileFiles) -> dict:
    """One Chrome-trace document with every lane of the profile: the framework trace's threads and
    device streams, the system trace's runtime, hardware, queue and transfer lanes and counters, and
    per-CPU utilisation. Both traces share one time base (``baseTimeNanoseconds``), so events are
    concatenated as they are; flows keep their own categories (``ac2g`` and ``neuron_flow``), so
    their ids cannot collide."""
    if files.framework_trace is None:
        raise ProfileFormatError(files.directory, "no trace.json (framework trace)",
                                 "A profile directory needs the framework trace written by NeuronProfiler")
    framework = _load_trace_json(files.framework_trace)
    events = list(framework.get("traceEvents") or [])
    document = {k: v for k, v in framework.items() if k != "traceEvents"}
    if files.system_trace is not None:
        system = _load_trace_json(files.system_trace)
        framework_tids = {_thread_key(e) for e in system.get("traceEvents") or [] if _repeats_framework(e)}
        framework_tids.discard(None)
        for event in system.get("traceEvents") or []:
            if _repeats_framework(event):
                continue
            if event.get("ph") == "M" and event.get("name") in ("thread_name", "thread_sort_index") and \
                    _thread_key(event) in framework_tids:
                continue  # keep the framework trace's own thread names
            events.append(event)
        if isinstance(system.get("neuron"), dict):
            document["neuron"] = system["neuron"]
    base = document.get("baseTimeNanoseconds")
    base_ns = base if isinstance(base, int) and not isinstance(base, bool) and abs(base) < 2**62 else 0
    if files.cpu_util is not None:
        events.extend(_cpu_counter_events(files.cpu_util, base_ns, _first_pid(events)))
    document["traceEvents"] = events
    return document


def _repeats_framework(event: dict) -> bool:
    cat = event.get("cat")
    return isinstance(cat, str) and cat in _DUPLICATE_SYSTEM_CATEGORIES  # any JSON value may be there


def _thread_key(event: dict) -> tuple | None:
    """(pid, tid) of an event, or None when either is not a JSON scalar (a damaged event: the
    trace reader names it when the merged trace is parsed)."""
    key = (event.get("pid"), event.get("tid"))
    return key if all(v is None or isinstance(v, (str, int, float)) for v in key) else None


def _load_trace_json(path: Path) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"not valid JSON ({exc})",
                                 "The file is truncated or damaged; record the profile again") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents", []), list):
        raise ProfileFormatError(path, "not a Chrome trace (expected an object with a traceEvents list)")
    for index, event in enumerate(data.get("traceEvents") or []):
        if not isinstance(event, dict):
            raise ProfileFormatError(path, f"event #{index} is a JSON {type(event).__name__}, not an object",
                                     "The file is damaged; record the profile again")
    return data


def _first_pid(events: list) -> int:
    for event in events:
        if event.get("ph") == "X" and isinstance(event.get("pid"), int):
            return event["pid"]
    return 0


def _cpu_counter_events(path: Path, base_ns: int, pid: int) -> list[dict]:
    """Per-CPU utilisation as counter events ``CPU:<id>/host_cpu_util`` (the all-CPU series is
    already in the system trace as ``host_cpu_util``)."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError):
        return []  # host samples are an extra; a damaged file only loses these lanes
    samples = doc.get("samples") if isinstance(doc, dict) else None
    out = []
    for sample in samples if isinstance(samples, list) else []:
        if not isinstance(sample, dict):
            continue
        cpu = sample.get("cpu_id")
        ts = sample.get("timestamp")
        util = sample.get("util", 0.0)
        if (not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0 or not isinstance(ts, (int, float))
                or isinstance(ts, bool) or not isinstance(util, (int, float)) or isinstance(util, bool)):
            continue
        out.append({"ph": "C", "name": f"CPU:{cpu}/host_cpu_util", "pid": pid, "tid": 0,
                    "ts": (ts - base_ns) / 1000.0, "args": {"util": float(util)}})
    return out


# --- NTFF ------------------------------------------------------------------------------------


@dataclass
class Ntff:
    """One instruction trace: the JSON header and its tables as columns (numpy arrays)."""

    path: Path
    header: dict
    tables: dict[str, dict[str, np.ndarray]]

    def table(self, name: str) -> dict[str, np.ndarray]:
        return self.tables.get(name, {})

    def rows(self, name: str) -> int:
        columns = self.tables.get(name) or {}
        return len(next(iter(columns.values()))) if columns else 0


def read_ntff_header(path: str | Path) -> dict:
    """Only the JSON header (summary, executions, framework ops): cheap, for listings."""
    return ntff_format.read_header(path)


def read_ntff(path: str | Path, verify: bool = True) -> Ntff:
    """The NTFF with its tables as NumPy columns."""
    header, tables = ntff_format.read(path, verify)
    columns = {}
    for name, table in tables.items():
        try:
            columns[name] = {column: _column(table[column]) for column in table.column_names}
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise ProfileFormatError(path, f"table {name!r} is damaged ({exc})", "Record the profile again") from None
    return Ntff(path=Path(path), header=header, tables=columns)


def _column(chunked) -> np.ndarray:
    array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return np.array(array.to_pylist(), dtype=object)
    return array.to_numpy(zero_copy_only=False)
