"""`trnscope retime`: a trn2 profile re-timed for trn1 has the device times of a real trn1 run of
the same script (each NEFF lowered again from its recorded recipe, simulated on trn1, and the
device timeline rebuilt against the recorded host intervals)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from trnscope.cli.main import main
from trnscope.compiler import recipe
from trnscope.compiler.lowering import OpCall
from trnscope.compiler.meta import TensorMeta
from trnscope.compiler.scalars import RuntimeScalar
from trnscope.profiling.retime import RetimeError, target_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from stack_profile import _recorded  # noqa: E402  (records a script's profile once, in a subprocess)

SCRIPT = r'''
import sys, torch
import trnscope
from torch.profiler import profile, ProfilerActivity
from trnscope.profiling import NeuronConfig, ProfileMode, NeuronProfiler

torch.manual_seed(0)
x = torch.randn(256, 512).to("neuron")
w = torch.randn(512, 384).to("neuron")
g = torch.randn(512).to("neuron")

def work():
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    y = torch.nn.functional.gelu(h @ w)
    return (y * 0.5).sum()

for _ in range(2):
    work()
torch.neuron.synchronize()
cfg = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir=sys.argv[1])
exporter = NeuronProfiler(cfg)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=cfg,
             on_trace_ready=exporter.export_trace):
    for _ in range(2):
        work()
    torch.neuron.synchronize()
print("PROFILE " + str(exporter.last_export))
'''


def _record(root: Path, instance: str) -> Path:
    """The script's profile recorded on ``instance`` in a subprocess (modelled host time)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRNSCOPE_INSTANCE", instance)
        env.setenv("TRNSCOPE_HOST_TIME", "modelled")
        return _recorded(root / instance, SCRIPT)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("retime")
    return {instance: _record(root, instance) for instance in ("trn2", "trn1")}, root


def _device(profile: Path) -> list[tuple[str, int, int]]:
    """(NEFF name, start from the first launch, duration) of every device execution, in order, in
    whole ns. Times are read as ns before any arithmetic: trace times are absolute (about 5e12 us),
    where doubles are about 1 ns apart, so subtracting them as floats can be 1 ns off."""
    events = json.loads((profile / "system_trace.json").read_text())["traceEvents"]
    ns = lambda us: int(round(us * 1000))  # noqa: E731
    first = min(ns(e["ts"]) for e in events if e.get("name") == "nrt_execute")
    runs = sorted((e["args"]["seq"], e) for e in events if e.get("ph") == "X" and e.get("name") == "nc_exec_running")
    return [(e["args"]["neff_name"], ns(e["ts"]) - first, ns(e["dur"])) for _, e in runs]


def _queue_waits(profile: Path) -> list[tuple[int, int]]:
    """(start from the first launch, duration) of every queue_wait slice, in whole ns, in order."""
    events = json.loads((profile / "system_trace.json").read_text())["traceEvents"]
    ns = lambda us: int(round(us * 1000))  # noqa: E731
    first = min(ns(e["ts"]) for e in events if e.get("name") == "nrt_execute")
    return sorted((ns(e["ts"]) - first, ns(e["dur"])) for e in events if e.get("name") == "queue_wait")


def test_trn2_profile_retimed_for_trn1_matches_a_real_trn1_run(recorded):
    profiles, root = recorded
    out = root / "retimed-trn1"
    buffer = io.StringIO()
    code = main(["retime", str(profiles["trn2"]), "--instance", "trn1", "-o", str(out)],
                console=Console(file=buffer, width=160, color_system=None))
    assert code == 0, buffer.getvalue()
    assert "re-simulated as recorded" in buffer.getvalue()
    retimed, real, before = _device(out), _device(profiles["trn1"]), _device(profiles["trn2"])
    assert len(retimed) == len(real) == len(before) > 6
    # the device times of the real trn1 run, execution by execution (the 256x512x384 matmul and
    # the element-wise kernels are lowered for trn1 again, not only re-simulated)
    assert [(n, d) for n, _, d in retimed] == [(n, d) for n, _, d in real]
    # and its starts, to the ns: the queue is rebuilt as the runtime builds it, in whole ns
    assert [t for _, t, _ in retimed] == [t for _, t, _ in real]
    assert [d for _, _, d in retimed] != [d for _, _, d in before]  # trn1 is not trn2
    # the execution queue waits as the trn1 run's: moved, resized, dropped or added
    assert _queue_waits(out) == _queue_waits(profiles["trn1"]) != _queue_waits(profiles["trn2"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["window"]["target"] == "trn1" and manifest["retimed"]["recorded"]["target"] == "trn2"
    recording = json.loads((out / "trace.json").read_text())["trnscope"]
    assert recording["target"] == "trn1" and recording["retimed"]["recorded"]["target"] == "trn2"
    assert manifest["retimed"]["relowered"] and not manifest["retimed"]["resimulated"]
    # it is a profile like any other: summary, the explorer's loader and diff read it
    from trnscope.analysis import ProfileAnalysis, load_profile
    from trnscope.profiling.export import verify_profile

    assert verify_profile(out) == []
    a = ProfileAnalysis(load_profile(out))
    b = ProfileAnalysis(load_profile(profiles["trn1"]))
    assert a.device.device_time_ns == b.device.device_time_ns and a.device.target == "trn1"
    assert a.profile.target == "trn1" and a.headline()["retimed_from"] == "trn2"
    # diff puts the two side by side: targets named, each NEFF on both
    text = io.StringIO()
    assert main(["diff", str(profiles["trn2"]), str(out)], console=Console(file=text, width=200, color_system=None)) == 0
    assert "(trn1; retimed from trn2)" in text.getvalue() and "NEFFs and copies" in text.getvalue()
    from trnscope.analysis import diff_profiles

    kernels = diff_profiles(ProfileAnalysis(load_profile(profiles["trn2"])), a)["kernels"]
    assert kernels and all(k["status"] == "both" and k["base_calls"] == k["test_calls"] for k in kernels)


def test_the_queue_is_rebuilt_in_whole_ns_at_any_trace_time():
    """Absolute trace times near 5.46e12 us (a machine up for weeks), where doubles are ~1 ns
    apart: summing them as floats put about a fifth of the rebuilt starts 1-2 ns off."""
    from trnscope.profiling.retime import RetimeResult, _schedule

    spec = target_spec("trn1")
    launch = int(spec.neff_launch_latency_ns)
    base = 5_459_274_490_733_077  # ns
    events, expected, free = [], {}, 0
    for seq in range(200):
        submit_start, submit_dur = base + seq * 7_919 + seq % 13, 391 + seq % 7
        events.append({"ph": "X", "name": "nrt_execute", "ts": round(submit_start / 1000, 3),
                       "dur": round(submit_dur / 1000, 3), "args": {"seq": seq}})
        events.append({"ph": "X", "name": "nc_exec_running", "ts": round((submit_start + 5000) / 1000, 3), "dur": 1.0,
                       "args": {"seq": seq, "nc": 0, "neff_id": str(seq % 3)}})
        duration = 5_000 + 977 * (seq % 3)
        start = max(submit_start + submit_dur, free) + launch
        free = start + duration
        expected[seq] = (start, duration, start - (submit_start + submit_dur))
    moved = _schedule({"traceEvents": events}, None, {str(k): 5_000 + 977 * k + 0.4 for k in range(3)}, spec,
                      RetimeResult(out=Path("."), target="trn1"))
    got = {seq: (m.start_ns, m.dur_ns, m.queue_wait_ns + launch) for seq, m in moved.items()}
    assert got == {seq: (s, d, w) for seq, (s, d, w) in expected.items()}
    # what is written back reads as the same ns
    assert all(int(round(m.ts_us * 1000)) == m.start_ns for m in moved.values())


def test_overrides_and_bad_options():
    spec = target_spec("trn2", overrides=["hbm_bandwidth=2x"])
    assert spec.hbm_bytes_per_s_per_core == 2 * target_spec("trn2").hbm_bytes_per_s_per_core
    assert target_spec("trn1", overrides=["neff_launch_latency_ns=1000"]).neff_launch_latency_ns == 1000
    for bad, problem in ((["nope=2"], "spec field"), (["hbm_bandwidth=fast"], "number or a factor"),
                         (["hbm_bandwidth=-1"], "positive")):
        with pytest.raises(RetimeError, match=problem):
            target_spec("trn2", overrides=bad)
    assert (target_spec("trn2", lnc=2).lnc, target_spec("trn2", lnc=1).lnc, target_spec("trn1", lnc=1).lnc) == (2, 1, 1)
    assert target_spec("trn2", lnc=2).cores_per_chip == 4
    with pytest.raises(RetimeError, match="allowed values are 1"):
        target_spec("trn1", lnc=2)
    with pytest.raises(RetimeError, match="unknown Trainium instance"):
        target_spec("trn9")


def test_recipes_round_trip():
    meta = TensorMeta.contiguous((4, 8), "float32")
    call = OpCall("aten::add.Tensor", (meta, TensorMeta((8,), (1,), meta.dtype, 3)), (meta,),
                  (("alpha", RuntimeScalar("alpha", "float", 1)), ("dims", (0, -1)), ("eps", float("inf")), ("flag", None)))
    assert recipe.decode(json.loads(json.dumps(recipe.encode(call)))) == call
    with pytest.raises(recipe.NoRecipe):
        recipe.encode(OpCall("x", (), (), (("f", object()),)))
