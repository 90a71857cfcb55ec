"""Invalid programs raise a clear error naming the instruction; nothing hangs."""

import pytest

from trnscope import hw
from trnscope.compiler.builder import AllocationError, KernelBuilder
from trnscope.isa import (
    AP, Act, Activation, Alu, DeadlockError, Dma, LoadStationary, MultiplyMoving, Program, ProgramError, Space,
    TensorTensor, hbm, psum, sbuf, validate,
)
from trnscope.sim import simulate

SPEC = hw.TRN2


def _prog_with(*instrs, sems=0):
    p = Program("bad")
    for i in range(sems):
        p.semaphore(f"s{i}")
    with p.origin("aten::add"):
        for ins in instrs:
            p.add(ins)
    return p


def test_tile_over_128_partitions():
    a = AP(Space.SBUF, sbuf(0, 1, (4,), "float32").dtype, 256, ((1, 4),))
    p = _prog_with(TensorTensor(alu=Alu.ADD, in0=a, in1=a, out=a))
    with pytest.raises(ProgramError, match=r"instruction #0 vector:TENSOR_TENSOR from 'aten::add'.*256 partitions"):
        validate(p, SPEC)


def test_sbuf_overflow_names_instruction_and_capacity():
    big = sbuf(0, 128, (SPEC.sbuf_bytes_per_partition // 4 + 1,), "float32")
    p = _prog_with(Activation(func=Act.EXP, inp=big, out=big))
    with pytest.raises(ProgramError, match="SBUF overflow.*229376 per partition"):
        simulate(p, SPEC)


def test_psum_overflow():
    t = psum(0, 128, (512,), offset=SPEC.psum_bytes_per_partition - 1024)
    p = _prog_with(Activation(func=Act.COPY, inp=t, out=sbuf(0, 128, (512,), "float32")))
    with pytest.raises(ProgramError, match="PSUM overflow"):
        validate(p, SPEC)


def test_matmul_dtype_mismatch():
    p = _prog_with(
        LoadStationary(src=sbuf(0, 128, (128,), "float32")),
        MultiplyMoving(moving=sbuf(0, 128, (512,), "bfloat16", offset=1024), dst=psum(0, 128, (512,))),
    )
    with pytest.raises(ProgramError, match="instruction #1 tensor:MATMUL.*dtype mismatch"):
        validate(p, SPEC)


def test_dma_element_count_mismatch():
    p = Program("dma")
    t = p.tensor("x", (128, 64), "float32")
    q = p.queue("q")
    p.add(Dma(queue=q, src=hbm(t, 128, 64, [(1, 64)], "float32"), dst=sbuf(0, 128, (32,), "float32")))
    with pytest.raises(ProgramError, match="8192 elements into a pattern of 4096"):
        validate(p, SPEC)


def test_hbm_out_of_bounds():
    p = Program("oob")
    t = p.tensor("x", (100, 64), "float32")
    q = p.queue("q")
    p.add(Dma(queue=q, src=hbm(t, 128, 64, [(1, 64)], "float32"), dst=sbuf(0, 128, (64,), "float32")))
    with pytest.raises(ProgramError, match="reaches elements 0..8191 of HBM tensor 'x' which has 6400"):
        validate(p, SPEC)


def test_cycle_deadlocks_with_clear_message_not_a_hang():
    a = sbuf(0, 128, (64,), "float32")
    p = _prog_with(
        TensorTensor(alu=Alu.ADD, in0=a, in1=a, out=a, waits=((1, 1),), signals=((0, 1),)),
        Activation(func=Act.EXP, inp=a, out=a, waits=((0, 1),), signals=((1, 1),)),
        sems=2,
    )
    with pytest.raises(DeadlockError, match=r"(?s)deadlocks.*vector:TENSOR_TENSOR.*s1 >= 1"):
        simulate(p, SPEC)
    # the simulator alone (no static check) detects it too
    with pytest.raises(DeadlockError, match="never started"):
        simulate(p, SPEC, check=False)


def test_bad_start_partition():
    t = sbuf(16, 64, (8,), "float32")
    p = _prog_with(Activation(func=Act.EXP, inp=t, out=t))
    with pytest.raises(ProgramError, match="cannot start at partition 16"):
        validate(p, SPEC)


def test_allocator_reports_overflow_with_free_bytes():
    kb = KernelBuilder(Program("alloc"), SPEC)
    kb.tile(128, (40000,), "float32")
    with pytest.raises(AllocationError, match="SBUF overflow: 160000 bytes per partition requested, 69376 free"):
        kb.tile(128, (40000,), "float32")
