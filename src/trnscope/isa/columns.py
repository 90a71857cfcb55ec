"""A Program's instructions as columns: what validation, ordering and the simulator read.

Large programs repeat a few instruction *shapes*: a 4096^3 matmul has ~14 k instructions but ~1 k
distinct ones once the semaphore waits are set aside (the waits differ in every instruction; every
other field - opcode, access patterns, signals, framework op, queue - repeats), and only a handful of
*forms*: shapes with each access pattern's placement (partition start, offset, tensor) set aside.
Costs, streams and the engine rules are functions of the form; bounds checks are functions of the
access patterns themselves. So the columns hold a shape id per instruction, one representative
instruction per shape, a form id per shape and one representative per form; everything else is
evaluated per form or per pattern and broadcast with NumPy. The waits are the only per-instruction
data, kept as CSR arrays.

The pass runs on C-level iterators (``map`` over ``attrgetter``s, ``dict.setdefault``) so no Python
bytecode runs per instruction; access patterns enter the keys as their ids ``AP._sid``/``AP._fid``.
"""

from __future__ import annotations

import gc
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, fields
from itertools import chain
from operator import attrgetter, call

import numpy as np

from .ap import AP
from .errors import ProgramError
from .instructions import Engine, SemaphoreSet

# Stream codes: the compute engines in this order, then DMA queue q as DMA_STREAM_BASE + q.
STREAM_ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.SYNC)
DMA_STREAM_BASE = len(STREAM_ENGINES)
_ENGINE_CODE = {e: i for i, e in enumerate(STREAM_ENGINES)}
_WAITS = attrgetter("waits")


@dataclass
class Columns:
    n: int
    shape: np.ndarray       # int64 [n]: shape id of each instruction
    reps: list              # [n_shapes] the first instruction of each shape
    first: np.ndarray       # int64 [n_shapes]: its index
    shape_form: np.ndarray  # int64 [n_shapes]: form id of each shape
    form_reps: list         # [n_forms] the first instruction of each form
    form: np.ndarray        # int64 [n]: form id of each instruction
    stream: np.ndarray      # int64 [n]: engine code 0..4, or DMA_STREAM_BASE + queue
    op: np.ndarray          # int64 [n]: framework op index
    wait_ptr: np.ndarray    # int64 [n+1] CSR into wait_sem / wait_val
    wait_sem: np.ndarray
    wait_val: np.ndarray
    sig_ptr: np.ndarray     # int64 [n+1] CSR into sig_sem / sig_val / sig_set, signals then a set
    sig_sem: np.ndarray
    sig_val: np.ndarray
    sig_set: np.ndarray     # bool: SemaphoreSet writes the value instead of adding it

    @property
    def n_shapes(self) -> int:
        return len(self.reps)

    @property
    def n_forms(self) -> int:
        return len(self.form_reps)

    def form_mask(self, *classes: type) -> np.ndarray:
        """bool [n_forms]: forms whose instruction is one of ``classes``."""
        return np.fromiter((isinstance(r, classes) for r in self.form_reps), np.bool_, len(self.form_reps))


class _KeyGetters(dict):
    """class -> attrgetter of the fields that define an instruction's shape or form (all but ``waits``)."""

    def __init__(self, ap_id: str):
        super().__init__()
        self.ap_id = ap_id

    def __missing__(self, cls):
        names = ["__class__"]
        for f in fields(cls):
            if f.name == "waits":
                continue
            # fields declared as a plain AP enter the key by id; AP-or-scalar fields as they are
            names.append(f"{f.name}.{self.ap_id}" if f.type in ("AP", AP) else f.name)
        getter = self[cls] = attrgetter(*names)
        return getter


_SHAPE_KEYS = _KeyGetters("_sid")
_FORM_KEYS = _KeyGetters("_fid")


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    return v


def _slow_key(ins, form: bool) -> tuple:
    """The key of an instruction the fast getters cannot key (a non-AP in an AP field, a list field)."""
    vals = [type(ins)]
    for f in fields(ins):
        if f.name != "waits":
            v = getattr(ins, f.name)
            vals.append((v.space, v.dtype, v.partitions, v.dims) if form and f.type in ("AP", AP)
                        and isinstance(v, AP) else _freeze(v))
    return tuple(vals)


def _group(instrs: list, getters: _KeyGetters, form: bool) -> tuple[np.ndarray, np.ndarray]:
    """(group id of each instruction, index of each group's first instruction), groups of equal keys."""
    n = len(instrs)
    try:
        keys = list(map(call, map(getters.__getitem__, map(type, instrs)), instrs))
        firsts = _first_of_key(keys, n)
    except (AttributeError, TypeError):
        firsts = _first_of_key([_slow_key(ins, form) for ins in instrs], n)
    is_first = firsts == np.arange(n)
    rank = np.cumsum(is_first) - 1
    return (rank[firsts] if n else np.zeros(0, np.int64)), np.flatnonzero(is_first)


@contextmanager
def gc_paused():
    """Hold the cyclic GC while a pass allocates a tuple per instruction: those allocations would
    trigger collections that walk the whole (large, long-lived) Program for nothing, several times
    the cost of the pass itself. Nothing allocated here forms a cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def program_columns(program) -> Columns:
    with gc_paused():
        return _program_columns(program)


def _program_columns(program) -> Columns:
    instrs = program.instructions
    n = len(instrs)
    shape, first = _group(instrs, _SHAPE_KEYS, form=False)
    reps = [instrs[i] for i in first.tolist()]
    shape_form, form_first = _group(reps, _FORM_KEYS, form=True)
    form_reps = [reps[i] for i in form_first.tolist()]
    form = shape_form[shape]

    wait_ptr, wait_sem, wait_val = _waits(program, instrs, n)

    # per-form signals, ops and streams, broadcast to the instructions
    s_cnt, s_sem, s_val, s_set, s_op, s_stream = [], [], [], [], [], []
    for k, rep in enumerate(form_reps):
        pairs = list(rep.signals)
        for p in pairs:
            if len(p) != 2:
                at = int(first[form_first[k]])
                raise ProgramError(f"{program.label(at)}: signals must be (semaphore, delta) pairs, "
                                   f"got {rep.signals!r}")
        s_sem.extend(int(s) for s, _ in pairs)
        s_val.extend(int(v) for _, v in pairs)
        s_set.extend([False] * len(pairs))
        if isinstance(rep, SemaphoreSet):
            s_sem.append(int(rep.sem))
            s_val.append(int(rep.value))
            s_set.append(True)
            pairs.append(None)
        s_cnt.append(len(pairs))
        s_op.append(rep.op)
        eng = rep.engine
        s_stream.append(DMA_STREAM_BASE + rep.queue if eng is Engine.DMA else _ENGINE_CODE[eng])
    s_cnt_a = np.asarray(s_cnt, np.int64)
    s_ptr = np.zeros(len(form_reps) + 1, np.int64)
    np.cumsum(s_cnt_a, out=s_ptr[1:])
    counts = s_cnt_a[form]
    sig_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=sig_ptr[1:])
    # entry j of instruction i is entry j of its form
    src = np.repeat(s_ptr[form] - sig_ptr[:-1], counts) + np.arange(int(sig_ptr[-1]), dtype=np.int64)
    sig_sem = np.asarray(s_sem, np.int64)[src]
    sig_val = np.asarray(s_val, np.int64)[src]
    sig_set = np.asarray(s_set, np.bool_)[src]
    return Columns(n=n, shape=shape.astype(np.int64), reps=reps, first=first.astype(np.int64),
                   shape_form=shape_form.astype(np.int64), form_reps=form_reps, form=form.astype(np.int64),
                   stream=np.asarray(s_stream, np.int64)[form], op=np.asarray(s_op, np.int64)[form],
                   wait_ptr=wait_ptr, wait_sem=wait_sem, wait_val=wait_val, sig_ptr=sig_ptr, sig_sem=sig_sem,
                   sig_val=sig_val, sig_set=sig_set)


def _first_of_key(keys: list, n: int) -> np.ndarray:
    """For each instruction, the index of the first instruction with an equal key."""
    memo: dict = {}
    return np.frombuffer(array("q", map(memo.setdefault, keys, range(n))), np.int64)


def _waits(program, instrs: list, n: int):
    waits = list(map(_WAITS, instrs))
    counts = np.frombuffer(array("q", map(len, waits)), np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    pairs = chain.from_iterable(waits)
    if not set(map(len, pairs)) <= {2}:
        bad = next(i for i, w in enumerate(waits) if any(len(p) != 2 for p in w))
        raise ProgramError(f"{program.label(bad)}: waits must be (semaphore, value) pairs, got {waits[bad]!r}")
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(waits)), np.int64, 2 * int(ptr[-1]))
    return ptr, flat[0::2].copy(), flat[1::2].copy()


def stream_csr(cols: Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Streams in order of first appearance (as ``Program.streams()``): (codes, ptr, instr) CSR."""
    codes, first_idx, dense = np.unique(cols.stream, return_index=True, return_inverse=True)
    appearance = np.argsort(first_idx, kind="stable")
    rank = np.empty_like(appearance)
    rank[appearance] = np.arange(len(appearance))
    sid = rank[dense.reshape(-1)] if cols.n else np.zeros(0, np.int64)
    instr = np.argsort(sid, kind="stable").astype(np.int64)
    ptr = np.zeros(len(codes) + 1, np.int64)
    np.cumsum(np.bincount(sid, minlength=len(codes)), out=ptr[1:])
    return codes[appearance], ptr, instr
