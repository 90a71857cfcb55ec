"""NTFF: the instruction trace of one NEFF on one NeuronCore (``<neff_id>_instid_0_vnc_<nc>.ntff``).

Neuron's NTFF is an undocumented binary; trnscope's is documented (docs/file-formats.md) and
self-describing. It pairs with ``neff_<neff_id>.neff`` through the numeric id in both names.

Layout (little-endian)::

    offset  size  field
    0       4     magic b"NTFF"
    4       2     version major (1)
    6       2     version minor (1; files with 0 lack the allocation table and header["memory"])
    8       4     header_size H: bytes of the JSON header
    12      8     body_size B
    20      32    SHA-256 of the body
    52      H     header: UTF-8 JSON (neff id/name, vnc, target, executions, summary, tables, ...)
    52+H    B     body: one Parquet file (zstd) per table, back to back (offsets in header["tables"])

Tables (times in ns from the start of the NEFF execution; every execution of a NEFF runs the same
simulated timeline, so it is stored once and ``header["executions"]`` lists when each ran) and their
columns are :data:`TABLES`. The writer hands columns (NumPy or pyarrow arrays) to :func:`encode_body`;
readers get pyarrow tables from :func:`read` or only the header from :func:`read_header`, whose
fields are checked against :data:`HEADER_SHAPE` (what the analyses and the explorer read).
"""

from __future__ import annotations

import hashlib
import io
import struct
from pathlib import Path

import orjson

from .errors import FormatError

MAGIC = b"NTFF"
FORMAT_NAME = "trnscope-ntff"
VERSION = (1, 1)  # 1.1 added the allocation table and header["memory"]
HEAD = struct.Struct("<4sHHIQ32s")  # magic, major, minor, header size, body size, body sha256

INSTRUCTION_COLUMNS = (
    "id", "start_ns", "end_ns", "duration_ns", "engine", "timeline_track", "opcode", "operands",
    "framework_op", "evt_wait_time_ns", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes",
    "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "raw_flops", "model_flops", "waits", "signals",
    "nki_source_location", "pcore_idx",
)
DMA_COLUMNS = ("id", "queue", "trigger_ns", "data_start_ns", "end_ns", "transfer_bytes", "hbm_read_bytes",
               "hbm_write_bytes", "operands", "framework_op")
SEMAPHORE_COLUMNS = ("instruction_id", "engine", "semaphore", "kind", "value", "time_ns", "wait_ns")
ALLOCATION_COLUMNS = ("id", "space", "offset", "end_offset", "bytes_per_partition", "partitions", "start_ns", "end_ns",
                      "first_instruction", "last_instruction", "framework_op")
TABLES = {"instruction": INSTRUCTION_COLUMNS, "dma": DMA_COLUMNS, "semaphore": SEMAPHORE_COLUMNS,
          "allocation": ALLOCATION_COLUMNS}

_HINT = "Record the profile again"


# --- the header readers rely on ----------------------------------------------------------------

# The header fields the analyses and the explorer read, with the JSON types they must have (a
# field may be absent; nothing else is checked). Numbers are finite and not booleans.
NUMBER, COUNT = "number", "count"  # any finite number; a non-negative integer
_ENGINE_SHAPE = {"active_time_ns": NUMBER, "instruction_count": COUNT, "semaphore_wait_ns": NUMBER,
                 "active_time_percent": NUMBER}
HEADER_SHAPE = {
    "neff_id": (str, int), "neff_name": str, "vnc": COUNT, "target": str, "neuroncore": str, "truncated": bool,
    "instruction_count": COUNT, "instructions_written": COUNT, "framework_ops": [(str, int, float)],
    "executions": [{"seq": COUNT, "start_ns": int, "end_ns": int, "queue_wait_ns": NUMBER,
                    "framework_op": (str, type(None))}],
    "summary": {"total_time_ns": NUMBER, "mfu_estimated_percent": NUMBER, "mbu_estimated_percent": NUMBER,
                "hbm_read_bytes": COUNT, "hbm_write_bytes": COUNT, "dma_transfer_count": COUNT,
                "dma_transfer_total_bytes": COUNT, "dma_transfer_average_bytes": NUMBER,
                "instruction_count": COUNT, "bottleneck": (str, type(None)), "engines": {"*": _ENGINE_SHAPE}},
    "memory": {"partitions": COUNT, "sbuf_bytes": NUMBER, "psum_bytes": NUMBER},
    "tables": {"*": {"offset": COUNT, "length": COUNT}},
}


def shape_problem(value, shape, where: str) -> str | None:
    """What in ``value`` does not have ``shape`` (see HEADER_SHAPE), or None."""
    if shape == NUMBER or shape == COUNT:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
            return f"{where} is {_json_type(value)}, not a number"
        if shape == COUNT and (not isinstance(value, int) or value < 0 or value >= 2**63):
            return f"{where} = {value!r} is not a count"
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_json_type(value)}, not a list"
        for i, item in enumerate(value):
            if problem := shape_problem(item, shape[0], f"{where}[{i}]"):
                return problem
        return None
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_json_type(value)}, not an object"
        for key, item in value.items():
            inner = shape.get(key, shape.get("*"))
            if inner is not None and (problem := shape_problem(item, inner, f"{where}.{key}")):
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


# --- writing -----------------------------------------------------------------------------------


def semaphore_text(pairs) -> str:
    """``[("qSyncIO0", 1), ("S[1] (Vector)", 2)]`` -> ``"qSyncIO0:1;S[1] (Vector):2"`` (the
    ``waits``/``signals`` columns)."""
    return ";".join(f"{s}:{v}" for s, v in pairs)


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


def encode_body(tables: dict[str, dict]) -> tuple[dict, bytes]:
    """(``header["tables"]``, body bytes) for tables given as {name: {column: array}} (NumPy or
    pyarrow arrays, or lists), each written as one zstd Parquet file; columns in TABLES order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    index, parts, offset = {}, [], 0
    for name, columns in tables.items():
        order = TABLES.get(name, tuple(columns))
        table = pa.table({c: columns[c] for c in order if c in columns})
        text = [field.name for field in table.schema
                if pa.types.is_dictionary(field.type) or pa.types.is_string(field.type)]
        buffer = io.BytesIO()
        # text columns dictionary-encoded (a writer that hands over pyarrow dictionary arrays skips
        # the hashing), numbers plain; no statistics (nothing reads them) and no stored Arrow schema,
        # so text reads back as plain strings whatever the writer handed over
        pq.write_table(table, buffer, compression="zstd", use_dictionary=text, write_statistics=False,
                       store_schema=False)
        blob = buffer.getvalue()
        index[name] = {"offset": offset, "length": len(blob), "rows": table.num_rows, "encoding": "parquet",
                       "columns": table.column_names}
        parts.append(blob)
        offset += len(blob)
    return index, b"".join(parts)


def encode(header: dict, index: dict, body: bytes) -> bytes:
    """The whole file: ``header`` (the writer's fields) gets ``format``, ``version`` and ``tables``."""
    head = dict(header)
    head["format"] = FORMAT_NAME
    head["version"] = list(VERSION)
    head["tables"] = index
    text = orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)
    return HEAD.pack(MAGIC, VERSION[0], VERSION[1], len(text), len(body), hashlib.sha256(body).digest()) + text + body


# --- reading -----------------------------------------------------------------------------------


def read_header(path: str | Path) -> dict:
    """Only the JSON header (summary, executions, framework ops): cheap, for listings."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            fixed = handle.read(HEAD.size)
            header_size = _check_fixed(path, fixed)[0]
            text = handle.read(header_size)
    except OSError as exc:
        raise FormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(text) < header_size:
        raise FormatError(path, "truncated inside its header", _HINT)
    return _parse_header(path, text)


def read(path: str | Path, verify: bool = True) -> tuple[dict, dict]:
    """(header, {table name: pyarrow.Table}); checks the body's SHA-256 when ``verify``."""
    import pyarrow as pa  # here, not at the top: listing a profile reads headers only
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FormatError(path, f"cannot be read ({exc.strerror or exc})") from None
    header_size, body_size, digest = _check_fixed(path, data[:HEAD.size])
    if len(data) < HEAD.size + header_size:
        raise FormatError(path, "truncated inside its header", _HINT)
    header = _parse_header(path, data[HEAD.size:HEAD.size + header_size])
    body = memoryview(data)[HEAD.size + header_size:]
    if len(body) != body_size:
        raise FormatError(path, f"truncated: body has {len(body)} of {body_size} bytes", _HINT)
    if verify and hashlib.sha256(body).digest() != digest:
        raise FormatError(path, "body hash mismatch: its checksum differs from the header's (the file is corrupt)",
                          _HINT)
    tables: dict = {}
    for name, entry in (header.get("tables") or {}).items():
        try:
            offset, length = int(entry["offset"]), int(entry["length"])
            if offset < 0 or length < 0 or offset + length > len(body):
                raise ValueError(f"bytes {offset}..{offset + length} lie outside the {len(body)}-byte body")
            tables[name] = pq.read_table(pa.BufferReader(pa.py_buffer(body[offset:offset + length])))
        except (KeyError, TypeError, ValueError, OSError, pa.ArrowException) as exc:
            # pyarrow reports a damaged Parquet file as a bare OSError
            raise FormatError(path, f"table {name!r} is damaged ({exc})", _HINT) from None
    return header, tables


def _check_fixed(path: Path, fixed: bytes) -> tuple[int, int, bytes]:
    if len(fixed) < HEAD.size or fixed[:4] != MAGIC:
        raise FormatError(path, "not an NTFF file (bad magic)" if len(fixed) >= 4 else "empty or truncated NTFF",
                          "0-byte NTFFs mean no execution was captured on that NeuronCore")
    _, major, _minor, header_size, body_size, digest = HEAD.unpack(fixed)
    if major != VERSION[0]:
        raise FormatError(path, f"NTFF version {major}, this reader knows {VERSION[0]}",
                          "Open it with the trnscope version that wrote it")
    return header_size, body_size, digest


def _parse_header(path: Path, text: bytes) -> dict:
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise FormatError(path, f"header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise FormatError(path, "header is not a JSON object")
    problem = shape_problem(header, HEADER_SHAPE, "header")
    if problem:
        raise FormatError(path, problem, "The file is damaged or from another writer; record the profile again")
    return header
