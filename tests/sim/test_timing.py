"""The performance model follows the published formulas (hardware.md 3.3, 3.4, 7)."""

import pytest

from trnscope import hw
from trnscope.compiler.builder import KernelBuilder
from trnscope.compiler.kernels.matmul import matmul_program
from trnscope.isa import Act, Activation, Alu, Dma, Program, TensorTensor, hbm, sbuf
from trnscope.sim import simulate

SPEC = hw.TRN2


def _single(ins_factory, spec=SPEC):
    p = Program("one")
    p.add(ins_factory())
    return simulate(p, spec, cache=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_doubling_free_size_doubles_a_vector_instruction(dtype):
    def tt(n):
        a = sbuf(0, 128, (n,), dtype)
        b = sbuf(0, 128, (n,), dtype, offset=n * 4)
        o = sbuf(0, 128, (n,), dtype, offset=2 * n * 4)
        return lambda: TensorTensor(alu=Alu.MAX, in0=a, in1=b, out=o)

    t1 = _single(tt(2048)).total_ns
    t2 = _single(tt(4096)).total_ns
    assert t2 / t1 == pytest.approx(2.0, rel=0.05)
    # and follows max(MIN_II, 2N) / clock for a non-fast op (MAX is not add/mul/sub)
    perf = 2.0 if dtype == "bfloat16" else 1.0  # NC-v3 2x mode for all-BF16 SBUF operands
    assert t1 == pytest.approx(2 * 2048 / perf / SPEC.vector_clock_hz * 1e9, rel=1e-6)


def test_min_ii_floor_and_short_overhead():
    def act(n):
        return lambda: Activation(func=Act.EXP, inp=sbuf(0, 128, (n,), "float32"),
                                  out=sbuf(0, 128, (n,), "float32", offset=4096))
    # N=1: max(64, 1) + 200 static overhead = 264 ScalarE cycles: the measured anchor of S4
    assert _single(act(1)).total_ns == pytest.approx(264 / SPEC.scalar_clock_hz * 1e9)
    assert _single(act(16)).total_ns == _single(act(1)).total_ns


def _dma_program(partitions, free, spec=SPEC):
    p = Program("dma")
    t = p.tensor("x", (partitions, free), "float32")
    q = p.queue("qSyncIO0", "input")
    p.add(Dma(queue=q, src=hbm(t, partitions, free, [(1, free)], "float32"),
              dst=sbuf(0, partitions, (free,), "float32")))
    return p


def test_dma_time_is_fixed_cost_plus_bytes_over_bandwidth():
    tl = simulate(_dma_program(128, 8192), SPEC, cache=False)
    per_engine_rows = 128 // SPEC.dma_engines
    row_bytes = 8192 * 4
    expected = SPEC.dma_fixed_latency_ns + per_engine_rows * row_bytes / SPEC.dma_effective_bytes_per_ns
    assert tl.total_ns == pytest.approx(expected)


def test_small_transfers_are_overhead_bound():
    small = simulate(_dma_program(128, 8), SPEC, cache=False)     # 32 B per partition
    large = simulate(_dma_program(128, 16384), SPEC, cache=False)  # 64 KiB per partition
    eff_small = small.summary["dma_throughput_bytes_per_s"] / SPEC.dma_bytes_per_s_per_core
    eff_large = large.summary["dma_throughput_bytes_per_s"] / SPEC.dma_bytes_per_s_per_core
    assert eff_small < 0.01
    assert eff_large > 0.8


def _two_engines(dependent: bool):
    p = Program("pair")
    sem = p.semaphore("S[1] (Vector)")
    a = sbuf(0, 128, (1024,), "float32")
    b = sbuf(0, 128, (1024,), "float32", offset=4096)
    p.add(TensorTensor(alu=Alu.ADD, in0=a, in1=a, out=a, signals=((sem, 1),)))
    p.add(Activation(func=Act.EXP, inp=b, out=b, waits=((sem, 1),) if dependent else ()))
    return simulate(p, SPEC, cache=False)


def test_independent_engines_overlap_and_a_semaphore_serialises_them():
    free = _two_engines(False)
    assert free.start_ns[0] == free.start_ns[1] == 0.0
    chained = _two_engines(True)
    assert chained.start_ns[1] == pytest.approx(chained.end_ns[0])
    assert chained.wait_ns[1] == pytest.approx(chained.end_ns[0])
    assert chained.total_ns > free.total_ns


def _streaming_add(rows, cols, spec=SPEC):
    p = Program("add")
    a = p.tensor("a", (rows, cols), "float32")
    b = p.tensor("b", (rows, cols), "float32")
    o = p.tensor("o", (rows, cols), "float32", "output")
    kb = KernelBuilder(p, spec)
    qa, qb, qo = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input"), kb.queue("qSyncIO2", "output")
    with p.origin("aten::add"):
        for r0 in range(0, rows, 128):
            ta, tb = kb.tile(128, (cols,), "float32"), kb.tile(128, (cols,), "float32")
            kb.dma(qa, hbm(a, 128, cols, [(1, cols)], "float32", offset=r0 * cols), ta)
            kb.dma(qb, hbm(b, 128, cols, [(1, cols)], "float32", offset=r0 * cols), tb)
            kb.emit(TensorTensor(alu=Alu.ADD, in0=ta, in1=tb, out=ta))
            kb.dma(qo, ta, hbm(o, 128, cols, [(1, cols)], "float32", offset=r0 * cols))
            kb.release(ta, tb)
    return p


def test_memory_bound_program_reports_dma_as_bottleneck():
    tl = simulate(_streaming_add(2048, 2048), SPEC, cache=False)
    assert tl.summary["bottleneck"] == "dma/hbm"
    assert tl.summary["mbu_estimated_percent"] > 50


def test_large_bf16_matmul_keeps_tensor_engine_busy():
    tl = simulate(matmul_program(2048, 2048, 2048, "bfloat16", spec=SPEC), SPEC, cache=False)
    s = tl.summary
    assert s["bottleneck"] == "tensor"
    assert s["engines"]["tensor"]["active_time_percent"] > 80
    assert s["mfu_estimated_percent"] > 70
    assert s["model_flops"] == 2 * 2048 ** 3


def test_fp32_matmul_costs_four_times_bf16_on_tensor_engine():
    bf = simulate(matmul_program(1024, 1024, 1024, "bfloat16", spec=SPEC), SPEC, cache=False)
    fp = simulate(matmul_program(1024, 1024, 1024, "float32", spec=SPEC), SPEC, cache=False)
    ratio = fp.summary["engines"]["tensor"]["instruction_time_ns"] / bf.summary["engines"]["tensor"]["instruction_time_ns"]
    assert ratio == pytest.approx(4.0, rel=0.02)


def test_lower_hbm_bandwidth_slows_a_memory_bound_program():
    slow = SPEC.replace(hbm_bytes_per_s_per_core=SPEC.hbm_bytes_per_s_per_core / 4)
    fast_t = simulate(_streaming_add(1024, 2048, SPEC), SPEC, cache=False).total_ns
    slow_t = simulate(_streaming_add(1024, 2048, slow), slow, cache=False).total_ns
    assert slow_t > 2.5 * fast_t


def test_tensor_engine_throttles_after_idle_on_trn2_only():
    def first_mm_ns(spec):
        tl = simulate(matmul_program(128, 128, 512, "bfloat16", spec=spec), spec, cache=False)
        mm = [i for i, ins in enumerate(tl.program.instructions) if ins.OPCODE == "MATMUL"][0]
        return tl.duration_ns[mm], 512 / spec.tensor_clock_hz * 1e9

    d2, nominal2 = first_mm_ns(hw.TRN2)
    assert d2 == pytest.approx(nominal2 / hw.TRN2.throttle_start_fraction)
    d1, nominal1 = first_mm_ns(hw.TRN1)
    assert d1 == pytest.approx(nominal1)


def test_dma_queue_completes_in_order():
    p = Program("fifo")
    t = p.tensor("x", (128, 8192), "float32")
    q = p.queue("q", "input")
    p.add(Dma(queue=q, src=hbm(t, 128, 8192, [(1, 8192)], "float32"), dst=sbuf(0, 128, (8192,), "float32")))
    p.add(Dma(queue=q, src=hbm(t, 1, 8192, [(1, 16)], "float32"), dst=sbuf(0, 1, (16,), "float32", offset=65536)))
    tl = simulate(p, SPEC, cache=False)
    assert tl.end_ns[1] >= tl.end_ns[0]
