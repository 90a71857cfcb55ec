"""NeuronProfiler.export_trace: the profile directory, its files and their formats."""

import hashlib
import os
import re
import socket
import time

import pytest
import torch
from torch.profiler import profile, schedule

from trnscope.isa import neff as neff_format
from trnscope.profiling import NeuronConfig, NeuronProfiler, ProfileMode, capture
from trnscope.profiling.export import load_manifest, verify_profile
from trnscope.profiling.ntff import NtffFormatError, read_header, read_ntff

from .helpers import ACTIVITIES, HIDDEN, ROWS, check_trace_event_format, load_json, profile_once, x_events

ALL_MODES = [ProfileMode.DEVICE, ProfileMode.RUNTIME, ProfileMode.CPU_UTIL, ProfileMode.HOST_MEMORY]


def naive(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@pytest.fixture(scope="module")
def exported(xw, tmp_path_factory):
    x, w = xw
    out = tmp_path_factory.mktemp("export")
    prof, where, _ = profile_once(lambda: naive(x, w).cpu(), out, modes=ALL_MODES, record_shapes=True,
                                  with_stack=True)
    return prof, where, out


def test_directory_layout(exported):
    prof, where, out = exported
    assert where.parent.name == f"{socket.gethostname()}_pid_{os.getpid()}"
    assert where.parent.parent == out
    assert re.fullmatch(r"\d{8}_\d{6}_\d{6}(_\d+)?", where.name)
    names = {p.name for p in where.iterdir()}
    assert {"trace.json", "system_trace.json", "cpu_util.json", "host_mem.json", "manifest.json"} <= names
    assert not [n for n in names if n.startswith(".")]  # no temp files left behind


def test_neff_ntff_pairing_by_id(exported):
    _, where, _ = exported
    neffs = {re.fullmatch(r"neff_(\d+)\.neff", p.name).group(1): p for p in where.glob("neff_*.neff")}
    ntffs = {re.fullmatch(r"(\d+)_instid_0_vnc_(\d+)\.ntff", p.name).group(1): p for p in where.glob("*.ntff")}
    assert len(neffs) == 6 and set(neffs) == set(ntffs)
    for nid, p in neffs.items():
        program = neff_format.load(p)
        assert str(program.neff_id) == nid
        header, tables = read_ntff(ntffs[nid])
        assert header["neff_id"] == nid and header["neff_file"] == p.name and header["vnc"] == 0
        assert header["instruction_count"] == len(program.instructions) == tables["instruction"].num_rows
        assert header["truncated"] is False
        assert len(header["executions"]) == 1
        ex = header["executions"][0]
        assert ex["end_ns"] > ex["start_ns"]
        assert header["summary"]["total_time_ns"] == pytest.approx((ex["end_ns"] - ex["start_ns"]), abs=1)
        ins = tables["instruction"].to_pydict()
        assert set(ins["engine"]) <= {"tensor", "vector", "scalar", "gpsimd", "sync", "dma"}
        assert all(e >= s for s, e in zip(ins["start_ns"], ins["end_ns"]))
        assert tables["dma"].num_rows == sum(1 for e in ins["engine"] if e == "dma")
        sem = tables["semaphore"].to_pydict()
        assert set(sem["kind"]) <= {"wait", "signal"}


def test_ntff_is_checked_when_read(exported, tmp_path):
    _, where, _ = exported
    src = next(where.glob("*.ntff"))
    data = bytearray(src.read_bytes())
    data[-3] ^= 0xFF
    bad = tmp_path / src.name
    bad.write_bytes(bytes(data))
    read_header(bad)  # the header is intact
    with pytest.raises(NtffFormatError, match="hash mismatch"):
        read_ntff(bad)
    (tmp_path / "x.ntff").write_bytes(b"NEFF" + bytes(60))
    with pytest.raises(NtffFormatError, match="bad magic"):
        read_ntff(tmp_path / "x.ntff")


def test_framework_trace_format_and_device_lanes(exported):
    _, where, _ = exported
    doc = load_json(where / "trace.json")
    check_trace_event_format(doc)
    names = {e["name"] for e in x_events(doc)}
    assert not any(n.startswith("trnscope::") for n in names)
    # no emulator Python frames (with_stack=True); torch.neuron.* calls show as the user's calls
    assert all(n.startswith("trnscope/device/neuron.py(") for n in names if "trnscope/" in n)
    assert "aten::set_" not in names  # host views of the emulator are gone
    ops = x_events(doc, "cpu_op")
    assert {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"} <= {e["name"] for e in ops}
    assert any("Input Dims" in e.get("args", {}) for e in ops)  # record_shapes kept
    assert x_events(doc, "python_function")  # with_stack kept (user frames)
    runtime = x_events(doc, "privateuse1_runtime")
    driver = x_events(doc, "privateuse1_driver")
    kernels = [e for e in runtime if e["name"] == "nrt_execute"]
    assert len(kernels) == 6
    assert {e["name"] for e in runtime} >= {"nrt_execute", "nrt_tensor_read"}
    assert len(driver) == 7  # 6 NEFFs + the .cpu() copy
    assert all(e["pid"] == 0 and e["tid"] == 0 for e in driver)
    meta = {(e["pid"], e["name"]): e["args"] for e in doc["traceEvents"] if e.get("ph") == "M"}
    assert meta[(0, "process_name")]["name"] == "neuron:0"
    # ac2g flows connect each runtime call to its device event, id = correlation
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "ac2g"]
    assert len(flows) == 2 * len(driver)
    corr = {e["args"]["correlation"] for e in driver}
    assert corr == {e["args"]["correlation"] for e in runtime if e["name"] != "cpu_fallback"}
    # each runtime call sits inside the ATen op that dispatched it, on the same thread
    by_ext = {e["args"]["External id"]: e for e in ops}
    for r in runtime:
        op = by_ext[r["args"]["External id"]]
        assert op["tid"] == r["tid"]
        assert op["ts"] <= r["ts"] and r["ts"] + r["dur"] <= op["ts"] + op["dur"] + 1e-3, (op, r)
    # device work starts after it was submitted
    sub = {e["args"]["correlation"]: e for e in runtime}
    for d in driver:
        assert d["ts"] >= sub[d["args"]["correlation"]]["ts"]
    assert doc["trnscope"]["clock"] == "emulated" and doc["trnscope"]["executions"] == 7


def test_system_trace(exported):
    _, where, _ = exported
    doc = load_json(where / "system_trace.json")
    check_trace_event_format(doc)
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    # lanes only where there is something to show: the core that worked, and of its queue and
    # transfer lanes only the one used (this window reads one result back, writes nothing)
    nc_lanes = {t for t in threads if not t.startswith("framework/")}
    assert {"neuron_rt/NC:0", "neuron_hw/NC:0", "NC:0/device_to_host_transfers"} <= nc_lanes
    assert "NC:0/host_to_device_transfers" not in nc_lanes
    assert all(":0" in t for t in nc_lanes), nc_lanes  # no lanes for the seven idle NeuronCores
    assert doc["neuron"]["neuron_cores"] == [0]
    assert any(t.startswith("framework/TID:") for t in threads)
    hw = x_events(doc, "neuron_hw", "nc_exec_running")
    rt = x_events(doc, "neuron_rt", "nrt_execute")
    assert len(hw) == len(rt) == 6
    assert len(x_events(doc, "dma", "device_to_host")) == 1
    assert len(x_events(doc, "framework")) == 7
    # flows: framework -> runtime -> hardware, linked by ids
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "neuron_flow"]
    ids = {e["id"] for e in flows}
    for e in hw:
        assert e["args"]["flow_in"] in ids
        assert e["args"]["ntff"].endswith("_instid_0_vnc_0.ntff") and (where / e["args"]["ntff"]).is_file()
    counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert {"NC:0/hbm_usage", "host_cpu_util", "host_memory"} <= {e["name"] for e in counters}
    assert all(e["args"]["bytes"] > 0 for e in counters if e["name"] == "NC:0/hbm_usage")
    assert doc["neuron"]["schema"] == "trnscope-system-trace" and len(doc["neuron"]["neffs"]) == 6


def test_host_samples(exported):
    _, where, _ = exported
    cpu = load_json(where / "cpu_util.json")
    mem = load_json(where / "host_mem.json")
    assert cpu["samples"] and mem["samples"]
    assert all(0.0 <= s["util"] <= 100.0 for s in cpu["samples"])
    # the emulated program's host thread, from the model: emulated intervals tiling the window
    assert {s["cpu_id"] for s in cpu["samples"]} == {-1} and cpu["source"] == "model"
    window = load_manifest(where)["window"]
    stamps = [(s["timestamp"], s["timestamp"] + s["duration"]) for s in cpu["samples"]]
    assert stamps[0][0] == window["start_ns"] and stamps[-1][1] == window["end_ns"]
    assert all(a[1] == b[0] for a, b in zip(stamps, stamps[1:]))
    assert all(s["usage"] > 0 and s["mem_total"] > 0 for s in mem["samples"])
    assert all(s["emulated_device_bytes"] > 0 for s in mem["samples"])  # device tensors exist


def test_manifest_lists_every_file_with_hashes(exported, tmp_path):
    _, where, _ = exported
    m = load_manifest(where)
    assert m["complete"] is True and m["reason"] is None
    listed = {f["path"] for f in m["files"]}
    assert listed == {p.name for p in where.iterdir()} - {"manifest.json"}
    for f in m["files"]:
        data = (where / f["path"]).read_bytes()
        assert f["bytes"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()
    assert m["window"]["kernels"] == 6 and m["window"]["missing_in_flight"] == 0
    assert verify_profile(where) == []
    # a damaged copy is caught
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(where, copy)
    (copy / "trace.json").write_bytes(b"{}")
    assert any("trace.json" in p for p in verify_profile(copy))


def test_modes_select_files(xw, tmp_path):
    x, w = xw
    _, where, _ = profile_once(lambda: naive(x, w), tmp_path, modes=[ProfileMode.RUNTIME])
    names = {p.name for p in where.iterdir()}
    assert names == {"trace.json", "system_trace.json", "manifest.json"}
    _, where, _ = profile_once(lambda: naive(x, w), tmp_path / "d", modes=[ProfileMode.DEVICE])
    names = {p.name for p in where.iterdir()}
    assert "system_trace.json" not in names and len([n for n in names if n.endswith(".ntff")]) == 6


def test_export_chrome_trace_has_device_lanes(xw, tmp_path):
    x, w = xw
    prof, _, _ = profile_once(lambda: naive(x, w), tmp_path, export=False)
    path = tmp_path / "neuron_trace.json"
    prof.export_chrome_trace(str(path))
    doc = load_json(path)
    check_trace_event_format(doc)
    assert len(x_events(doc, "privateuse1_driver")) == 6
    assert not list(tmp_path.glob("*_pid_*"))  # nothing exported without NeuronProfiler


def test_neff_cache_dir_is_used(xw, tmp_path):
    from trnscope.profiling import NeuronConfig

    x, w = xw
    cache = tmp_path / "cache"
    cache.mkdir()
    cfg = NeuronConfig(profile_output_dir=tmp_path / "out", neff_cache_dir=cache)
    _, where, _ = profile_once(lambda: naive(x, w), None, modes=cfg)
    m = load_manifest(where)
    assert {f["source"] for f in m["files"] if f["kind"] == "neff"} == {"program"}
    # with the NEFFs in the cache, the export copies them from there
    for p in where.glob("neff_*.neff"):
        (cache / p.name).write_bytes(p.read_bytes())
    _, where2, _ = profile_once(lambda: naive(x, w), None, modes=NeuronConfig(
        profile_output_dir=tmp_path / "out", neff_cache_dir=cache))
    assert {f["source"] for f in load_manifest(where2)["files"] if f["kind"] == "neff"} == {"neff_cache_dir"}


def test_trace_opens_in_trnscope_trace_reader(exported):
    trace_mod = pytest.importorskip("trnscope.trace")
    _, where, _ = exported
    for name in ("trace.json", "system_trace.json"):
        t = trace_mod.read_kineto(where / name)
        assert t is not None


def _hta():
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError as exc:  # not a skip: `make test` installs it, and the must-show depends on it
        raise AssertionError("HTA (PyPI traceinsight, pinned in pyproject's `test` extra) is not installed: "
                             "run `make install` or `pip install -e '.[test]'`") from exc
    return TraceAnalysis


def _union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@pytest.fixture
def hta_exact_times():
    """HTA by default shrinks every ns-resolution event inward to whole µs (its workaround for
    pytorch#122425), which is up to 2 µs on kernels of 3 µs; its own switch turns that off so
    that its figures can be compared with ours exactly."""
    _hta()
    from hta.configs.env_options import HTAEnvOptions

    opts = HTAEnvOptions.instance()
    saved = opts.disable_ns_rounding()
    opts.set_disable_ns_rounding(True)
    yield
    opts.set_disable_ns_rounding(saved)


def test_trace_loads_in_hta(exported, tmp_path, hta_exact_times):
    """HTA (Holistic Trace Analysis) reads the framework trace and analyses our device lane.

    HTA takes every event with a ``stream`` arg for device work and joins it to its launch through
    ``correlation``, whatever the category, so its kernel and temporal breakdowns see the NEFF
    executions and the DtoH copy. (Its idle-time breakdown and launch statistics key on CUDA
    category and API names and have nothing to say about a NeuronCore: docs/profiling.md.)
    """
    TraceAnalysis = _hta()
    _, where, _ = exported
    import shutil

    doc = load_json(where / "trace.json")
    device = x_events(doc, "privateuse1_driver")
    assert len(device) == 7
    shutil.copy(where / "trace.json", tmp_path / "rank-0.json")
    analysis = TraceAnalysis(trace_dir=str(tmp_path))
    df = analysis.t.get_trace(0)
    names = analysis.t.symbol_table.get_sym_table()

    # what HTA takes for device work is exactly our device lane, each joined to its runtime call
    gpu = df[df["stream"].ne(-1)]
    assert sorted(names[n] for n in gpu["name"]) == sorted(e["name"] for e in device)
    for _, k in gpu.iterrows():
        launch = df.loc[k["index_correlation"]]
        assert names[launch["name"]] in ("nrt_execute", "nrt_tensor_read")
        assert names[launch["cat"]] == "privateuse1_runtime" and launch["correlation"] == k["correlation"]
    host_ops = {names[n] for n in df[df["stream"].eq(-1)]["name"]}
    assert {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"} <= host_ops

    # kernel breakdown: per-NEFF time as trnscope simulated it
    by_type, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    got = dict(zip(per_kernel["name"], per_kernel["sum (us)"]))
    want = {e["name"]: e["dur"] for e in device}
    assert set(got) == set(want)
    for name, dur in want.items():
        assert got[name] == pytest.approx(dur, abs=0.01), name
    kinds = dict(zip(per_kernel["name"], per_kernel["kernel_type"]))
    assert kinds.pop("Memcpy DtoH (Neuron -> Host)") == "MEMORY"
    assert set(kinds.values()) == {"COMPUTATION"}
    shares = dict(zip(by_type["kernel_type"], by_type["sum"]))  # whole µs: HTA truncates each kernel's
    assert shares["MEMORY"] == pytest.approx(want["Memcpy DtoH (Neuron -> Host)"], abs=1)
    assert shares["COMPUTATION"] == pytest.approx(sum(want[n] for n in kinds), abs=len(kinds))

    # temporal breakdown: span of device activity, busy and idle time, as computed from our lane
    tb = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    span = max(e["ts"] + e["dur"] for e in device) - min(e["ts"] for e in device)
    busy = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in device])
    compute = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in device if not e["name"].startswith("Memcpy")])
    assert tb["kernel_time(us)"] == pytest.approx(span, abs=0.01)
    assert tb["idle_time(us)"] == pytest.approx(span - busy, abs=0.01)
    assert tb["compute_time(us)"] == pytest.approx(compute, abs=0.01)
    assert tb["non_compute_time(us)"] == pytest.approx(busy - compute, abs=0.01)


def test_a_failed_export_is_marked_incomplete_and_does_not_raise(xw, tmp_path, monkeypatch):
    from trnscope.profiling import NeuronProfilerWarning, export

    x, w = xw

    def broken(*a, **k):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(export, "FrameworkView", broken)
    with pytest.warns(NeuronProfilerWarning, match="incomplete: OSError: disk full"):
        _, where, _ = profile_once(lambda: naive(x, w), tmp_path)
    m = load_manifest(where)
    assert m["complete"] is False and "disk full" in m["reason"]
    assert verify_profile(where)[0].startswith("marked incomplete")
    # what was written before the failure is listed and intact
    assert {f["kind"] for f in m["files"]} == {"neff", "ntff", "recipes"}  # recipes.json (retime) is written before the trace


def _lanes(doc):
    """(process names, thread names, event count per (pid, tid)) of a Chrome trace."""
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    counts = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("X", "i"):
            counts[(e["pid"], e.get("tid"))] = counts.get((e["pid"], e.get("tid")), 0) + 1
    return procs, threads, counts


def test_lanes_only_for_neuroncores_that_worked(tmp_path):
    """Capture turns recording on for every core of the chip; the traces still only draw the
    cores that did work (here neuron:1 of 8), with no Kineto "GPU n" placeholder processes."""
    if torch.neuron.device_count() < 2:
        pytest.skip("needs a chip with two NeuronCores")
    x = torch.randn(ROWS, HIDDEN).to("neuron:1")
    # torch.neuron.synchronize() waits for the current NeuronCore (0): wait for neuron:1 itself, or
    # its two kernels are still running when the window closes (and are left out)
    prof, where, _ = profile_once(lambda: (x * x + 1, torch.neuron.synchronize("neuron:1")), tmp_path)
    trace = load_json(where / "trace.json")
    check_trace_event_format(trace)
    procs, threads, counts = _lanes(trace)
    host_pid = prof.profiler._trnscope_window.pid
    device_procs = {pid: name for pid, name in procs.items() if pid != host_pid}
    assert list(device_procs.values()) == ["neuron:1"], procs
    (dev_pid,) = device_procs
    assert counts[(dev_pid, 0)] == 2 and threads[(dev_pid, 0)] == "Stream 0"  # mul, add
    labels = [e["args"]["labels"] for e in trace["traceEvents"] if e.get("name") == "process_labels"]
    assert not [lab for lab in labels if lab.startswith("GPU ")], labels
    assert trace["trnscope"]["active_neuron_cores"] == [1]
    assert len(trace["trnscope"]["neuron_cores"]) == torch.neuron.device_count()  # all were captured

    system = load_json(where / "system_trace.json")
    check_trace_event_format(system)
    _, sthreads, scounts = _lanes(system)
    nc_lanes = {name: scounts.get(key, 0) for key, name in sthreads.items() if not name.startswith("framework/")}
    # nrt_execute + cache-hit instants; the add, submitted while the mul still runs, waits in the
    # execution queue for the core and then pays its own NEFF start (docs/cost-model.md)
    assert nc_lanes == {"neuron_rt/NC:1": 4, "neuron_rt/NC:1/exec_queue": 1, "neuron_hw/NC:1": 2}, nc_lanes
    assert system["neuron"]["neuron_cores"] == [1]
    assert load_manifest(where)["window"]["active_neuron_cores"] == [1]


def test_lanes_for_neuroncores_selected_explicitly(tmp_path):
    """capture_enabled_for_nc names cores the user wants to see: an idle one keeps its lanes."""
    if torch.neuron.device_count() < 3:
        pytest.skip("needs a chip with three NeuronCores")
    x = torch.randn(ROWS, HIDDEN).to("neuron:1")
    cfg = NeuronConfig(profile_output_dir=tmp_path, capture_enabled_for_nc="1-2")
    # torch.neuron.synchronize() waits for the current NeuronCore (0): wait for neuron:1 itself,
    # or the execution may still be running when the window closes (and is left out)
    _, where, _ = profile_once(lambda: (x * x, torch.neuron.synchronize("neuron:1")), None, modes=cfg)
    procs, _, counts = _lanes(load_json(where / "trace.json"))
    assert sorted(n for n in procs.values() if n.startswith("neuron:")) == ["neuron:1", "neuron:2"]
    _, sthreads, scounts = _lanes(load_json(where / "system_trace.json"))
    hw = {name: scounts.get(key, 0) for key, name in sthreads.items() if name.startswith("neuron_hw/")}
    assert hw == {"neuron_hw/NC:1": 1, "neuron_hw/NC:2": 0}


def test_session_span_is_clipped_to_the_window(xw, tmp_path):
    """Kineto stamps its session span when it starts, before the window opens; after large
    numerics its start-up takes milliseconds. The exported trace must not open on that stretch:
    the span, and with it every event of trace.json, lies within the window."""
    x, w = xw
    started = {}
    kineto_start = capture.ORIGINALS["_start_trace"]

    def slow_kineto_start(self):  # Kineto's start-up made slow, as after tens of MiB of numerics
        kineto_start(self)
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
        started["done"] = True

    capture.ORIGINALS["_start_trace"] = slow_kineto_start
    try:
        cfg = NeuronConfig(profile_output_dir=tmp_path)
        exporter = NeuronProfiler(cfg)
        naive(x, w)
        torch.neuron.synchronize()
        with profile(activities=ACTIVITIES, experimental_config=cfg, on_trace_ready=exporter.export_trace,
                     schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
            for _ in range(2):
                naive(x, w)
                torch.neuron.synchronize()
                prof.step()
    finally:
        capture.ORIGINALS["_start_trace"] = kineto_start
    assert started
    doc = load_json(exporter.last_export / "trace.json")
    base, meta = doc["baseTimeNanoseconds"], doc["trnscope"]
    lo = (meta["window_start_ns"] - base) / 1000.0
    hi = (meta["window_end_ns"] - base) / 1000.0
    span = [e for e in doc["traceEvents"] if e.get("cat") == "Trace"]
    assert span and all(lo - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-3 for e in span), (lo, hi, span)
    timed = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i") and isinstance(e.get("ts"), (int, float))]
    assert lo - 1e-3 <= min(e["ts"] for e in timed) and max(e["ts"] + e.get("dur", 0) for e in timed) <= hi + 1e-3
    # the 20 ms of start-up are outside the window: the window holds the step, not the start-up
    step = next(e for e in timed if e.get("name", "").startswith("ProfilerStep#"))
    assert step["ts"] - lo < 20_000, (step, lo, hi)
