"""Recommendations that fit the device and the kernel: golden top findings for every fixture trace
and the RMSNorm profiles, advice in the device's own terms, the limiter of kernels far below
their roofline, and evidence figures on every finding."""

from __future__ import annotations

import numpy as np
import pytest

from synthetic import KinetoBuilder, write_ntff

from trnscope.analysis import ProfileAnalysis, load_profile
from trnscope.analysis.device import NeffStat
from trnscope.analysis.limiter import (
    COMPUTE, DESCRIPTORS, DMA_QUEUES, HBM, LATENCY, contiguous_run_bytes, kernel_limit,
)
from trnscope.analysis.profile import NEURON, Profile
from trnscope.analysis.profile_dir import ProfileFiles

# the first finding for each fixture trace (None: no finding), decided on the trace alone
GOLDEN = {
    "call_stack_backward_thread": "host_bound",  # 45 us of device work in a 413 ms profile
    "cpu_only": None,
    "critical_path_alexnet": "host_bound",
    "critical_path_cuda_event_sync": "host_bound",
    "cupti_profiler": None,  # only CUPTI counter ranges: no execution times
    "ns_resolution_trace": None,  # 95% busy, no MFU/MBU recorded for CUDA kernels: nothing to say
    "timeline_analysis_sampled": "dependency_wait",
    "trace_diff_control": "exposed_communication",
    "trace_diff_test": None,  # device bound with 71% comm/comp overlap
    "triton_example": "host_bound",
}
NEURON_WORDS = ("NEFF", "neuron", "Neuron", "SBUF", "NeuronCore")


@pytest.fixture(scope="module")
def fixture_analyses(kineto_fixture):
    return {prefix: ProfileAnalysis(load_profile(kineto_fixture(prefix))) for prefix in GOLDEN}


@pytest.mark.parametrize("prefix", list(GOLDEN))
def test_golden_top_recommendation_of_each_fixture(fixture_analyses, prefix):
    a = fixture_analyses[prefix]
    top = a.recommendations[0].rule if a.recommendations else None
    assert top == GOLDEN[prefix], [(r.rule, r.title) for r in a.recommendations]
    for r in a.recommendations:
        assert r.evidence and any(isinstance(v, (int, float)) for v in r.evidence.values()), r.rule
        assert not any(word in r.title + r.detail for word in NEURON_WORDS), (r.rule, r.detail)


def test_rmsnorm_profiles(rmsnorm):
    """The demo's three profiles (recorded in modelled host time, so the same on every machine).
    Naive: six NEFFs per call, the device idles between short executions: fuse. Fused and compiled:
    one 10 us NEFF per call at its HBM roofline, never told to fuse; the window's one copy back to
    the host (512 KiB, 42 us) is the larger part of its device time."""
    naive = ProfileAnalysis(load_profile(rmsnorm["naive"]))
    first = naive.recommendations[0]
    assert first.rule == "many_small_dispatches"
    assert "fewer NEFFs" in first.detail and "torch.compile(backend=\"neuron\")" in first.detail
    assert "aten::mul ×6" in first.detail
    for name in [n for n in ("fused", "compiled") if n in rmsnorm]:
        a = ProfileAnalysis(load_profile(rmsnorm[name]))
        assert a.device.programs == 1
        assert a.recommendations[0].rule == "copies_dominate", [r.rule for r in a.recommendations]
        assert "many_small_dispatches" not in [r.rule for r in a.recommendations]
        for r in a.recommendations:
            assert "Fuse producer and consumer" not in r.detail, r.detail
        hbm = next((r for r in a.recommendations if r.rule == "hbm_bound"), None)
        if hbm is not None:
            assert "single kernel already" in hbm.detail


def _many_small(tmp_path, name, **builder) -> ProfileAnalysis:
    b = KinetoBuilder(**builder)
    b.op("train_step", 0, 2000)
    for i in range(40):
        b.op("aten::add", i * 50, 20)
        b.op("Stage::waitEvents", i * 50 + 20, 5)
        b.kernel("vectorized_elementwise_kernel", i * 50 + 30, 5, launch=i * 50 + 2)
    return ProfileAnalysis(load_profile(b.write(tmp_path / f"{name}.pt.trace.json")))


def test_advice_in_each_device_s_terms(tmp_path):
    cuda = _many_small(tmp_path, "cuda")
    rocm = _many_small(tmp_path, "rocm", launch_name="hipLaunchKernel",
                       metadata={"deviceProperties": [{"id": 0, "name": "AMD Instinct MI250X"}]})
    mtia = _many_small(tmp_path, "mtia", runtime_category="mtia_runtime", launch_name="runFunction - launch",
                       device_label="MTIA 0")
    assert (cuda.device_kind.kind, rocm.device_kind.kind, mtia.device_kind.kind) == ("cuda", "rocm", "mtia")
    details = {}
    for kind, a in (("cuda", cuda), ("rocm", rocm), ("mtia", mtia)):
        first = a.recommendations[0]
        assert first.rule == "many_small_dispatches"
        assert not any(word in first.title + first.detail for word in NEURON_WORDS)
        # the ops that launched the kernels, not a wrapper around the wait
        assert "aten::add ×40" in first.detail and "Stage::waitEvents" not in first.detail
        details[kind] = first.detail
    assert "CUDA graph" in details["cuda"] and "HIP graph" in details["rocm"]
    assert "graph" not in details["mtia"]


def _neff(name="k", mfu=1.0, mbu=1.0, engines=None, neff_id="1") -> NeffStat:
    return NeffStat(neff_id=neff_id, name=name, executions=1, device_time_ns=1_000_000, framework_ops=["aten::sum"],
                    cores=[0], ntff={0: "x.ntff"}, mfu_percent=mfu, mbu_percent=mbu, engines=engines or {},
                    dma_transfers=16, dma_average_bytes=64 * 1024)


def _profile_with_dma(tmp_path, transfers: list[tuple[int, float, str]], hbm_bytes: int, total_ns: float,
                      mbu: float) -> Profile:
    """A profile whose one NTFF has DMA transfers (bytes, duration ns, operands)."""
    n = len(transfers)
    path = write_ntff(tmp_path / "1_instid_0_vnc_0.ntff", {
        "neff_id": "1", "vnc": 0, "target": "trn2",
        "summary": {"total_time_ns": total_ns, "hbm_read_bytes": hbm_bytes, "hbm_write_bytes": 0,
                    "mbu_estimated_percent": mbu},
    }, {"dma": {
        "id": list(range(n)), "queue": ["qSyncIO0"] * n, "trigger_ns": [0.0] * n, "data_start_ns": [0.0] * n,
        "end_ns": [t for _, t, _ in transfers], "transfer_bytes": [b for b, _, _ in transfers],
        "hbm_read_bytes": [b for b, _, _ in transfers], "hbm_write_bytes": [0] * n,
        "operands": [o for _, _, o in transfers], "framework_op": ["aten::sum.dim_IntList"] * n,
    }})
    files = ProfileFiles(directory=tmp_path, ntffs={("1", 0): path})
    return Profile(path=tmp_path, kind=NEURON, trace=None, files=files)


def test_limiter_of_kernels_near_and_far_from_their_roofline(tmp_path):
    assert kernel_limit(_neff(mfu=2, mbu=85)).limiter == HBM
    assert kernel_limit(_neff(mfu=90, mbu=20)).limiter == COMPUTE
    # a block at 48% MFU and 45% MBU is not "moving data": compute is the closer roof
    block = kernel_limit(_neff(mfu=48, mbu=45))
    assert block.limiter == COMPUTE and not block.far_below_roofline
    # far below both roofs: what the NTFF says decides
    vector = kernel_limit(_neff(mfu=0, mbu=10, engines={"vector": 95, "dma": 20}))
    assert vector.far_below_roofline and vector.limiter == "VectorE"
    idle = kernel_limit(_neff(mfu=0, mbu=5, engines={"vector": 20, "dma": 30}))
    assert idle.limiter == LATENCY


def test_small_dma_descriptors_are_named_with_the_op(tmp_path):
    """A reduction reading 4-byte runs: DMA queues busy, HBM at 0.2%: the limiter is the
    descriptors, not HBM bandwidth, and the op that issued them is named."""
    slow = [(524288, 867_787.0, "fp32@hbm:t0+0[0x128;0x1024] fp32@sb[0:128]+0x40[1x1024]")] * 8
    fast = [(1048576, 2892.6, "fp32@hbm:t0+0[8192x128;1x2048] fp32@sb[0:128]+0x40[1x2048]")]
    total = 7_000_000.0
    moved = sum(b for b, _, _ in slow + fast)
    bandwidth = 362.5  # bytes per ns: trn2's HBM per core, as the fast transfer achieves
    mbu = 100 * moved / (bandwidth * total)
    profile = _profile_with_dma(tmp_path, slow + fast, moved, total, mbu)
    limit = kernel_limit(_neff(mfu=0.0, mbu=mbu, engines={"dma": 99.5, "vector": 0.2}), profile)
    assert limit.limiter == DESCRIPTORS and limit.far_below_roofline
    assert limit.evidence["contiguous_run_bytes"] == 4 and limit.evidence["ops"] == ["aten::sum.dim_IntList"]
    assert limit.evidence["slow_transfers"] == 8 and limit.evidence["slow_rate_share"] < 0.01
    assert "aten::sum.dim_IntList" in limit.explanation and "4-byte" in limit.explanation
    # the same busy queues moving data fast: the queues, not descriptors
    queues = kernel_limit(_neff(mfu=0.0, mbu=20, engines={"dma": 90}),
                          _profile_with_dma(tmp_path, fast * 4, 4 * 1048576, 60_000.0, 20.0))
    assert queues.limiter == DMA_QUEUES


@pytest.mark.parametrize("dims,dtype", [([(1, 1024)], "float32"), ([(256, 8), (1, 256)], "bfloat16"),
                                        ([(1, 256), (256, 8)], "bfloat16"), ([(0, 512)], "float32"),
                                        ([(2048, 4), (1, 64), (64, 8)], "float32"), ([(1, 1)], "float32")])
def test_contiguous_runs_match_the_access_pattern_model(dims, dtype):
    """The run read from a transfer's operand text is isa's AP.contiguous_run() x itemsize, for the
    text AP.describe() writes (the NTFF's operands)."""
    from trnscope.isa.ap import hbm, sbuf

    src = hbm(0, 128, 8192, dims, dtype, offset=64)
    size = int(np.prod([n for _, n in dims]))
    dst = sbuf(0, 128, (size,), dtype)
    expected = min(src.contiguous_run(), dst.contiguous_run()) * src.dtype.itemsize
    assert contiguous_run_bytes(f"{src.describe()} {dst.describe()}") == expected


def test_unreadable_operand_text():
    assert contiguous_run_bytes("nonsense") is None and contiguous_run_bytes("zz9@hbm:t0+0[1x2;1x4]") is None


def test_training_step_costly_kernels_far_below_roofline_are_named(train_profile):
    """A Linear training step on the emulated device: whatever the kernels' quality, a kernel taking
    10% or more of device time far below its roofline gets a finding naming its op and limiter."""
    a = ProfileAnalysis(load_profile(train_profile))
    costly = [k for k in a.kernel_limits if k.far_below_roofline
              and k.device_time_ns >= 0.1 * a.device.kernel_time_ns]
    rules = {r.rule: r for r in a.recommendations}
    if not costly:
        assert "below_roofline" not in rules
        return
    finding = rules["below_roofline"]
    assert costly[0].ops[0] in finding.title and costly[0].limiter in finding.title
    assert finding.evidence["kernels"][0]["limiter"] == costly[0].limiter
