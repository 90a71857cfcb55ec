"""The NEFF container's header: 1024 bytes before the tarball (docs/file-formats.md, "NEFF").

trnscope's NEFF mirrors Neuron's container (hardware.md 6.1). This module is the header's one
definition: its magic, versions, field layout, how it is packed and read, and how a NEFF's id
(the number in ``neff_<id>.neff`` and in its NTFFs' names) follows from the body's hash. The
tarball's members hold encoded instructions, which belong to the ISA layer: ``trnscope.isa.neff``
writes and decodes them and uses this header.
"""

from __future__ import annotations

import struct

MAGIC = b"NEFF"
PKG_VERSION = 2  # 2 = SHA-256 hash, as Neuron's pkg_version selects the hash kind
HEADER_SIZE = 1024
NEFF_VERSION = (2, 0)
FORMAT_NAME = "trnscope-neff"  # neff.json's "format"
# magic, pkg_version, header_size, data_size, version major, minor, build, num_tpb, hash, uuid, name,
# requested_tpb_count, target
HEADER = struct.Struct("<4sIIQII128sI32s16s256sI16s")


class NeffFormatError(ValueError):
    """A file that is not a valid trnscope NEFF."""


def neff_id(digest: bytes) -> int:
    """A NEFF's id: the first 8 bytes of its body's SHA-256, as an unsigned big-endian integer."""
    return int.from_bytes(digest[:8], "big")


def pack_header(*, body_size: int, digest: bytes, build: str, name: str, target: str, tpbs: int) -> bytes:
    """The 1024-byte header of a NEFF whose tarball has ``body_size`` bytes and SHA-256 ``digest``."""
    header = HEADER.pack(MAGIC, PKG_VERSION, HEADER_SIZE, body_size, NEFF_VERSION[0], NEFF_VERSION[1],
                         _fixed(build, 128), tpbs, digest, digest[:16], _fixed(name, 256), tpbs, _fixed(target, 16))
    return header.ljust(HEADER_SIZE, b"\0")


def read_header(data: bytes, source: str = "<bytes>") -> dict:
    if len(data) < HEADER_SIZE or data[:4] != MAGIC:
        raise NeffFormatError(f"{source} is not a NEFF file (no 'NEFF' header); pass a .neff written by trnscope")
    (_magic, pkg, hsize, dsize, vmaj, vmin, build, num_tpb, digest, uuid, name, req, target) = HEADER.unpack(
        data[: HEADER.size])
    return {
        "pkg_version": pkg, "header_size": hsize, "data_size": dsize, "neff_version": (vmaj, vmin),
        "neff_build_version": _text(build), "num_tpb": num_tpb, "hash": digest.hex(), "uuid": uuid.hex(),
        "name": _text(name), "requested_tpb_count": req, "target": _text(target), "neff_id": neff_id(digest),
    }


def _fixed(text: str, size: int) -> bytes:
    return text.encode()[:size]


def _text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")
