"""The NEFF container: a 1024-byte header followed by a tarball, laid out like Neuron's (hardware.md 6.1).

Header (little-endian, zero padded to 1024 bytes):

    magic "NEFF" | pkg_version u32 | header_size u32 | data_size u64 | neff_version_major u32 |
    neff_version_minor u32 | neff_build_version char[128] | num_tpb u32 | hash char[32] (SHA-256 of
    the tarball) | uuid char[16] | name char[256] | requested_tpb_count u32 | target char[16]

Tarball (deterministic: fixed order, mtime 0, uid 0) holding ``neff.json`` (graph level),
``sg00/def.json`` (variables, DMA queues, semaphores, framework ops), one ``sg00/<Engine>.json``
per engine stream (Neuron's names: Tensor, DVE (Vector), Activation (Scalar), Pool (GpSimd), Sync,
DMA) and constants as ``sg00/const_<tensor>.npy``. docs/file-formats.md documents every field.
"""

from __future__ import annotations

import hashlib
import io
import math
import tarfile
import typing
from dataclasses import fields
from enum import Enum
from operator import attrgetter, itemgetter

import numpy as np
import orjson

from .. import caches
from .ap import AP
from .dtypes import DType
from .columns import gc_paused
from .errors import NeffFormatError, ProgramError
from .instructions import INSTRUCTION_TYPES, Engine, Instruction
from .program import Program, QueueDecl, TensorDecl
# the container's header is defined once, with the other file formats
from ..formats.neff import FORMAT_NAME, HEADER_SIZE, MAGIC, NEFF_VERSION, pack_header, read_header  # noqa: F401

BUILD = "trnscope-0.1.0"

ENGINE_FILES = {
    Engine.TENSOR: "Tensor.json",
    Engine.VECTOR: "DVE.json",
    Engine.SCALAR: "Activation.json",
    Engine.GPSIMD: "Pool.json",
    Engine.SYNC: "Sync.json",
    Engine.DMA: "DMA.json",
}


# JSON has no NaN or infinity (orjson writes them as null, the same as None): a fill of -inf and
# one of NaN would share a NEFF hash, and the NEFF cache would run one for the other. They are
# written as {"float": "nan" | "inf" | "-inf"}, which no other field value looks like.
_NONFINITE_NAMES = {"nan", "inf", "-inf"}


def _nonfinite(v: float) -> dict:
    return {"float": "nan" if v != v else ("inf" if v > 0 else "-inf")}


def _encode_value(v):
    if isinstance(v, AP):
        return {"ap": v.to_list()}
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, tuple):
        return [_encode_value(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return _nonfinite(v)
    return v


def _finite_fields(v):
    """A field value with its non-finite floats tagged as :func:`_encode_value` tags them, the rest
    as it is (for orjson to write)."""
    if isinstance(v, float) and not math.isfinite(v):
        return _nonfinite(v)
    if isinstance(v, tuple) and any(isinstance(x, (float, tuple)) for x in v):
        return tuple(_finite_fields(x) for x in v)
    return v


def _decode_value(v):
    if isinstance(v, dict) and len(v) == 1 and v.get("float") in _NONFINITE_NAMES:
        return float(v["float"])
    if isinstance(v, list):
        return [_decode_value(x) for x in v]
    return v


def encode_instruction(index: int, ins: Instruction) -> dict:
    d = {"id": index, "type": type(ins).__name__, "opcode": ins.OPCODE}
    for f in fields(ins):
        d[f.name] = _encode_value(getattr(ins, f.name))
    return d


def decode_instruction(d: dict) -> Instruction:
    cls = INSTRUCTION_TYPES.get(d.get("type", ""))
    if cls is None:
        raise NeffFormatError(f"unknown instruction type {d.get('type')!r} (instruction id {d.get('id')})")
    kw = {}
    for name, convert in _field_decoders(cls):
        if name not in d:
            continue
        v = _decode_value(d[name])
        if isinstance(v, dict) and "ap" in v:
            v = AP.from_list(v["ap"])
        elif convert is not None and v is not None:
            v = convert(v)
        kw[name] = v
    return cls(**kw)


_DECODERS: dict[type, tuple] = {}


def _field_decoders(cls: type) -> tuple:
    """(field name, how its JSON value becomes the field's type or None) for each field of ``cls``,
    read off its annotations: an enum field takes its enum's value, a tuple field a tuple (of tuples)."""
    found = _DECODERS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _DECODERS[cls] = tuple((f.name, _decoder(hints[f.name])) for f in fields(cls))
    return found


def _decoder(hint):
    for t in (hint, *typing.get_args(hint)):
        if isinstance(t, type) and issubclass(t, Enum):
            return t
    if hint is tuple or typing.get_origin(hint) is tuple:
        return _as_tuple
    return None


def _as_tuple(v) -> tuple:
    return tuple(tuple(x) if isinstance(x, list) else x for x in v)


def _tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _json(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def encode_body(program: Program) -> bytes:
    """The tarball: deterministic bytes for a given Program (its hash is the NEFF's identity).

    Byte for byte what :func:`_encode_body_reference` writes, built from the Program's shapes
    (``isa.columns.ShapeIndex``): an instruction's JSON object is its shape's text with two holes, its
    ``id`` and its ``waits``, so each shape is written once and each instruction costs two small
    writes and a join. Programs whose shapes are not keyed exactly take the reference path.
    """
    streams = _engine_streams(program)
    if streams is None:
        return _encode_body_reference(program)
    return _body(program, streams)


def _encode_body_reference(program: Program) -> bytes:
    """Every instruction encoded on its own, in one plain loop (the specification of :func:`encode_body`)."""
    streams: dict[Engine, list[dict]] = {e: [] for e in ENGINE_FILES}
    for i, ins in enumerate(program.instructions):
        streams[ins.ENGINE].append(encode_instruction(i, ins))
    return _body(program, {e: _json(v) for e, v in streams.items()})


def _body(program: Program, streams: dict) -> bytes:
    definition = {
        "var": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype.value, "type": t.kind}
                for t in program.tensors],
        "dma_queue": [{"name": q.name, "type": q.kind, "id": i} for i, q in enumerate(program.queues)],
        "semaphores": list(program.semaphores),
        "framework_ops": list(program.ops),
        "engines": {e.value: ENGINE_FILES[e] for e in ENGINE_FILES},
        "instruction_count": len(program.instructions),
    }
    top = {"format": FORMAT_NAME, "version": list(NEFF_VERSION), "target": program.target,
           "subgraphs": ["sg00"], "meta": program.meta}
    members = [("neff.json", _json(top)), ("sg00/def.json", _json(definition))]
    for e, fname in ENGINE_FILES.items():
        members.append((f"sg00/{fname}", streams[e]))
    for idx in sorted(program.constants):
        arr = np.ascontiguousarray(program.constants[idx])
        npy = io.BytesIO()
        np.save(npy, arr, allow_pickle=False)
        members.append((f"sg00/const_{idx}.npy", npy.getvalue()))
    return _tar_bytes(members)


# Placeholders for the two per-instruction values while a shape's text is written: strings no field
# holds, so splitting the shape's JSON on their text leaves exactly the pieces around them.
_ID_HOLE = "\0trnscope:id\0"
_WAITS_HOLE = "\0trnscope:waits\0"
_ID_HOLE_JSON = orjson.dumps(_ID_HOLE)
_WAITS_HOLE_JSON = orjson.dumps(_WAITS_HOLE)
# The ids and waits of all instructions are written by ONE orjson call over [id, SEP, waits, SEP, ...]
# and split on SEP's text: SEP is a Fragment (pasted verbatim) holding \x01, a byte orjson never
# writes itself (control characters in strings are escaped), so ",\x01," occurs only between values.
# One call instead of two per instruction: each orjson call allocates a fresh output buffer, which
# costs more than the writing.
_SEP = orjson.Fragment(b"\x01")
_SEP_TEXT = b",\x01,"
# a pattern (a dataclass) in the waits must not be written by orjson's own dataclass support: it
# raises and the Program takes the reference path; dicts are sorted as the reference sorts them
_DUMP_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
_WAITS = attrgetter("waits")
_ENGINE_ORDER = {e: k for k, e in enumerate(ENGINE_FILES)}

# shape key -> (",{...\"id\":", ",...\"waits\":", "...}"); keys hold pattern ids, which are never
# reused, so a hit is always the same text
_SEGMENTS: dict = {}
caches.register("isa.neff: shape texts", _SEGMENTS.clear)
# pattern id -> its text, a Fragment ({"ap": ...} has one key, nothing for SORT_KEYS to reorder)
_AP_TEXT: dict = {}
caches.register("isa.neff: pattern texts", _AP_TEXT.clear)
SEGMENT_MEMO_LIMIT = 1 << 16
_FIELD_VALUES: dict = {}
caches.register("isa.neff: field texts", _FIELD_VALUES.clear)


def _ap_text(v) -> orjson.Fragment:
    """orjson's fallback while a shape is written: a pattern as the reference writes it, anywhere in a
    field (the reference also turns patterns inside tuples into {"ap": ...}); anything else orjson
    cannot write itself makes the Program take the reference path."""
    if not isinstance(v, AP):
        raise TypeError(f"{type(v).__name__} in an instruction field")
    text = _AP_TEXT.get(v._sid)
    if text is None:
        if len(_AP_TEXT) >= SEGMENT_MEMO_LIMIT:
            _AP_TEXT.clear()
        text = _AP_TEXT[v._sid] = orjson.Fragment(_json({"ap": v.to_list()}))
    return text


def _segments(key, rep: Instruction) -> tuple[bytes, bytes, bytes]:
    """The text of a shape's instructions around their id and waits. Field values go to orjson as they
    are: it writes enums by value and tuples as arrays, which is what ``_encode_value`` makes of them."""
    seg = _SEGMENTS.get(key)
    if seg is None:
        cls = type(rep)
        getter = _FIELD_VALUES.get(cls)
        if getter is None:
            names = tuple(f.name for f in fields(cls) if f.name != "waits")
            getter = _FIELD_VALUES[cls] = (names, attrgetter(*names))
        names, values = getter
        d = {k: _finite_fields(v) for k, v in zip(names, values(rep))}
        d.update(id=_ID_HOLE, type=cls.__name__, opcode=cls.OPCODE, waits=_WAITS_HOLE)
        text = orjson.dumps(d, default=_ap_text, option=_DUMP_OPTIONS)
        head, hole, tail = text.partition(_ID_HOLE_JSON)
        mid, hole2, end = tail.partition(_WAITS_HOLE_JSON)
        if not hole or not hole2 or _ID_HOLE_JSON in end or _WAITS_HOLE_JSON in end:
            raise ValueError("a field holds a placeholder's text")
        if len(_SEGMENTS) >= SEGMENT_MEMO_LIMIT:
            _SEGMENTS.clear()
        seg = _SEGMENTS[key] = (b"," + head, mid, end)
    return seg


def _objects(items) -> np.ndarray:
    out = np.empty(len(items), object)
    out[:] = items
    return out


def _engine_streams(program: Program) -> dict | None:
    """Each engine file's JSON from the shapes, or None when the reference must write it."""
    instrs = program.instructions
    try:
        index = program.shape_index(identical=True)
    except ProgramError:
        return None  # malformed waits: the reference writes whatever they are
    if not index.exact:
        return None
    try:
        segs = [_segments(key, rep) for key, rep in zip(index.keys, index.reps)]
        shape = np.frombuffer(index.shape, np.int64).copy() if len(index.shape) else np.zeros(0, np.int64)
        engine = np.array([_ENGINE_ORDER[type(r).ENGINE] for r in index.reps], np.int64)[shape]
        n = len(instrs)
        values: list = [_SEP] * (4 * n - 1) if n else []
        values[0::4] = range(n)
        values[2::4] = map(_WAITS, instrs)
        texts = orjson.dumps(values, option=_DUMP_OPTIONS)[1:-1].split(_SEP_TEXT) if n else []
        if len(texts) != 2 * n:
            raise ValueError("waits text holds the separator")
        # the pieces go through object arrays: gathering them by shape and instruction index is then
        # NumPy's, not one Python call per piece
        per_instr = _objects(texts)
        ids, waits = per_instr[0::2], per_instr[1::2]
        pre, mid, end = (_objects(x) for x in zip(*segs)) if segs else (_objects(()),) * 3
        out = {}
        for e, k in _ENGINE_ORDER.items():
            at = np.flatnonzero(engine == k)
            if not len(at):
                out[e] = b"[]"
                continue
            sh = shape[at]
            pieces = np.empty((len(at), 5), object)
            pieces[:, 0] = pre[sh]
            pieces[:, 1] = ids[at]
            pieces[:, 2] = mid[sh]
            pieces[:, 3] = waits[at]
            pieces[:, 4] = end[sh]
            body = b"".join(pieces.ravel().tolist())
            out[e] = b"[" + body[1:] + b"]"  # the first instruction has no comma before it
        return out
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        return None


def to_bytes(program: Program) -> bytes:
    raw = _unchanged_bytes(program)
    if raw is not None:
        return raw
    body = encode_body(program)
    tpbs = program.physical_cores()[0]  # a NEFF for LNC=2 holds instructions for both physical cores (S46)
    return pack_header(body_size=len(body), digest=hashlib.sha256(body).digest(), build=BUILD, name=program.name,
                       target=program.target, tpbs=tpbs) + body


def _members(data: bytes, source: str) -> tuple[dict, dict, dict, dict]:
    """(header, tar members by name, neff.json, def.json) of a NEFF, its size and hash checked."""
    header = read_header(data, source)
    body = data[header["header_size"]: header["header_size"] + header["data_size"]]
    if len(body) != header["data_size"]:
        raise NeffFormatError(f"{source} is truncated: header says {header['data_size']} body bytes, "
                              f"found {len(body)}; re-export the NEFF")
    if hashlib.sha256(body).hexdigest() != header["hash"]:
        raise NeffFormatError(f"{source} is corrupt: its content does not match the hash in its header")
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r") as tar:
            files = {m.name: f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m))}
        top = orjson.loads(files["neff.json"])
        definition = orjson.loads(files["sg00/def.json"])
    except (tarfile.TarError, KeyError, orjson.JSONDecodeError, EOFError, OSError) as exc:
        raise NeffFormatError(f"{source}: unreadable NEFF body ({exc})") from None
    return header, files, top, definition


def _decode_streams(files: dict, source: str) -> list[Instruction]:
    """The instructions of all engine files, in program order. Instructions equal but for their id
    and waits (most of a large kernel's) are decoded once and copied with their own waits."""
    try:
        with gc_paused():  # many small objects, none in a cycle: a collection would only walk them
            return _decode_records(files)
    except NeffFormatError as exc:
        if source in str(exc):
            raise
        raise NeffFormatError(f"{source}: {exc}") from None  # the decoder does not know the file
    except (orjson.JSONDecodeError, *_DECODE_ERRORS) as exc:
        raise NeffFormatError(f"{source}: unreadable NEFF instructions ({type(exc).__name__}: {str(exc)[:200]})") from None


def _decode_records(files: dict) -> list[Instruction]:
    records = []
    for fname in ENGINE_FILES.values():
        records.extend(orjson.loads(files.get(f"sg00/{fname}", b"[]")))
    records.sort(key=_ID)
    protos: dict[bytes, Instruction] = {}
    out = []
    for r in records:
        del r["id"]
        waits = r.pop("waits", ())
        key = orjson.dumps(r)
        proto = protos.get(key)
        if proto is None:
            proto = protos[key] = decode_instruction(r)
        out.append(_with_waits(proto, tuple(map(tuple, waits)) if waits else ()))
    return out


_ID = itemgetter("id")
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_new = object.__new__
_set = object.__setattr__


def _with_waits(proto: Instruction, waits: tuple) -> Instruction:
    """A copy of frozen ``proto`` with other ``waits`` (without the generated __init__'s checks)."""
    cls = type(proto)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls) if f.name != "waits")
    ins = _new(cls)
    for name in names:
        _set(ins, name, getattr(proto, name))
    _set(ins, "waits", waits)
    return ins


# What a damaged NEFF whose hash was recomputed raises while being decoded (a value of the wrong
# type or size in its JSON, a bad constant array): reported as NeffFormatError naming the file.
_DECODE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError, RecursionError)


def from_bytes(data: bytes, source: str = "<bytes>", *, lazy: bool = False) -> Program:
    """The Program a NEFF holds (its size and SHA-256 checked first). ``lazy``: decode the
    instructions when they are first used (a NEFF from a cache is often only executed: the
    runtime needs its header, tensors and simulated timeline, not its instructions)."""
    try:
        return _from_bytes(data, source, lazy)
    except NeffFormatError as exc:
        if source in str(exc):
            raise
        raise NeffFormatError(f"{source}: {exc}") from None
    except _DECODE_ERRORS as exc:
        raise NeffFormatError(f"{source}: unreadable NEFF ({type(exc).__name__}: {str(exc)[:200]}); "
                              f"re-export the NEFF") from None


def _from_bytes(data: bytes, source: str, lazy: bool) -> Program:
    header, files, top, definition = _members(data, source)
    if not isinstance(top, dict) or not isinstance(definition, dict):
        raise NeffFormatError(f"{source}: unreadable NEFF body (neff.json or def.json is not a JSON object)")
    prog = Program.__new__(NeffProgram) if lazy else Program(name=header["name"])
    prog.name = header["name"]
    prog.target = top.get("target", header["target"])
    prog.meta = top.get("meta", {})
    try:
        prog.tensors = [TensorDecl(v["name"], tuple(v["shape"]), DType(v["dtype"]), v["type"])
                        for v in definition["var"]]
        prog.queues = [QueueDecl(q["name"], q["type"]) for q in definition["dma_queue"]]
        prog.semaphores = list(definition["semaphores"])
        prog.ops = list(definition["framework_ops"])
    except (KeyError, TypeError, ValueError) as exc:
        raise NeffFormatError(f"{source}: unreadable NEFF definitions ({type(exc).__name__}: {exc})") from None
    prog.constants = {}
    for name, blob in files.items():
        if name.startswith("sg00/const_"):
            idx = int(name[len("sg00/const_"):-len(".npy")])
            prog.constants[idx] = np.load(io.BytesIO(blob), allow_pickle=False)
    if isinstance(prog, NeffProgram):
        prog._pending = (files, source, data)
        prog._origin, prog._index = -1, None
        prog._count = int(definition.get("instruction_count", -1))
    else:
        prog.instructions = _decode_streams(files, source)
    prog._hash = bytes.fromhex(header["hash"])
    return prog


class NeffProgram(Program):
    """A Program read from a NEFF whose instructions are decoded when first used
    (``from_bytes(..., lazy=True)``). Until then :func:`to_bytes` returns the NEFF it came from."""

    _pending: tuple | None  # (tar members, source, NEFF bytes) until the instructions are decoded
    _count: int             # the instruction count its header declares

    @property
    def instructions(self) -> list[Instruction]:  # type: ignore[override]
        pending = self.__dict__.get("_pending")
        if pending is not None:
            files, source, _ = pending
            self.__dict__["_instructions"] = _decode_streams(files, source)
            self.__dict__["_pending"] = None
        return self.__dict__["_instructions"]

    @instructions.setter
    def instructions(self, value: list[Instruction]) -> None:
        self.__dict__["_pending"] = None
        self.__dict__["_instructions"] = value

    @property
    def decoded(self) -> bool:
        return self.__dict__.get("_pending") is None

    def __len__(self) -> int:
        count = self.__dict__.get("_count", -1)
        return count if not self.decoded and count >= 0 else len(self.instructions)


def _unchanged_bytes(program: Program) -> bytes | None:
    """The NEFF a lazily read Program came from, while nothing has touched its instructions."""
    pending = program.__dict__.get("_pending") if isinstance(program, NeffProgram) else None
    if pending is None or program._hash is None:
        return None
    return pending[2]


def save(program: Program, path) -> None:
    from pathlib import Path

    Path(path).write_bytes(to_bytes(program))


def load(path) -> Program:
    from pathlib import Path

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise NeffFormatError(f"cannot read NEFF {p}: {exc.strerror}") from None
    return from_bytes(data, str(p))
