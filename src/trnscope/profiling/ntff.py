"""NTFF: the instruction trace of one NEFF on one NeuronCore (``<neff_id>_instid_0_vnc_<nc>.ntff``).

Neuron's NTFF is an undocumented binary; trnscope's is documented (docs/file-formats.md) and
self-describing. It pairs with ``neff_<neff_id>.neff`` through the numeric id in both names.

Layout (little-endian)::

    offset  size  field
    0       4     magic b"NTFF"
    4       2     version major (1)
    6       2     version minor (0)
    8       4     header_size H: bytes of the JSON header
    12      8     body_size B
    20      32    SHA-256 of the body
    52      H     header: UTF-8 JSON (neff id/name, vnc, target, executions, summary, tables, ...)
    52+H    B     body: one Parquet file per table, back to back (offsets in header["tables"])

Tables (times in ns from the start of the NEFF execution; every execution of a NEFF runs the same
simulated timeline, so it is stored once and ``header["executions"]`` lists when each ran):

* ``instruction``: one row per instruction (Explorer's Instruction table): id, start_ns, end_ns,
  duration_ns, engine, timeline_track, opcode, operands, framework_op, evt_wait_time_ns, bytes per
  memory, raw_flops, model_flops, waits, signals;
* ``dma``: one row per DMA transfer: id, queue, trigger_ns, data_start_ns, end_ns, transfer_bytes,
  hbm_read_bytes, hbm_write_bytes, operands, framework_op;
* ``semaphore``: one row per semaphore wait or signal: instruction id, engine, semaphore, kind
  (``wait``/``signal``), value, time_ns (wait: instruction start; signal: instruction end), wait_ns.

``max_events_per_nc`` caps the instruction rows written per NeuronCore in one profile window; a
capped file says ``truncated: true`` and how many rows it holds of how many.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections import OrderedDict

import orjson

MAGIC = b"NTFF"
VERSION = (1, 0)
_HEAD = struct.Struct("<4sHHIQ32s")

_INSTRUCTION_COLUMNS = [
    "id", "start_ns", "end_ns", "duration_ns", "engine", "timeline_track", "opcode", "operands",
    "framework_op", "evt_wait_time_ns", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes",
    "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "raw_flops", "model_flops", "waits", "signals",
]
_DMA_COLUMNS = ["id", "queue", "trigger_ns", "data_start_ns", "end_ns", "transfer_bytes", "hbm_read_bytes",
                "hbm_write_bytes", "operands", "framework_op"]
_SEM_COLUMNS = ["instruction_id", "engine", "semaphore", "kind", "value", "time_ns", "wait_ns"]

# encoded tables per (neff id, target, limit), kept across windows with precache_node_info=True
_cache: "OrderedDict[tuple, dict]" = OrderedDict()
_CACHE_MAX_BYTES = 256 << 20
_cache_bytes = 0


class NtffFormatError(ValueError):
    pass


def _sem_text(pairs) -> str:
    return ";".join(f"{s}:{v}" for s, v in pairs)


def tables_of(timeline, limit: int | None = None) -> dict[str, dict[str, list]]:
    """Columns (name -> list) of the three tables, for the first ``limit`` instructions."""
    recs = timeline.records()
    if limit is not None:
        recs = recs[:limit]
    ins = {c: [] for c in _INSTRUCTION_COLUMNS}
    dma = {c: [] for c in _DMA_COLUMNS}
    sem = {c: [] for c in _SEM_COLUMNS}
    for r in recs:
        for c in _INSTRUCTION_COLUMNS:
            v = r.get(c)
            if c in ("waits", "signals"):
                v = _sem_text(v or [])
            ins[c].append(v)
        if r.get("engine") == "dma" or "transfer_bytes" in r:
            dma["id"].append(r["id"])
            dma["queue"].append(r["timeline_track"])
            dma["trigger_ns"].append(r.get("dma_trigger_ts", r["start_ns"]))
            dma["data_start_ns"].append(r.get("dma_data_start_ns", r["start_ns"]))
            dma["end_ns"].append(r["end_ns"])
            dma["transfer_bytes"].append(int(r.get("transfer_bytes", 0)))
            dma["hbm_read_bytes"].append(r["hbm_read_bytes"])
            dma["hbm_write_bytes"].append(r["hbm_write_bytes"])
            dma["operands"].append(r["operands"])
            dma["framework_op"].append(r["framework_op"])
        for kind, pairs, t in (("wait", r.get("waits") or [], r["start_ns"]), ("signal", r.get("signals") or [], r["end_ns"])):
            for s, v in pairs:
                sem["instruction_id"].append(r["id"])
                sem["engine"].append(r["engine"])
                sem["semaphore"].append(str(s))
                sem["kind"].append(kind)
                sem["value"].append(int(v))
                sem["time_ns"].append(t)
                sem["wait_ns"].append(r["evt_wait_time_ns"] if kind == "wait" else 0.0)
    return {"instruction": ins, "dma": dma, "semaphore": sem}


def _parquet(columns: dict[str, list]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def encode_tables(timeline, limit: int | None = None, cache_key=None) -> tuple[dict, bytes]:
    """(tables index, body bytes) for a timeline; cached per ``cache_key`` when given."""
    global _cache_bytes
    key = (cache_key, limit) if cache_key is not None else None
    if key is not None and key in _cache:
        _cache.move_to_end(key)
        return _cache[key]["index"], _cache[key]["body"]
    cols = tables_of(timeline, limit)
    index, parts, off = {}, [], 0
    for name, c in cols.items():
        blob = _parquet(c)
        index[name] = {"offset": off, "length": len(blob), "rows": len(next(iter(c.values()))) if c else 0,
                       "encoding": "parquet", "columns": list(c)}
        parts.append(blob)
        off += len(blob)
    body = b"".join(parts)
    if key is not None and len(body) <= _CACHE_MAX_BYTES:
        _cache[key] = {"index": index, "body": body}
        _cache_bytes += len(body)
        while _cache_bytes > _CACHE_MAX_BYTES:
            _, old = _cache.popitem(last=False)
            _cache_bytes -= len(old["body"])
    return index, body


def write_ntff(path, header: dict, timeline, limit: int | None = None, cache_key=None) -> int:
    """Write one NTFF; returns its size. ``header`` gets ``tables`` and the version filled in."""
    index, body = encode_tables(timeline, limit, cache_key)
    head = dict(header)
    head["format"] = "trnscope-ntff"
    head["version"] = list(VERSION)
    head["tables"] = index
    hjson = orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)
    blob = _HEAD.pack(MAGIC, VERSION[0], VERSION[1], len(hjson), len(body), hashlib.sha256(body).digest())
    with open(path, "wb") as f:
        f.write(blob)
        f.write(hjson)
        f.write(body)
    return len(blob) + len(hjson) + len(body)


def read_header(path) -> dict:
    with open(path, "rb") as f:
        fixed = f.read(_HEAD.size)
        if len(fixed) < _HEAD.size or fixed[:4] != MAGIC:
            raise NtffFormatError(f"{path}: not an NTFF file (bad magic)")
        _, major, _minor, hsize, _bsize, _digest = _HEAD.unpack(fixed)
        if major != VERSION[0]:
            raise NtffFormatError(f"{path}: NTFF version {major} (this reader knows {VERSION[0]})")
        return orjson.loads(f.read(hsize))


def read_ntff(path, verify: bool = True) -> tuple[dict, dict]:
    """(header, {table name: pyarrow.Table}). Checks the body hash when ``verify``."""
    import pyarrow.parquet as pq

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEAD.size or data[:4] != MAGIC:
        raise NtffFormatError(f"{path}: not an NTFF file (bad magic)")
    _, major, _minor, hsize, bsize, digest = _HEAD.unpack_from(data)
    if major != VERSION[0]:
        raise NtffFormatError(f"{path}: NTFF version {major} (this reader knows {VERSION[0]})")
    header = orjson.loads(data[_HEAD.size:_HEAD.size + hsize])
    body = data[_HEAD.size + hsize:]
    if len(body) != bsize:
        raise NtffFormatError(f"{path}: truncated (body {len(body)} of {bsize} bytes)")
    if verify and hashlib.sha256(body).digest() != digest:
        raise NtffFormatError(f"{path}: body hash mismatch (corrupt file)")
    tables = {}
    for name, ent in header.get("tables", {}).items():
        tables[name] = pq.read_table(io.BytesIO(body[ent["offset"]:ent["offset"] + ent["length"]]))
    return header, tables
