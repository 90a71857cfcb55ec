"""Static checks of a Program against a hardware spec. Every error names the instruction at fault.

The rules of an instruction's form (shapes, dtypes, spaces) are its class's ``check`` (isa.instructions);
the rules on where an access pattern lies (bounds, partitions, capacity, PSUM banks) are written once
here, in :data:`_PLACEMENT_RULES`, over numbers that are either one pattern's (plain ints: the
per-instruction rules and their messages) or all patterns' at once (int64 arrays).

Every rule is a function of an instruction's fields other than its waits (and, for a MATMUL, of the
LDWEIGHTS before it), so :func:`validate` checks each distinct instruction form once
(``isa.columns``), the placements of all patterns as arrays, the waits' semaphore ids as arrays, and
deadlock freedom with the compiled stream walk. When something is wrong it re-runs the
per-instruction rules on the first offending instruction, so the error is exactly the one
``_validate_reference`` - the same rules as a plain loop over the instructions, kept as the
specification - raises.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable, NamedTuple

import numpy as np

from ..hw import HardwareSpec
from .ap import AP, Space
from .columns import Columns, program_columns
from .errors import ProgramError
from .instructions import RANDOM_DISTRIBUTIONS, DmaInstruction, Engine, Instruction, LoadStationary, MultiplyMoving, \
    SemaphoreSet
from .order import _execution_order_reference, execution_order
from .program import Program

__all__ = ["RANDOM_DISTRIBUTIONS", "validate"]


def validate(program: Program, spec: HardwareSpec, *, columns: Columns | None = None) -> None:
    """Raise :class:`ProgramError` for the first invalid instruction; also proves deadlock freedom.

    ``columns``: the Program's :func:`~trnscope.isa.columns.program_columns`, when the caller has them.
    """
    cols = columns if columns is not None else program_columns(program)
    bad = _first_invalid(program, spec, cols)
    if bad is not None:
        _raise_for(program, spec, cols, bad)
    execution_order(program, columns=cols)


def _validate_reference(program: Program, spec: HardwareSpec) -> None:
    """The rules instruction by instruction, in program order (what :func:`validate` must agree with)."""
    stationary: AP | None = None
    for i, ins in enumerate(program.instructions):
        _check_instruction(program, spec, ins, program.label(i), stationary)
        if isinstance(ins, LoadStationary):
            stationary = ins.src
    _execution_order_reference(program)


def _check_instruction(program: Program, spec: HardwareSpec, ins: Instruction, where: str,
                       stationary: AP | None, waits: bool = True, placement: bool = True) -> None:
    """The rules for one instruction. ``waits``/``placement`` False leave out the checks of its waits and
    of where its access patterns lie: :func:`validate` does those as arrays."""
    nsem, nq, nops = len(program.semaphores), len(program.queues), len(program.ops)
    for sid, _ in (*(ins.waits if waits else ()), *ins.signals):
        if not 0 <= sid < nsem:
            raise ProgramError(f"{where}: semaphore {sid} is not declared (program has {nsem})")
    if isinstance(ins, SemaphoreSet) and not 0 <= ins.sem < nsem:
        raise ProgramError(f"{where}: semaphore {ins.sem} is not declared (program has {nsem})")
    if ins.op >= nops:
        raise ProgramError(f"{where}: framework op {ins.op} is not declared")
    if isinstance(ins, DmaInstruction) and not 0 <= ins.queue < nq:
        raise ProgramError(f"{where}: DMA queue {ins.queue} is not declared (program has {nq})")
    if placement:
        getter, one_bank = _OPERANDS[type(ins)]
        for v, bank in zip(getter(ins)[1:], one_bank):
            if isinstance(v, AP):
                _check_ap(program, spec, v, where, bank)
    try:
        ins.check(spec, stationary)
        _check_engine_limits(ins, spec)
    except ProgramError as exc:
        raise ProgramError(f"{where}: {exc}") from None


_LIMITED_ENGINES = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def _check_engine_limits(ins: Instruction, spec: HardwareSpec) -> None:
    """What VectorE, ScalarE and GpSimdE take, whatever the instruction: SBUF/PSUM tiles of a bounded
    free size."""
    if ins.engine not in _LIMITED_ENGINES:
        return
    for ap in (*ins.reads(), *ins.writes()):
        limit = spec.vector_free_max_psum if ap.space is Space.PSUM else spec.vector_free_max_sbuf
        if ap.free_size > limit:
            raise ProgramError(f"free size {ap.free_size} exceeds the engine limit {limit} in "
                               f"{ap.space.value.upper()}")
        if ap.space is Space.HBM:
            raise ProgramError("compute engines cannot access HBM; DMA the data into SBUF first")


def _first_invalid(program: Program, spec: HardwareSpec, cols: Columns) -> int | None:
    """Index of the first instruction that breaks a rule, or None."""
    candidates = []
    nsem = len(program.semaphores)
    hit = np.flatnonzero((cols.wait_sem < 0) | (cols.wait_sem >= nsem))
    if len(hit):
        candidates.append(int(np.searchsorted(cols.wait_ptr, hit[0], side="right")) - 1)

    # rules on an instruction's form: each form once (a MATMUL once per stationary form before it)
    is_mm = cols.form_mask(MultiplyMoving)
    bad_form = np.zeros(cols.n_forms, np.bool_)
    for k, rep in enumerate(cols.form_reps):
        if not is_mm[k]:
            bad_form[k] = not _form_passes(program, spec, rep, None)
    _first_hit(bad_form[cols.form], candidates)
    mm_at = np.flatnonzero(is_mm[cols.form])
    if len(mm_at):
        ls_at = np.flatnonzero(cols.form_mask(LoadStationary)[cols.form])
        prev = np.searchsorted(ls_at, mm_at) - 1
        stat_form = cols.form[ls_at[np.maximum(prev, 0)]] if len(ls_at) else np.zeros(len(mm_at), np.int64)
        stat_form = np.where(prev >= 0, stat_form, -1)
        pair = cols.form[mm_at] * (cols.n_forms + 1) + (stat_form + 1)
        pairs, inverse = np.unique(pair, return_inverse=True)
        bad_pair = np.zeros(len(pairs), np.bool_)
        for j, code in enumerate(pairs.tolist()):
            k, st = divmod(code, cols.n_forms + 1)
            stationary = cols.form_reps[st - 1].src if st else None
            bad_pair[j] = not _form_passes(program, spec, cols.form_reps[k], stationary)
        hit = np.flatnonzero(bad_pair[inverse.reshape(-1)])
        if len(hit):
            candidates.append(int(mm_at[hit[0]]))

    # where every access pattern lies: each shape's patterns, as arrays
    _first_hit(_bad_placements(program, spec, cols)[cols.shape], candidates)
    return min(candidates) if candidates else None


def _first_hit(mask: np.ndarray, candidates: list) -> None:
    hit = np.flatnonzero(mask)
    if len(hit):
        candidates.append(int(hit[0]))


def _form_passes(program: Program, spec: HardwareSpec, ins: Instruction, stationary: AP | None) -> bool:
    try:
        _check_instruction(program, spec, ins, "", stationary, waits=False, placement=False)
    except ProgramError:
        return False
    return True


class _Operands(dict):
    """class -> (attrgetter of its class and operand fields, READS then WRITES: always a tuple; for each
    operand whether it must lie within one PSUM bank)."""

    def __missing__(self, cls):
        names = (*cls.READS, *cls.WRITES)
        getter = attrgetter("__class__", *names) if names else _no_operands
        entry = self[cls] = (getter, tuple(n in cls.ONE_BANK for n in names))
        return entry


def _no_operands(ins: Instruction) -> tuple:
    return (type(ins),)


_OPERANDS = _Operands()
_PLACEMENT = attrgetter("_fid", "partitions", "start", "offset", "tensor", "pstride")
_SPACE_CODE = {Space.HBM: 0, Space.SBUF: 1, Space.PSUM: 2}
_HBM, _SBUF, _PSUM = 0, 1, 2
# beyond this, int64 arithmetic on offsets and strides could overflow: check those patterns one by one
_ARRAY_LIMIT = 1 << 40
_DTYPE_CODE: dict = {}  # DType -> small int, to compare dtypes as arrays


class _Placed(NamedTuple):
    """Where access patterns lie, as numbers: one pattern's (ints) or many patterns' (int64 arrays)."""
    space: Any      # 0 HBM, 1 SBUF, 2 PSUM
    itemsize: Any
    dtype: Any      # _DTYPE_CODE of the pattern's dtype
    ndims: Any
    empty: Any      # 1 when a free dim has size < 1
    pos: Any        # sum of the positive steps stride * (size - 1) of the free dims, in elements
    neg: Any        # sum of the negative ones
    parts: Any
    start: Any
    offset: Any
    pstride: Any
    known: Any      # 1 when ``tensor`` is a bound HBM tensor
    numel: Any      # that tensor's elements (0 when unbound)
    tdtype: Any     # its _DTYPE_CODE (-1 when unbound)
    one_bank: Any   # 1 for a TensorE output that must lie within one PSUM bank


def _form_facts(ap: AP) -> tuple[int, int, int, int, int, int, int]:
    """(space, itemsize, dtype, ndims, empty, positive steps, negative steps) of a pattern's form."""
    pos = sum(st * (sz - 1) for st, sz in ap.dims if st * (sz - 1) > 0)
    neg = sum(st * (sz - 1) for st, sz in ap.dims if st * (sz - 1) < 0)
    empty = any(sz < 1 for _, sz in ap.dims)
    code = _DTYPE_CODE.setdefault(ap.dtype, len(_DTYPE_CODE))
    return (_SPACE_CODE[ap.space], ap.dtype.itemsize, code, len(ap.dims), int(empty), pos, neg)


def _placed_one(program: Program, ap: AP, one_bank: bool) -> _Placed:
    known = int(0 <= ap.tensor < len(program.tensors))
    decl = program.tensors[ap.tensor] if known else None
    numel = decl.numel if decl is not None else 0
    tdtype = _DTYPE_CODE.setdefault(decl.dtype, len(_DTYPE_CODE)) if decl is not None else -1
    return _Placed(*_form_facts(ap), ap.partitions, ap.start, ap.offset, ap.pstride, known, numel, tdtype,
                   int(one_bank))


# --- the placement rules ------------------------------------------------------------------------------
# Each rule: (where it is broken, given _Placed and the spec; its message, given the pattern). The
# predicates use only operators that mean the same on ints and on int64 arrays (&, |, comparisons,
# + - * //; never ``not``/``and``/``or``/``~``), so one definition serves both forms.

def _hbm_span(p: _Placed) -> tuple[Any, Any]:
    """(lowest, highest) element of its HBM tensor a pattern touches."""
    pstep = p.pstride * (p.parts - 1)
    return p.offset + pstep * (pstep < 0) + p.neg, p.offset + pstep * (pstep > 0) + p.pos


def _start_ok(p: _Placed) -> Any:
    """>64 partitions start at 0; 33-64 at 0 or 64; <=32 at 0, 32, 64 or 96."""
    return (((p.parts > 64) & (p.start == 0))
            | ((p.parts > 32) & (p.parts <= 64) & ((p.start == 0) | (p.start == 64)))
            | ((p.parts <= 32) & (p.start >= 0) & (p.start <= 96) & (p.start % 32 == 0)))


def _chip_bytes(p: _Placed) -> tuple[Any, Any]:
    """(lowest byte, end byte) a pattern reaches in each partition."""
    return p.offset + p.neg * p.itemsize, p.offset + (p.pos + 1) * p.itemsize


def _capacity(p: _Placed, spec: HardwareSpec) -> Any:
    return spec.sbuf_bytes_per_partition * (p.space == _SBUF) + spec.psum_bytes_per_partition * (p.space == _PSUM)


def _crosses_bank(p: _Placed, spec: HardwareSpec) -> Any:
    bank = spec.psum_bank_bytes
    return (p.offset + (p.pos + 1) * p.itemsize - 1) // bank != p.offset // bank


def _space_name(ap: AP) -> str:
    return "SBUF" if ap.space is Space.SBUF else "PSUM"


_Predicate = Callable[[_Placed, HardwareSpec], Any]
_Message = Callable[[AP, _Placed, Program, HardwareSpec], str]
_PLACEMENT_RULES: tuple[tuple[_Predicate, _Message], ...] = (
    (lambda p, spec: p.ndims > spec.ap_max_dims,
     lambda ap, p, prog, spec: f"access pattern has {len(ap.dims)} free dims; the engines take at most "
                               f"{spec.ap_max_dims} (split the instruction)"),
    (lambda p, spec: (p.empty != 0) | (p.parts < 1),
     lambda ap, p, prog, spec: f"access pattern {ap.describe()} has an empty dimension"),
    (lambda p, spec: (p.space == _HBM) & (p.known == 0),
     lambda ap, p, prog, spec: f"HBM tensor {ap.tensor} is not bound (program has {len(prog.tensors)})"),
    (lambda p, spec: (p.space == _HBM) & (p.known != 0) & ((_hbm_span(p)[0] < 0) | (_hbm_span(p)[1] >= p.numel)),
     lambda ap, p, prog, spec: f"access pattern {ap.describe()} reaches elements {_hbm_span(p)[0]}.."
                               f"{_hbm_span(p)[1]} of HBM tensor {prog.tensors[ap.tensor].name!r} which has "
                               f"{p.numel}"),
    (lambda p, spec: (p.space == _HBM) & (p.known != 0) & (p.dtype != p.tdtype),
     lambda ap, p, prog, spec: f"dtype mismatch: pattern reads {prog.tensors[ap.tensor].name!r} "
                               f"({prog.tensors[ap.tensor].dtype.value}) as {ap.dtype.value}"),
    (lambda p, spec: (p.space != _HBM) & (p.parts > spec.partitions),
     lambda ap, p, prog, spec: f"tile spans {ap.partitions} partitions; the maximum is {spec.partitions} "
                               f"(tile the partition dimension by 128)"),
    (lambda p, spec: (p.space != _HBM) & (p.start + p.parts > spec.partitions),
     lambda ap, p, prog, spec: f"partitions {ap.start}..{ap.start + ap.partitions - 1} run past partition "
                               f"{spec.partitions - 1}"),
    (lambda p, spec: (p.space != _HBM) & (_start_ok(p) == 0),
     lambda ap, p, prog, spec: f"a tile of {ap.partitions} partitions cannot start at partition {ap.start} "
                               f"(>64 partitions start at 0; 33-64 at 0 or 64; <=32 at 0, 32, 64 or 96)"),
    (lambda p, spec: (p.space != _HBM) & ((_chip_bytes(p)[0] < 0) | (_chip_bytes(p)[1] > _capacity(p, spec))),
     lambda ap, p, prog, spec: f"{_space_name(ap)} overflow: the tile needs bytes {_chip_bytes(p)[0]}.."
                               f"{_chip_bytes(p)[1]} of each partition but {_space_name(ap)} has "
                               f"{_capacity(p, spec)} per partition on {spec.name}; use smaller tiles"),
    (lambda p, spec: (p.one_bank != 0) & (p.space == _PSUM) & _crosses_bank(p, spec),
     lambda ap, p, prog, spec: f"the output crosses a PSUM bank boundary (banks are {spec.psum_bank_bytes} "
                               f"bytes per partition)"),
)


def _check_ap(program: Program, spec: HardwareSpec, ap: AP, where: str, one_bank: bool = False) -> None:
    p = _placed_one(program, ap, one_bank)
    for broken, message in _PLACEMENT_RULES:
        if broken(p, spec):
            raise ProgramError(f"{where}: {message(ap, p, program, spec)}")


def _ap_passes(program: Program, spec: HardwareSpec, ap: AP, one_bank: bool) -> bool:
    try:
        _check_ap(program, spec, ap, "", one_bank)
    except ProgramError:
        return False
    return True


def _bad_placements(program: Program, spec: HardwareSpec, cols: Columns) -> np.ndarray:
    """bool [n_shapes]: shapes with an access pattern that breaks a placement rule, all patterns at once."""
    aps: list[AP] = []
    owner: list[int] = []
    banks: list[bool] = []
    for k, rep in enumerate(cols.reps):
        getter, one_bank = _OPERANDS[type(rep)]
        for v, bank in zip(getter(rep)[1:], one_bank):
            if isinstance(v, AP):
                aps.append(v)
                owner.append(k)
                banks.append(bank)
    bad = np.zeros(cols.n_shapes, np.bool_)
    if not aps:
        return bad
    forms = {}
    for ap in aps:
        if ap._fid not in forms:
            forms[ap._fid] = _form_facts(ap)
    try:
        place = np.array(list(map(_PLACEMENT, aps)), np.int64).reshape(-1, 6)
        facts = np.array([forms[f] for f in place[:, 0].tolist()], np.int64).reshape(-1, 7)
        if np.abs(place).max() > _ARRAY_LIMIT or np.abs(facts).max() > _ARRAY_LIMIT:
            raise OverflowError
    except (OverflowError, TypeError, ValueError):
        for k, ap, bank in zip(owner, aps, banks):
            bad[k] |= not _ap_passes(program, spec, ap, bank)
        return bad
    _, parts, start, offset, tensor, pstride = place.T
    space, itemsize, dtype, ndims, empty, pos, neg = facts.T
    n_t = len(program.tensors)
    numel = np.array([t.numel for t in program.tensors] + [0], np.int64)
    tdtype = np.array([_DTYPE_CODE.setdefault(t.dtype, len(_DTYPE_CODE)) for t in program.tensors] + [-1], np.int64)
    known = (tensor >= 0) & (tensor < n_t)
    t = np.where(known, tensor, n_t)
    p = _Placed(space, itemsize, dtype, ndims, empty, pos, neg, parts, start, offset, pstride, known.astype(np.int64),
                numel[t], tdtype[t], np.asarray(banks, np.int64))
    wrong = np.zeros(len(aps), np.bool_)
    for broken, _ in _PLACEMENT_RULES:
        wrong |= broken(p, spec)
    np.logical_or.at(bad, np.asarray(owner, np.int64)[wrong], True)
    return bad


def _raise_for(program: Program, spec: HardwareSpec, cols: Columns, i: int) -> None:
    ls_at = np.flatnonzero(cols.form_mask(LoadStationary)[cols.form][:i])
    last = program.instructions[int(ls_at[-1])] if len(ls_at) else None
    stationary = last.src if isinstance(last, LoadStationary) else None
    _check_instruction(program, spec, program.instructions[i], program.label(i), stationary)
    # the array checks and the per-instruction rules disagree: trust the plain rules
    _validate_reference(program, spec)
