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
  memory, raw_flops, model_flops, waits, signals, nki_source_location (the NKI kernel line that
  issued the instruction, "" for compiler kernels);
* ``dma``: one row per DMA transfer: id, queue, trigger_ns, data_start_ns, end_ns, transfer_bytes,
  hbm_read_bytes, hbm_write_bytes, operands, framework_op;
* ``semaphore``: one row per semaphore wait or signal: instruction id, engine, semaphore, kind
  (``wait``/``signal``), value, time_ns (wait: instruction start; signal: instruction end), wait_ns;
* ``allocation`` (since 1.1): one row per live range of SBUF/PSUM bytes, derived from the
  instructions' access patterns (see :func:`allocation_table`): id, space, offset, end_offset,
  bytes_per_partition, partitions, start_ns, end_ns, first_instruction, last_instruction,
  framework_op. With ``header["memory"]`` (the capacities of the target) it gives the SBUF and PSUM
  usage counters. Files without it (1.0) still read; they simply have no usage counters.

``max_events_per_nc`` caps the instruction rows written per NeuronCore in one profile window; a
capped file says ``truncated: true`` and how many rows it holds of how many.
"""

from __future__ import annotations

import hashlib
import io
import struct
from collections import OrderedDict

import orjson

from .. import caches

MAGIC = b"NTFF"
VERSION = (1, 1)  # 1.1 added the allocation table and header["memory"]
_HEAD = struct.Struct("<4sHHIQ32s")

_INSTRUCTION_COLUMNS = [
    "id", "start_ns", "end_ns", "duration_ns", "engine", "timeline_track", "opcode", "operands",
    "framework_op", "evt_wait_time_ns", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes",
    "sbuf_write_bytes", "psum_read_bytes", "psum_write_bytes", "raw_flops", "model_flops", "waits", "signals",
    "nki_source_location", "pcore_idx",
]
_DMA_COLUMNS = ["id", "queue", "trigger_ns", "data_start_ns", "end_ns", "transfer_bytes", "hbm_read_bytes",
                "hbm_write_bytes", "operands", "framework_op"]
_SEM_COLUMNS = ["instruction_id", "engine", "semaphore", "kind", "value", "time_ns", "wait_ns"]
_ALLOC_COLUMNS = ["id", "space", "offset", "end_offset", "bytes_per_partition", "partitions", "start_ns", "end_ns",
                  "first_instruction", "last_instruction", "framework_op"]

# encoded tables per (neff id, target, limit), kept across windows with precache_node_info=True
_cache: "OrderedDict[tuple, dict]" = OrderedDict()
_CACHE_MAX_BYTES = 256 << 20
_cache_bytes = 0


def _clear_cache() -> None:
    global _cache_bytes
    _cache.clear()
    _cache_bytes = 0


caches.register("profiling.ntff: encoded tables", _clear_cache)


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
    source = nki_source_locations(timeline.program)
    for r in recs:
        for c in _INSTRUCTION_COLUMNS:
            v = r.get(c)
            if c in ("waits", "signals"):
                v = _sem_text(v or [])
            elif c == "nki_source_location":
                v = source[r["id"]] if source is not None else ""
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
    return {"instruction": ins, "dma": dma, "semaphore": sem, "allocation": allocation_table(timeline, limit)}


def nki_source_locations(program) -> list[str] | None:
    """Per instruction, the NKI kernel source line that issued it ("file.py:42 (kernel)"), from the
    Program's ``meta["nki"]`` (a kernel's own NEFF) or ``meta["nki_linked"]`` (kernels linked into a
    graph's NEFF, each from its ``first_instruction``); None when the Program has no NKI kernel."""
    meta = program.meta
    parts = ([dict(meta["nki"], first_instruction=0)] if "nki" in meta else []) + list(meta.get("nki_linked", ()))
    if not parts:
        return None
    out = [""] * len(program.instructions)
    for part in parts:
        locs, first = part["locations"], part["first_instruction"]
        for k, loc in enumerate(part["instruction_location"]):
            if 0 <= first + k < len(out) and 0 <= loc < len(locs):
                out[first + k] = locs[loc]
    return out


def allocation_table(timeline, limit: int | None = None) -> dict[str, list]:
    """Live ranges of on-chip memory (SBUF, PSUM), from the access patterns and the timeline.

    A Program names no allocations, only the byte ranges each instruction reads and writes (the
    compiler's arenas reserve the same range in every partition, so a range is what a tile
    holds). Every range is cut at every boundary any access uses, and each piece is followed in
    program order (the semaphores make that the order in time too): a write starts a new value
    unless the value there has not been read yet by another instruction (accumulation, in-place
    updates and tiles filled piece by piece keep one value); the value is live from the start of
    the instruction that opened it to the end of its last read (or last write, if never read).
    Pieces opened and closed by the same two instructions form one row, so a row's bytes are
    all live over its whole [start_ns, end_ns) and rows of one space never double count a byte.
    """
    import numpy as np

    program = timeline.program
    n = len(program.instructions) if limit is None else min(limit, len(program.instructions))
    ins_id, space_of, lo, hi, parts, write = [], [], [], [], [], []
    for i, ins in enumerate(program.instructions[:n]):
        for is_write, aps in ((0, ins.reads()), (1, ins.writes())):
            for ap in aps:
                if not ap.on_chip:
                    continue
                ins_id.append(i)
                space_of.append(0 if ap.space.value == "sbuf" else 1)
                lo.append(ap.offset)
                hi.append(ap.offset + ap.extent_bytes())
                parts.append(ap.start + ap.partitions)
                write.append(is_write)
    out: dict[str, list] = {c: [] for c in _ALLOC_COLUMNS}
    if not ins_id:
        return out
    ins_id, space_of = np.asarray(ins_id, np.int64), np.asarray(space_of, np.int64)
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    parts, write = np.asarray(parts, np.int64), np.asarray(write, np.int64)
    start = np.asarray(timeline.start_ns[:n], np.float64)
    end = np.asarray(timeline.end_ns[:n], np.float64)
    ops = program.ops
    rows = 0
    for space, space_name in ((0, "sbuf"), (1, "psum")):
        mine = np.flatnonzero(space_of == space)
        if not len(mine):
            continue
        bounds = np.unique(np.concatenate((lo[mine], hi[mine])))
        first_seg = np.searchsorted(bounds, lo[mine])
        count = np.searchsorted(bounds, hi[mine]) - first_seg
        keep = count > 0
        mine, first_seg, count = mine[keep], first_seg[keep], count[keep]
        # one event per (access, piece it covers)
        access = np.repeat(mine, count)
        seg = np.repeat(first_seg, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
        order = np.lexsort((write[access], ins_id[access], seg))  # by piece, program order, reads first
        access, seg = access[order], seg[order]
        ev_ins, ev_write = ins_id[access], write[access]
        new = np.ones(len(seg), bool)
        same_piece = seg[1:] == seg[:-1]
        read_by_other = (ev_write[:-1] == 0) & (ev_ins[:-1] != ev_ins[1:])
        new[1:] = ~same_piece | ((ev_write[1:] == 1) & read_by_other)
        value = np.cumsum(new) - 1
        n_values = int(value[-1]) + 1
        opener = ev_ins[new]
        piece = seg[new]
        # closer: the read (or, for a value never read, the write) that ends last
        ev_end = end[ev_ins]
        has_read = np.zeros(n_values, bool)
        has_read[value[ev_write == 0]] = True
        candidate = np.where((ev_write == 0) | ~has_read[value], ev_end, -np.inf)
        last = np.full(n_values, -np.inf)
        np.maximum.at(last, value, candidate)
        is_last = candidate == last[value]
        closer = np.full(n_values, -1, np.int64)
        closer[value[is_last]] = ev_ins[is_last]  # ties: the last in program order wins
        width = np.maximum.reduceat(parts[access], np.flatnonzero(new))
        size = bounds[piece + 1] - bounds[piece]
        groups, inverse = np.unique(np.stack((opener, closer)), axis=1, return_inverse=True)
        inverse = inverse.reshape(-1)
        g = groups.shape[1]
        nbytes = np.bincount(inverse, weights=size, minlength=g).astype(np.int64)
        g_lo = np.full(g, np.iinfo(np.int64).max)
        g_hi = np.zeros(g, np.int64)
        g_parts = np.zeros(g, np.int64)
        np.minimum.at(g_lo, inverse, bounds[piece])
        np.maximum.at(g_hi, inverse, bounds[piece + 1])
        np.maximum.at(g_parts, inverse, width)
        first, final = groups[0], groups[1]
        order = np.lexsort((g_lo, start[first]))
        for k in order.tolist():
            op = program.instructions[int(first[k])].op
            out["id"].append(rows)
            out["space"].append(space_name)
            out["offset"].append(int(g_lo[k]))
            out["end_offset"].append(int(g_hi[k]))
            out["bytes_per_partition"].append(int(nbytes[k]))
            out["partitions"].append(int(g_parts[k]))
            out["start_ns"].append(float(start[first[k]]))
            out["end_ns"].append(float(max(end[final[k]], start[first[k]])))
            out["first_instruction"].append(int(first[k]))
            out["last_instruction"].append(int(final[k]))
            out["framework_op"].append(ops[op] if 0 <= op < len(ops) else "")
            rows += 1
    return out


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
    head.setdefault("memory", memory_capacity(timeline.spec))
    hjson = orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)
    blob = _HEAD.pack(MAGIC, VERSION[0], VERSION[1], len(hjson), len(body), hashlib.sha256(body).digest())
    with open(path, "wb") as f:
        f.write(blob)
        f.write(hjson)
        f.write(body)
    return len(blob) + len(hjson) + len(body)


def memory_capacity(spec) -> dict:
    """On-chip capacities of the target, for usage as a share of capacity (header["memory"])."""
    return {"partitions": spec.partitions,
            "sbuf_bytes_per_partition": spec.sbuf_bytes_per_partition, "sbuf_bytes": spec.sbuf_bytes,
            "psum_bytes_per_partition": spec.psum_bytes_per_partition, "psum_bytes": spec.psum_bytes}


def read_header(path) -> dict:
    with open(path, "rb") as f:
        fixed = f.read(_HEAD.size)
        if len(fixed) < _HEAD.size or fixed[:4] != MAGIC:
            raise NtffFormatError(f"{path}: not an NTFF file (bad magic)")
        _, major, _minor, hsize, _bsize, _digest = _HEAD.unpack(fixed)
        if major != VERSION[0]:
            raise NtffFormatError(f"{path}: NTFF version {major} (this reader knows {VERSION[0]})")
        return _header(path, f.read(hsize))


def _header(path, text: bytes) -> dict:
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise NtffFormatError(f"{path}: header is not valid JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("tables", {}), dict):
        raise NtffFormatError(f"{path}: header is not an NTFF header (a JSON object with a 'tables' object)")
    return header


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
    header = _header(path, data[_HEAD.size:_HEAD.size + hsize])
    body = data[_HEAD.size + hsize:]
    if len(body) != bsize:
        raise NtffFormatError(f"{path}: truncated (body {len(body)} of {bsize} bytes)")
    if verify and hashlib.sha256(body).digest() != digest:
        raise NtffFormatError(f"{path}: body hash mismatch (corrupt file)")
    tables = {}
    for name, ent in header.get("tables", {}).items():
        try:
            tables[name] = pq.read_table(io.BytesIO(body[int(ent["offset"]):int(ent["offset"]) + int(ent["length"])]))
        except (KeyError, TypeError, ValueError, OSError, NotImplementedError) as exc:  # pyarrow's errors subclass these
            raise NtffFormatError(f"{path}: table {name!r} is damaged ({exc})") from None
    return header, tables
