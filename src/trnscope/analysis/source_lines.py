"""Device time per source line: Python line -> framework op -> NEFF -> instruction.

Each device execution is given the line of the user's code that caused it, the most precise one
the profile holds (``trnscope.sourceline`` defines how lines are spelled):

1. ``call``: the line recorded with the execution (``args.source``): a trnscope profile recorded
   with ``with_stack=True`` notes, for each execution, the innermost frame of the user's code on
   the dispatching thread;
2. ``frame``: else the innermost ``python_function`` frame of the user's code around the op that
   launched it (any torch.profiler trace recorded with ``with_stack=True``). Kineto names a frame
   by its function's *first* line, so such a row says which function, not which line;
3. ``backward``: an execution of autograd's backward (whose thread runs no user code) takes the
   line of the forward op it is the gradient of: the backward node's ``Sequence number`` is the
   forward op's (how PyTorch pairs them);
4. ``backward call``: backward work paired with no forward op (gradient accumulation into the
   parameters) takes the line that called ``backward()``, recorded with the execution
   (``args.backward_source``, trnscope with ``with_stack=True``).

Inside a NEFF the instructions may say more (the NTFF's instruction table): a compiled graph's
instructions are labelled ``<op> (<line>)`` from the FX node's stack trace (``graph``), an NKI
kernel's carry the kernel line that issued them (``nki``). An execution of such a NEFF is split
over those lines by the time their instructions ran (the union of each line's instruction
intervals, scaled so the parts add up to the execution's duration); the execution's own line is
then the rows' *caller*. Only the costliest ``MAX_SPLIT_NEFFS`` NEFFs' tables are read.

Rows add up to the device time of all executions (those with no line known form one row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import numpy as np

from ..sourceline import SourceLine, is_library, parse, parse_frame, split_op_label
from ..trace import Trace
from .device_work import DeviceWork, device_work
from .exec_args import decode_args
from .instructions import group_time
from .lanes import FRAME_CATEGORIES
from .ops import OpTable
from .profile import Profile
from .profile_dir import ProfileFormatError, read_ntff

MAX_SPLIT_NEFFS = 64
CALL, FRAME, BACKWARD, BACKWARD_CALL, GRAPH, NKI = "call", "frame", "backward", "backward call", "graph", "nki"
UNKNOWN = "(no source line)"


@dataclass
class LineRow:
    line: str  # "model.py:37 (forward)", or UNKNOWN
    file: str
    number: int
    function: str
    origin: str  # CALL, FRAME, BACKWARD, BACKWARD_CALL, GRAPH, NKI: how the line was found (see the module)
    backward: bool  # device work of autograd's backward for the line's forward ops
    device_ns: float
    share: float
    executions: int  # executions with time on this line
    ops: list[dict]  # [{op, device_ns}] most first
    neffs: list[dict]  # [{neff_id, name, nc, device_ns}] most first
    callers: list[str]  # lines whose call ran this line's NEFF part (graph and NKI lines)
    first_row: int  # the earliest execution's slice row

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SourceLineTable:
    rows: list[LineRow] = field(default_factory=list)
    device_total_ns: float = 0.0
    executions: int = 0
    with_line: int = 0  # executions given a line
    recorded: bool = False  # lines recorded with the executions (trnscope, with_stack=True)
    frames: bool = False  # the trace has Python frames (with_stack=True)
    problems: list[str] = field(default_factory=list)

    @property
    def line_share(self) -> float:
        """The share of device time on a known line (NEFF parts included)."""
        known = sum(r.device_ns for r in self.rows if r.line != UNKNOWN)
        return known / self.device_total_ns if self.device_total_ns else 0.0

    def to_dict(self) -> dict:
        return {"rows": [r.to_dict() for r in self.rows], "device_total_ns": self.device_total_ns,
                "line_share": self.line_share,
                "executions": self.executions, "with_line": self.with_line, "recorded": self.recorded,
                "frames": self.frames, "problems": self.problems}


class _SeqArgs(msgspec.Struct, frozen=True, gc=False, rename={"seq": "Sequence number", "fwd": "Fwd thread id"}):
    seq: int | None = None
    fwd: int | None = None


@dataclass
class ExecutionLines:
    """Per device execution (``device_work`` order) its line and how it was found."""

    lines: list[SourceLine | None]
    origins: list[str | None]
    recorded: bool  # lines recorded with the executions (trnscope, with_stack=True)
    frames: "_FrameLines"

    def of(self, index: int) -> dict | None:
        line = self.lines[index] if 0 <= index < len(self.lines) else None
        return {"line": str(line), "origin": self.origins[index]} if line is not None else None


def execution_lines(trace: Trace, ops: OpTable) -> ExecutionLines:
    work = device_work(trace)
    owner = ops.owner_of if len(ops.owner_of) == len(work) else np.full(len(work), -1, dtype=np.int64)
    start_rows = np.where(owner >= 0, owner, work.launcher)
    frames = _FrameLines(trace)
    lines: list[SourceLine | None] = [None] * len(work)
    origins: list[str | None] = [None] * len(work)
    recorded = False
    for i, a in enumerate(work.args):
        line = parse(a.source) if a.source else None
        if line is not None:
            lines[i], origins[i] = line, CALL
            recorded = True
    marks: dict[int, SourceLine] = {}  # host slice -> the line of the first execution below it
    for i in np.argsort(work.start, kind="stable").tolist():
        row = int(start_rows[i])
        if lines[i] is None and row >= 0:
            line = frames.line_above(row)
            if line is not None:
                lines[i], origins[i] = line, FRAME
        if lines[i] is not None and row >= 0:
            frames.mark(row, lines[i], marks)
    _backward_lines(trace, work, start_rows, lines, origins, marks, frames)
    for i, a in enumerate(work.args):
        if lines[i] is None and a.backward_source:
            line = parse(a.backward_source)
            if line is not None:
                lines[i], origins[i] = line, BACKWARD_CALL
    return ExecutionLines(lines, origins, recorded, frames)


def source_line_table(profile: Profile, ops: OpTable, device_neffs: list | None = None,
                      per_execution: ExecutionLines | None = None) -> SourceLineTable:
    """``device_neffs``: the device summary's NEFFs (names, costliest first) when there are NTFFs."""
    trace = profile.trace
    work = device_work(trace)
    out = SourceLineTable(executions=len(work))
    if not len(work):
        return out
    found = per_execution or execution_lines(trace, ops)
    lines, origins = found.lines, found.origins
    out.recorded, out.frames = found.recorded, found.frames.any
    out.with_line = sum(x is not None for x in lines)

    splits = _neff_splits(profile, device_neffs or [], out.problems)
    names = {str(n.neff_id): n.name for n in device_neffs or []}
    acc: dict[tuple[str, bool], dict] = {}
    duration = (work.end - work.start).astype(np.float64)
    for i in np.argsort(work.start, kind="stable").tolist():
        args = work.args[i]
        caller, origin = lines[i], origins[i]
        backward = origin in (BACKWARD, BACKWARD_CALL)
        op = ops.launch_ops[i] if i < len(ops.launch_ops) and ops.launch_ops[i] else str(work.program[i])
        neff = (str(args.neff_id), _core(args)) if args.neff_id is not None else None
        parts = splits.get(neff) if neff is not None else None
        for line, part_op, part_origin, fraction in (parts or [(None, None, None, 1.0)]):
            where = line or caller
            key = (str(where) if where is not None else "", backward)
            row = acc.get(key)
            if row is None:
                row = acc[key] = {"line": where, "origin": part_origin if line else origin, "ns": 0.0, "execs": set(),
                                  "ops": {}, "neffs": {}, "callers": set(), "first": int(work.rows[i])}
            ns = duration[i] * fraction
            row["ns"] += ns
            row["execs"].add(i)
            name = part_op or op
            row["ops"][name] = row["ops"].get(name, 0.0) + ns
            if neff is not None:
                row["neffs"][neff] = row["neffs"].get(neff, 0.0) + ns
            if line is not None and caller is not None:
                row["callers"].add(str(caller))
    total = float(duration.sum())
    out.device_total_ns = total
    for (text, backward), row in acc.items():
        where_line: SourceLine | None = row["line"]
        out.rows.append(LineRow(
            line=text or UNKNOWN, file=where_line.file if where_line else "",
            number=where_line.line if where_line else 0,
            function=where_line.function if where_line else "", origin=row["origin"] or "", backward=backward,
            device_ns=row["ns"], share=row["ns"] / total if total else 0.0, executions=len(row["execs"]),
            ops=[{"op": k, "device_ns": v} for k, v in sorted(row["ops"].items(), key=lambda kv: -kv[1])],
            neffs=[{"neff_id": k[0], "nc": k[1], "name": names.get(k[0], k[0]), "device_ns": v}
                   for k, v in sorted(row["neffs"].items(), key=lambda kv: -kv[1])],
            callers=sorted(row["callers"]), first_row=row["first"]))
    out.rows.sort(key=lambda r: (r.line == UNKNOWN, -r.device_ns, r.line))
    return out


def _core(args) -> int:
    for value in (args.nc, args.device):
        if isinstance(value, int):
            return value
    return 0


class _FrameLines:
    """The innermost Python frame of the user's code above a host slice (``with_stack`` frames)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        s = trace.slices
        frame_ids = [i for i in (trace.strings.id_of(c) for c in FRAME_CATEGORIES) if i is not None]
        self.is_frame = np.isin(s.cat, frame_ids) if frame_ids else np.zeros(len(s), dtype=bool)
        self.any = bool(self.is_frame.any())
        self._user: dict[int, SourceLine | None] = {}  # name id -> the user's frame, or None
        self._above: dict[int, SourceLine | None] = {}

    def _frame(self, row: int) -> SourceLine | None:
        name = int(self.trace.slices.name[row])
        if name not in self._user:
            line = parse_frame(self.trace.strings[name])
            self._user[name] = line if line is not None and not is_library(line.file) else None
        return self._user[name]

    def line_above(self, row: int) -> SourceLine | None:
        if not self.any:
            return None
        if row in self._above:
            return self._above[row]
        parents = self.trace.slices.parent
        walked, current, line = [], row, None
        while current >= 0:
            if current in self._above:
                line = self._above[current]
                break
            walked.append(current)
            if self.is_frame[current]:
                line = self._frame(current)
                if line is not None:
                    break
            current = int(parents[current])
        for r in walked:
            self._above[r] = line
        return line

    def mark(self, row: int, line: SourceLine, marks: dict) -> None:
        """``row`` and the slices above it were running when ``line`` dispatched (first one wins)."""
        parents = self.trace.slices.parent
        current = row
        while current >= 0 and current not in marks:
            marks[current] = line
            current = int(parents[current])


def _backward_lines(trace: Trace, work: DeviceWork, start_rows: np.ndarray, lines: list, origins: list,
                    marks: dict, frames: _FrameLines) -> None:
    """Executions of autograd's backward take their forward op's line (paired by sequence number)."""
    missing = [i for i, line in enumerate(lines) if line is None and start_rows[i] >= 0]
    if not missing or (not marks and not frames.any):
        return  # nothing to pair with: no forward op has a line
    s = trace.slices
    host = np.unique(np.concatenate([_ancestors(s.parent, int(start_rows[i])) for i in missing]))
    seq_of_row = {}
    for row, a in zip(host.tolist(), decode_args(s.args.raw_many(host), _SeqArgs)):
        if a.seq is not None and a.fwd:  # a backward node names its forward thread (forward ops: 0)
            seq_of_row[row] = a.seq
    if not seq_of_row:
        return
    wanted = set(seq_of_row.values())
    # the forward ops: host slices with those sequence numbers and no Fwd thread id
    cat_ids = [i for i in (trace.strings.id_of(c) for c in ("cpu_op", "operator")) if i is not None]
    candidates = np.flatnonzero(np.isin(s.cat, cat_ids)) if cat_ids else np.zeros(0, dtype=np.int64)
    forward: dict[int, SourceLine] = {}
    for row, a in zip(candidates.tolist(), decode_args(s.args.raw_many(candidates), _SeqArgs)):
        if a.seq in wanted and not a.fwd and a.seq not in forward:
            line = marks.get(row) or frames.line_above(row)
            if line is not None:
                forward[a.seq] = line
    for i in missing:
        for row in _ancestors(s.parent, int(start_rows[i])).tolist():
            seq = seq_of_row.get(row)
            if seq is not None and seq in forward:
                lines[i], origins[i] = forward[seq], BACKWARD
                break


def _ancestors(parents: np.ndarray, row: int) -> np.ndarray:
    out: list[int] = []
    while row >= 0 and len(out) < 256:
        out.append(row)
        row = int(parents[row])
    return np.array(out, dtype=np.int64)


def instruction_lines(table: Mapping[str, Sequence | np.ndarray]) -> tuple[list[str | None], list[str], list[str | None]]:
    """Per instruction of an NTFF table: its source line (text), its op, and where the line came from
    (NKI, GRAPH, or None without a line)."""
    labels: Any = table.get("framework_op")
    n = len(labels) if labels is not None else 0
    nki = table.get("nki_source_location")
    lines: list[str | None] = [None] * n
    ops: list[str] = [""] * n
    origin: list[str | None] = [None] * n
    memo: dict[str, tuple[str, SourceLine | None]] = {}
    for k in range(n):
        label = str(labels[k] or "")
        if label not in memo:
            memo[label] = split_op_label(label)
        op, line = memo[label]
        ops[k] = op
        where = str(nki[k]) if nki is not None and nki[k] else ""
        if where:
            lines[k], origin[k] = where, NKI
        elif line is not None:
            lines[k], origin[k] = str(line), GRAPH
    return lines, ops, origin


def _neff_splits(profile: Profile, neffs: list, problems: list[str]) -> dict:
    """(neff_id, nc) -> [(line, op, origin, fraction)] for NEFFs whose instructions carry lines."""
    files = profile.files
    if files is None or not files.ntffs:
        return {}
    costly = [str(n.neff_id) for n in neffs[:MAX_SPLIT_NEFFS]]
    out = {}
    for (neff_id, nc), path in sorted(files.ntffs.items()):
        if str(neff_id) not in costly:
            continue
        try:
            table = read_ntff(path).table("instruction")
        except (ProfileFormatError, OSError) as exc:
            problems.append(str(exc))
            continue
        parts = split_by_line(table)
        if parts:
            out[(str(neff_id), nc)] = parts
    return out


def split_by_line(table: dict[str, np.ndarray]) -> list[tuple[SourceLine | None, str | None, str | None, float]]:
    """An NTFF instruction table's time per (line, op): [(line, op, origin, fraction)], fractions
    of the union-busy time adding up to 1; [] when no instruction has a line."""
    lines, ops, origin = instruction_lines(table)
    if not any(lines):
        return []
    groups = group_time(table, [(line, op if line else None, o) for line, op, o in zip(lines, ops, origin)])
    total = sum(g.busy_ns for g in groups)
    if not total:
        return []
    keys = [cast(tuple, g.key) for g in groups]
    return [(parse(k[0]) if k[0] else None, k[1], k[2], g.busy_ns / total) for k, g in zip(keys, groups) if g.busy_ns > 0]
