"""SQL over a profile: DuckDB on the profile's tables, read-only (Neuron Explorer's Database
Viewer, for trnscope profiles and any Kineto trace).

The tables are the trace's columns (the ones the Parquet trace cache stores, with string ids
resolved to text and times relative to the trace's first event, as the explorer's axis) and the
analyses' tables (operators, kernels, NEFFs, device executions), handed to DuckDB as Arrow tables
without copying. NTFF instruction rows (``instructions``) are read only when a query names that
table. docs/file-formats.md lists every table and column.

Read-only: a query is one SELECT (or WITH ... SELECT) statement; once the tables are registered,
the connection is closed to the outside (``enable_external_access = false``, then the
configuration is locked), so a query can neither read nor write files, attach databases or load
extensions; it runs with a row cap and a time limit (interrupted past it).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np

from ..trace.arrow import pa
from .device_work import device_work
from .summary import ProfileAnalysis

MAX_ROWS = 10_000
TIME_LIMIT_S = 20.0
# table -> (what a row is, {column: meaning}) — the reference docs/file-formats.md is written from
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "slices": ("one span of the timeline (op, runtime call, execution, Python frame, ...)", {
        "row": "the slice's row (the explorer's `row=`, `/slice/<row>`)", "ts_ns": "start, ns from the trace's first event",
        "dur_ns": "duration ns", "end_ns": "ts_ns + dur_ns", "track": "its track (`tracks.track`)",
        "lane": "the track's label", "depth": "nesting level on its track (0 = top)",
        "parent": "row of the enclosing slice, -1 at the top", "name": "name", "cat": "category (cpu_op, neuron_runtime, ...)"}),
    "tracks": ("one lane of the trace", {
        "track": "track id", "kind": "slices / counter / ...", "pid": "process", "tid": "thread (null for counters)",
        "name": "thread or counter name", "label": "what the explorer calls it", "process_name": "process name"}),
    "instants": ("one instant event", {"ts_ns": "time, ns from the first event", "track": "its track", "name": "name", "cat": "category"}),
    "counters": ("one counter sample", {
        "track": "its track", "counter": "the track's name", "series": "the series' name", "ts_ns": "time, ns from the first event",
        "value": "value"}),
    "flows": ("one flow arrow (launch -> execution, ...)", {
        "flow_id": "flow id", "name": "name", "cat": "category (ac2g, neuron_flow, ...)", "start_row": "slice row it leaves",
        "end_row": "slice row it reaches", "start_ts_ns": "time it leaves", "end_ts_ns": "time it arrives"}),
    "executions": ("one device execution (a NEFF, kernel or copy on a device stream)", {
        "row": "its slice row", "ts_ns": "start", "dur_ns": "duration", "device": "device (neuron:0, GPU 0, ...)",
        "program": "NEFF id or kernel name", "name": "slice name", "is_copy": "a memcpy/memset",
        "bytes": "HBM bytes moved (copies: size)", "kind": "computation / communication / memory / other",
        "launcher_row": "slice row of the runtime call that launched it (-1 unknown)",
        "submit_ns": "when it was launched (-1 unknown)", "op": "the framework op it came from",
        "source": "the line of the user's code behind it (NULL unknown)",
        "source_found": "how that line was found: call, frame, backward, backward call"}),
    "ops": ("one operator name, as prof.key_averages()", {
        "name": "op", "category": "category", "calls": "calls", "cpu_total_ns": "host time with children",
        "cpu_self_ns": "host time without children", "device_total_ns": "device time of all it launched",
        "device_self_ns": "device time it launched itself", "dispatches": "device executions launched",
        "programs": "NEFF ids / kernels (list)", "bytes": "bytes moved"}),
    "kernels": ("one NEFF, kernel or copy, over its executions", {
        "name": "name", "program": "NEFF id or kernel", "calls": "executions", "device_total_ns": "total time",
        "device_min_ns": "shortest", "device_max_ns": "longest", "bytes": "bytes moved", "is_copy": "a copy",
        "ops": "framework ops that launched it (list)", "mfu_percent": "MFU (of its dtype's TensorE peak)", "mbu_percent": "MBU",
        "bottleneck": "busiest engine"}),
    "neffs": ("one NEFF of a Neuron profile, from its NTFF summary", {
        "neff_id": "NEFF id", "name": "name", "executions": "executions in the profile", "device_time_ns": "their total time",
        "framework_ops": "ops it came from (list)", "instruction_count": "instructions",
        "mfu_percent": "MFU, of TensorE's peak for the dtype its matmuls streamed",
        "peak_dtype": "that peak's dtype: FP32, BF16, mixed (...)", "peak_flops_per_s": "that peak, FLOP/s",
        "mfu_bf16_percent": "MFU of the BF16 peak (the NTFF's figure)",
        "mbu_percent": "MBU", "hbm_bytes": "HBM bytes per execution", "dma_transfers": "DMA transfers",
        "dma_average_bytes": "average DMA size", "bottleneck": "busiest engine"}),
    "instructions": ("one instruction of a NEFF's NTFF trace (read when a query names this table)", {
        "neff_id": "NEFF id", "nc": "NeuronCore", "id": "instruction id", "start_ns": "start, ns from the execution's start",
        "end_ns": "end", "duration_ns": "duration", "engine": "engine", "opcode": "opcode", "framework_op": "op it came from",
        "evt_wait_time_ns": "semaphore wait", "hbm_read_bytes": "HBM read", "hbm_write_bytes": "HBM written",
        "sbuf_read_bytes": "SBUF read", "sbuf_write_bytes": "SBUF written", "psum_read_bytes": "PSUM read",
        "psum_write_bytes": "PSUM written", "raw_flops": "FLOPs executed", "model_flops": "model FLOPs",
        "nki_source_location": "NKI kernel source line, if any", "operands": "operands (text)"}),
}


class QueryError(ValueError):
    """A query the database refuses or that fails (the message says why and what to do)."""


@dataclass
class QueryResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple]
    truncated: bool  # more rows than the cap

    def to_dict(self) -> dict:
        return {"columns": self.columns, "types": self.types, "rows": [list(r) for r in self.rows],
                "truncated": self.truncated}


def _duckdb():
    try:
        import duckdb
    except ImportError:  # pragma: no cover - a dependency in pyproject.toml
        raise QueryError("SQL needs the duckdb package: pip install duckdb (it is one of trnscope's dependencies)") from None
    return duckdb


class ProfileDatabase:
    """A read-only DuckDB connection over one profile's tables."""

    def __init__(self, analysis: ProfileAnalysis) -> None:
        self.analysis = analysis
        self._lock = threading.Lock()
        self._con = None
        self._with_instructions = False

    def tables(self) -> dict[str, tuple[str, dict[str, str]]]:
        return TABLES

    def query(self, sql: str, max_rows: int = MAX_ROWS, time_limit_s: float = TIME_LIMIT_S) -> QueryResult:
        duckdb = _duckdb()
        text = (sql or "").strip().rstrip(";").strip()
        if not text:
            raise QueryError('no query: give one SELECT statement, e.g. "SELECT name, count(*) FROM slices GROUP BY 1"')
        try:
            statements = duckdb.extract_statements(text)
        except duckdb.Error as exc:
            raise QueryError(_message(exc)) from None
        if len(statements) != 1:
            raise QueryError(f"one statement at a time ({len(statements)} given)")
        if statements[0].type != duckdb.StatementType.SELECT:
            raise QueryError("the profile database is read-only: only SELECT (or WITH ... SELECT) queries run")
        wants_instructions = re.search(r"\binstructions\b", text, re.IGNORECASE) is not None
        with self._lock:
            con = self._connect(wants_instructions)
            timer = threading.Timer(time_limit_s, con.interrupt)
            timer.start()
            try:
                cursor = con.execute(text)
                rows = cursor.fetchmany(max_rows + 1)
                description = cursor.description or []
            except duckdb.InterruptException:
                raise QueryError(f"the query ran past {time_limit_s:g} s and was stopped; narrow it (WHERE, LIMIT)") from None
            except duckdb.Error as exc:
                raise QueryError(_message(exc)) from None
            finally:
                timer.cancel()
        return QueryResult(columns=[d[0] for d in description], types=[str(d[1]) for d in description],
                           rows=[tuple(_plain(v) for v in r) for r in rows[:max_rows]], truncated=len(rows) > max_rows)

    # --- the tables --------------------------------------------------------------------------

    def _connect(self, instructions: bool):
        duckdb = _duckdb()
        if self._con is not None and (self._with_instructions or not instructions):
            return self._con
        # a new connection when instructions are first asked for: the configuration of the first
        # one is locked, so nothing more could be registered on it
        con = duckdb.connect(":memory:")
        con.execute("SET threads = 2")
        tables = self._tables()
        if instructions:
            tables["instructions"] = self._instructions()
        for name, table in tables.items():
            con.register(name, table)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        if self._con is not None:
            self._con.close()
        self._con, self._with_instructions = con, instructions or self._with_instructions
        return con

    def _tables(self) -> dict[str, "pa.Table"]:
        a = self.analysis
        trace = a.profile.trace
        origin = int(trace.start_ns) if len(trace.slices) or len(trace.counters) else 0
        strings = np.array(trace.strings.to_list(), dtype=object)
        s = trace.slices
        labels = np.array([t.label for t in trace.tracks] or [""], dtype=object)
        out = {
            "slices": pa.table({
                "row": np.arange(len(s), dtype=np.int64), "ts_ns": s.ts_ns - origin, "dur_ns": s.dur_ns,
                "end_ns": s.ts_ns + s.dur_ns - origin, "track": s.track, "lane": _text(labels[s.track]),
                "depth": s.depth, "parent": s.parent, "name": _text(strings[s.name]), "cat": _text(strings[s.cat])}),
            "tracks": pa.table({
                "track": [t.id for t in trace.tracks], "kind": [t.kind.value if hasattr(t.kind, "value") else str(t.kind) for t in trace.tracks],
                "pid": [str(t.pid) for t in trace.tracks], "tid": [None if t.tid is None else str(t.tid) for t in trace.tracks],
                "name": [t.name for t in trace.tracks], "label": [t.label for t in trace.tracks],
                "process_name": [t.process_name for t in trace.tracks]}),
        }
        i = trace.instants
        out["instants"] = pa.table({"ts_ns": i.ts_ns - origin, "track": i.track, "name": _text(strings[i.name]),
                                    "cat": _text(strings[i.cat])})
        c = trace.counters
        series_track = np.asarray(c.series_track)[c.series] if len(c) else np.zeros(0, np.int64)
        out["counters"] = pa.table({
            "track": series_track, "counter": _text(labels[series_track]) if len(c) else _text(np.zeros(0, object)),
            "series": _text(strings[np.asarray(c.series_name)[c.series]]) if len(c) else _text(np.zeros(0, object)),
            "ts_ns": c.ts_ns - origin, "value": c.value})
        f = trace.flows
        out["flows"] = pa.table({"flow_id": f.flow_id, "name": _text(strings[f.name]), "cat": _text(strings[f.cat]),
                                 "start_row": f.start_row, "end_row": f.end_row, "start_ts_ns": f.start_ts_ns - origin,
                                 "end_ts_ns": f.end_ts_ns - origin})
        w = device_work(trace)
        out["executions"] = pa.table({
            "row": w.rows, "ts_ns": w.start - origin, "dur_ns": w.end - w.start,
            "device": [w.devices[d] for d in w.device.tolist()], "program": [str(p) for p in w.program.tolist()],
            "name": _text(strings[s.name[w.rows]]), "is_copy": w.is_copy, "bytes": w.bytes,
            "kind": [str(k) for k in w.kind.tolist()], "launcher_row": w.launcher,
            "submit_ns": np.where(w.submit >= 0, w.submit - origin, -1),
            "op": [x.framework_op or x.op for x in w.args],
            "source": [str(line) if line is not None else None for line in a.execution_lines.lines],
            "source_found": a.execution_lines.origins})
        ops = a.ops
        out["ops"] = _rows_table([r.__dict__ for r in ops.ops], TABLES["ops"][1])
        out["kernels"] = _rows_table([k.__dict__ for k in ops.kernels], TABLES["kernels"][1])
        out["neffs"] = _rows_table([n.__dict__ for n in a.device.neffs], TABLES["neffs"][1])
        return out

    def _instructions(self) -> "pa.Table":
        from .device_trace import build_device_trace
        from .profile_dir import ProfileFormatError, read_ntff

        files = self.analysis.profile.files
        columns = TABLES["instructions"][1]
        parts: dict[str, list] = {k: [] for k in columns}
        for (neff_id, nc), path in sorted((files.ntffs if files is not None else {}).items()):
            try:
                table = build_device_trace(read_ntff(path)).instruction_table
            except (ProfileFormatError, OSError) as exc:
                raise QueryError(f"{path.name} cannot be read for the instructions table: {exc}") from None
            n = len(table.get("id", ()))
            parts["neff_id"].append(np.full(n, str(neff_id), dtype=object))
            parts["nc"].append(np.full(n, int(nc), dtype=np.int64))
            for key in columns:
                if key in ("neff_id", "nc"):
                    continue
                values = table.get(key)
                if values is None:
                    values = np.full(n, None, dtype=object)
                elif key == "operands" or np.asarray(values).dtype == object:
                    values = np.array([None if v is None else str(v) for v in values], dtype=object)
                parts[key].append(np.asarray(values))
        return pa.table({k: (_text(np.concatenate(v)) if v and np.concatenate(v).dtype == object else
                             (np.concatenate(v) if v else np.zeros(0, np.int64))) for k, v in parts.items()})


def _text(values: np.ndarray) -> "pa.Array":
    return pa.array(values.tolist(), type=pa.string())


def _rows_table(rows: list[dict], columns: dict[str, str]) -> "pa.Table":
    data = {k: [_cell(r.get(k)) for r in rows] for k in columns}
    return pa.table(data) if rows else pa.table({k: pa.array([], type=pa.string()) for k in columns})


def _cell(value):
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return value


def _plain(value):
    """A value JSON can carry (DuckDB gives Decimal, datetime, ... for some expressions)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _message(exc: Exception) -> str:
    text = str(exc).strip()
    return text + ("\nTables: " + ", ".join(TABLES) + " (docs/file-formats.md; `trnscope query PROFILE --tables`)"
                   if "does not exist" in text or "not found" in text.lower() else "")
