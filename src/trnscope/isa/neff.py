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
import struct
import tarfile
from dataclasses import fields
from enum import Enum

import numpy as np
import orjson

from .ap import AP
from .dtypes import DType
from .errors import NeffFormatError
from .instructions import INSTRUCTION_TYPES, Act, Alu, Engine, Instruction
from .program import Program, QueueDecl, TensorDecl

MAGIC = b"NEFF"
PKG_VERSION = 2  # 2 = SHA-256 hash, as Neuron's pkg_version selects the hash kind
HEADER_SIZE = 1024
NEFF_VERSION = (2, 0)
BUILD = "trnscope-0.1.0"
_HEADER = struct.Struct("<4sIIQII128sI32s16s256sI16s")

ENGINE_FILES = {
    Engine.TENSOR: "Tensor.json",
    Engine.VECTOR: "DVE.json",
    Engine.SCALAR: "Activation.json",
    Engine.GPSIMD: "Pool.json",
    Engine.SYNC: "Sync.json",
    Engine.DMA: "DMA.json",
}
_ENUM_FIELDS = {"alu": Alu, "alu0": Alu, "alu1": Alu, "cmp": Alu, "func": Act, "on": Engine}
_TUPLE_FIELDS = {"waits", "signals", "coefs"}


def _encode_value(v):
    if isinstance(v, AP):
        return {"ap": v.to_list()}
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, tuple):
        return [_encode_value(x) for x in v]
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
    for f in fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if isinstance(v, dict) and "ap" in v:
            v = AP.from_list(v["ap"])
        elif f.name in _ENUM_FIELDS and v is not None:
            v = _ENUM_FIELDS[f.name](v)
        elif f.name in _TUPLE_FIELDS:
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        kw[f.name] = v
    return cls(**kw)


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
    """The tarball: deterministic bytes for a given Program (its hash is the NEFF's identity)."""
    streams: dict[Engine, list[dict]] = {e: [] for e in ENGINE_FILES}
    for i, ins in enumerate(program.instructions):
        streams[ins.ENGINE].append(encode_instruction(i, ins))
    definition = {
        "var": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype.value, "type": t.kind}
                for t in program.tensors],
        "dma_queue": [{"name": q.name, "type": q.kind, "id": i} for i, q in enumerate(program.queues)],
        "semaphores": list(program.semaphores),
        "framework_ops": list(program.ops),
        "engines": {e.value: ENGINE_FILES[e] for e in ENGINE_FILES},
        "instruction_count": len(program.instructions),
    }
    top = {"format": "trnscope-neff", "version": list(NEFF_VERSION), "target": program.target,
           "subgraphs": ["sg00"], "meta": program.meta}
    members = [("neff.json", _json(top)), ("sg00/def.json", _json(definition))]
    for e, fname in ENGINE_FILES.items():
        members.append((f"sg00/{fname}", _json(streams[e])))
    for idx in sorted(program.constants):
        arr = np.ascontiguousarray(program.constants[idx])
        npy = io.BytesIO()
        np.save(npy, arr, allow_pickle=False)
        members.append((f"sg00/const_{idx}.npy", npy.getvalue()))
    return _tar_bytes(members)


def _fixed(s: str, n: int) -> bytes:
    return s.encode()[:n]


def to_bytes(program: Program) -> bytes:
    body = encode_body(program)
    digest = hashlib.sha256(body).digest()
    header = _HEADER.pack(
        MAGIC, PKG_VERSION, HEADER_SIZE, len(body), NEFF_VERSION[0], NEFF_VERSION[1], _fixed(BUILD, 128), 1,
        digest, digest[:16], _fixed(program.name, 256), 1, _fixed(program.target, 16),
    )
    return header.ljust(HEADER_SIZE, b"\0") + body


def read_header(data: bytes, source: str = "<bytes>") -> dict:
    if len(data) < HEADER_SIZE or data[:4] != MAGIC:
        raise NeffFormatError(f"{source} is not a NEFF file (no 'NEFF' header); pass a .neff written by trnscope")
    (magic, pkg, hsize, dsize, vmaj, vmin, build, num_tpb, digest, uuid, name, req, target) = _HEADER.unpack(
        data[: _HEADER.size])
    return {
        "pkg_version": pkg, "header_size": hsize, "data_size": dsize, "neff_version": (vmaj, vmin),
        "neff_build_version": build.rstrip(b"\0").decode(errors="replace"), "num_tpb": num_tpb,
        "hash": digest.hex(), "uuid": uuid.hex(), "name": name.rstrip(b"\0").decode(errors="replace"),
        "requested_tpb_count": req, "target": target.rstrip(b"\0").decode(errors="replace"),
        "neff_id": int.from_bytes(digest[:8], "big"),
    }


def from_bytes(data: bytes, source: str = "<bytes>") -> Program:
    header = read_header(data, source)
    body = data[header["header_size"]: header["header_size"] + header["data_size"]]
    if len(body) != header["data_size"]:
        raise NeffFormatError(f"{source} is truncated: header says {header['data_size']} body bytes, "
                              f"found {len(body)}; re-export the NEFF")
    if hashlib.sha256(body).hexdigest() != header["hash"]:
        raise NeffFormatError(f"{source} is corrupt: its content does not match the hash in its header")
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r") as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        top = orjson.loads(files["neff.json"])
        definition = orjson.loads(files["sg00/def.json"])
        records = []
        for fname in ENGINE_FILES.values():
            records.extend(orjson.loads(files.get(f"sg00/{fname}", b"[]")))
    except (tarfile.TarError, KeyError, orjson.JSONDecodeError) as exc:
        raise NeffFormatError(f"{source}: unreadable NEFF body ({exc})") from None
    prog = Program(name=header["name"], target=top.get("target", header["target"]), meta=top.get("meta", {}))
    prog.tensors = [TensorDecl(v["name"], tuple(v["shape"]), DType(v["dtype"]), v["type"]) for v in definition["var"]]
    prog.queues = [QueueDecl(q["name"], q["type"]) for q in definition["dma_queue"]]
    prog.semaphores = list(definition["semaphores"])
    prog.ops = list(definition["framework_ops"])
    records.sort(key=lambda r: r["id"])
    prog.instructions = [decode_instruction(r) for r in records]
    for name, blob in files.items():
        if name.startswith("sg00/const_"):
            idx = int(name[len("sg00/const_"):-len(".npy")])
            prog.constants[idx] = np.load(io.BytesIO(blob), allow_pickle=False)
    prog._hash = bytes.fromhex(header["hash"])
    return prog


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
