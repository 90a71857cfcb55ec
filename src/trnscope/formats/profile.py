"""The profile directory: what its files are called, what kind each is, and its manifest.

``NeuronProfiler.export_trace`` writes one directory per recording window (docs/file-formats.md,
"Profile directory")::

    <profile_output_dir>/<hostname>_pid_<pid>/<YYYYmmdd_HHMMSS_ffffff>/
        trace.json                       framework trace (Kineto JSON with device lanes)
        system_trace.json                runtime and hardware lanes, flows, HBM usage
        neff_<id>.neff                   every NEFF executed in the window
        <id>_instid_0_vnc_<nc>.ntff      its instruction trace on NeuronCore <nc>
        recipes.json                     what re-lowering each NEFF needs
        cpu_util.json, host_mem.json     host samples
        manifest.json                    written first (incomplete) and last: every file, size, sha256

The manifest's schema, the reason an unfinished export leaves in it, and its checks live here; the
window's own fields come from the writer (they are the recorded run's).
"""

from __future__ import annotations

import datetime
import hashlib
import re
from pathlib import Path

import orjson

MANIFEST = "manifest.json"
FRAMEWORK_TRACE = "trace.json"
SYSTEM_TRACE = "system_trace.json"
CPU_UTIL = "cpu_util.json"
HOST_MEM = "host_mem.json"
RECIPES = "recipes.json"
JSON_FILES = (MANIFEST, FRAMEWORK_TRACE, SYSTEM_TRACE, CPU_UTIL, HOST_MEM, RECIPES)

# manifest "kind" of each file
KIND_FRAMEWORK_TRACE, KIND_SYSTEM_TRACE, KIND_NEFF, KIND_NTFF = "framework_trace", "system_trace", "neff", "ntff"
KIND_RECIPES, KIND_CPU_UTIL, KIND_HOST_MEM = "recipes", "cpu_util", "host_mem"

NTFF_NAME = re.compile(r"^(?P<neff>\d+)_instid_(?P<inst>\d+)_vnc_(?P<nc>\d+)\.ntff$")
NEFF_NAME = re.compile(r"^neff_(?P<neff>\d+)\.neff$")

MANIFEST_SCHEMA = "trnscope-profile-manifest"
MANIFEST_VERSION = 1
INTERRUPTED = "the export did not finish (the process was killed or interrupted while writing the profile)"

# the JSON documents beside the traces: (schema, version)
SYSTEM_TRACE_SCHEMA = ("trnscope-system-trace", 1)
CPU_UTIL_SCHEMA = ("trnscope-cpu-util", 2)
HOST_MEM_SCHEMA = ("trnscope-host-mem", 2)


def neff_file_name(neff_id: int | str) -> str:
    return f"neff_{neff_id}.neff"


def ntff_file_name(neff_id: int | str, nc: int) -> str:
    """The instruction trace of NEFF ``neff_id`` on NeuronCore ``nc`` (pairs with its NEFF by the id)."""
    return f"{neff_id}_instid_0_vnc_{nc}.ntff"


def ntff_files_of(directory: Path, neff_id: int | str) -> list[Path]:
    """The NTFFs of one NEFF in a profile directory, by NeuronCore."""
    found = [(int(m["nc"]), p) for p in Path(directory).iterdir()
             if (m := NTFF_NAME.match(p.name)) and m["neff"] == str(neff_id) and p.is_file()]
    return [p for _, p in sorted(found)]


def neff_files(directory: Path) -> list[tuple[str, Path]]:
    """(neff id, path) of the NEFFs in a profile directory, by name."""
    return [(m["neff"], p) for p in sorted(Path(directory).iterdir())
            if (m := NEFF_NAME.match(p.name)) and p.is_file()]


def is_profile_file(name: str) -> bool:
    """Whether a file name is one a profile directory is made of."""
    return name in JSON_FILES or bool(NTFF_NAME.match(name) or NEFF_NAME.match(name))


def is_temporary(name: str) -> bool:
    """A half-written file: writers write ``.<name>.tmp...`` and rename it into place."""
    return name.startswith(".") and ".tmp" in name


def temporary_name(path: Path, tag: str = "") -> Path:
    """Where ``path`` is written before it is renamed into place (what :func:`is_temporary` finds)."""
    return path.with_name(f".{path.name}.tmp{tag}")


# --- the manifest ----------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path, kind: str, **extra) -> dict:
    """A manifest ``files`` entry for a written file (NEFFs add neff_id, name, source; NTFFs
    neff_id, vnc, truncated, instructions)."""
    return {"path": path.name, "kind": kind, "bytes": path.stat().st_size, "sha256": sha256_file(path), **extra}


def manifest_document(*, complete: bool, reason: str | None, trnscope_version: str, torch_version: str,
                      instance_id: str, process_id: int, window: dict, config: dict, warnings: list[str],
                      files: list[dict]) -> dict:
    """The manifest, fields in the documented order (``window``: id, start_ns, end_ns, clock,
    host_time, target, instance, neuroncore, neuron_cores, active_neuron_cores, executions,
    kernels, missing_in_flight, ended_on_exception)."""
    return {
        "schema": MANIFEST_SCHEMA,
        "version": MANIFEST_VERSION,
        "complete": complete,
        "reason": reason,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "trnscope_version": trnscope_version,
        "torch_version": torch_version,
        "instance_id": instance_id,
        "process_id": process_id,
        "window": window,
        "config": config,
        "warnings": warnings,
        "files": files,
    }


def looks_like_manifest(head: bytes) -> bool:
    """Whether the first bytes of a ``manifest.json`` are a profile manifest's."""
    return MANIFEST_SCHEMA.encode() in head


def load_manifest(directory) -> dict:
    return orjson.loads((Path(directory) / MANIFEST).read_bytes())


def verify_profile(directory) -> list[str]:
    """Problems with a profile directory ([] when its manifest is complete and every file matches)."""
    d = Path(directory)
    problems = []
    try:
        m = load_manifest(d)
    except FileNotFoundError:
        return ["no manifest.json (the export did not finish)"]
    if not m.get("complete"):
        problems.append(f"marked incomplete: {m.get('reason')}")
    for f in m.get("files", []):
        p = d / f["path"]
        if not p.is_file():
            problems.append(f"{f['path']}: missing")
            continue
        if p.stat().st_size != f["bytes"]:
            problems.append(f"{f['path']}: {p.stat().st_size} bytes, manifest says {f['bytes']}")
        elif sha256_file(p) != f["sha256"]:
            problems.append(f"{f['path']}: sha256 mismatch")
    return problems
