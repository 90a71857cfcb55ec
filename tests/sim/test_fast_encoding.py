"""The columnar fast path (isa.columns, shape/form grouping, compiled ordering) gives exactly what the
plain per-instruction reference gives: the same encoded arrays, the same timeline, the same order and
the same error message for every kind of invalid program."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from trnscope import hw
from trnscope.compiler.builder import KernelBuilder
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.compiler.lowering import OpCall, lower
from trnscope.compiler.meta import TensorMeta
from trnscope.isa import (
    AP, Act, Activation, Alu, DeadlockError, Dma, LoadStationary, Memset, MultiplyMoving, Program, ProgramError,
    SemaphoreSet, SemaphoreWait, Space, TensorCopy, TensorReduce, TensorScalar, TensorTensor, execution_order, hbm,
    psum, sbuf, validate,
)
from trnscope.isa.columns import program_columns
from trnscope.isa.order import _execution_order_reference
from trnscope.isa.validate import _validate_reference
from trnscope.sim import simulate
from trnscope.sim.core import run_core
from trnscope.sim.encode import encode, encode_reference

SPEC = hw.TRN2


def _meta(*shape, dtype="bfloat16", stride=None):
    m = TensorMeta.contiguous(shape, dtype)
    return m if stride is None else TensorMeta(m.shape, tuple(stride), m.dtype)


def _lowered(name, inputs, outputs, attrs=None):
    return lower(OpCall.make(name, inputs, outputs, attrs), SPEC)


def _broadcast_add():
    # a [512, 768] + a [768] row vector broadcast by a zero stride
    return _lowered("aten::add.Tensor", [_meta(512, 768), _meta(512, 768, stride=(0, 1))], [_meta(512, 768)])


def _sum_rows():
    return _lowered("aten::sum.dim_IntList", [_meta(384, 1000, dtype="float32")], [_meta(384, dtype="float32")],
                    {"dim": [1], "keepdim": False})


def _softmax():
    return _lowered("aten::_softmax", [_meta(300, 1000)], [_meta(300, 1000)], {"dim": -1, "half_to_float": False})


def _rms_norm():
    return _lowered("aten::_fused_rms_norm", [_meta(256, 2048), _meta(2048)],
                    [_meta(256, 2048), _meta(256, 1, dtype="float32")], {"normalized_shape": [2048], "eps": 1e-6})


def _dma_heavy():
    """Many small strided transfers on several queues, with a write-back: DMA-bound, many descriptors."""
    p = Program("dma_heavy")
    x = p.tensor("x", (1024, 96), "float32")
    o = p.tensor("o", (96, 1024), "float32", "output")
    kb = KernelBuilder(p, SPEC)
    qs = [kb.queue(f"qSyncIO{i}", "input") for i in range(3)]
    qo = kb.queue("qOut", "output")
    with p.origin("aten::t"):
        for r in range(0, 1024, 128):
            t = kb.tile(128, (96,), "float32")
            kb.dma(qs[r // 128 % 3], hbm(x, 128, 96, [(1, 96)], "float32", offset=r * 96), t)
            kb.emit(TensorScalar(inp=t, out=t, alu0=Alu.MULTIPLY, scalar0=2.0))
            kb.dma(qo, t, hbm(o, 128, 1, [(1024, 96)], "float32", offset=r))
            kb.release(t)
    return p


def _hand_written():
    """Every engine, per-partition scalar operands, a semaphore set, a sync wait, a reduction."""
    p = Program("hand")
    done = p.semaphore("done")
    gate = p.semaphore("gate")
    with p.origin("aten::mix"):
        a = sbuf(0, 128, (256,), "bfloat16")
        b = sbuf(0, 128, (256,), "bfloat16", offset=512)
        col = sbuf(0, 128, (1,), "float32", offset=1024)
        p.add(Memset(out=a, value=0.0, signals=((done, 1),)))
        p.add(Memset(out=b, value=1.0, signals=((done, 1),)))
        p.add(TensorReduce(alu=Alu.ADD, inp=b, out=col, waits=((done, 2),), signals=((done, 1),)))
        p.add(TensorScalar(inp=a, out=a, alu0=Alu.ADD, scalar0=col, waits=((done, 3),), signals=((done, 1),)))
        p.add(Activation(func=Act.EXP, inp=a, out=b, scale=col, waits=((done, 4),), signals=((done, 1),)))
        p.add(TensorCopy(inp=b, out=a, on=Activation.ENGINE, waits=((done, 5),), signals=((done, 1),)))
        p.add(SemaphoreSet(sem=gate, value=7, waits=((done, 6),)))
        p.add(SemaphoreWait(waits=((gate, 7),), signals=((done, 1),)))
        p.add(TensorTensor(alu=Alu.MAX, in0=a, in1=b, out=a, waits=((done, 7),)))
    return p


PROGRAMS = {
    "matmul_bf16": lambda: matmul_program(640, 384, 1152, "bfloat16", spec=SPEC),
    "matmul_fp32": lambda: matmul_program(256, 256, 512, "float32", spec=SPEC),
    "broadcast_add": _broadcast_add,
    "sum_rows": _sum_rows,
    "softmax": _softmax,
    "rms_norm": _rms_norm,
    "dma_heavy": _dma_heavy,
    "hand_written": _hand_written,
}


def _core(enc, spec):
    return run_core(enc.n, enc.kind, enc.base_ns, enc.dep_ns, enc.wait_ptr, enc.wait_sem, enc.wait_val, enc.sig_ptr,
                    enc.sig_sem, enc.sig_val, enc.sig_set, enc.dma_desc, enc.dma_desc_ns, enc.dma_fixed_ns,
                    enc.stream_ptr, enc.stream_instr, enc.n_streams, max(1, enc.n_sems), spec.dma_engines,
                    spec.tensor_throttling, spec.throttle_idle_ns, spec.throttle_ramp_ns, spec.throttle_start_fraction,
                    enc.pcore, enc.n_cores, enc.psum_lock, enc.n_psum_locks)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("spec", [hw.TRN2, hw.TRN1], ids=["trn2", "trn1"])
def test_fast_encoding_equals_the_per_instruction_reference(name, spec):
    prog = PROGRAMS[name]()
    cols = program_columns(prog)
    assert cols.n_forms <= cols.n_shapes <= len(prog)
    fast, ref = encode(prog, spec, columns=cols), encode_reference(prog, spec)
    for f in fields(fast):
        a, b = getattr(fast, f.name), getattr(ref, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f.name
        else:
            assert a == b, f.name
    # and so the same timeline, record for record
    for x, y in zip(_core(fast, spec), _core(ref, spec)):
        assert np.array_equal(x, y)
    tl = simulate(prog, spec, cache=False)
    assert tl.records() == simulate(prog, spec, cache=False, check=False).records()
    assert np.array_equal(tl.end_ns, _core(ref, spec)[1])
    validate(prog, spec)
    _validate_reference(prog, spec)
    assert execution_order(prog) == _execution_order_reference(prog)


def test_large_matmul_has_few_shapes_and_fewer_forms():
    prog = matmul_program(2048, 2048, 2048, "bfloat16", spec=SPEC)
    cols = program_columns(prog)
    assert cols.n_shapes < len(prog) / 2
    assert cols.n_forms < 50


# --- invalid programs: the fast validation names the same instruction with the same words --------

def _valid_prefix(p: Program) -> None:
    with p.origin("aten::ok"):
        for k in range(3):
            t = sbuf(0, 128, (64,), "float32", offset=256 * k)
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t))


def _bad(kind: str) -> Program:
    p = Program(kind)
    x = p.tensor("x", (100, 64), "float32")
    q = p.queue("q")
    s = p.semaphore("s")
    _valid_prefix(p)
    t = sbuf(0, 128, (64,), "float32")
    with p.origin("aten::bad"):
        if kind == "wait_semaphore":
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, waits=((5, 1),)))
        elif kind == "signal_semaphore":
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, signals=((-1, 1),)))
        elif kind == "set_semaphore":
            p.add(SemaphoreSet(sem=9, value=1))
        elif kind == "queue":
            p.add(Dma(queue=4, src=hbm(x, 100, 64, [(1, 64)], "float32"), dst=sbuf(0, 100, (64,), "float32")))
        elif kind == "hbm_bounds":
            p.add(Dma(queue=q, src=hbm(x, 128, 64, [(1, 64)], "float32"), dst=t))
        elif kind == "hbm_unbound":
            p.add(Dma(queue=q, src=hbm(7, 100, 64, [(1, 64)], "float32"), dst=sbuf(0, 100, (64,), "float32")))
        elif kind == "partitions_past_end":
            late = sbuf(96, 64, (64,), "float32")
            p.add(TensorTensor(alu=Alu.ADD, in0=late, in1=late, out=late))
        elif kind == "hbm_dtype":
            p.add(Dma(queue=q, src=hbm(x, 100, 64, [(1, 64)], "bfloat16"), dst=sbuf(0, 100, (64,), "bfloat16")))
        elif kind == "partitions":
            wide = AP(Space.SBUF, t.dtype, 256, ((1, 4),))
            p.add(TensorTensor(alu=Alu.ADD, in0=wide, in1=wide, out=wide))
        elif kind == "start_partition":
            odd = sbuf(16, 32, (64,), "float32")
            p.add(TensorTensor(alu=Alu.ADD, in0=odd, in1=odd, out=odd))
        elif kind == "sbuf_overflow":
            big = sbuf(0, 128, (64,), "float32", offset=SPEC.sbuf_bytes_per_partition - 128)
            p.add(TensorTensor(alu=Alu.ADD, in0=big, in1=big, out=big))
        elif kind == "negative_offset":
            back = AP(Space.SBUF, t.dtype, 128, ((-1, 64),), 0, 16)
            p.add(TensorTensor(alu=Alu.ADD, in0=back, in1=back, out=back))
        elif kind == "too_many_dims":
            deep = AP(Space.SBUF, t.dtype, 128, ((1, 2),) * 5)
            p.add(TensorTensor(alu=Alu.ADD, in0=deep, in1=deep, out=deep))
        elif kind == "empty_dim":
            empty = AP(Space.SBUF, t.dtype, 128, ((1, 0),))
            p.add(TensorTensor(alu=Alu.ADD, in0=empty, in1=empty, out=empty))
        elif kind == "psum_bank":
            p.add(LoadStationary(src=sbuf(0, 128, (128,), "bfloat16")))
            p.add(MultiplyMoving(moving=sbuf(0, 128, (512,), "bfloat16", offset=1024),
                                 dst=psum(0, 128, (512,), offset=1024)))
        elif kind == "matmul_no_stationary":
            p.add(MultiplyMoving(moving=sbuf(0, 128, (512,), "bfloat16"), dst=psum(0, 128, (512,))))
        elif kind == "matmul_stationary_mismatch":
            # the same MATMUL twice: valid after the first LDWEIGHTS, wrong after the second
            mm = dict(moving=sbuf(0, 128, (512,), "bfloat16", offset=1024), dst=psum(0, 128, (512,)))
            p.add(LoadStationary(src=sbuf(0, 128, (128,), "bfloat16")))
            p.add(MultiplyMoving(**mm))
            p.add(LoadStationary(src=sbuf(0, 64, (128,), "bfloat16")))
            p.add(MultiplyMoving(**mm))
        elif kind == "shape_mismatch":
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=sbuf(0, 128, (32,), "float32"), out=t))
        elif kind == "engine_reads_hbm":
            p.add(TensorCopy(inp=hbm(x, 100, 64, [(1, 64)], "float32"), out=sbuf(0, 100, (64,), "float32")))
        elif kind == "framework_op":
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, op=42))
        elif kind == "deadlock":
            p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, waits=((s, 1),)))
            p.add(Activation(func=Act.EXP, inp=t, out=t, waits=((s, 1),), signals=((s, 1),)))
    return p


BAD_KINDS = ["wait_semaphore", "signal_semaphore", "set_semaphore", "queue", "hbm_bounds", "hbm_unbound",
             "hbm_dtype", "partitions", "partitions_past_end", "start_partition", "sbuf_overflow", "negative_offset", "too_many_dims", "empty_dim",
             "psum_bank", "matmul_no_stationary", "matmul_stationary_mismatch", "shape_mismatch",
             "engine_reads_hbm", "framework_op", "deadlock"]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_fast_validation_raises_exactly_the_reference_error(kind):
    prog = _bad(kind)
    with pytest.raises(ProgramError) as ref:
        _validate_reference(prog, SPEC)
    with pytest.raises(ProgramError) as fast:
        validate(prog, SPEC)
    assert type(fast.value) is type(ref.value)
    assert str(fast.value) == str(ref.value)
    if kind != "deadlock":
        assert "instruction #" in str(fast.value)


def test_deadlock_message_matches_reference_ordering():
    prog = _bad("deadlock")
    with pytest.raises(DeadlockError) as ref:
        _execution_order_reference(prog)
    with pytest.raises(DeadlockError) as fast:
        execution_order(prog)
    assert str(fast.value) == str(ref.value)


def test_malformed_waits_are_a_clear_error():
    p = Program("w")
    p.semaphore("s")
    t = sbuf(0, 128, (64,), "float32")
    p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, waits=((0, 1, 2),)))
    with pytest.raises(ProgramError, match=r"instruction #0 .*waits must be \(semaphore, value\) pairs"):
        simulate(p, SPEC, cache=False)


def test_execution_order_rejects_undeclared_semaphores_instead_of_reading_past_them():
    p = Program("s")
    t = sbuf(0, 128, (64,), "float32")
    p.add(TensorTensor(alu=Alu.ADD, in0=t, in1=t, out=t, signals=((3, 1),)))
    with pytest.raises(ProgramError, match="instruction #0 .*semaphore 3 is not declared"):
        execution_order(p)


def test_equal_patterns_share_a_content_id_and_different_ones_never_do():
    a = sbuf(0, 128, (64,), "float32", offset=256)
    assert sbuf(0, 128, (64,), "float32", offset=256)._sid == a._sid
    assert sbuf(0, 128, (64,), "float32", offset=512)._sid != a._sid
    assert sbuf(0, 128, (64,), "float32", offset=512)._fid == a._fid  # same form, other placement
    import pickle

    b = pickle.loads(pickle.dumps(a))
    assert b == a and b._sid == a._sid and hash(b) == hash(a)
