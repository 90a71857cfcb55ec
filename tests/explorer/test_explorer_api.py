"""The explorer's HTTP API, through Starlette's TestClient."""

from __future__ import annotations

import orjson
import pytest
from starlette.testclient import TestClient

from explorer_testdata import entry_by
from trnscope.hw import logical_spec
from trnscope.explorer import create_app


def eid(listing, relpath_part: str) -> str:
    return entry_by(listing, relpath=lambda p: relpath_part in p)["id"]


def test_index_and_static_assets(client):
    import base64
    import hashlib
    import re

    page = client.get("/")
    assert page.status_code == 200 and "cdn" not in page.text.lower() and "https://" not in page.text
    version = re.search(r'href="/static/([0-9a-f]{12})/css/explorer\.css"', page.text).group(1)
    assert f'data-static="/static/{version}/"' in page.text  # where the boot script loads the modules from
    for asset in ("js/main.js", "js/timeline/timeline.js", "js/timeline/columns.js", "css/explorer.css"):
        response = client.get(f"/static/{version}/{asset}")
        assert response.status_code == 200, asset
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
        # the unversioned path still answers, revalidated by its ETag
        plain = client.get(f"/static/{asset}")
        assert plain.status_code == 200 and plain.headers["cache-control"] == "no-cache"
        assert plain.content == response.content
        assert client.get(f"/static/{asset}", headers={"if-none-match": plain.headers["etag"]}).status_code == 304
    assert "javascript" in client.get(f"/static/{version}/js/main.js").headers["content-type"]
    assert client.get("/static/js/nope.js").status_code == 404
    # the boot script is inlined and allowed by its hash, and no other inline script is
    boot = re.search(r"<script[^>]*>(.*?)</script>", page.text, re.S).group(1)
    assert "__trnscopeBoot" in boot and "main.js" in boot
    assert page.text.count("<script") == 1
    digest = base64.b64encode(hashlib.sha256(boot.encode()).digest()).decode()
    csp = page.headers["content-security-policy"]
    assert f"script-src 'self' 'sha256-{digest}';" in csp


def test_listing_finds_profiles_and_traces(listing):
    kinds = {e["relpath"]: e["kind"] for e in listing["entries"]}
    # naive, fused, the damaged copy, a training step, a torch.compile profile with steps, the
    # source-line profile (eager, compiled and NKI) and naive re-timed for trn1
    assert sum(1 for k in kinds.values() if k == "neuron") == 7
    assert any(p.endswith(".pt.trace.json.gz") for p in kinds)
    assert "bad/truncated.pt.trace.json" in kinds and "bad/garbage_trace.json.gz" in kinds
    assert "bad/notes.json" not in kinds
    naive = entry_by(listing, relpath=lambda p: p.startswith("rmsnorm/naive"))
    assert naive["manifest"]["complete"] and naive["manifest"]["neffs"] == 6


def test_card_summary_ops(client, listing):
    naive = eid(listing, "rmsnorm/naive")
    card = client.get(f"/api/entries/{naive}/card").json()
    assert card["kind"] == "neuron" and card["headline"]["dispatches"] == 18
    assert card["recommendations"][0]["title"].startswith("Many small dispatches")
    summary = client.get(f"/api/entries/{naive}/summary").json()
    assert summary["device"]["source"] == "ntff" and summary["idle"]["regime"] in (
        "host-dispatch bound", "launch-latency bound")
    gap = summary["idle"]["largest"][0]
    assert gap["lane"].startswith("t") and gap["ts"] >= 0 and gap["after_op"].startswith("aten::")
    ops = client.get(f"/api/entries/{naive}/ops").json()
    mul = next(r for r in ops["ops"] if r["name"] == "aten::mul")
    assert mul["dispatches"] == 6 and len(mul["neffs"]) == 2 and all(n["ntff"] for n in mul["neffs"])
    assert mul["first_ts"] is not None


def test_neuron_timeline_groups(client, listing):
    layout = client.get(f"/api/entries/{eid(listing, 'rmsnorm/naive')}/timeline").json()
    groups = [g["id"] for g in layout["groups"]]
    assert groups[:4] == ["framework", "framework_stream", "neuron_rt", "neuron_hw"]
    assert "hbm" in groups and "host" in groups
    titles = [lane["title"] for lane in layout["lanes"]]
    assert any(t.startswith("framework/TID:") for t in titles)
    assert "neuron_rt/NC:0" in titles and "neuron_hw/NC:0" in titles and "NC:0/hbm_usage" in titles
    assert layout["start"] == 0 and layout["end"] > 0


def test_kineto_timeline_has_runtime_lanes(client, listing):
    layout = client.get(f"/api/entries/{eid(listing, 'critical_path_alexnet')}/timeline").json()
    groups = {g["id"]: g["title"] for g in layout["groups"]}
    assert {"cpu", "runtime", "gpu"} <= set(groups) and groups["runtime"] == "CUDA runtime"
    runtime = [lane for lane in layout["lanes"] if lane["runtime_only"]]
    assert runtime and all(lane["id"].startswith("r") for lane in runtime)
    lod = client.get(f"/api/entries/{eid(listing, 'critical_path_alexnet')}/lod",
                     params={"t0": layout["start"], "t1": layout["end"], "px": 800,
                             "lanes": ",".join(lane["id"] for lane in runtime)}).json()
    names = {lod["strings"][str(n)] for lane in runtime for n in lod["lanes"][lane["id"]]["name"]}
    assert names and all(n.startswith("cuda") for n in names)


def test_lod_is_bounded_by_pixels(client, listing):
    entry = eid(listing, "timeline_analysis")
    layout = client.get(f"/api/entries/{entry}/timeline").json()
    full = client.get(f"/api/entries/{entry}/lod", params={"t0": layout["start"], "t1": layout["end"], "px": 200}).json()
    for lane in layout["lanes"]:
        if lane["kind"] != "slices":
            continue
        data = full["lanes"][lane["id"]]
        per_level = {}
        for depth in data["depth"]:
            per_level[depth] = per_level.get(depth, 0) + 1
        assert all(count <= 201 for count in per_level.values()), lane["title"]  # one per pixel (+1 straddler)
        assert sum(data["merged"]) >= len(data["ts"])
    total = sum(len(v["ts"]) for v in full["lanes"].values() if "ts" in v)
    represented = sum(sum(v["merged"]) for v in full["lanes"].values() if "merged" in v)
    assert total < represented  # level of detail merged slices: the whole trace was not sent
    # a narrow window returns only what overlaps it, at full detail
    t0 = layout["start"] + (layout["end"] - layout["start"]) * 0.4
    t1 = t0 + (layout["end"] - layout["start"]) * 0.001
    narrow = client.get(f"/api/entries/{entry}/lod", params={"t0": t0, "t1": t1, "px": 1000}).json()
    for data in narrow["lanes"].values():
        for ts, dur in zip(data.get("ts", []), data.get("dur", [])):
            assert ts < t1 and ts + max(dur, 1) > t0


def _same(binary, plain, where="") -> None:
    """A decoded binary answer equals the JSON one: arrays element for element, the rest as is."""
    import numpy as np

    if isinstance(binary, np.ndarray):
        assert binary.tolist() == plain, where
    elif isinstance(binary, dict):
        assert set(binary) == set(plain), where
        for key in binary:
            _same(binary[key], plain[key], f"{where}/{key}")
    elif isinstance(binary, list):
        assert len(binary) == len(plain), where
        for i, (a, b) in enumerate(zip(binary, plain)):
            _same(a, b, f"{where}/{i}")
    else:
        assert binary == plain, where


@pytest.mark.parametrize("what", ["timeline_analysis", "rmsnorm/naive", "device"])
def test_binary_columns_carry_the_same_answer_as_json(client, listing, what):
    from trnscope.explorer import columns

    entry = eid(listing, "rmsnorm/naive" if what == "device" else what)
    base = f"/api/entries/{entry}"
    if what == "device":
        neff = client.get(f"{base}/summary").json()["device"]["neffs"][0]["neff_id"]
        base = f"{base}/device/{neff}/0"
    binary_accept = {"accept": columns.MEDIA_TYPE}
    packed = client.get(f"{base}/timeline", params={"px": 700}, headers=binary_accept)
    assert packed.headers["content-type"] == columns.MEDIA_TYPE
    layout = columns.decode(packed.content)
    _same(layout, client.get(f"{base}/timeline", params={"px": 700}).json())
    assert layout["initial_lod"]["lanes"]  # the first window came with the layout, as columns
    params = {"t0": layout["start"], "t1": (layout["start"] + layout["end"]) / 2, "px": 333}
    lod = client.get(f"{base}/lod", params=params, headers=binary_accept)
    _same(columns.decode(lod.content), client.get(f"{base}/lod", params=params).json())
    # errors stay JSON whatever was asked for
    bad = client.get(f"{base}/lod", params={"t0": 5, "t1": 1, "px": 10}, headers=binary_accept)
    assert bad.status_code == 400 and "t1 must be greater" in bad.json()["error"]["problem"]


def test_binary_columns_keep_wide_integers_exact():
    import numpy as np

    from trnscope.explorer import columns

    doc = {"a": np.array([1, -2, 3], np.int64), "big": np.array([2**40 + 1, 0], np.int64),
           "f": np.array([0.5, 1e300]), "empty": np.zeros(0, np.int32), "nested": [{"x": np.arange(3)}], "s": "text"}
    back = columns.decode(columns.encode(doc))
    assert back["a"].dtype == np.int32 and back["a"].tolist() == [1, -2, 3]
    assert back["big"].dtype == np.float64 and back["big"].tolist() == [2**40 + 1, 0]
    assert back["f"].tolist() == [0.5, 1e300] and back["empty"].tolist() == [] and back["s"] == "text"
    assert back["nested"][0]["x"].tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        columns.decode(b"JSON" + bytes(8))


@pytest.mark.parametrize("params, problem", [
    ({"t0": 10, "t1": 5, "px": 100}, "t1 must be greater"),
    ({"t0": 0, "t1": 5, "px": 0}, "px must be"),
    ({"t0": 0, "t1": 5, "px": 100000}, "px must be"),
    ({"t0": "x", "t1": 5, "px": 100}, "t0 must be a number"),
    ({"t1": 5, "px": 100}, "missing parameter t0"),
    ({"t0": 0, "t1": 5, "px": 100, "lanes": "t999"}, "unknown lane"),
])
def test_lod_rejects_bad_parameters(client, listing, params, problem):
    response = client.get(f"/api/entries/{eid(listing, 'rmsnorm/naive')}/lod", params=params)
    assert response.status_code == 400 and problem in response.json()["error"]["problem"]


def test_slice_details_follow_the_dependency_chain(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    ops = client.get(f"/api/entries/{entry}/ops").json()
    mul = next(r for r in ops["ops"] if r["name"] == "aten::mul")
    details = client.get(f"/api/entries/{entry}/slice/{mul['first_row']}").json()
    assert details["name"] == "aten::mul" and details["args"]["Input Dims"]
    downstream = {(d["name"], d["lane_title"]) for d in details["downstream"]}
    assert ("nrt_execute", "neuron_rt/NC:0") in downstream and ("nc_exec_running", "neuron_hw/NC:0") in downstream
    assert all("from" in d for d in details["downstream"])
    link = details["device_traces"][0]
    assert link["nc"] == 0 and link["ntff"].endswith("_vnc_0.ntff")
    hw = next(d for d in details["downstream"] if d["name"] == "nc_exec_running")
    upstream = client.get(f"/api/entries/{entry}/slice/{hw['row']}").json()["upstream"]
    assert [u["name"] for u in upstream][:2] == ["nrt_execute", "nrt_execute"]
    assert any(u.get("op", {}).get("name") == "aten::mul" for u in upstream)
    assert client.get(f"/api/entries/{entry}/slice/99999999").status_code == 400


def test_selection_summary(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    layout = client.get(f"/api/entries/{entry}/timeline").json()
    sel = client.get(f"/api/entries/{entry}/select", params={"t0": layout["start"], "t1": layout["end"]}).json()
    names = {n["name"]: n for n in sel["names"]}
    assert names["aten::mul"]["count"] == 6 and names["nc_exec_running"]["count"] == 18
    assert all(0 <= lane["busy_share"] <= 1 for lane in sel["lanes"])
    half = client.get(f"/api/entries/{entry}/select", params={"t0": layout["start"], "t1": layout["end"] / 2}).json()
    assert half["slices"] < sel["slices"]


def test_device_trace_endpoints(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    link = client.get(f"/api/entries/{entry}/summary").json()["device"]["neffs"][0]
    base = f"/api/entries/{entry}/device/{link['neff_id']}/0"
    layout = client.get(f"{base}/timeline").json()
    assert [g["id"] for g in layout["groups"]] == ["dma", "engines", "counters"]
    assert layout["color_by"] == "cat" and layout["framework_ops"]
    assert {lane["title"] for lane in layout["lanes"]} >= {"Tensor (LoadStationary)", "TensorMatrix (MultiplyMoving)",
                                                         "Vector", "Scalar", "GpSimd", "Sync", "DMA throughput"}
    execution = layout["executions"][0]
    assert isinstance(execution["start_ns"], str) and execution["system_ts"] >= 0 and execution["system_row"] >= 0
    lod = client.get(f"{base}/lod", params={"t0": 0, "t1": layout["end"], "px": 500}).json()
    engine_rows = [r for lane in layout["lanes"] if lane["group"] == "engines" for r in lod["lanes"][lane["id"]]["row"]]
    assert engine_rows
    details = [client.get(f"{base}/slice/{row}").json() for row in engine_rows[:20]]
    with_deps = [d for d in details if d.get("predecessors")]
    assert with_deps, "some engine instruction waits on another"
    dep = with_deps[0]["predecessors"][0]
    assert dep["semaphore"] and dep["ts"] <= with_deps[0]["ts"] and with_deps[0]["upstream"]
    back = client.get(f"/api/entries/{entry}/execution/{execution['seq']}").json()
    assert back["ts"] == pytest.approx(execution["system_ts"], abs=1)
    assert client.get(f"/api/entries/{entry}/device/123/0/timeline").status_code == 404


def test_compare(client, listing):
    base, test = eid(listing, "rmsnorm/naive"), eid(listing, "rmsnorm/fused")
    diff = client.get("/api/compare", params={"base": base, "test": test}).json()
    rows = {r["key"]: r for r in diff["summary"]}
    assert rows["dispatches"]["base"] == 18 and rows["dispatches"]["test"] == 3 and rows["dispatches"]["delta"] == -15
    assert diff["base"]["id"] == base and diff["test"]["recommendations"]
    assert client.get("/api/compare", params={"base": base}).status_code == 400


def test_bad_files_get_clear_errors_and_the_server_keeps_serving(client, listing):
    truncated = eid(listing, "bad/truncated")
    response = client.get(f"/api/entries/{truncated}/card")
    assert response.status_code == 422
    error = response.json()["error"]
    assert "JSON" in error["problem"] and error["hint"] and error["file"] == "bad/truncated.pt.trace.json"
    garbage = client.get(f"/api/entries/{eid(listing, 'bad/garbage')}/timeline")
    assert garbage.status_code == 422 and "gzip" in garbage.json()["error"]["problem"]
    # the failure is remembered and shown in the listing; other entries still work
    again = client.get("/api/entries").json()
    assert entry_by(again, id=truncated)["status"] == "error" and entry_by(again, id=truncated)["error"]["problem"]
    assert client.get(f"/api/entries/{eid(listing, 'rmsnorm/fused')}/card").status_code == 200
    broken = eid(listing, "broken_profile")
    card = client.get(f"/api/entries/{broken}/card")
    assert card.status_code == 200  # its system trace is intact; the damaged NTFF is reported
    assert any("the manifest recorded" in w for w in card.json()["warnings"])
    assert any("the manifest recorded" in p for p in entry_by(listing, id=broken)["manifest"]["problems"])
    neff = client.get(f"/api/entries/{broken}/summary").json()["device"]["neffs"][0]["neff_id"]
    device = client.get(f"/api/entries/{broken}/device/{neff}/0/timeline")
    assert device.status_code == 422 and "truncated" in device.json()["error"]["problem"]
    assert client.get("/api/entries/nope/card").status_code == 404


def test_raw_files_stay_inside_the_roots(client, listing, explorer_root, tmp_path):
    listed = entry_by(listing, kind="kineto")["relpath"]
    ok = client.get(f"/raw/0/{listed}")
    assert ok.status_code == 200 and ok.content == (explorer_root / listed).read_bytes()
    assert ok.headers["content-disposition"].startswith("attachment")
    assert client.get("/raw/0/bad/notes.json").status_code == 404  # in a served folder, but not a trace
    assert client.get("/raw/0/bad/missing.json").status_code == 404
    assert client.get("/raw/7/bad/notes.json").status_code == 404
    for attempt in ("/raw/0/../../../../etc/passwd", "/raw/0/%2e%2e/%2e%2e/etc/passwd", "/raw/0/..%2F..%2Fetc%2Fpasswd",
                    "/raw/0//etc/passwd"):
        response = client.get(attempt)
        assert response.status_code in (403, 404), attempt
        assert "root:" not in response.text
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    link = explorer_root / "bad" / "link.txt"
    if not link.exists():
        link.symlink_to(secret)
    escaped = client.get("/raw/0/bad/link.txt")
    assert escaped.status_code == 403 and "do not serve" not in escaped.text


def test_a_large_trace_is_never_sent_whole(tmp_path):
    """60k kernels launched from one thread: every answer stays within lanes x levels x pixels."""
    events = []
    for i in range(60_000):
        ts = i * 10
        events += [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": ts, "dur": 8},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 2, "dur": 3,
             "args": {"correlation": i}},
            {"ph": "X", "cat": "kernel", "name": f"kernel{i % 5}", "pid": 0, "tid": 7, "ts": ts + 6, "dur": 4,
             "args": {"correlation": i}},
        ]
    (tmp_path / "big.pt.trace.json").write_bytes(orjson.dumps({"traceEvents": events}))
    with TestClient(create_app([tmp_path])) as client:
        entry = client.get("/api/entries").json()["entries"][0]["id"]
        layout = client.get(f"/api/entries/{entry}/timeline", params={"px": 300}).json()
        first = layout["initial_lod"]
        sent = sum(len(lane.get("ts", [])) for lane in first["lanes"].values())
        levels = sum(lane["depth"] for lane in layout["lanes"] if lane["kind"] == "slices")
        assert sent <= levels * 301 < len(events) / 10
        runtime = next(lane["id"] for lane in layout["lanes"] if lane["runtime_only"])
        assert len(first["lanes"][runtime]["ts"]) <= 300
        assert sum(first["lanes"][runtime]["merged"]) == 60_000  # every call is represented


def test_payloads_say_which_tensore_peak(client, listing):
    """The card, the summary, the roofline and the device view carry the TensorE peak each MFU is
    against: the training step's matmuls streamed FP32 (the suite's --auto-cast=none)."""
    train = eid(listing, "train/")
    card = client.get(f"/api/entries/{train}/card").json()["headline"]
    assert card["mfu_peak"] == "FP32" and card["mfu_peak_flops_per_s"] == pytest.approx(logical_spec("trn2").peak_fp32_flops)
    assert card["mfu_text"].startswith(f"MFU {card['mfu_percent']:.1f}% of FP32 peak 39.3 TFLOP/s (")
    assert card["mfu_percent"] == pytest.approx(4 * card["mfu_bf16_percent"])  # FP32: a quarter of BF16's rate
    summary = client.get(f"/api/entries/{train}/summary").json()
    addmm = next(n for n in summary["device"]["neffs"] if n["name"].startswith("addmm"))
    assert addmm["peak_dtype"] == "FP32" and addmm["mfu_percent"] == pytest.approx(4 * addmm["mfu_bf16_percent"])
    limit = next(k for k in summary["kernel_limits"] if k["neff_id"] == addmm["neff_id"])
    assert limit["peak_dtype"] == "FP32" and limit["limiter"] == "TensorE compute"
    roofline = client.get(f"/api/entries/{train}/roofline").json()
    assert [p["dtype"] for p in roofline["peaks"]] == ["BF16", "FP32"]
    point = next(p for p in roofline["neffs"] if p["neff_id"] == addmm["neff_id"])
    assert point["peak_dtype"] == "FP32" and point["bound"] == "compute"
    device = client.get(f"/api/entries/{train}/device/{addmm['neff_id']}/0/timeline").json()
    assert device["tensor_peak"]["dtype"] == "fp32" and device["peak_text"] == "FP32 peak 39.3 TFLOP/s"
    assert device["mfu_percent"] == pytest.approx(addmm["mfu_percent"])
