"""Writing NTFFs: a simulated timeline's instruction, DMA, semaphore and allocation tables.

The file format (magic, header, tables and their columns) is defined in
:mod:`trnscope.formats.ntff`; this module turns a ``DeviceTimeline`` into those columns, column by
column. A Program repeats a few instruction *shapes* (``isa.columns``: a 4096^3 matmul has ~14 k
instructions and ~1 k shapes), so every text column (engine, opcode, operands, framework op,
signals, the Explorer row) is made once per shape or per distinct value and gathered per
instruction with pyarrow's ``take``; the waits, which differ in every instruction, are joined by
pyarrow's string kernels; numbers come straight from the simulator's arrays. No Python step runs
per instruction (the records-per-instruction export took 566 ms for that matmul, 54x its
simulation).

``max_events_per_nc`` caps the instruction rows written per NeuronCore in one profile window; a
capped file says ``truncated: true`` and how many rows it holds of how many.
"""

from __future__ import annotations

from collections import OrderedDict
from operator import attrgetter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import caches
from ..formats import ntff as ntff_format
from ..gcpause import gc_paused
from ..formats.errors import FormatError
from ..formats.ntff import semaphore_text

NtffFormatError = FormatError  # the readers' error (formats.ntff), under the name this module always used

# encoded tables per (neff id, target, limit), kept across windows with precache_node_info=True
_cache: "OrderedDict[tuple, dict]" = OrderedDict()
_CACHE_MAX_BYTES = 256 << 20
_cache_bytes = 0


def _clear_cache() -> None:
    global _cache_bytes
    _cache.clear()
    _cache_bytes = 0


caches.register("profiling.ntff: encoded tables", _clear_cache)


def tables_of(timeline, limit: int | None = None) -> dict[str, dict]:
    """Columns (name -> NumPy or pyarrow array) of the four tables, for the first ``limit``
    instructions. Text columns are pyarrow dictionary arrays: per-instruction indices into the
    texts of the forms, shapes or distinct values they come from."""
    from ..isa.columns import program_columns
    from ..sim.encode import KIND_DMA, KIND_LS
    from ..sim.timeline import track_name

    program, enc = timeline.program, timeline.encoded
    n = len(program.instructions) if limit is None else min(limit, len(program.instructions))
    cols = program_columns(program)
    shape = cols.shape[:n]
    form = cols.shape_form[shape]
    forms = cols.form_reps
    names = program.semaphores
    # engine, opcode and signals are the same for every instruction of a form (a handful per
    # program), the operands for every instruction of a shape
    engine = _texts([r.engine.value for r in forms], form)
    opcode = _texts([r.OPCODE for r in forms], form)
    signals = _texts([semaphore_text((names[s], v) for s, v in r.signals) for r in forms], form)
    patterns = _ShapePatterns(cols.reps)
    operands = _texts(patterns.operands, shape)
    labels = list(program.ops) + [""]
    op = np.asarray(cols.op[:n])
    framework_op = _texts(labels, np.where((op >= 0) & (op < len(program.ops)), op, len(program.ops)))
    kind = np.asarray(enc.kind[:n])
    dma_form = np.asarray([r.engine.value == "dma" for r in forms], bool)
    is_dma = (kind == KIND_DMA) | dma_form[form]

    # the Explorer row depends on the stream, the physical core and, on TensorE, the kind: named
    # once per distinct combination
    stream, pcore = np.asarray(enc.stream[:n], np.int64), np.asarray(enc.pcore[:n], np.int64)
    combo = (stream * 2 + (kind == KIND_LS)) * 256 + pcore
    present = np.flatnonzero(np.bincount(combo)) if n else np.zeros(0, np.int64)
    first = [int(np.argmax(combo == code)) for code in present.tolist()]  # a few dozen rows at most
    track = _texts([track_name(program, enc, i) for i in first], np.searchsorted(present, combo))

    start = np.asarray(timeline.start_ns[:n], np.float64)
    end = np.asarray(timeline.end_ns[:n], np.float64)
    data_start = np.asarray(timeline.data_start_ns[:n], np.float64)
    wait = np.asarray(timeline.wait_ns[:n], np.float64)
    counts = {name: np.asarray(getattr(enc, name)[:n], np.int64)
              for name in ("hbm_read", "hbm_write", "sbuf_read", "sbuf_write", "psum_read", "psum_write")}
    sem_names = pa.array([str(s) for s in names], pa.string())
    instruction = {
        "id": np.arange(n, dtype=np.int64), "start_ns": start, "end_ns": end, "duration_ns": end - start,
        "engine": engine, "timeline_track": track, "opcode": opcode, "operands": operands,
        "framework_op": framework_op, "evt_wait_time_ns": wait,
        **{f"{name}_bytes": value for name, value in counts.items()},
        "raw_flops": np.asarray(enc.flops_hw[:n], np.float64), "model_flops": np.asarray(enc.flops_model[:n], np.float64),
        "waits": _semaphore_lists(sem_names, cols.wait_ptr[:n + 1], cols.wait_sem, cols.wait_val),
        "signals": signals, "nki_source_location": _nki_sources(program, n), "pcore_idx": pcore,
    }
    rows = np.flatnonzero(is_dma)
    dma_kind = kind[rows] == KIND_DMA
    picked = pa.array(rows)
    dma = {
        "id": rows.astype(np.int64), "queue": track.take(picked), "trigger_ns": start[rows],
        "data_start_ns": np.where(dma_kind, data_start[rows], start[rows]), "end_ns": end[rows],
        "transfer_bytes": np.where(dma_kind, np.maximum(counts["hbm_read"][rows] + counts["sbuf_read"][rows],
                                                        counts["hbm_write"][rows] + counts["sbuf_write"][rows]), 0),
        "hbm_read_bytes": counts["hbm_read"][rows], "hbm_write_bytes": counts["hbm_write"][rows],
        "operands": operands.take(picked), "framework_op": framework_op.take(picked),
    }
    return {"instruction": instruction, "dma": dma,
            "semaphore": _semaphore_table(cols, n, engine, sem_names, start, end, wait),
            "allocation": allocation_table(timeline, limit, columns=cols, patterns=patterns)}


def _texts(values: list[str], index: np.ndarray):
    """A text column: ``values[index[i]]`` per row, as a dictionary array (nothing copied per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.asarray(index, np.int32)), pa.array(values, pa.string()))


def _semaphore_lists(names: pa.Array, ptr: np.ndarray, sem: np.ndarray, value: np.ndarray) -> pa.Array:
    """``"sem:value;..."`` per instruction from CSR arrays, by pyarrow's string kernels."""
    total = int(ptr[-1]) - int(ptr[0])
    entries = pc.binary_join_element_wise(names.take(pa.array(sem[ptr[0]:ptr[-1]])),
                                          pc.cast(pa.array(value[ptr[0]:ptr[-1]]), pa.string()), ":") \
        if total else pa.array([], pa.string())
    offsets = pa.array(ptr - ptr[0], pa.int64())
    return pc.binary_join(pa.LargeListArray.from_arrays(offsets, entries), ";")


def _semaphore_table(cols, n: int, engine: pa.Array, names: pa.Array, start, end, wait) -> dict:
    """One row per wait (at the instruction's start, with its wait time) and per signal (at its
    end), an instruction's waits before its signals, in program order."""
    w_count = np.diff(cols.wait_ptr[:n + 1])
    w_ins = np.repeat(np.arange(n, dtype=np.int64), w_count)
    w_at = slice(int(cols.wait_ptr[0]), int(cols.wait_ptr[n]))
    s_all = np.repeat(np.arange(len(cols.sig_ptr) - 1, dtype=np.int64), np.diff(cols.sig_ptr))
    s_keep = np.flatnonzero(~cols.sig_set & (s_all < n))  # a SemaphoreSet's write is not a signal
    s_ins = s_all[s_keep]
    ins = np.concatenate((w_ins, s_ins))
    order = np.argsort(ins, kind="stable")  # per instruction: waits first, each list in its order
    ins = ins[order]
    is_wait = order < len(w_ins)
    sem = np.concatenate((cols.wait_sem[w_at], cols.sig_sem[s_keep]))[order]
    value = np.concatenate((cols.wait_val[w_at], cols.sig_val[s_keep]))[order]
    return {
        "instruction_id": ins, "engine": engine.take(pa.array(ins)),
        "semaphore": pa.DictionaryArray.from_arrays(pa.array(sem.astype(np.int32)), names),
        "kind": _texts(["signal", "wait"], is_wait),
        "value": value.astype(np.int64), "time_ns": np.where(is_wait, start[ins], end[ins]),
        "wait_ns": np.where(is_wait, wait[ins], 0.0),
    }


def _nki_sources(program, n: int) -> pa.Array:
    """Per instruction, the NKI kernel source line that issued it ("file.py:42 (kernel)"), from the
    Program's ``meta["nki"]`` (a kernel's own NEFF) or ``meta["nki_linked"]`` (kernels linked into a
    graph's NEFF, each from its ``first_instruction``); "" for compiler kernels."""
    meta = program.meta
    parts = ([dict(meta["nki"], first_instruction=0)] if "nki" in meta else []) + list(meta.get("nki_linked", ()))
    if not parts:
        return _texts([""], np.zeros(n, np.int32))
    texts, index = [""], np.zeros(n, np.int64)
    for part in parts:
        locations, first = list(part["locations"]), int(part["first_instruction"])
        which = np.asarray(part["instruction_location"], np.int64)
        at = first + np.arange(len(which), dtype=np.int64)
        ok = (at >= 0) & (at < n) & (which >= 0) & (which < len(locations))
        index[at[ok]] = len(texts) + which[ok]
        texts += locations
    return _texts(texts, index)


def nki_source_locations(program) -> list[str] | None:
    """The NKI source line of every instruction, or None when the Program has no NKI kernel."""
    meta = program.meta
    if "nki" not in meta and not meta.get("nki_linked"):
        return None
    return _nki_sources(program, len(program.instructions)).to_pylist()


class _ShapePatterns:
    """What the tables need from each shape's access patterns, in one walk over the shapes (which
    share patterns: each is looked at once): its operands' text (``AP.describe``, reads then
    writes) and its on-chip accesses as CSR rows (space 0 sbuf / 1 psum, first byte, end byte,
    partitions reached, is write)."""

    def __init__(self, reps: list) -> None:
        from ..isa.ap import AP

        seen: dict[int, tuple] = {}
        fields: dict[type, tuple] = {}  # per instruction class: a getter of its READS + WRITES, and how many read
        self.operands: list[str] = []
        flat: list[tuple] = []
        sizes: list[int] = []
        for rep in reps:
            cls = type(rep)
            known_class = fields.get(cls)
            if known_class is None:
                names = (*cls.READS, *cls.WRITES)
                getter = attrgetter(*names) if len(names) > 1 else (
                    (lambda r, g=attrgetter(names[0]): (g(r),)) if names else (lambda r: ()))
                known_class = fields[cls] = (getter, len(cls.READS))
            getter, reads = known_class
            words, before = [], len(flat)
            for k, ap in enumerate(getter(rep)):
                if type(ap) is not AP:
                    continue  # an immediate operand, or an absent optional one
                known = seen.get(ap.sid)
                if known is None:
                    access = ((0 if ap.space.value == "sbuf" else 1, ap.offset, ap.offset + ap.extent_bytes(),
                               ap.start + ap.partitions) if ap.on_chip else None)
                    known = seen[ap.sid] = (ap.describe(), access)
                words.append(known[0])
                if known[1] is not None:
                    flat.append((*known[1], int(k >= reads)))
            self.operands.append(" ".join(words))
            sizes.append(len(flat) - before)
        self.accesses = np.array(flat, np.int64).reshape(-1, 5)
        self.ptr = np.zeros(len(reps) + 1, np.int64)
        np.cumsum(sizes, out=self.ptr[1:])

    def on_chip(self, shape: np.ndarray):
        """Every on-chip access of the instructions of these shapes, in program order:
        (instruction, space, first byte, end byte, partitions, is write) columns."""
        count = np.diff(self.ptr)[shape]
        out_ptr = np.zeros(len(shape) + 1, np.int64)
        np.cumsum(count, out=out_ptr[1:])
        src = np.repeat(self.ptr[shape] - out_ptr[:-1], count) + np.arange(int(out_ptr[-1]), dtype=np.int64)
        rows = self.accesses[src]
        return (np.repeat(np.arange(len(shape), dtype=np.int64), count),
                rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4])


def allocation_table(timeline, limit: int | None = None, columns=None, patterns=None) -> dict:
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
    from ..isa.columns import program_columns

    program = timeline.program
    cols = columns if columns is not None else program_columns(program)
    n = len(program.instructions) if limit is None else min(limit, len(program.instructions))
    patterns = patterns if patterns is not None else _ShapePatterns(cols.reps)
    ins_id, space_of, lo, hi, parts, write = patterns.on_chip(cols.shape[:n])
    start = np.asarray(timeline.start_ns[:n], np.float64)
    end = np.asarray(timeline.end_ns[:n], np.float64)
    labels = list(program.ops) + [""]
    op = np.asarray(cols.op[:n])
    op = np.where((op >= 0) & (op < len(program.ops)), op, len(program.ops))
    if not len(ins_id):
        kinds = {"start_ns": np.float64, "end_ns": np.float64}
        empty = {c: np.zeros(0, kinds.get(c, np.int64)) for c in ntff_format.ALLOCATION_COLUMNS}
        return {**empty, "space": _texts([], empty["id"]), "framework_op": _texts([], empty["id"])}
    # both spaces in one pass: PSUM's byte offsets moved past any SBUF one, so no piece spans both
    shift = space_of << _SPACE_SHIFT
    first, final, g_lo, g_hi, nbytes, g_parts = _live_ranges(ins_id, lo + shift, hi + shift, parts, write, end)
    space = g_lo >> _SPACE_SHIFT
    order = np.lexsort((g_lo, start[first], space))  # SBUF rows, then PSUM rows, each by start and offset
    first, final, space = first[order], final[order], space[order]
    g_lo, g_hi = g_lo[order] - (space << _SPACE_SHIFT), g_hi[order] - (space << _SPACE_SHIFT)
    return {
        "id": np.arange(len(first), dtype=np.int64), "space": _texts(["sbuf", "psum"], space),
        "offset": g_lo, "end_offset": g_hi, "bytes_per_partition": nbytes[order], "partitions": g_parts[order],
        "start_ns": start[first], "end_ns": np.maximum(end[final], start[first]),
        "first_instruction": first, "last_instruction": final,
        "framework_op": _texts(labels, op[first]),
    }


_SPACE_SHIFT = 40  # bytes per partition are far fewer than 2**40


def _live_ranges(ins_id, lo, hi, parts, write, end):
    """(first instruction, last instruction, first byte, end byte, bytes per partition, partitions)
    of each live range (value rows with the same opener and closer), in order of the two."""
    bounds = np.sort(np.concatenate((lo, hi)))  # np.unique, by sorting: its hashing is slower here
    bounds = bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))]
    first_seg = np.searchsorted(bounds, lo)
    count = np.searchsorted(bounds, hi) - first_seg
    keep = count > 0
    first_seg, count = first_seg[keep], count[keep]
    access = np.repeat(np.flatnonzero(keep), count)  # one event per (access, piece it covers)
    seg = np.repeat(first_seg, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    # by piece, then program order with an instruction's reads first: the accesses come in that
    # order already, so a stable sort by piece is enough (a radix sort while pieces fit 16 bits)
    order = np.argsort(seg.astype(np.int16) if len(bounds) < 2**15 else seg, kind="stable")
    access, seg = access[order], seg[order]
    ev_ins, ev_write = ins_id[access], write[access]
    if not len(seg):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty, empty
    new = np.ones(len(seg), bool)
    same_piece = seg[1:] == seg[:-1]
    read_by_other = (ev_write[:-1] == 0) & (ev_ins[:-1] != ev_ins[1:])
    new[1:] = ~same_piece | ((ev_write[1:] == 1) & read_by_other)
    opens = np.flatnonzero(new)  # events of one value are a run
    value = np.cumsum(new) - 1
    opener = ev_ins[opens]
    piece = seg[opens]
    # closer: the read (or, for a value never read, the write) that ends last
    ev_end = end[ev_ins]
    has_read = np.add.reduceat((ev_write == 0).astype(np.int64), opens) > 0
    candidate = np.where((ev_write == 0) | ~has_read[value], ev_end, -np.inf)
    last = np.maximum.reduceat(candidate, opens)
    is_last = candidate == last[value]
    # ties: the last in program order wins (the last such event of the run)
    closer = ev_ins[np.maximum.reduceat(np.where(is_last, np.arange(len(seg)), -1), opens)]
    width = np.maximum.reduceat(parts[access], opens)
    size = bounds[piece + 1] - bounds[piece]
    # rows: the values with the same opener and closer
    key = opener * (int(ev_ins.max()) + 2) + (closer + 1)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    runs = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    nbytes = np.add.reduceat(size[order], runs).astype(np.int64)
    g_lo = np.minimum.reduceat(bounds[piece][order], runs)
    g_hi = np.maximum.reduceat(bounds[piece + 1][order], runs)
    g_parts = np.maximum.reduceat(width[order], runs)
    return opener[order][runs], closer[order][runs], g_lo, g_hi, nbytes, g_parts


def encode_tables(timeline, limit: int | None = None, cache_key=None) -> tuple[dict, bytes]:
    """(tables index, body bytes) for a timeline; cached per ``cache_key`` when given."""
    global _cache_bytes
    key = (cache_key, limit) if cache_key is not None else None
    if key is not None and key in _cache:
        _cache.move_to_end(key)
        return _cache[key]["index"], _cache[key]["body"]
    with gc_paused():  # the passes allocate; a collection would walk the whole Program for nothing
        index, body = ntff_format.encode_body(tables_of(timeline, limit))
    if key is not None and len(body) <= _CACHE_MAX_BYTES:
        _cache[key] = {"index": index, "body": body}
        _cache_bytes += len(body)
        while _cache_bytes > _CACHE_MAX_BYTES:
            _, old = _cache.popitem(last=False)
            _cache_bytes -= len(old["body"])
    return index, body


def write_ntff(path, header: dict, timeline, limit: int | None = None, cache_key=None) -> int:
    """Write one NTFF; returns its size. ``header`` gets ``tables``, the format and version, and
    ``memory`` (the target's capacities) unless given."""
    index, body = encode_tables(timeline, limit, cache_key)
    head = dict(header)
    head.setdefault("memory", memory_capacity(timeline.spec))
    data = ntff_format.encode(head, index, body)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def memory_capacity(spec) -> dict:
    """On-chip capacities of the target, for usage as a share of capacity (header["memory"])."""
    return {"partitions": spec.partitions,
            "sbuf_bytes_per_partition": spec.sbuf_bytes_per_partition, "sbuf_bytes": spec.sbuf_bytes,
            "psum_bytes_per_partition": spec.psum_bytes_per_partition, "psum_bytes": spec.psum_bytes}


def read_header(path) -> dict:
    return ntff_format.read_header(path)


def read_ntff(path, verify: bool = True) -> tuple[dict, dict]:
    """(header, {table name: pyarrow.Table}). Checks the body hash when ``verify``."""
    return ntff_format.read(path, verify)
