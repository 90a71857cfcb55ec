"""Static checks of a Program against a hardware spec. Every error names the instruction at fault.

Every rule is a function of an instruction's fields other than its waits (and, for a MATMUL, of the
LDWEIGHTS before it), so :func:`validate` checks each distinct instruction shape once
(``isa.columns``), the waits' semaphore ids as arrays, and deadlock freedom with the compiled
stream walk. When something is wrong it re-runs the per-instruction rules on the first offending
instruction, so the error is exactly the one ``_validate_reference`` - the same rules as a plain
loop over the instructions, kept as the specification - raises.
"""

from __future__ import annotations

from operator import attrgetter, call

import numpy as np

from ..hw import HardwareSpec
from .ap import AP, Space
from .columns import Columns, program_columns
from .errors import ProgramError
from .instructions import (
    Activation, BnAggr, BnStats, Dma, DmaGather, DmaScatter, Instruction, LoadStationary, MultiplyMoving,
    Gather, PartitionReduce, Random, Select, SemaphoreSet, TensorCopy, TensorReduce, TensorScalar, TensorScan, TensorTensor,
    TensorTranspose,
)
from .order import _execution_order_reference, execution_order
from .program import Program


RANDOM_DISTRIBUTIONS = ("uniform", "normal", "bernoulli", "exponential")


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
    of where its access patterns lie (bounds, PSUM banks): :func:`validate` does those as arrays."""
    nsem, nq, nops = len(program.semaphores), len(program.queues), len(program.ops)
    for sid, _ in (*(ins.waits if waits else ()), *ins.signals):
        if not 0 <= sid < nsem:
            raise ProgramError(f"{where}: semaphore {sid} is not declared (program has {nsem})")
    if isinstance(ins, SemaphoreSet) and not 0 <= ins.sem < nsem:
        raise ProgramError(f"{where}: semaphore {ins.sem} is not declared (program has {nsem})")
    if ins.op >= nops:
        raise ProgramError(f"{where}: framework op {ins.op} is not declared")
    if isinstance(ins, (Dma, DmaGather, DmaScatter)) and not 0 <= ins.queue < nq:
        raise ProgramError(f"{where}: DMA queue {ins.queue} is not declared (program has {nq})")
    if placement:
        for ap in (*ins.reads(), *ins.writes()):
            _check_ap(program, spec, ap, where)
    _check_engine_rules(ins, spec, where, stationary, placement)


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
    """class -> attrgetter of its class and operand fields (the class first: a tuple even with one operand)."""

    def __missing__(self, cls):
        names = (*cls.READS, *cls.WRITES)
        getter = self[cls] = attrgetter("__class__", *names) if names else _no_operands
        return getter


def _no_operands(ins: Instruction) -> tuple:
    return (type(ins),)


_OPERANDS = _Operands()
_PLACEMENT = attrgetter("_fid", "partitions", "start", "offset", "tensor", "pstride")
_SPACE_CODE = {Space.HBM: 0, Space.SBUF: 1, Space.PSUM: 2}
# beyond this, int64 arithmetic on offsets and strides could overflow: check those patterns one by one
_ARRAY_LIMIT = 1 << 40


def _bad_placements(program: Program, spec: HardwareSpec, cols: Columns) -> np.ndarray:
    """bool [n_shapes]: shapes with an access pattern out of bounds (what ``_check_ap`` and the PSUM bank
    rule check), evaluated for all patterns at once."""
    aps: list[AP] = []
    owner: list[int] = []
    for k, vals in enumerate(map(call, map(_OPERANDS.__getitem__, map(type, cols.reps)), cols.reps)):
        for v in vals[1:]:
            if isinstance(v, AP):
                aps.append(v)
                owner.append(k)
    # TensorE writes PSUM within one bank
    pe_out = [(k, rep.dst) for k, rep in enumerate(cols.reps) if isinstance(rep, (MultiplyMoving, TensorTranspose))
              and isinstance(rep.dst, AP) and rep.dst.space is Space.PSUM]
    bad = np.zeros(cols.n_shapes, np.bool_)
    if not aps:
        return bad
    forms = {}
    for ap in aps:
        if ap._fid not in forms:
            forms[ap._fid] = _form_facts(ap, spec)
    try:
        place = np.array(list(map(_PLACEMENT, aps)), np.int64).reshape(-1, 6)
        facts = np.array([forms[f] for f in place[:, 0].tolist()], np.int64).reshape(-1, 8)
        if np.abs(place).max() > _ARRAY_LIMIT or np.abs(facts).max() > _ARRAY_LIMIT:
            raise OverflowError
    except (OverflowError, TypeError, ValueError):
        for k, ap in zip(owner, aps):
            bad[k] |= not _ap_passes(program, spec, ap)
        for k, dst in pe_out:
            bad[k] |= (dst.offset + dst.extent_bytes() - 1) // spec.psum_bank_bytes != dst.offset // spec.psum_bank_bytes
        return bad
    _, parts, start, offset, tensor, pstride = place.T
    space, itemsize, dtype, ndims, empty, pos, neg, _ = facts.T
    wrong = (ndims > spec.ap_max_dims) | (empty != 0) | (parts < 1)
    hbm = space == 0
    if hbm.any():
        numel = np.array([t.numel for t in program.tensors] + [0], np.int64)
        tdtype = np.array([_DTYPE_CODE.setdefault(t.dtype, len(_DTYPE_CODE)) for t in program.tensors] + [-1],
                          np.int64)
        known = (tensor >= 0) & (tensor < len(program.tensors))
        t = np.where(known, tensor, len(program.tensors))
        pstep = pstride * (parts - 1)
        lo = offset + np.minimum(pstep, 0) + neg
        hi = offset + np.maximum(pstep, 0) + pos
        wrong |= hbm & (~known | (lo < 0) | (hi >= numel[t]) | (dtype != tdtype[t]))
    chip = ~hbm
    if chip.any():
        npart = spec.partitions
        start_ok = np.where(parts > 64, start == 0,
                            np.where(parts > 32, (start == 0) | (start == 64), np.isin(start, (0, 32, 64, 96))))
        capacity = np.where(space == 1, spec.sbuf_bytes_per_partition, spec.psum_bytes_per_partition)
        lowest = offset + neg * itemsize
        end = offset + (pos + 1) * itemsize
        wrong |= chip & ((parts > npart) | (start + parts > npart) | ~start_ok | (lowest < 0) | (end > capacity))
    np.logical_or.at(bad, np.asarray(owner, np.int64)[wrong], True)
    if pe_out:
        k = np.array([k for k, _ in pe_out], np.int64)
        off = np.array([d.offset for _, d in pe_out], np.int64)
        ext = np.array([d.extent_bytes() for _, d in pe_out], np.int64)
        bank = spec.psum_bank_bytes
        np.logical_or.at(bad, k[(off + ext - 1) // bank != off // bank], True)
    return bad


_DTYPE_CODE: dict = {}  # DType -> small int, to compare dtypes as arrays


def _form_facts(ap: AP, spec: HardwareSpec) -> tuple:
    """(space, itemsize, dtype, ndims, empty, positive steps, negative steps, 0) of a pattern's form, in
    elements: what the bounds checks need besides the placement."""
    pos = sum(st * (sz - 1) for st, sz in ap.dims if st * (sz - 1) > 0)
    neg = sum(st * (sz - 1) for st, sz in ap.dims if st * (sz - 1) < 0)
    empty = any(sz < 1 for _, sz in ap.dims)
    code = _DTYPE_CODE.setdefault(ap.dtype, len(_DTYPE_CODE))
    return (_SPACE_CODE[ap.space], ap.dtype.itemsize, code, len(ap.dims), int(empty), pos, neg, 0)


def _ap_passes(program: Program, spec: HardwareSpec, ap: AP) -> bool:
    try:
        _check_ap(program, spec, ap, "")
    except ProgramError:
        return False
    return True


def _raise_for(program: Program, spec: HardwareSpec, cols: Columns, i: int) -> None:
    ls_at = np.flatnonzero(cols.form_mask(LoadStationary)[cols.form][:i])
    stationary = program.instructions[int(ls_at[-1])].src if len(ls_at) else None
    _check_instruction(program, spec, program.instructions[i], program.label(i), stationary)
    # the array checks and the per-instruction rules disagree: trust the plain rules
    _validate_reference(program, spec)


def _check_ap(program: Program, spec: HardwareSpec, ap: AP, where: str) -> None:
    if len(ap.dims) > spec.ap_max_dims:
        raise ProgramError(f"{where}: access pattern has {len(ap.dims)} free dims; the engines take at most "
                           f"{spec.ap_max_dims} (split the instruction)")
    if any(size < 1 for _, size in ap.dims) or ap.partitions < 1:
        raise ProgramError(f"{where}: access pattern {ap.describe()} has an empty dimension")
    if ap.space is Space.HBM:
        if not 0 <= ap.tensor < len(program.tensors):
            raise ProgramError(f"{where}: HBM tensor {ap.tensor} is not bound (program has {len(program.tensors)})")
        decl = program.tensors[ap.tensor]
        lo, hi = ap.element_span()
        if lo < 0 or hi >= decl.numel:
            raise ProgramError(f"{where}: access pattern {ap.describe()} reaches elements {lo}..{hi} of HBM tensor "
                               f"{decl.name!r} which has {decl.numel}")
        if ap.dtype != decl.dtype:
            raise ProgramError(f"{where}: dtype mismatch: pattern reads {decl.name!r} ({decl.dtype.value}) as "
                               f"{ap.dtype.value}")
        return
    if ap.partitions > spec.partitions:
        raise ProgramError(f"{where}: tile spans {ap.partitions} partitions; the maximum is {spec.partitions} "
                           f"(tile the partition dimension by 128)")
    if ap.start + ap.partitions > spec.partitions:
        raise ProgramError(f"{where}: partitions {ap.start}..{ap.start + ap.partitions - 1} run past partition "
                           f"{spec.partitions - 1}")
    if not _start_partition_ok(ap.start, ap.partitions):
        raise ProgramError(f"{where}: a tile of {ap.partitions} partitions cannot start at partition {ap.start} "
                           f"(>64 partitions start at 0; 33-64 at 0 or 64; <=32 at 0, 32, 64 or 96)")
    capacity = spec.sbuf_bytes_per_partition if ap.space is Space.SBUF else spec.psum_bytes_per_partition
    end = ap.offset + ap.extent_bytes()
    lowest = ap.offset + sum(min(stride, 0) * (size - 1) for stride, size in ap.dims) * ap.dtype.itemsize
    if lowest < 0 or end > capacity:
        name = "SBUF" if ap.space is Space.SBUF else "PSUM"
        raise ProgramError(f"{where}: {name} overflow: the tile needs bytes {lowest}..{end} of each partition "
                           f"but {name} has {capacity} per partition on {spec.name}; use smaller tiles")


def _start_partition_ok(start: int, count: int) -> bool:
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start in (0, 32, 64, 96)


def _same_shape(a: AP, b: AP) -> bool:
    return a.partitions == b.partitions and a.free_size == b.free_size


def _check_engine_rules(ins: Instruction, spec: HardwareSpec, where: str, stationary: AP | None,
                        placement: bool = True) -> None:
    if isinstance(ins, LoadStationary):
        if ins.src.space is not Space.SBUF:
            raise ProgramError(f"{where}: the stationary operand must be in SBUF")
        if ins.src.free_size > spec.gemm_stationary_fmax:
            raise ProgramError(f"{where}: stationary free size {ins.src.free_size} > {spec.gemm_stationary_fmax}")
    elif isinstance(ins, MultiplyMoving):
        if stationary is None:
            raise ProgramError(f"{where}: MATMUL with no LDWEIGHTS before it on TensorE")
        if ins.moving.space is not Space.SBUF:
            raise ProgramError(f"{where}: the moving operand must be in SBUF")
        if ins.moving.free_size > spec.gemm_moving_fmax:
            raise ProgramError(f"{where}: moving free size {ins.moving.free_size} > {spec.gemm_moving_fmax} "
                               f"(one PSUM bank holds 512 FP32 per partition)")
        if ins.moving.partitions != stationary.partitions:
            raise ProgramError(f"{where}: contraction mismatch: moving has {ins.moving.partitions} partitions, "
                               f"stationary {stationary.partitions}")
        if (ins.moving.dtype.itemsize == 4) != (stationary.dtype.itemsize == 4) or not ins.moving.dtype.is_float:
            raise ProgramError(f"{where}: dtype mismatch: moving {ins.moving.dtype.value} with stationary "
                               f"{stationary.dtype.value}; cast both to bf16 or both to fp32")
        _check_psum_out(ins.dst, spec, where, placement=placement)
        if ins.dst.partitions != stationary.free_size or ins.dst.free_size != ins.moving.free_size:
            raise ProgramError(f"{where}: output tile {ins.dst.shape} does not match stationary.T @ moving "
                               f"[{stationary.free_size}, {ins.moving.free_size}]")
    elif isinstance(ins, TensorTranspose):
        _check_psum_out(ins.dst, spec, where, fp32=False, placement=placement)
        if ins.dst.partitions != ins.src.free_size or ins.dst.free_size != ins.src.partitions:
            raise ProgramError(f"{where}: transpose of {ins.src.shape} cannot produce {ins.dst.shape}")
    elif isinstance(ins, TensorTensor):
        if not (_same_shape(ins.in0, ins.out) and _same_shape(ins.in1, ins.out)):
            raise ProgramError(f"{where}: shape mismatch {ins.in0.shape}, {ins.in1.shape} -> {ins.out.shape} "
                               f"(broadcast with zero strides)")
    elif isinstance(ins, (TensorScalar, Activation)):
        inp = ins.inp
        if not _same_shape(inp, ins.out):
            raise ProgramError(f"{where}: shape mismatch {inp.shape} -> {ins.out.shape}")
        scalars = (ins.scalar0, ins.scalar1) if isinstance(ins, TensorScalar) else (ins.scale, ins.bias)
        for s in scalars:
            if isinstance(s, AP) and (s.partitions != inp.partitions or s.free_size != 1):
                raise ProgramError(f"{where}: per-partition operand must be [{inp.partitions}, 1], got {s.shape}")
        if isinstance(ins, Activation) and ins.accum_out is not None and (
                ins.accum_out.partitions != inp.partitions or ins.accum_out.free_size != 1):
            raise ProgramError(f"{where}: accumulate output must be [{inp.partitions}, 1]")
    elif isinstance(ins, TensorReduce):
        reduced = 1
        for _, size in ins.inp.dims[len(ins.inp.dims) - ins.axes:]:
            reduced *= size
        if ins.axes < 1 or ins.axes > len(ins.inp.dims) or ins.out.free_size * reduced != ins.inp.free_size \
                or ins.out.partitions != ins.inp.partitions:
            raise ProgramError(f"{where}: reducing {ins.axes} innermost dims of {ins.inp.shape} cannot give "
                               f"{ins.out.shape}")
    elif isinstance(ins, (TensorCopy, TensorScan)):
        if not _same_shape(ins.inp, ins.out):
            raise ProgramError(f"{where}: shape mismatch {ins.inp.shape} -> {ins.out.shape}")
        if isinstance(ins, TensorScan) and ins.in1 is not None:
            if not _same_shape(ins.in1, ins.out) or ins.alu0 is None:
                raise ProgramError(f"{where}: a two-input scan needs in1 of shape {ins.out.shape} and alu0")
            if isinstance(ins.initial, AP) and (ins.initial.partitions != ins.inp.partitions
                                                or ins.initial.free_size != 1):
                raise ProgramError(f"{where}: the scan's initial value must be [{ins.inp.partitions}, 1]")
    elif isinstance(ins, Select):
        if not all(_same_shape(a, ins.out) for a in (ins.pred, ins.on_true, ins.on_false)):
            raise ProgramError(f"{where}: select operands must all have shape {ins.out.shape}")
    elif isinstance(ins, BnStats):
        if ins.inp.free_size > spec.bn_stats_fmax or ins.out.free_size not in (3, 6):
            raise ProgramError(f"{where}: bn_stats takes at most {spec.bn_stats_fmax} elements per partition and "
                               f"writes 3 (count, mean, M2) or 6 (those of the even and of the odd elements)")
    elif isinstance(ins, BnAggr):
        if ins.inp.free_size % 3 or ins.out.free_size != 2:
            raise ProgramError(f"{where}: bn_aggr reads bn_stats triples and writes 2 values (mean, var)")
    elif isinstance(ins, PartitionReduce):
        if ins.out.partitions != 1 or ins.out.free_size != ins.inp.free_size:
            raise ProgramError(f"{where}: partition reduce of {ins.inp.shape} writes [1, {ins.inp.free_size}]")
    elif isinstance(ins, Gather):
        _check_gather(ins, where)
    elif isinstance(ins, Random):
        if ins.dist not in RANDOM_DISTRIBUTIONS or not ins.out.dtype.is_float:
            raise ProgramError(f"{where}: rng draws {', '.join(RANDOM_DISTRIBUTIONS)} into a float tile, got "
                               f"{ins.dist!r} into {ins.out.dtype.value}")
    elif isinstance(ins, Dma):
        _check_dma(ins, where)
    elif isinstance(ins, (DmaGather, DmaScatter)):
        if not ins.index.dtype.name.startswith(("int", "uint")):
            raise ProgramError(f"{where}: the index tile must be an integer tile")
        tile = ins.dst if isinstance(ins, DmaGather) else ins.src
        if tile.partitions != ins.index.partitions or tile.free_size != ins.table.free_size * ins.index.free_size:
            raise ProgramError(f"{where}: indirect DMA moves rows of {ins.table.free_size} elements into a "
                               f"{tile.shape} tile indexed by {ins.index.shape}")
    if ins.engine.value in ("vector", "scalar", "gpsimd"):
        for ap in (*ins.reads(), *ins.writes()):
            limit = spec.vector_free_max_psum if ap.space is Space.PSUM else spec.vector_free_max_sbuf
            if ap.free_size > limit:
                raise ProgramError(f"{where}: free size {ap.free_size} exceeds the engine limit {limit} in "
                                   f"{ap.space.value.upper()}")
            if ap.space is Space.HBM:
                raise ProgramError(f"{where}: compute engines cannot access HBM; DMA the data into SBUF first")


def _check_psum_out(ap: AP, spec: HardwareSpec, where: str, fp32: bool = True, placement: bool = True) -> None:
    if ap.space is not Space.PSUM:
        raise ProgramError(f"{where}: TensorE writes only PSUM")
    if fp32 and ap.dtype.value != "float32":
        raise ProgramError(f"{where}: dtype mismatch: matmul results accumulate in FP32 PSUM, got {ap.dtype.value}")
    if not placement:
        return
    bank = ap.offset // spec.psum_bank_bytes
    if (ap.offset + ap.extent_bytes() - 1) // spec.psum_bank_bytes != bank:
        raise ProgramError(f"{where}: the output crosses a PSUM bank boundary (banks are {spec.psum_bank_bytes} "
                           f"bytes per partition)")


def _check_gather(ins: Gather, where: str) -> None:
    """nc_n_gather's rules: SBUF tiles of one partition count, an integer index tile as large as the
    output, the data's dtype out (it moves elements, it does not cast)."""
    if any(ap.space is not Space.SBUF for ap in (ins.data, ins.index, ins.out)):
        raise ProgramError(f"{where}: GpSimdE gathers between SBUF tiles only")
    if not ins.index.dtype.name.startswith(("int", "uint")):
        raise ProgramError(f"{where}: the gather index must be an integer tile, got {ins.index.dtype.value}")
    if not ins.data.partitions == ins.index.partitions == ins.out.partitions or \
            ins.out.free_size != ins.index.free_size or ins.out.dtype != ins.data.dtype:
        raise ProgramError(f"{where}: a gather writes one {ins.data.dtype.value} element per index on each partition: "
                           f"data {ins.data.shape}, index {ins.index.shape}, out {ins.out.shape} {ins.out.dtype.value}")


def _check_dma(ins: Dma, where: str) -> None:
    src, dst = ins.src, ins.dst
    if ins.transpose:
        if dst.partitions != src.free_size or dst.free_size != src.partitions:
            raise ProgramError(f"{where}: DMA transpose of {src.shape} cannot produce {dst.shape}")
    elif src.num_elements != dst.num_elements:
        raise ProgramError(f"{where}: DMA moves {src.num_elements} elements into a pattern of {dst.num_elements}")
    if src.dtype != dst.dtype and not (src.dtype.is_float and dst.dtype.is_float) and not (
            not src.dtype.is_float and not dst.dtype.is_float):
        raise ProgramError(f"{where}: dtype mismatch: DMA casts between float types or between integer types only "
                           f"({src.dtype.value} -> {dst.dtype.value}); cast on VectorE instead")
