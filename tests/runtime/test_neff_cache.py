"""The persistent NEFF cache: a second process reuses the first one's NEFFs and timelines; entries are
keyed on trnscope's build and the target spec's content; a damaged entry is reported once, removed
and rebuilt, never trusted; the cache can be moved or turned off; compile metrics count it all.
Everything is checked by counts and contents, never by time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trnscope import hw, metrics, reset_caches
from trnscope.runtime import host_costs
from trnscope.compiler import OpCall, lowering as _lowering  # noqa: F401
from trnscope.compiler.lowering import clear_cache
from trnscope.compiler.meta import TensorMeta
from trnscope.runtime import EmulatedClock, NeuronCoreRuntime, compile_watch, neff_cache

SRC = Path(__file__).resolve().parents[2] / "src"
X = TensorMeta.contiguous((256, 512), "float32")
W = TensorMeta.contiguous((512, 384), "float32")
O = TensorMeta.contiguous((256, 384), "float32")


def _calls() -> list[OpCall]:
    return [OpCall.make("aten::mm", (X, W), (O,)), OpCall.make("aten::exp", (X,), (X,)),
            OpCall.make("aten::addcdiv", (X, X, X), (X,), {"value": -0.125})]


@pytest.fixture
def cache(tmp_path, monkeypatch, fresh_caches):
    """A process-wide cache in a fresh directory, and nothing in memory in front of it."""
    c = neff_cache.NeffCache(tmp_path / "neff", enabled=True)
    monkeypatch.setattr(neff_cache, "_cache", c)
    metrics.clear_all()
    return c


def _run(calls, spec=hw.TRN2) -> tuple[NeuronCoreRuntime, list]:
    rt = NeuronCoreRuntime(0, EmulatedClock(), spec)
    rt.recording = True
    for call in calls:
        rt.execute(call)
    return rt, rt.records


def test_an_entry_is_read_back_with_its_timeline(cache):
    rt1, recs1 = _run(_calls())
    assert rt1.stats()["neffs_compiled"] == 3 and metrics.get_counter_value("CompilationCache.DiskWrites") == 3
    reset_caches()  # as a new process: nothing in memory
    rt2, recs2 = _run(_calls())
    s = rt2.stats()
    assert (s["neffs_compiled"], s["neffs_loaded"]) == (0, 3)
    assert metrics.get_counter_value("CompilationCache.DiskHits") == 3
    for a, b in zip(recs1, recs2):
        assert a.neff_id == b.neff_id and a.device_end_ns - a.device_start_ns == b.device_end_ns - b.device_start_ns
        # the host pays the model's NEFF load instead of its compile (runtime.hostcost)
        assert a.compile_ns == host_costs().compile_ns(len(a.program.instructions))
        assert b.compile_ns == host_costs().neff_load_ns and list(b.timeline.start_ns) == list(a.timeline.start_ns)
        assert b.timeline.summary == json.loads(json.dumps(a.timeline.summary))
    # the timeline came from disk, not from the simulator; the NEFF's instructions were never needed
    assert not recs2[0].program.decoded
    assert recs2[0].program.instructions == recs1[0].program.instructions
    files = sorted(p.name for p in cache.root.rglob("*") if p.is_file())
    assert sum(n.endswith(".neff") for n in files) == 3 and sum(n.endswith(".timeline.npz") for n in files) == 3
    assert sum(n.endswith(".json") for n in files) == 3


def test_a_runtime_scalars_value_does_not_make_a_new_entry(cache):
    _run([OpCall.make("aten::addcdiv", (X, X, X), (X,), {"value": v}) for v in (0.5, -3.0, 1e-4)])
    assert metrics.get_counter_value("Compilation.NeffsCompiled") == 1
    assert len(list(cache.root.rglob("keys/*.json"))) == 1


@pytest.mark.parametrize("damage", ["truncate_neff", "flip_neff", "flip_timeline", "garbage_record", "other_key"])
def test_a_damaged_entry_is_reported_once_and_rebuilt(cache, damage):
    call = _calls()[0]
    _run([call])
    record = next(cache.root.rglob("keys/*.json"))
    rec = json.loads(record.read_bytes())
    neff_file = record.parent.parent / rec["neff"]
    tl_file = record.parent.parent / rec["timeline"]
    if damage == "truncate_neff":
        neff_file.write_bytes(neff_file.read_bytes()[:-100])
    elif damage == "flip_neff":
        data = bytearray(neff_file.read_bytes())
        data[2000] ^= 0xFF
        neff_file.write_bytes(bytes(data))
    elif damage == "flip_timeline":
        data = bytearray(tl_file.read_bytes())
        data[len(data) // 2] ^= 0x01
        tl_file.write_bytes(bytes(data))
    elif damage == "garbage_record":
        record.write_bytes(b'{"format": 1, "key": ')
    else:
        record.write_bytes(json.dumps(dict(rec, key=rec["key"] + " ")).encode())
    reset_caches()
    with pytest.warns(neff_cache.NeffCacheWarning, match="damaged"):
        rt, _ = _run([call])
    assert rt.stats()["neffs_compiled"] == 1  # rebuilt, not trusted
    assert metrics.get_counter_value("CompilationCache.CorruptEntries") == 1
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt entry is whole: no second report
        rt, _ = _run([call])
    assert rt.stats()["neffs_loaded"] == 1


def test_entries_are_keyed_on_the_build_and_the_specs_content(cache, monkeypatch):
    call = _calls()[1]
    _run([call])
    slow = hw.TRN2.replace(hbm_bytes_per_s_per_core=hw.TRN2.hbm_bytes_per_s_per_core / 8)  # same name
    clear_cache()
    rt, recs = _run([call], slow)
    assert rt.stats()["neffs_compiled"] == 1  # another spec's content: its own entry
    clear_cache()
    monkeypatch.setattr(neff_cache, "_fingerprint", "0123456789abcdef")  # another build of trnscope
    rt, _ = _run([call])
    assert rt.stats()["neffs_compiled"] == 1 and rt.stats()["neffs_loaded"] == 0
    builds = sorted(p.name for p in cache.root.iterdir())
    assert len(builds) == 2 and any(b.endswith("0123456789abcdef") for b in builds)


def test_old_builds_are_removed_when_another_build_writes(cache, monkeypatch):
    for i in range(4):
        (cache.root / f"trnscope-0.0.{i}-{i:016x}").mkdir(parents=True)
        os.utime(cache.root / f"trnscope-0.0.{i}-{i:016x}", (1000 + i, 1000 + i))
    _run([_calls()[1]])
    names = sorted(p.name for p in cache.root.iterdir())
    assert len(names) == neff_cache.KEEP_BUILDS and "trnscope-0.0.3-0000000000000003" in names


def test_the_cache_can_be_moved_or_turned_off(tmp_path, monkeypatch):
    for var in neff_cache.DIR_ENV + neff_cache.DISABLE_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert neff_cache.root_dir() == tmp_path / "xdg" / "trnscope" / "neff"
    monkeypatch.setenv("TRNSCOPE_NEFF_CACHE_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "a"))
    assert neff_cache.root_dir() == tmp_path / "a"  # TorchNeuron's variable first
    assert neff_cache.NeffCache().enabled
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    off = neff_cache.NeffCache()
    assert not off.enabled
    monkeypatch.setattr(neff_cache, "_cache", off)
    clear_cache()
    rt, _ = _run([_calls()[1]])
    assert rt.stats()["neffs_compiled"] == 1 and not (tmp_path / "a").exists()
    clear_cache()


_SCRIPT = """
import json, torch, trnscope
from trnscope import runtime, metrics
a = torch.randn(192, 256, device="neuron")
b = torch.randn(256, 320, device="neuron")
(a @ b).exp().mul(0.5)
torch.neuron.synchronize()
rt = runtime.core(0)
import sys
print(json.dumps({"stats": rt.stats(), "disk_hits": metrics.get_counter_value("CompilationCache.DiskHits"),
                  "report": metrics.report(), "simulator": "numba" in sys.modules}))
"""


def test_a_second_process_reuses_the_first_ones_neffs(tmp_path):
    env = dict(os.environ, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path), PYTHONPATH=str(SRC),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    first, second = runs
    assert first["stats"]["neffs_compiled"] >= 3 and first["stats"]["neffs_loaded"] == 0
    assert second["stats"]["neffs_compiled"] == 0
    assert second["stats"]["neffs_loaded"] == first["stats"]["neffs_compiled"] == second["disk_hits"]
    assert "Counter: CompilationCache.DiskHits" in second["report"]
    assert first["simulator"] and not second["simulator"]  # every timeline came from the cache
    assert "Metric: CompilationTime" in first["report"] and "Metric: CompilationTime" not in second["report"]


def test_metrics_report_and_clear(cache):
    _run(_calls()[:2])
    text = metrics.report()
    for name in ("Compilation.NeffsCompiled", "CompilationCache.InMemoryMisses", "CompilationCache.DiskMisses",
                 "CompilationCache.DiskWrites"):
        assert f"Counter: {name}" in text and metrics.get_counter_value(name) == 2
    assert metrics.get_metric_data("CompilationTime")["total_samples"] == 2
    assert set(metrics.get_compilation_metrics()) >= {"Compilation.NeffsCompiled", "CompilationTime"}
    assert metrics.report_filtered(["Compilation.NeffsCompiled"], []).count("Counter:") == 1
    metrics.clear_all()
    assert metrics.get_counter_value("Compilation.NeffsCompiled") is None and not metrics.get_metric_names()


def test_an_op_that_keeps_compiling_for_new_values_is_named_once(cache, monkeypatch):
    compile_watch.reset()
    monkeypatch.setenv("TRNSCOPE_RECOMPILE_WARN_AFTER", "4")
    # leaky_relu's slope is compiled into its kernel: a new slope is a new NEFF
    calls = [OpCall.make("aten::leaky_relu", (X,), (X,), {"negative_slope": 0.01 * (i + 1)}) for i in range(6)]
    with pytest.warns(compile_watch.RecompileWarning, match=r"aten::leaky_relu has compiled 4 NEFFs .*'negative_slope'") \
            as caught:
        _run(calls)
    assert sum(issubclass(w.category, compile_watch.RecompileWarning) for w in caught) == 1
    compile_watch.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", compile_watch.RecompileWarning)
        # many tensor shapes of one op, each reused, are a model's parameters: below the shape limit
        _run([OpCall.make("aten::exp", (m,), (m,)) for m in
              (TensorMeta.contiguous((n, 8), "float32") for n in range(1, 9))])


def test_a_build_directory_is_kept_under_its_size_cap(cache, monkeypatch):
    calls = [OpCall.make("aten::exp", (m,), (m,)) for m in (TensorMeta.contiguous((n, 64), "float32")
                                                             for n in range(1, 13))]
    _run(calls)
    build = next(cache.root.iterdir())
    size = sum(p.stat().st_size for p in build.rglob("*") if p.is_file())
    records = sorted(build.rglob("keys/*.json"))
    assert len(records) == 12
    for i, r in enumerate(records):  # written in this order
        os.utime(r, (1000 + i, 1000 + i))
    cache.max_bytes = size // 2
    cache._cap(build)
    left = list(build.rglob("keys/*.json"))
    assert 0 < len(left) < 12 and records[-1] in left and records[0] not in left  # the oldest went first
    assert sum(p.stat().st_size for p in build.rglob("*") if p.is_file()) <= size // 2
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # evicted entries are misses, not damage
        rt, _ = _run(calls)
    assert rt.stats()["neffs_loaded"] == len(left) and rt.stats()["neffs_compiled"] == 12 - len(left)
