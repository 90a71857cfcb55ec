"""The NEFF cache that survives the process: compiled NEFFs and their simulated timelines on disk.

Where: ``$TORCH_NEURONX_NEFF_CACHE_DIR`` (TorchNeuron's variable) or ``$TRNSCOPE_NEFF_CACHE_DIR``,
else the user cache directory (``platformdirs``: ``$XDG_CACHE_HOME/trnscope/neff`` or
``~/.cache/trnscope/neff`` on Linux, ``~/Library/Caches/trnscope/neff`` on macOS).
``TORCH_NEURONX_DISABLE_NEFF_CACHE=1`` (also ``TORCH_NEURONX_NEFF_DISABLE_CACHE``, the spelling of
TorchNeuron's own sources) turns it off: nothing is read from or written to disk. The NEFFs of the
running process stay cached in memory either way (a process that re-lowered every call could not
run a training loop in useful time).

Layout, under the root::

    trnscope-<version>-<build>/      one per trnscope build: <build> hashes the source of every
                                      layer a NEFF or a timeline depends on (hw, isa, compiler, sim,
                                      this module), so a cache written by another build, older or
                                      newer, is never read
      <spec>/                         one per target spec: a hash of every field of the HardwareSpec
        neff_<id>_<sha>.neff          the NEFF (``trnscope inspect`` reads it); <sha>: the first 12
                                      hex digits of its SHA-256, so concurrent writers never collide
        neff_<id>_<sha>.timeline.npz  its simulated timeline on this spec, beside it
        keys/<key>.json               the commit record of one op call's entry (see below)

``<key>`` is the SHA-256 of the op call as the lowering cache keys it (name, tensor metadata,
attributes with runtime scalars as placeholders, see ``compiler.scalars``); calls that compile to
the same NEFF share its files. An entry is written NEFF and timeline first, each to a private
temporary file renamed into place, and its key record last, so a reader sees an entry whole or
not at all. The record holds the full key text (a hash collision is caught, not trusted), the
NEFF's and the timeline's sizes and SHA-256; a lookup checks all of them (the NEFF's header hash
too) and trusts nothing that does not match: such an entry is reported once (a
:class:`NeffCacheWarning`), removed and compiled again. Build directories other than the two most
recently used are removed when the cache is first written in a process, and the entries written
longest ago go until this build's directory is under ``TRNSCOPE_NEFF_CACHE_MAX_MB`` (4096).

The ranks of a multi-rank run share the cache. Which rank stores a NEFF first, and so which ranks
would find it on disk, is a race between processes; a profile must not depend on it. A record
therefore names the run that wrote it (:func:`run_identity`), and an entry another process of the
same run wrote is not a hit: that rank compiles the NEFF too. As on Neuron, every rank whose cache
lacked a graph when the run began compiles it (or waits on the rank compiling it, the same host
time), and a NEFF from an earlier run is a load on every rank.
"""

from __future__ import annotations

import enum
import hashlib
import io
import math
import os
import tempfile
import threading
import time
import warnings
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np
import orjson

from .. import __version__, caches, metrics
from ..isa import NeffFormatError, Program, neff

DIR_ENV = ("TORCH_NEURONX_NEFF_CACHE_DIR", "TRNSCOPE_NEFF_CACHE_DIR")
RUN_ENV = "TRNSCOPE_RUN_ID"      # the multi-rank run (set by `trnscope run --nproc`; see run_identity)
DISABLE_ENV = ("TORCH_NEURONX_DISABLE_NEFF_CACHE", "TORCH_NEURONX_NEFF_DISABLE_CACHE", "TRNSCOPE_DISABLE_NEFF_CACHE")
FORMAT = 1                      # of the key records and timeline files
KEEP_BUILDS = 2                 # build directories kept when another build writes
DEFAULT_MAX_MB = 4096           # a build directory's size cap (TRNSCOPE_NEFF_CACHE_MAX_MB)
_PACKAGE = Path(__file__).resolve().parents[1]
# the layers whose code decides a NEFF's bytes or its simulated timeline
_FINGERPRINTED = ("hw", "isa", "compiler", "sim")


class NeffCacheWarning(UserWarning):
    """A damaged persistent-cache entry (reported once, then rebuilt)."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def disabled() -> bool:
    return any(_truthy(os.environ.get(v)) for v in DISABLE_ENV)


def root_dir() -> Path:
    """The cache's root directory (which need not exist yet)."""
    for var in DIR_ENV:
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("trnscope", appauthor=False)) / "neff"


def run_identity() -> str | None:
    """The multi-rank run this process is a rank of, or None outside one: ``$TRNSCOPE_RUN_ID``
    (``trnscope run --nproc`` sets one per launch; set the same value on every node when nodes share a
    cache directory), else under torchrun the node's launcher process (run id, host, its pid and
    start time: the ranks of one launch share it, two launches never do), else for ranks started by
    hand the rendezvous address with the parent process."""
    explicit = os.environ.get(RUN_ENV)
    if explicit:
        return explicit
    if "TORCHELASTIC_RUN_ID" in os.environ:
        launcher = f"torchrun/{os.environ['TORCHELASTIC_RUN_ID']}"
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        launcher = f"manual/{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    else:
        return None
    import socket

    ppid = os.getppid()
    return f"{launcher}/{socket.gethostname()}/{ppid}/{_start_ticks(ppid)}"


def _start_ticks(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot; Linux), so a reused pid is another run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


_fingerprint: str | None = None


def build_fingerprint() -> str:
    """A hash of trnscope's version and the source of the layers NEFFs and timelines depend on."""
    global _fingerprint
    if _fingerprint is None:
        h = hashlib.sha256(f"{__version__}/{FORMAT}".encode())
        files = [Path(__file__)]
        for layer in _FINGERPRINTED:
            files.extend(sorted((_PACKAGE / layer).rglob("*.py")))
        for f in files:
            h.update(str(f.relative_to(_PACKAGE)).encode())
            h.update(f.read_bytes())
        _fingerprint = h.hexdigest()[:16]
    return _fingerprint


def key_text(key: tuple) -> str | None:
    """Deterministic text of a lowering cache key, or None when a part of it has no stable text
    (an object whose repr is its address): such a call is cached in memory only."""
    try:
        return orjson.dumps(_stable(key)).decode()
    except TypeError:
        return None


def _stable(v):
    """``v`` as JSON values that tell apart what the key tells apart: NaN, infinities and None
    (JSON would write all three as null), tuples and numbers of every kind, trnscope's enums and
    dataclasses (runtime-scalar placeholders) by type and fields."""
    t = type(v)
    if t is float:
        return v if math.isfinite(v) else {"float": repr(v)}
    if v is None or t in (int, str, bool):
        return v
    if t is tuple or t is list:
        return [_stable(x) for x in v]
    if isinstance(v, enum.Enum):
        return {"enum": t.__name__, "value": _stable(v.value)}
    if is_dataclass(v) and not isinstance(v, type):
        return {"dataclass": t.__name__, **{f.name: _stable(getattr(v, f.name)) for f in fields(v)}}
    raise TypeError(f"{t.__name__} has no stable text")


class NeffCache:
    """The persistent cache of one process (:func:`get`)."""

    def __init__(self, root: Path | None = None, enabled: bool | None = None) -> None:
        self.root = root if root is not None else root_dir()
        self.enabled = not disabled() if enabled is None else enabled
        self._lock = threading.Lock()
        self._pruned = False
        self._reported: set[str] = set()
        self.run = run_identity()
        self._mine: set[str] = set()  # key records this process wrote (its own entries are hits)
        self.max_bytes = int(float(os.environ.get("TRNSCOPE_NEFF_CACHE_MAX_MB", str(DEFAULT_MAX_MB))) * 2**20)

    def _dir(self, spec_digest: str) -> Path:
        return self.root / f"trnscope-{__version__}-{build_fingerprint()}" / spec_digest[:16]

    # --- reading ------------------------------------------------------------------------------------
    def load(self, key: tuple, spec) -> tuple[Program, object | None] | None:
        """(Program, timeline or None) cached for lowering cache key ``key`` on ``spec``, or None."""
        if not self.enabled:
            return None
        text = key_text(key)
        if text is None:
            return None
        t0 = time.perf_counter_ns()
        d = self._dir(key[1])
        record_path = d / "keys" / f"{_digest(text)}.json"
        try:
            raw = record_path.read_bytes()
        except OSError:
            metrics.count("CompilationCache.DiskMisses")
            return None
        try:
            rec = orjson.loads(raw)
            if rec.get("format") != FORMAT or rec.get("key") != text:
                raise _Damaged("its record is for another key or format")
            if self.run is not None and rec.get("run") == self.run and text not in self._mine:
                # another rank of this run compiled it a moment ago: this rank compiles it too
                metrics.count("CompilationCache.SameRunMisses")
                return None
            data = _checked(d / rec["neff"], rec["neff_bytes"], rec["neff_sha256"], "NEFF")
            program = neff.from_bytes(data, str(d / rec["neff"]), lazy=True)
            timeline = None
            if rec.get("timeline"):
                blob = _checked(d / rec["timeline"], rec["timeline_bytes"], rec["timeline_sha256"], "timeline")
                timeline = _timeline_from_bytes(blob, program, spec)
        except FileNotFoundError:  # its NEFF was evicted (the size cap) after the record was read: a miss
            _unlink(record_path)
            metrics.count("CompilationCache.DiskMisses")
            return None
        except (_Damaged, NeffFormatError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, OSError) as exc:
            self._report(record_path, exc)
            return None
        metrics.count("CompilationCache.DiskHits")
        metrics.sample("NeffCache.LoadTime", time.perf_counter_ns() - t0)
        return program, timeline

    def _report(self, record_path: Path, exc: Exception) -> None:
        """A damaged entry: said once, removed (its record; the shared NEFF is rewritten by the next
        store), counted."""
        metrics.count("CompilationCache.CorruptEntries")
        with self._lock:
            first = str(record_path) not in self._reported
            self._reported.add(str(record_path))
        _unlink(record_path)
        if first:
            warnings.warn(f"trnscope: the NEFF cache entry {record_path} is damaged ({exc}); it was removed and the "
                          f"NEFF is compiled again", NeffCacheWarning, stacklevel=4)

    # --- writing ------------------------------------------------------------------------------------
    def store(self, key: tuple, program: Program, timeline, compile_ns: int = 0) -> None:
        """Keep ``program`` (and ``timeline``, its simulated timeline) for ``key``. A failure to write
        only costs the speed-up: it is counted (``CompilationCache.DiskErrors``), never raised."""
        if not self.enabled:
            return
        text = key_text(key)
        if text is None:
            return
        t0 = time.perf_counter_ns()
        d = self._dir(key[1])
        try:
            self._prune_once()
            (d / "keys").mkdir(parents=True, exist_ok=True)
            data = neff.to_bytes(program)
            sha = hashlib.sha256(data).hexdigest()
            # file names carry their content's digest: processes storing the same NEFF at once (the
            # ranks of a multi-rank run) never overwrite a file another one's record describes
            name = f"neff_{program.neff_id}_{sha[:12]}.neff"
            _write_atomic(d / name, data)
            rec = {"format": FORMAT, "key": text, "op": program.ops[0] if program.ops else program.name,
                   "neff": name, "neff_bytes": len(data), "neff_sha256": sha,
                   "compile_ns": int(compile_ns), "created": time.time(), "trnscope": __version__,
                   "build": build_fingerprint(), "run": self.run, "timeline": None}
            blob = _timeline_to_bytes(timeline) if timeline is not None else None
            if blob is not None:
                tsha = hashlib.sha256(blob).hexdigest()
                tname = f"neff_{program.neff_id}_{tsha[:12]}.timeline.npz"
                _write_atomic(d / tname, blob)
                rec.update(timeline=tname, timeline_bytes=len(blob), timeline_sha256=tsha)
            _write_atomic(d / "keys" / f"{_digest(text)}.json", orjson.dumps(rec))
            self._mine.add(text)
        except OSError:
            metrics.count("CompilationCache.DiskErrors")
            return
        metrics.count("CompilationCache.DiskWrites")
        metrics.sample("NeffCache.StoreTime", time.perf_counter_ns() - t0)

    def _prune_once(self) -> None:
        """Once per process, before its first write: remove build directories other than this one and
        the most recently used others, and bring this build's entries under the size cap."""
        if self._pruned:
            return
        self._pruned = True
        mine = f"trnscope-{__version__}-{build_fingerprint()}"
        try:
            others = [p for p in self.root.iterdir() if p.is_dir() and p.name.startswith("trnscope-")
                      and p.name != mine]
        except OSError:
            others = []
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        import shutil

        for old in others[KEEP_BUILDS - 1:]:
            shutil.rmtree(old, ignore_errors=True)
        self._cap(self.root / mine)

    def _cap(self, build_dir: Path) -> None:
        """Remove the least recently written entries (record, NEFF, timeline) of ``build_dir`` until its
        files take at most ``max_bytes``; a record whose NEFF went with another entry becomes a miss."""
        try:
            files = [(p.stat().st_mtime, p.stat().st_size, p) for p in build_dir.rglob("*") if p.is_file()]
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        if total <= self.max_bytes:
            return
        records = sorted((m, p) for m, _, p in files if p.parent.name == "keys")
        sizes = {p: size for _, size, p in files}
        for _, record in records:
            if total <= 0.9 * self.max_bytes:
                break
            try:
                rec = orjson.loads(record.read_bytes())
                doomed = [record] + [record.parent.parent / rec[k] for k in ("neff", "timeline") if rec.get(k)]
            except (OSError, orjson.JSONDecodeError, TypeError, KeyError):
                doomed = [record]
            for path in doomed:
                total -= sizes.pop(path, 0)
                _unlink(path)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class _Damaged(Exception):
    pass


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _checked(path: Path, size: int, sha256: str, what: str) -> bytes:
    data = path.read_bytes()
    if len(data) != size:
        raise _Damaged(f"its {what} file has {len(data)} bytes, the record says {size}: truncated")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _Damaged(f"its {what} file does not match the checksum in its record")
    return data


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --- timelines ------------------------------------------------------------------------------------------
# A DeviceTimeline is arrays per instruction, the simulator's encoding (more arrays and a few ints) and a
# summary dict: the arrays go into one .npz (no pickles), the rest into a JSON member of it.

_TIMELINE_ARRAYS = ("start_ns", "end_ns", "data_start_ns", "wait_ns")


def _timeline_to_bytes(tl) -> bytes | None:
    arrays = {name: np.asarray(getattr(tl, name)) for name in _TIMELINE_ARRAYS}
    scalars = {}
    for f in fields(tl.encoded):
        v = getattr(tl.encoded, f.name)
        if isinstance(v, np.ndarray):
            arrays[f"encoded.{f.name}"] = v
        elif isinstance(v, (int, float, str, bool)) or v is None:
            scalars[f.name] = v
        else:
            return None  # nothing this format can hold: the timeline is simulated again on load
    if any(a.dtype == object for a in arrays.values()):
        return None
    try:
        meta = orjson.dumps({"format": FORMAT, "summary": tl.summary, "encoded": scalars},
                            option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return None
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta, np.uint8), **arrays)  # type: ignore[arg-type]  # arrays by name
    return buf.getvalue()


def _timeline_from_bytes(blob: bytes, program: Program, spec) -> "StoredTimeline":
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = orjson.loads(arrays.pop("__meta__").tobytes())
    if meta.get("format") != FORMAT:
        raise _Damaged("its timeline is of another format")
    if any(len(arrays[name]) != len(program) for name in _TIMELINE_ARRAYS):
        raise _Damaged(f"its timeline does not have the NEFF's {len(program)} instructions")
    return StoredTimeline(program, spec, arrays, meta)


class StoredTimeline:
    """A simulated timeline read from the cache. What the runtime needs to execute the NEFF (its
    total time, summary, spec) is here at once; anything else - the per-instruction columns a profile
    writes - makes the simulator's ``DeviceTimeline`` from the stored arrays on first use, so a
    process whose kernels all come from the cache never imports the simulator (numba)."""

    __slots__ = ("program", "spec", "summary", "_arrays", "_meta", "_full")

    def __init__(self, program: Program, spec, arrays: dict, meta: dict) -> None:
        self.program, self.spec, self.summary = program, spec, meta["summary"]
        self._arrays, self._meta, self._full = arrays, meta, None

    @property
    def total_ns(self) -> float:
        return float(self.summary.get("total_time_ns", 0.0))

    def full(self):
        """The ``sim.DeviceTimeline`` these stored columns are."""
        if self._full is None:
            from ..sim.encode import Encoded
            from ..sim.timeline import DeviceTimeline

            arrays = self._arrays
            enc_fields = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("encoded.")}
            enc_fields.update(self._meta["encoded"])
            try:
                encoded = Encoded(**enc_fields)
            except TypeError as exc:  # cannot happen within one build (the build hash covers sim/)
                raise RuntimeError(f"a cached timeline does not fit this simulator ({exc})") from None
            tl = DeviceTimeline(self.program, self.spec, encoded, *(arrays[name] for name in _TIMELINE_ARRAYS))
            tl.summary = self.summary
            self._full = tl
        return self._full

    def __getattr__(self, name: str):
        if name.startswith("_"):  # a slot not set yet (a copy being made): not a timeline column
            raise AttributeError(name)
        return getattr(self.full(), name)


_cache: NeffCache | None = None
_cache_lock = threading.Lock()


def get() -> NeffCache:
    """This process's cache, configured from the environment when first used."""
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = NeffCache()
        return _cache


def reset() -> None:
    """Forget the process's cache object: the next :func:`get` reads the environment again."""
    global _cache
    with _cache_lock:
        _cache = None


# --- the runtime's way to a NEFF --------------------------------------------------------------------------

class Lowered:
    """Where an op call's NEFF came from: ``source`` is "memory" (this process had it), "disk" (the
    persistent cache) or "compiled" (lowered now, in ``compile_ns``); ``timeline`` is its simulated
    timeline when known without simulating; ``key`` is set when the runtime should :func:`keep` it
    once simulated."""

    __slots__ = ("program", "compile_ns", "timeline", "source", "key")

    def __init__(self, program: Program, compile_ns: int, timeline, source: str, key: tuple | None) -> None:
        self.program, self.compile_ns, self.timeline, self.source, self.key = program, compile_ns, timeline, source, key


TIMELINES_KEPT = 4096
_timelines: dict[tuple, object] = {}  # (NEFF hash, spec digest) -> timeline read from disk
caches.register("runtime.neff_cache: timelines read from disk", _timelines.clear)


def lower(call, spec) -> Lowered:
    """The NEFF of ``call`` on ``spec``: this process's lowering cache, else the persistent cache,
    else compiled now (and watched for an op that keeps compiling, :mod:`.compile_watch`)."""
    from ..compiler.lowering import cached, compile_call, remember
    from . import compile_watch

    from ..compiler import recipe

    abstract, key, program = cached(call, spec)
    if program is not None:
        metrics.count("CompilationCache.InMemoryHits")
        recipe.note(program.neff_id, abstract)
        return Lowered(program, 0, _timelines.get((program.content_hash, key[1])), "memory", None)
    metrics.count("CompilationCache.InMemoryMisses")
    hit = get().load(key, spec)
    if hit is not None:
        program, timeline = hit
        remember(key, program)
        recipe.note(program.neff_id, abstract)
        if timeline is not None:
            if len(_timelines) >= TIMELINES_KEPT:
                _timelines.pop(next(iter(_timelines)))
            _timelines[(program.content_hash, key[1])] = timeline
        return Lowered(program, 0, timeline, "disk", None if timeline is not None else key)
    program, ns = compile_call(abstract, spec, key)
    recipe.note(program.neff_id, abstract)  # what `trnscope retime` lowers again for another target
    metrics.count("Compilation.NeffsCompiled")
    metrics.sample("CompilationTime", ns)
    compile_watch.compiled(abstract)
    return Lowered(program, ns, None, "compiled", key)


def keep(lowered: Lowered, timeline) -> None:
    """Write a NEFF :func:`lower` compiled, with its timeline, to the persistent cache."""
    if lowered.key is not None:
        get().store(lowered.key, lowered.program, timeline, lowered.compile_ns)
