"""Logical NeuronCores (LNC, S23): NEURON_LOGICAL_NC_CONFIG, the logical core's spec, kernels spread
over the pair's physical cores, and what the simulator, the interpreter and the device trace make of it.
Timings are on the modelled device clock."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trnscope import hw
from trnscope.analysis.device_trace import build_device_trace
from trnscope.analysis.profile_dir import read_ntff
from trnscope.compiler.builder import KernelBuilder
from trnscope.compiler.lnc import PairBuilder, core_masks, disjoint, respread
from trnscope.compiler.lowering import lower
from trnscope.compiler.opcall import from_aten
from trnscope.interp.interpreter import run
from trnscope.isa import DType, Dma, Program
from trnscope.isa.ap import hbm
from trnscope.profiling import ntff as ntff_format
from trnscope.sim import simulate

from trnscope.compiler.verify import assert_lowering_matches

from .helpers import aten, meta, randn

LNC1, LNC2 = hw.logical_spec("trn2", 1), hw.logical_spec("trn2", 2)


def _program(spec, op, *args):
    out = op(*args)
    return lower(from_aten(op, args, {}, out if isinstance(out, tuple) else (out,)), spec)


# --- the setting ---------------------------------------------------------------------------------------

def test_trn2_defaults_to_lnc2_and_trn1_to_lnc1(monkeypatch):
    monkeypatch.delenv(hw.LNC_ENV_VAR, raising=False)
    assert hw.logical_spec("trn2").lnc == 2 and hw.logical_spec("trn1").lnc == 1
    monkeypatch.setenv(hw.LNC_ENV_VAR, "1")
    assert hw.logical_spec("trn2").lnc == 1


def test_device_count_memory_and_peaks_follow_the_logical_core():
    assert (LNC1.cores_per_chip, LNC2.cores_per_chip) == (8, 4)
    assert (LNC1.hbm_bytes_per_core, LNC2.hbm_bytes_per_core) == (12 * hw.GiB, 24 * hw.GiB)  # a 24 GiB bank per pair
    assert LNC2.hbm_bytes_per_s_per_core == pytest.approx(2.9e12 / 4)  # one of four HBM stacks
    assert LNC2.peak_bf16_flops == pytest.approx(2 * LNC1.peak_bf16_flops)
    assert LNC2.dma_bytes_per_s_per_core == pytest.approx(2 * LNC1.dma_bytes_per_s_per_core)
    # per physical core resources stay: SBUF, PSUM, 16 DMA engines, and each engine's HBM share
    assert LNC2.sbuf_bytes_per_partition == LNC1.sbuf_bytes_per_partition and LNC2.dma_engines == 16
    assert LNC2.hbm_bytes_per_ns_per_dma_engine == pytest.approx(LNC1.hbm_bytes_per_ns_per_dma_engine)
    assert hw.physical_spec(LNC2) == LNC1 == hw.TRN2


def test_devices_and_capacity_follow_the_setting():
    from trnscope.device import _devices, memory

    saved = hw.get_spec()
    try:
        for lnc, count, cap in ((1, 8, 12 * hw.GiB), (2, 4, 24 * hw.GiB)):
            hw.set_instance("trn2", lnc)
            assert _devices.device_count() == count and torch.neuron.device_count() == count
            assert memory.capacity() == cap
    finally:
        hw.set_instance(saved)


@pytest.mark.parametrize("value", ["3", "0", "two", "-1"])
def test_a_bad_value_names_the_variable_and_the_allowed_values(monkeypatch, value):
    monkeypatch.setenv(hw.LNC_ENV_VAR, value)
    with pytest.raises(hw.LncConfigError, match=rf"NEURON_LOGICAL_NC_CONFIG='{value}'.*allowed values are 1, 2"):
        hw.logical_spec("trn2")


def test_trn1_rejects_lnc2(monkeypatch):
    monkeypatch.setenv(hw.LNC_ENV_VAR, "2")
    with pytest.raises(hw.LncConfigError, match="not supported on trn1.*allowed values are 1"):
        hw.logical_spec("trn1")
    with pytest.raises(hw.LncConfigError, match="lnc=2 is not supported on trn1"):
        hw.logical_spec("trn1", 2)


# --- kernels spread over the pair ---------------------------------------------------------------------

def _pcores(program):
    n, tags = program.physical_cores()
    return n, (np.bincount(tags, minlength=n) if tags is not None else None)


def test_a_big_matmul_roughly_halves_at_lnc2():
    a, b = meta(4096, 4096), meta(4096, 4096)
    t1 = simulate(_program(LNC1, aten.mm.default, a, b), LNC1)
    p2 = _program(LNC2, aten.mm.default, a, b)
    t2 = simulate(p2, LNC2)
    n, per_core = _pcores(p2)
    assert n == 2 and per_core.min() > 0.4 * per_core.sum()
    assert t1.summary["bottleneck"] == "tensor"
    # compute-bound: two TensorEs; each core loads the weights it needs, so not quite 2x
    assert 0.5 * t1.total_ns <= t2.total_ns < 0.6 * t1.total_ns
    assert t2.summary["mfu_estimated_percent"] <= 100 and t2.summary["physical_cores_used"] == 2


def test_an_hbm_bound_op_is_held_to_the_pairs_shared_bandwidth():
    x, y = meta(4096, 4096, dtype=torch.float32), meta(4096, 4096, dtype=torch.float32)
    moved = 3 * x.numel() * 4
    for spec in (LNC1, LNC2):
        tl = simulate(_program(spec, aten.add.Tensor, x, y), spec)
        bound = moved / spec.hbm_bytes_per_s_per_core * 1e9
        assert bound <= tl.total_ns < 1.1 * bound  # HBM-bound on one core and on the pair
        assert tl.summary["mbu_estimated_percent"] <= 100
    # DMA engines four times faster: the pair still shares one HBM stack, so the op cannot go faster
    fast = hw.logical_spec(hw.TRN2.replace(dma_bytes_per_ns_per_engine=4 * hw.TRN2.dma_bytes_per_ns_per_engine), 2)
    tl = simulate(_program(fast, aten.add.Tensor, x, y), fast)
    assert tl.total_ns >= moved / fast.hbm_bytes_per_s_per_core * 1e9


def test_spread_kernels_compute_the_same_numbers():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((384, 512), np.float32), rng.standard_normal((512, 640), np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for op, args, want in ((aten.mm.default, (ta, tb), a @ b),
                           (aten._softmax.default, (ta, 1, False), torch.softmax(ta, 1).numpy())):
        p = _program(LNC2, op, *args)
        assert p.physical_cores()[0] == 2
        out = run(p, [t.numpy().ravel() for t in args if isinstance(t, torch.Tensor)])
        got = next(iter(out.values())).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_the_pair_splits_between_row_tiles_so_no_tile_is_loaded_twice():
    """A fused rms_norm stores two results per 128-row tile (the output and its rstd): the byte-balanced
    cut of 1000 rows fell between them, and both cores loaded that tile. Cut at a tile boundary, the
    pair reads x once: only the weight, broadcast into each core's partitions, is read per core."""
    x, w = meta(1000, 4096, dtype=torch.float32), meta(4096, dtype=torch.float32)
    read = {}
    for spec in (LNC1, LNC2):
        out = aten._fused_rms_norm.default(x, [4096], w, 1e-6)
        p = lower(from_aten(aten._fused_rms_norm.default, (x, [4096], w, 1e-6), {}, out), spec)
        read[spec.lnc] = simulate(p, spec).summary["hbm_read_bytes"]
    weight_per_core = 128 * 4096 * 4
    assert read[2] - read[1] == weight_per_core


def _cross_core_waits(program) -> int:
    """Instructions that wait on a semaphore of the other physical core's streams."""
    n, tags = program.physical_cores()
    assert n == 2 and tags is not None
    on_nc1 = [name.endswith("@nc1") for name in program.semaphores]
    return sum(1 for ins, core in zip(program.instructions, tags.tolist())
               if any(on_nc1[sem] != (core == 1) for sem, _ in ins.waits))


def test_a_deep_matmul_keeps_both_cores_busy_to_the_end():
    """Issue 12's case: bf16 [4096, 8192] @ [8192, 8192] at LNC=2 ran at 69.8% MFU, core 1 ending at
    5.00 ms and core 0 at 3.74 ms. Each core's half of the output blocks reads its own A and B
    blocks through its own DMA queues, so neither waits for the other."""
    p = _program(LNC2, aten.mm.default, meta(4096, 8192), meta(8192, 8192))
    tl = simulate(p, LNC2)
    ends = [float(tl.end_ns[tl.encoded.pcore == c].max()) for c in (0, 1)]
    assert abs(ends[0] - ends[1]) <= 0.02 * tl.total_ns, ends
    assert tl.summary["mfu_estimated_percent"] >= 80, tl.summary["mfu_estimated_percent"]
    assert _cross_core_waits(p) == 0


@pytest.mark.parametrize("pair", [False, True], ids=["one_core", "pair"])
def test_reads_of_a_tensor_never_wait_for_other_reads_however_many(pair):
    """Old HBM records fold into a per-stream floor; the reads folded there must order later writes
    only. They ordered later reads too: past the record limit every load of a matmul operand waited
    for the load 1024 records back - on the other core at LNC=2, so core 1 of a 4096 x 8192 x 8192
    mm trailed core 0 by a third of its work (69.8% MFU)."""
    spec = LNC2 if pair else LNC1
    n = 1500  # loads: more than either builder's record limit (64 on one core, 1024 for the pair)
    prog = Program("loads", target=spec.name)
    x = prog.tensor("x", (32 * 128,), DType.bfloat16, "input")
    kb = PairBuilder(prog, spec, [1, 2] * (n // 2), [Dma] * n) if pair else KernelBuilder(prog, spec)
    q = kb.queue("qSyncIO0", "input")
    for i in range(n):  # each into a tile of its own: nothing but HBM could order them
        kb.dma(q, hbm(x, 128, 1, [(1, 1)], DType.bfloat16, offset=(i % 32) * 128), kb.tile(128, (1,), DType.bfloat16))
    assert len(prog.instructions) == n
    assert [ins for ins in prog.instructions if ins.waits] == []


def test_a_kernel_with_one_store_stays_on_one_core():
    p = _program(LNC2, aten.sum.default, meta(256, 512, dtype=torch.float32))
    assert p.physical_cores() == (1, None)
    assert core_masks(p, 2) is None


# one-value reductions: each physical core reduces a share, the partials meet through HBM
# (kernels.common.core_shares / meet_partials); measured on trn2, each well below its LNC=1 time
ONE_VALUE = [
    (aten.sum.default, lambda x: (x,), 0.90),             # 17.5 -> 14.8 us
    (aten.linalg_vector_norm.default, lambda x: (x,), 0.90),  # 18.7 -> 15.7 us
    (aten.dot.default, lambda x: (x.reshape(-1), x.reshape(-1)), 0.80),  # 38.0 -> 28.3 us
    (aten.mse_loss.default, lambda x: (x, x), 0.75),      # 47.7 -> 33.0 us
    (aten.argmax.default, lambda x: (x,), 0.96),          # 25.9 -> 24.4 us (VectorE-bound, and the meet)
    (aten.var.default, lambda x: (x,), 0.90),             # 22.3 -> 19.5 us
]


@pytest.mark.parametrize("op,make,most", ONE_VALUE, ids=[str(o) for o, _, _ in ONE_VALUE])
def test_a_reduction_to_one_value_splits_over_the_pair(op, make, most):
    args = make(meta(1024, 1024, dtype=torch.float32))
    p1, p2 = _program(LNC1, op, *args), _program(LNC2, op, *args)
    n, tags = p2.physical_cores()
    assert n == 2 and tags is not None
    read = [sum(ap.nbytes for ins, c in zip(p2.instructions, tags.tolist()) if c == core
                for ap in ins.reads() if ap.space.value == "hbm") for core in (0, 1)]
    # each core reads its half of the input (and the other's partial, a few bytes)
    assert min(read) > 0.49 * sum(read), read
    t1, t2 = simulate(p1, LNC1).total_ns, simulate(p2, LNC2).total_ns
    assert t2 < most * t1, (t1, t2)


@pytest.mark.parametrize("op,make", [(aten.sum.default, lambda x: (x,)), (aten.mean.default, lambda x: (x,)),
                                     (aten.amax.default, lambda x: (x,)),
                                     (aten.argmax.default, lambda x: (x,)), (aten.argmin.default, lambda x: (x,)),
                                     (aten.dot.default, lambda x: (x.reshape(-1), x.reshape(-1).flip(0))),
                                     (aten.mse_loss.default, lambda x: (x, x.flip(0))),
                                     (aten.linalg_vector_norm.default, lambda x: (x,)),
                                     (aten.var.default, lambda x: (x * 3 + 1,))],
                         ids=["sum", "mean", "amax", "argmax", "argmin", "dot", "mse_loss", "norm", "var"])
def test_partials_met_through_hbm_give_the_same_numbers(op, make):
    p = assert_lowering_matches(op, make(randn(1024, 1024, seed=3)), {}, LNC2, rtol=1e-4, atol=1e-3)
    assert p.physical_cores()[0] == 2


def test_tiles_of_one_tensor_are_told_apart_exactly():
    # two column halves of a [128, 4096] tensor: their element spans overlap, their elements do not
    left = hbm(0, 128, 4096, [(1, 2048)], DType.float32)
    right = hbm(0, 128, 4096, [(1, 2048)], DType.float32, offset=2048)
    assert not disjoint(left, left) and disjoint(left, right) and disjoint(right, left)
    assert not disjoint(left, hbm(0, 128, 4096, [(1, 2049)], DType.float32, offset=2047))


def test_the_device_trace_shows_both_physical_cores(tmp_path):
    p = _program(LNC2, aten.mm.default, meta(1024, 1024), meta(1024, 1024))
    tl = simulate(p, LNC2)
    recs = tl.records()
    assert {r["pcore_idx"] for r in recs} == {0, 1}
    tracks = {(r["pcore_idx"], r["timeline_track"]) for r in recs}
    assert (0, "TensorMatrix") in tracks and (1, "TensorMatrix@nc1") in tracks
    dma_queues = {(r["pcore_idx"], r["timeline_track"]) for r in recs if r["engine"] == "dma"}
    assert {c for c, _ in dma_queues} == {0, 1} and all(t.endswith("@nc1") == (c == 1) for c, t in dma_queues)
    path = tmp_path / "k_vnc_0.ntff"
    ntff_format.write_ntff(path, {"neff_id": p.neff_id, "neff_name": p.name, "vnc": 0, "target": "trn2",
                                  "summary": tl.summary, "executions": []}, tl)
    device = build_device_trace(read_ntff(path))
    names = [t.name for t in device.trace.tracks]
    assert "TensorMatrix (MultiplyMoving)" in names and "TensorMatrix (MultiplyMoving) · nc1" in names
    assert "Vector · nc1" in names
    busy = {name: 0 for name in names}
    for track, dur in zip(device.trace.slices.track.tolist(), device.trace.slices.dur_ns.tolist()):
        busy[device.trace.tracks[track].name] += dur
    assert busy["TensorMatrix (MultiplyMoving)"] > 0 and busy["TensorMatrix (MultiplyMoving) · nc1"] > 0


def test_a_one_core_program_respread_at_lnc2_times_like_one_compiled_for_it():
    a, b = meta(2048, 2048), meta(2048, 2048)
    one = _program(LNC1, aten.mm.default, a, b)
    again = respread(one, LNC2)
    assert again.physical_cores()[0] == 2 and respread(again, LNC2) is again and respread(one, LNC1) is one
    compiled = simulate(_program(LNC2, aten.mm.default, a, b), LNC2).total_ns
    assert simulate(again, LNC2).total_ns == pytest.approx(compiled, rel=0.05)
    assert again.neff_id != one.neff_id

