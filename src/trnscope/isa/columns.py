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

The grouping (:class:`ShapeIndex`) is made once per Program, when the NEFF hash or the simulator
first needs it, in one pass of C-level iterators (``map`` over ``attrgetter``s, ``dict.setdefault``:
about a microsecond per instruction, less than indexing each instruction as it is added would cost
the builder), and kept while the instruction list stays the same; ``program_columns`` then only
turns it into arrays and evaluates the per-form fields. Access patterns enter the keys as their ids
``AP._sid``/``AP._fid``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, fields
from functools import partial
from itertools import chain, tee
from operator import attrgetter, call, is_not

import numpy as np
import orjson

from .ap import AP
from .errors import ProgramError
from .instructions import Engine, SemaphoreSet
from ..gcpause import gc_paused  # noqa: F401  (the isa passes and their users hold the GC with it)

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

    def __init__(self, ap_id: str, with_class: bool = True):
        super().__init__()
        self.ap_id = ap_id
        self.with_class = with_class

    def __missing__(self, cls):
        names = ["__class__"] if self.with_class else []
        for f in fields(cls):
            if f.name == "waits":
                continue
            # fields declared as a plain AP enter the key by id; AP-or-scalar fields as they are
            names.append(f"{f.name}.{self.ap_id}" if f.type in ("AP", AP) else f.name)
        getter = self[cls] = attrgetter(*names)  # every class has signals and op: always a tuple
        return getter


_SHAPE_VALUES = _KeyGetters("_sid", with_class=False)
_FORM_KEYS = _KeyGetters("_fid")


def _operand_ref(v):
    """orjson's fallback inside a shape key: a pattern in an AP-or-scalar field enters by its content id
    (exact for serialisation, see ``ap._SIDS``); anything else orjson cannot write makes the key fail."""
    if isinstance(v, AP):
        return {"\0ap": v._sid}
    raise TypeError(f"{type(v).__name__} in an instruction field")


# Dataclasses pass through to _operand_ref: orjson would otherwise write a pattern's every slot.
_dump_values = partial(orjson.dumps, default=_operand_ref, option=orjson.OPT_PASSTHROUGH_DATACLASS)
_KEY_ERRORS = (AttributeError, TypeError, ValueError, OverflowError)


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_freeze(x) for x in v)
    return v


def _slow_key(ins, form: bool) -> tuple:
    """The key of an instruction the fast getters cannot key (a non-AP in an AP field, a list field)."""
    vals: list = [type(ins)]
    for f in fields(ins):
        if f.name != "waits":
            v = getattr(ins, f.name)
            vals.append((v.space, v.dtype, v.partitions, v.dims) if form and f.type in ("AP", AP)
                        and isinstance(v, AP) else _freeze(v))
    return tuple(vals)


def _form_key(ins) -> tuple:
    try:
        key = _FORM_KEYS[type(ins)](ins)
        hash(key)  # a list field gets through the getter
        return key
    except (AttributeError, TypeError):
        return _slow_key(ins, True)


class ShapeIndex:
    """A Program's instructions grouped into shapes and forms, with their waits flattened: everything
    :func:`program_columns` needs from the instructions themselves.

    :meth:`build` makes it for a whole list at once; ``Program.shape_index`` keeps it until the list
    changes (an instruction added, a list edited in place).

    A shape key is ``(class, field values, orjson bytes of the field values)`` with access patterns by
    content id: equal values (what the simulator needs) *and* equal serialisation (what the NEFF hash
    needs: ``1`` and ``1.0`` are equal values but different text; ``None`` and ``nan`` the same text but
    different values). ``exact`` is False when some instruction could only be keyed the slow way.
    """

    __slots__ = ("instrs", "keys", "shape", "reps", "first", "shape_form", "form_reps", "form_first",
                 "wait_cnt", "wait_flat", "exact")

    def __init__(self) -> None:
        self.instrs: list = []          # the instructions indexed, in order (the same objects)
        self.keys: list = []            # [n_shapes] shape key
        self.shape = array("q")         # [n] shape id
        self.reps: list = []            # [n_shapes] first instruction of each shape
        self.first = array("q")         # [n_shapes] its index
        self.shape_form = array("q")    # [n_shapes] form id
        self.form_reps: list = []       # [n_forms] first instruction of each form
        self.form_first = array("q")    # [n_forms] the shape it came from
        self.wait_cnt = array("q")      # [n] waits per instruction
        self.wait_flat = array("q")     # (semaphore, value) pairs, flattened
        self.exact = True

    def matches(self, instrs: list, identical: bool = False) -> bool:
        """Whether the index still describes ``instrs``: the same list of instructions, element for element
        (``identical``: the same objects; otherwise equal ones, which the simulator cannot tell apart)."""
        mine = self.instrs
        if len(mine) != len(instrs):
            return False
        return not any(map(is_not, mine, instrs)) if identical else mine == instrs

    @classmethod
    def build(cls, instrs: list, label=None) -> "ShapeIndex":
        """The index of a whole list, in C-level passes. ``label(i)`` names instruction i in errors."""
        n = len(instrs)
        idx = cls()
        memo: dict = {}
        try:
            # a lazy stream of keys: only each shape's first key is kept (in the memo), the others are
            # freed at once, so orjson's output buffers are reused instead of piling up
            vals = map(call, map(_SHAPE_VALUES.__getitem__, map(type, instrs)), instrs)
            keys = zip(map(type, instrs), *_tee_dump(vals))
            firsts = np.frombuffer(array("q", map(memo.setdefault, keys, range(n))), np.int64)
        except _KEY_ERRORS:
            memo = {}
            slow = [_slow_key(ins, False) for ins in instrs]
            firsts = np.frombuffer(array("q", map(memo.setdefault, slow, range(n))), np.int64)
            idx.exact = False
        is_first = firsts == np.arange(n)
        rank = np.cumsum(is_first) - 1
        shape = rank[firsts] if n else np.zeros(0, np.int64)
        first = np.flatnonzero(is_first)
        reps = [instrs[i] for i in first.tolist()]
        shape_form, form_first = _group([_form_key(r) for r in reps])
        idx.instrs = list(instrs)
        idx.keys = list(memo)  # in order of first appearance: shape order
        idx.shape = _int_array(shape)
        idx.reps = reps
        idx.first = _int_array(first)
        idx.shape_form = _int_array(shape_form)
        idx.form_reps = [reps[k] for k in form_first.tolist()]
        idx.form_first = _int_array(form_first)
        idx.wait_cnt, idx.wait_flat = _flat_waits(instrs, label or (lambda i: f"instruction #{i}"))
        return idx


def _tee_dump(vals):
    """(values, their orjson bytes) as two lazy streams in step."""
    a, b = tee(vals)
    return a, map(_dump_values, b)


def _int_array(a: np.ndarray) -> array:
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, np.int64).tobytes())
    return out


def _group(keys: list) -> tuple[np.ndarray, np.ndarray]:
    """(group id of each key, index of each group's first key), groups of equal keys."""
    n = len(keys)
    firsts = _first_of_key(keys, n)
    is_first = firsts == np.arange(n)
    rank = np.cumsum(is_first) - 1
    return (rank[firsts] if n else np.zeros(0, np.int64)), np.flatnonzero(is_first)


def _first_of_key(keys: list, n: int) -> np.ndarray:
    """For each instruction, the index of the first instruction with an equal key."""
    memo: dict = {}
    return np.frombuffer(array("q", map(memo.setdefault, keys, range(n))), np.int64)


def _flat_waits(instrs: list, label) -> tuple[array, array]:
    waits = list(map(_WAITS, instrs))
    counts = array("q", map(len, waits))
    if not set(map(len, chain.from_iterable(waits))) <= {2}:
        bad = next(i for i, w in enumerate(waits) if any(len(p) != 2 for p in w))
        raise ProgramError(f"{label(bad)}: waits must be (semaphore, value) pairs, got {waits[bad]!r}")
    flat = array("q")
    flat.frombytes(np.fromiter(chain.from_iterable(chain.from_iterable(waits)), np.int64,
                               2 * sum(counts)).tobytes())
    return counts, flat


def program_columns(program) -> Columns:
    with gc_paused():
        return _program_columns(program)


def _copy(a: array) -> np.ndarray:
    # a copy: the index's arrays keep growing as instructions are added, which a view would forbid
    return np.frombuffer(a, np.int64).copy() if len(a) else np.zeros(0, np.int64)


def _program_columns(program) -> Columns:
    idx = program.shape_index()
    n = len(idx.instrs)
    shape = _copy(idx.shape)
    first = _copy(idx.first)
    shape_form = _copy(idx.shape_form)
    form_first = _copy(idx.form_first)
    form_reps = list(idx.form_reps)
    form = shape_form[shape]

    counts = _copy(idx.wait_cnt)
    wait_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=wait_ptr[1:])
    flat = _copy(idx.wait_flat)

    # per-form signals, ops and streams, broadcast to the instructions
    s_sem: list[int] = []
    s_val: list[int] = []
    s_set: list[bool] = []
    s_cnt, s_op, s_stream = [], [], []
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
    sig_counts = s_cnt_a[form]
    sig_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(sig_counts, out=sig_ptr[1:])
    # entry j of instruction i is entry j of its form
    src = np.repeat(s_ptr[form] - sig_ptr[:-1], sig_counts) + np.arange(int(sig_ptr[-1]), dtype=np.int64)
    sig_sem = np.asarray(s_sem, np.int64)[src]
    sig_val = np.asarray(s_val, np.int64)[src]
    sig_set = np.asarray(s_set, np.bool_)[src]
    return Columns(n=n, shape=shape, reps=list(idx.reps), first=first, shape_form=shape_form, form_reps=form_reps,
                   form=form, stream=np.asarray(s_stream, np.int64)[form], op=np.asarray(s_op, np.int64)[form],
                   wait_ptr=wait_ptr, wait_sem=flat[0::2].copy(), wait_val=flat[1::2].copy(), sig_ptr=sig_ptr,
                   sig_sem=sig_sem, sig_val=sig_val, sig_set=sig_set)


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
