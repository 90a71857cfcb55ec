"""Everything trnscope knows about the files of a profile directory, in one place.

A Neuron-style profile directory (written by ``trnscope.profiling``, see docs/profiling.md and
docs/file-formats.md) is ``<out>/<host>_pid_<pid>/<timestamp>/`` holding

    trace.json                     framework trace: Kineto JSON with NeuronCore device lanes
    system_trace.json              runtime (neuron_rt) and hardware (neuron_hw) lanes, flows, HBM usage
    neff_<id>.neff                 each executed NEFF
    <id>_instid_0_vnc_<nc>.ntff    its instruction trace on NeuronCore <nc>
    cpu_util.json, host_mem.json   host samples (optional)
    manifest.json                  written last: every file, and whether the profile is complete

The format may still change: nothing outside this module reads these files directly, so a change
lands here and nowhere else. Reading never imports torch (``trnscope.profiling`` does, so its own
NTFF reader cannot be used here; this one follows the layout documented in ntff.py).
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..trace.arrow import pa, pq

MANIFEST = "manifest.json"
FRAMEWORK_TRACE = "trace.json"
SYSTEM_TRACE = "system_trace.json"
CPU_UTIL = "cpu_util.json"
HOST_MEM = "host_mem.json"
MANIFEST_SCHEMA = "trnscope-profile-manifest"

_NTFF_NAME = re.compile(r"^(?P<neff>\d+)_instid_(?P<inst>\d+)_vnc_(?P<nc>\d+)\.ntff$")
_NEFF_NAME = re.compile(r"^neff_(?P<neff>\d+)\.neff$")
_NTFF_MAGIC = b"NTFF"
_NTFF_HEAD = struct.Struct("<4sHHIQ32s")  # magic, major, minor, header size, body size, body sha256
_NTFF_MAJOR = 1


class ProfileFormatError(ValueError):
    """A profile file that cannot be read; the message names the file and what is wrong."""

    def __init__(self, path: str | Path, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        super().__init__(f"{path}: {problem}" + (f". {hint}" if hint else ""))


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


def is_profile_file(name: str) -> bool:
    """Whether a file name is one a profile directory is made of (the files this module reads)."""
    return name in (MANIFEST, FRAMEWORK_TRACE, SYSTEM_TRACE, CPU_UTIL, HOST_MEM) or bool(
        _NTFF_NAME.match(name) or _NEFF_NAME.match(name))


def is_profile_dir(path: Path) -> bool:
    """A directory with a profile manifest, or with a framework trace beside a system trace, or
    with NTFF files named as a profile names them (an export that was killed before its manifest:
    listed, as incomplete, rather than ignored). NEFFs alone do not make one: a NEFF cache
    directory holds ``neff_<id>.neff`` files too."""
    if not path.is_dir():
        return False
    if (path / MANIFEST).is_file():
        head = _head(path / MANIFEST, 512)
        if MANIFEST_SCHEMA.encode() in head:
            return True
    if (path / FRAMEWORK_TRACE).is_file() and (path / SYSTEM_TRACE).is_file():
        return True
    try:
        return any(_NTFF_NAME.match(p.name) for p in path.iterdir())
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
        if match := _NTFF_NAME.match(item.name):
            files.ntffs[(match["neff"], int(match["nc"]))] = item
        elif match := _NEFF_NAME.match(item.name):
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
        framework_tids = {(e.get("pid"), e.get("tid")) for e in system.get("traceEvents") or []
                          if e.get("cat") in _DUPLICATE_SYSTEM_CATEGORIES}
        for event in system.get("traceEvents") or []:
            if event.get("cat") in _DUPLICATE_SYSTEM_CATEGORIES:
                continue
            if event.get("ph") == "M" and event.get("name") in ("thread_name", "thread_sort_index") and \
                    (event.get("pid"), event.get("tid")) in framework_tids:
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
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            fixed = handle.read(_NTFF_HEAD.size)
            header_size = _check_fixed(path, fixed)[0]
            text = handle.read(header_size)
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(text) < header_size:
        raise ProfileFormatError(path, "truncated inside its header", "Record the profile again")
    return _parse_header(path, text)


def read_ntff(path: str | Path, verify: bool = True) -> Ntff:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    header_size, body_size, digest = _check_fixed(path, data[:_NTFF_HEAD.size])
    if len(data) < _NTFF_HEAD.size + header_size:
        raise ProfileFormatError(path, "truncated inside its header", "Record the profile again")
    header = _parse_header(path, data[_NTFF_HEAD.size:_NTFF_HEAD.size + header_size])
    body = data[_NTFF_HEAD.size + header_size:]
    if len(body) != body_size:
        raise ProfileFormatError(path, f"truncated: body has {len(body)} of {body_size} bytes",
                                 "Record the profile again")
    if verify and hashlib.sha256(body).digest() != digest:
        raise ProfileFormatError(path, "body checksum mismatch (the file is corrupt)", "Record the profile again")
    tables: dict[str, dict[str, np.ndarray]] = {}
    listed = header.get("tables") or {}
    if not isinstance(listed, dict):
        raise ProfileFormatError(path, "header 'tables' is not a JSON object", "Record the profile again")
    for name, entry in listed.items():
        try:
            offset, length = int(entry["offset"]), int(entry["length"])
            if offset < 0 or length < 0 or offset + length > len(body):
                raise ValueError(f"bytes {offset}..{offset + length} lie outside the {len(body)}-byte body")
            table = pq.read_table(io.BytesIO(body[offset:offset + length]))
            tables[name] = {column: _column(table[column]) for column in table.column_names}
        except (KeyError, TypeError, ValueError, OSError, pa.ArrowException) as exc:
            # pyarrow reports a damaged Parquet file as a bare OSError
            raise ProfileFormatError(path, f"table {name!r} is damaged ({exc})", "Record the profile again") from None
    return Ntff(path=path, header=header, tables=tables)


def _check_fixed(path: Path, fixed: bytes) -> tuple[int, int, bytes]:
    if len(fixed) < _NTFF_HEAD.size or fixed[:4] != _NTFF_MAGIC:
        raise ProfileFormatError(path, "not an NTFF file (bad magic)" if len(fixed) >= 4 else "empty or truncated NTFF",
                                 "0-byte NTFFs mean no execution was captured on that NeuronCore")
    _, major, _minor, header_size, body_size, digest = _NTFF_HEAD.unpack(fixed)
    if major != _NTFF_MAJOR:
        raise ProfileFormatError(path, f"NTFF version {major}, this reader knows {_NTFF_MAJOR}",
                                 "Open it with the trnscope version that wrote it")
    return header_size, body_size, digest


def _parse_header(path: Path, text: bytes) -> dict:
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ProfileFormatError(path, "header is not a JSON object")
    problem = _shape_problem(header, _HEADER_SHAPE, "header")
    if problem:
        raise ProfileFormatError(path, problem, "The file is damaged or from another writer; record the profile again")
    return header


# The header fields the analyses and the explorer read, with the JSON types they must have (a
# field may be absent; nothing else is checked). Numbers are finite and not booleans.
_NUMBER, _COUNT = "number", "count"  # any finite number; a non-negative integer
_ENGINE_SHAPE = {"active_time_ns": _NUMBER, "instruction_count": _COUNT, "semaphore_wait_ns": _NUMBER,
                 "active_time_percent": _NUMBER}
_HEADER_SHAPE = {
    "neff_id": (str, int), "neff_name": str, "vnc": _COUNT, "target": str, "neuroncore": str, "truncated": bool,
    "instruction_count": _COUNT, "instructions_written": _COUNT, "framework_ops": [(str, int, float)],
    "executions": [{"seq": _COUNT, "start_ns": int, "end_ns": int, "queue_wait_ns": _NUMBER, "framework_op": (str, type(None))}],
    "summary": {"total_time_ns": _NUMBER, "mfu_estimated_percent": _NUMBER, "mbu_estimated_percent": _NUMBER,
                "hbm_read_bytes": _COUNT, "hbm_write_bytes": _COUNT, "dma_transfer_count": _COUNT,
                "dma_transfer_total_bytes": _COUNT, "dma_transfer_average_bytes": _NUMBER,
                "instruction_count": _COUNT, "bottleneck": (str, type(None)), "engines": {"*": _ENGINE_SHAPE}},
    "memory": {"partitions": _COUNT, "sbuf_bytes": _NUMBER, "psum_bytes": _NUMBER},
    "tables": {"*": {"offset": _COUNT, "length": _COUNT}},
}


def _shape_problem(value, shape, where: str) -> str | None:
    """What in ``value`` does not have ``shape`` (see _HEADER_SHAPE), or None."""
    if shape == _NUMBER or shape == _COUNT:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
            return f"{where} is {_json_type(value)}, not a number"
        if shape == _COUNT and (not isinstance(value, int) or value < 0 or value >= 2**63):
            return f"{where} = {value!r} is not a count"
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_json_type(value)}, not a list"
        for i, item in enumerate(value):
            if problem := _shape_problem(item, shape[0], f"{where}[{i}]"):
                return problem
        return None
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_json_type(value)}, not an object"
        for key, item in value.items():
            inner = shape.get(key, shape.get("*"))
            if inner is not None and (problem := _shape_problem(item, inner, f"{where}.{key}")):
                return problem
        return None
    types = shape if isinstance(shape, tuple) else (shape,)
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types) or (
            isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64):
        return f"{where} is {_json_type(value)}"
    return None


def _json_type(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), f"the number {value!r}" if isinstance(value, (int, float)) else type(value).__name__)


def _column(chunked) -> np.ndarray:
    array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return np.array(array.to_pylist(), dtype=object)
    return array.to_numpy(zero_copy_only=False)


def parse_semaphore_list(text: str) -> list[tuple[str, int]]:
    """``"qSyncIO0:1;S[1] (Vector):2"`` -> [("qSyncIO0", 1), ("S[1] (Vector)", 2)]."""
    out = []
    for part in (text or "").split(";"):
        name, sep, value = part.rpartition(":")
        if sep and name:
            try:
                out.append((name, int(value)))
            except ValueError:
                continue
    return out
