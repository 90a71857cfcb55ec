"""A binary encoding of API answers that carry columns (layouts with their first level of
detail, level-of-detail answers), asked for with ``Accept: application/x-trnscope-columns``.

JSON makes the browser parse every number and then copy each column into a typed array; here the
columns arrive as typed arrays already, viewed in place over the response's bytes (no parsing, no
copy), and the server skips turning numpy arrays into text. Layout (little-endian)::

    0    4   magic b"TSC1"
    4    4   J: bytes of the JSON header
    8    J   header, UTF-8 JSON: {"document": ..., "arrays": [[offset, length, type], ...]}
    ...      padding to a multiple of 8, then the arrays back to back, each padded to 8 bytes;
             offsets count from the first array

In ``document`` every array is the object ``{"$array": k}`` (k indexes ``arrays``); ``type`` is
``f64`` or ``i32``. Integer columns travel as ``i32`` when their values fit and as ``f64`` (exact
up to 2**53, as JavaScript numbers are) otherwise.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

MEDIA_TYPE = "application/x-trnscope-columns"
MAGIC = b"TSC1"
_I32 = np.iinfo(np.int32)


def wants_columns(accept: str | None) -> bool:
    return accept is not None and MEDIA_TYPE in accept


def _wire(array: np.ndarray) -> tuple[np.ndarray, str]:
    if array.dtype.kind in "iub" and (not len(array) or (int(array.min()) >= _I32.min and int(array.max()) <= _I32.max)):
        return np.ascontiguousarray(array, dtype="<i4"), "i32"
    return np.ascontiguousarray(array, dtype="<f8"), "f64"


def encode(document) -> bytes:
    arrays: list[np.ndarray] = []
    index: list[list] = []
    offset = 0

    def walk(value):
        nonlocal offset
        if isinstance(value, np.ndarray):
            data, kind = _wire(value.reshape(-1))
            arrays.append(data)
            index.append([offset, len(data), kind])
            offset += -(-data.nbytes // 8) * 8
            return {"$array": len(index) - 1}
        if isinstance(value, dict):
            return {str(k): walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    head = orjson.dumps({"document": walk(document), "arrays": index},
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    parts = [MAGIC, struct.pack("<I", len(head)), head, bytes(-(8 + len(head)) % 8)]
    for data in arrays:
        parts += [data.tobytes(), bytes(-data.nbytes % 8)]
    return b"".join(parts)


def decode(blob: bytes):
    """The document with numpy arrays in place of the references (for tests and scripts)."""
    if blob[:4] != MAGIC:
        raise ValueError("not a trnscope columns answer (bad magic)")
    (size,) = struct.unpack_from("<I", blob, 4)
    head = orjson.loads(blob[8:8 + size])
    base = 8 + size + (-(8 + size) % 8)
    views = [np.frombuffer(blob, dtype="<i4" if kind == "i32" else "<f8", count=length, offset=base + start)
             for start, length, kind in head["arrays"]]

    def walk(value):
        if isinstance(value, dict):
            if len(value) == 1 and "$array" in value:
                return views[value["$array"]]
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(head["document"])
