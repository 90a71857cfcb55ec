"""What the explorer shows of the analyses: device use per device and stream, idle causes over the
window, limiters, memory over time (a counter lane per device), runtime lanes named after the
device's own API."""

from __future__ import annotations

import sys
from pathlib import Path

from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
from synthetic import KinetoBuilder  # noqa: E402

from trnscope.explorer import create_app


def _serve(tmp_path, builder: KinetoBuilder, name: str):
    builder.write(tmp_path / name)
    client = TestClient(create_app([tmp_path]))
    entry = next(e for e in client.get("/api/entries").json()["entries"] if e["relpath"] == name)
    return client, entry["id"]


def _training(device_label="GPU 0", **kw) -> KinetoBuilder:
    b = KinetoBuilder(device_label=device_label, **kw)
    b.op("step", 0, 1000)
    for i in range(10):
        b.kernel("gemm", i * 100, 40, stream=7, launch=i * 100 - 5)
        b.kernel("ncclKernel_AllReduce", i * 100 + 20, 50, stream=13, launch=i * 100 - 4)
        b.memory(i * 100 + 1, 1 << 20, (i + 1) << 20, (i + 2) << 20)
    return b


def test_summary_payload_has_device_use_idle_and_memory(tmp_path):
    client, entry = _serve(tmp_path, _training(), "train.pt.trace.json")
    with client:
        s = client.get(f"/api/entries/{entry}/summary").json()
    (device,) = s["utilization"]["devices"]
    assert device["device"] == "GPU 0" and device["busy_ns"] <= device["span_ns"]
    assert {st["name"].strip() for st in device["streams"]} == {"stream 7", "stream 13"}
    assert device["comm_comp_overlap"] is not None and 0 < device["kernel_type_shares"]["communication"] < 1
    assert abs(sum(s["idle"]["window_shares"].values()) - 1) < 1e-9
    (memory,) = s["memory"]["devices"]
    assert memory["device"] == "cuda:0" and memory["peak_bytes"] == 10 << 20 and len(memory["points"]) == 10
    assert memory["points"][0][0] >= 0  # times relative to the timeline's origin, like the gaps'
    assert s["device_kind"]["kind"] == "cuda" and s["headline"]["peak_memory_bytes"] == 10 << 20
    for r in s["recommendations"]:
        assert r["evidence"]


def test_memory_is_a_counter_lane_with_its_samples(tmp_path):
    client, entry = _serve(tmp_path, _training(), "train.pt.trace.json")
    with client:
        layout = client.get(f"/api/entries/{entry}/timeline").json()
        lane = next(lane for lane in layout["lanes"] if lane["group"] == "memory")
        assert lane["title"] == "cuda:0 memory" and lane["kind"] == "counter"
        assert [s["name"] for s in lane["series"]] == ["allocated bytes", "reserved bytes"]
        lod = client.get(f"/api/entries/{entry}/lod", params={"t0": layout["start"], "t1": layout["end"], "px": 200,
                                                               "lanes": lane["id"]}).json()
    series = lod["lanes"][lane["id"]]["series"]
    allocated = series[lane["series"][0]["id"]]
    assert allocated["v"] == [float(i << 20) for i in range(1, 11)]
    assert series[lane["series"][1]["id"]]["v"][-1] == float(11 << 20)


def test_runtime_lanes_are_named_after_the_device_s_api(tmp_path):
    rocm = _training(launch_name="hipLaunchKernel",
                     metadata={"deviceProperties": [{"id": 0, "name": "AMD Instinct MI250X"}]})
    client, entry = _serve(tmp_path, rocm, "rocm.pt.trace.json")
    with client:
        layout = client.get(f"/api/entries/{entry}/timeline").json()
    groups = {g["id"]: g["title"] for g in layout["groups"]}
    assert groups["runtime"] == "HIP runtime"
    assert any(lane["title"].endswith("· HIP runtime") for lane in layout["lanes"] if lane["runtime_only"])
    cuda_client, cuda_entry = _serve(tmp_path / "cuda", _training(), "cuda.pt.trace.json") if \
        (tmp_path / "cuda").mkdir() is None else (None, None)
    with cuda_client:
        groups = {g["id"]: g["title"] for g in cuda_client.get(f"/api/entries/{cuda_entry}/timeline").json()["groups"]}
    assert groups["runtime"] == "CUDA runtime"
