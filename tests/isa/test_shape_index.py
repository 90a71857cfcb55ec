"""A Program's shape index is made once, when first needed, and kept while its list stays the same; a
Program whose list changed (an instruction added, a NEFF read back, a list handed to the
constructor, in-place edits) is indexed again, so the columns - and everything simulate() derives
from them - describe the list as it is."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trnscope import hw
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.isa import Alu, Memset, Program, ProgramError, TensorTensor, neff, sbuf
from trnscope.isa.columns import ShapeIndex, program_columns
from trnscope.sim import simulate

SPEC = hw.TRN2


def _arrays(idx: ShapeIndex) -> dict:
    return {k: np.frombuffer(getattr(idx, k), np.int64).tolist()
            for k in ("shape", "first", "shape_form", "form_first", "wait_cnt", "wait_flat")}


def test_index_is_made_once_when_needed_and_kept():
    p = matmul_program(640, 384, 1152, "bfloat16", spec=SPEC)
    assert p._index is None  # building does not index
    kept = p.shape_index()
    assert kept.instrs == p.instructions and kept.exact
    bulk = ShapeIndex.build(p.instructions, p.label)
    assert _arrays(kept) == _arrays(bulk)
    assert kept.keys == bulk.keys
    assert all(a is b for a, b in zip(kept.reps, bulk.reps)) and len(kept.reps) == len(bulk.reps)
    assert all(a is b for a, b in zip(kept.form_reps, bulk.form_reps))
    # the kept index is what the columns and the NEFF hash come from: no rebuild
    program_columns(p)
    p.content_hash
    assert p.shape_index() is kept


def _timeline(p: Program):
    tl = simulate(p, SPEC, cache=False)
    return tl.start_ns.tolist(), tl.end_ns.tolist()


def _fresh_copy(p: Program) -> Program:
    return Program(p.name, p.target, list(p.tensors), list(p.queues), list(p.semaphores), list(p.ops),
                   list(p.instructions), dict(p.constants), dict(p.meta))


def test_edits_behind_the_program_are_seen():
    p = matmul_program(256, 256, 512, "bfloat16", spec=SPEC)
    program_columns(p)
    kept = p._index
    # swap two neighbours of different engines: the same length, another list
    i = next(k for k in range(len(p) - 1) if p.instructions[k].ENGINE is not p.instructions[k + 1].ENGINE)
    p.instructions[i], p.instructions[i + 1] = p.instructions[i + 1], p.instructions[i]
    cols = program_columns(p)
    assert p._index is not kept
    fresh = program_columns(_fresh_copy(p))
    for name in ("stream", "wait_ptr", "wait_sem", "wait_val", "sig_ptr", "sig_sem", "op"):
        assert np.array_equal(getattr(cols, name), getattr(fresh, name)), name
    assert _timeline(p) == _timeline(_fresh_copy(p))
    # a wait that can never be met: the rebuilt columns see it and validation names it
    j = len(p) - 1
    p.instructions[j] = dataclasses.replace(p.instructions[j], waits=((0, 10 ** 6),))
    with pytest.raises(ProgramError, match=f"instruction #{j}"):
        simulate(p, SPEC, cache=False)


def test_appends_behind_the_program_and_adds_are_seen():
    p = Program("a")
    t = sbuf(0, 128, (64,), "float32")
    p.add(Memset(out=t, value=1.0))
    assert program_columns(p).n == 1
    p.instructions.append(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, op=-1))
    assert program_columns(p).n == 2  # the kept index no longer matches: made again
    p.add(Memset(out=t, value=2.0))
    assert p._index is None  # an add drops it
    assert program_columns(p).n == 3
    assert _arrays(p._index) == _arrays(ShapeIndex.build(p.instructions))


def test_decoded_neff_simulates_as_written():
    p = matmul_program(256, 128, 512, "float32", spec=SPEC)
    q = neff.from_bytes(neff.to_bytes(p))
    assert q._index is None or not q._index.matches(q.instructions)  # built without add()
    assert _timeline(q) == _timeline(p)


def test_instructions_are_frozen_once_made():
    ins = Memset(out=sbuf(0, 128, (64,), "float32"), value=0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ins.waits = ((0, 1),)
    p = Program("f")
    s = p.semaphore("s")
    with p.origin("aten::fill"):
        p.add(ins, waits=((s, 1),), signals=((s, 1),))
    assert ins.waits == ((s, 1),) and ins.signals == ((s, 1),) and ins.op == 0


def test_malformed_waits_are_named_when_simulated_not_when_added():
    p = Program("w")
    p.semaphore("s")
    t = sbuf(0, 128, (64,), "float32")
    p.add(Memset(out=t, value=0.0))
    p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, waits=((0, 1, 2),)))
    assert p._index is None
    with pytest.raises(ProgramError, match=r"instruction #1 .*waits must be \(semaphore, value\) pairs"):
        program_columns(p)
