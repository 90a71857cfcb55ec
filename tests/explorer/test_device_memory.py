"""SBUF/PSUM usage in the device trace: a six-instruction program whose tile live ranges are
worked out by hand, written to an NTFF, read back and served by the explorer's API.

The program (trn2, fp32):

    0  DMA  q0   a  -> ta         ta: SBUF [128 x 128]  512 B/partition at offset 0
    1  DMA  q1   b  -> tb         tb: SBUF [128 x 256] 1024 B/partition at offset 512
    2  LDWEIGHTS  ta              (Tensor)
    3  MATMUL     tb -> pt        pt: PSUM [128 x 256] 1024 B/partition at offset 0
       ta, tb released
    4  TENSOR_COPY pt -> tc       tc: SBUF [128 x 256] 1024 B/partition at offset 0 (ta's and half
                                      of tb's bytes, reused)
    5  DMA  q2   tc -> o

so the live ranges are ta [start 0, end 2], tb [start 1, end 3], pt [start 3, end 4] and tc
[start 4, end 5]: SBUF holds 1536 B/partition until LDWEIGHTS ends, 1024 until MATMUL ends, then
1024 again from the copy to the store; PSUM holds 1024 B/partition from MATMUL to the copy.
"""

from __future__ import annotations

import struct

import orjson
import pytest
from starlette.testclient import TestClient

from trnscope.analysis.device_trace import build_device_trace
from trnscope.analysis.profile_dir import read_ntff
from trnscope.compiler.builder import KernelBuilder
from trnscope.explorer import create_app
from trnscope.formats.ntff import encode_body
from trnscope.hw import TRN2
from trnscope.isa import Program
from trnscope.isa.ap import hbm
from trnscope.isa.instructions import LoadStationary, MultiplyMoving, TensorCopy
from trnscope.profiling import ntff as ntff_format
from trnscope.sim import simulate

NEFF_ID = "4242"
PARTITIONS = TRN2.partitions


def program() -> Program:
    p = Program("alloc_demo", target="trn2")
    a = p.tensor("a", (128, 128), "float32")
    b = p.tensor("b", (128, 256), "float32")
    o = p.tensor("o", (128, 256), "float32", "output")
    kb = KernelBuilder(p, TRN2)
    q0, q1, q2 = kb.queue("qSyncIO0", "input"), kb.queue("qSyncIO1", "input"), kb.queue("qSyncIO2", "output")
    with p.origin("aten::mm"):
        ta, tb = kb.tile(128, (128,), "float32"), kb.tile(128, (256,), "float32")
        kb.dma(q0, hbm(a, 128, 128, [(1, 128)], "float32"), ta)
        kb.dma(q1, hbm(b, 128, 256, [(1, 256)], "float32"), tb)
        kb.emit(LoadStationary(src=ta))
        pt = kb.psum_tile(128, (256,))
        kb.emit(MultiplyMoving(moving=tb, dst=pt))
        kb.release(ta, tb)
        tc = kb.tile(128, (256,), "float32")
        kb.emit(TensorCopy(inp=pt, out=tc))
        kb.release(pt)
        kb.dma(q2, tc, hbm(o, 128, 256, [(1, 256)], "float32"))
    assert (ta.offset, tb.offset, pt.offset, tc.offset) == (0, 512, 0, 0)  # the layout the docstring describes
    return p


@pytest.fixture(scope="module")
def timeline():
    return simulate(program(), TRN2, cache=False)


def _write_profile(directory, timeline, *, legacy: bool = False):
    """A profile directory the explorer recognises: a one-op framework trace and the NTFF."""
    directory.mkdir(parents=True)
    (directory / "trace.json").write_text(orjson.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}).decode())
    header = {"neff_id": NEFF_ID, "neff_name": "alloc_demo", "vnc": 0, "target": "trn2", "neuroncore": "NeuronCore-v3",
              "summary": timeline.summary, "executions": [], "instruction_count": 6, "instructions_written": 6,
              "truncated": False}
    path = directory / f"{NEFF_ID}_instid_0_vnc_0.ntff"
    if legacy:
        _write_ntff_1_0(path, header, timeline)
    else:
        ntff_format.write_ntff(path, header, timeline)
    return path


def _write_ntff_1_0(path, header, timeline):
    """An NTFF as version 1.0 wrote them: no allocation table, no header["memory"]."""
    import hashlib

    tables = ntff_format.tables_of(timeline)
    del tables["allocation"]
    index, body = encode_body(tables)
    head = orjson.dumps({**header, "format": "trnscope-ntff", "version": [1, 0], "tables": index})
    path.write_bytes(struct.pack("<4sHHIQ32s", b"NTFF", 1, 0, len(head), len(body), hashlib.sha256(body).digest())
                     + head + body)


def expected_ranges(tl):
    s, e = tl.start_ns, tl.end_ns
    return [  # (space, offset, bytes per partition, start, end, first, last), as the docstring derives them
        ("sbuf", 0, 512, s[0], e[2], 0, 2),
        ("sbuf", 512, 1024, s[1], e[3], 1, 3),
        ("psum", 0, 1024, s[3], e[4], 3, 4),
        ("sbuf", 0, 1024, s[4], e[5], 4, 5),
    ]


def test_allocation_table_has_the_hand_derived_live_ranges(timeline):
    table = {name: list(column.to_pylist() if hasattr(column, "to_pylist") else column)
             for name, column in ntff_format.allocation_table(timeline).items()}
    rows = sorted(zip(table["space"], table["offset"], table["bytes_per_partition"], table["start_ns"],
                      table["end_ns"], table["first_instruction"], table["last_instruction"]),
                  key=lambda r: (r[3], r[0]))
    expected = sorted(expected_ranges(timeline), key=lambda r: (r[3], r[0]))
    assert [r[:3] + r[5:] for r in rows] == [r[:3] + r[5:] for r in expected]
    for got, want in zip(rows, expected):
        assert got[3] == pytest.approx(want[3]) and got[4] == pytest.approx(want[4])
    assert set(table["framework_op"]) == {"aten::mm"}
    assert all(p == 128 for p in table["partitions"])
    # the reuse is real: the copy's tile starts only after the matmul stopped reading the old bytes
    assert timeline.start_ns[4] >= timeline.end_ns[3]


def usage_at(series, t):
    """Value of a step series (ts ascending, value after each ts) at time t."""
    value = 0.0
    for ts, v in zip(series["ts"], series["v"]):
        if ts <= t:
            value = v
    return value


def test_usage_counters_in_the_api(tmp_path, timeline):
    _write_profile(tmp_path / "profile", timeline)
    s, e = timeline.start_ns, timeline.end_ns
    with TestClient(create_app([tmp_path])) as client:
        entry = client.get("/api/entries").json()["entries"][0]["id"]
        base = f"/api/entries/{entry}/device/{NEFF_ID}/0"
        layout = client.get(f"{base}/timeline").json()
        lanes = {lane["title"]: lane for lane in layout["lanes"]}
        sbuf, psum = lanes["SBUF usage"], lanes["PSUM usage"]
        assert sbuf["kind"] == psum["kind"] == "counter" and sbuf["group"] == "counters"
        assert [x["name"] for x in sbuf["series"]] == ["bytes", "percent"]
        sbuf_capacity = TRN2.sbuf_bytes_per_partition
        assert layout["memory"]["sbuf"]["peak_bytes"] == 1536 * PARTITIONS
        assert layout["memory"]["sbuf"]["peak_percent"] == pytest.approx(100 * 1536 / sbuf_capacity)
        assert layout["memory"]["sbuf"]["capacity_bytes"] == TRN2.sbuf_bytes
        assert layout["memory"]["psum"]["peak_bytes"] == 1024 * PARTITIONS
        assert layout["memory"]["psum"]["peak_percent"] == pytest.approx(100 * 1024 / TRN2.psum_bytes_per_partition)
        end = float(e.max())
        lod = client.get(f"{base}/lod", params={"t0": 0, "t1": end + 10, "px": 4000,
                                                "lanes": f"{sbuf['id']},{psum['id']}"}).json()
        sbuf_bytes, sbuf_pct = (lod["lanes"][sbuf["id"]]["series"][str(x["id"])] for x in sbuf["series"])
        psum_bytes = lod["lanes"][psum["id"]]["series"][str(psum["series"][0]["id"])]
        ranges = expected_ranges(timeline)
        edges = sorted({float(x) for r in ranges for x in r[3:5]})
        # every stretch between two consecutive boundaries, and after the last: the usage the
        # hand-derived ranges give there, in bytes (all partitions) and in percent of capacity
        for t in [(a + b) / 2 for a, b in zip(edges, edges[1:]) if b > a] + [end + 5]:
            want = {space: sum(size for sp, _, size, a, b, *_ in ranges if sp == space and a <= t < b)
                    for space in ("sbuf", "psum")}
            assert usage_at(sbuf_bytes, t) == want["sbuf"] * PARTITIONS, t
            assert usage_at(sbuf_pct, t) == pytest.approx(100 * want["sbuf"] / sbuf_capacity), t
            assert usage_at(psum_bytes, t) == want["psum"] * PARTITIONS, t
        assert max(sbuf_bytes["v"]) == 1536 * PARTITIONS and max(psum_bytes["v"]) == 1024 * PARTITIONS


def test_ntff_without_allocations_still_opens(tmp_path, timeline):
    path = _write_profile(tmp_path / "profile", timeline, legacy=True)
    device = build_device_trace(read_ntff(path))
    assert device.memory == {}
    with TestClient(create_app([tmp_path])) as client:
        entry = client.get("/api/entries").json()["entries"][0]["id"]
        layout = client.get(f"/api/entries/{entry}/device/{NEFF_ID}/0/timeline").json()
        titles = [lane["title"] for lane in layout["lanes"]]
        assert "DMA throughput" in titles and "SBUF usage" not in titles
        assert layout["memory"] == {}


def test_new_ntff_header_records_the_capacities(tmp_path, timeline):
    path = _write_profile(tmp_path / "profile", timeline)
    header = ntff_format.read_header(path)
    assert header["version"] == [1, 1]
    assert header["memory"] == {"partitions": 128, "sbuf_bytes_per_partition": TRN2.sbuf_bytes_per_partition,
                                "sbuf_bytes": TRN2.sbuf_bytes, "psum_bytes_per_partition": TRN2.psum_bytes_per_partition,
                                "psum_bytes": TRN2.psum_bytes}
    assert header["tables"]["allocation"]["rows"] == 4


def test_a_program_without_on_chip_tiles_shows_zero_usage_not_missing_data(tmp_path):
    p = Program("hbm_copy", target="trn2")
    a = p.tensor("a", (128, 64), "float32")
    o = p.tensor("o", (128, 64), "float32", "output")
    kb = KernelBuilder(p, TRN2)
    with p.origin("aten::copy_"):
        kb.dma(kb.queue("qSyncIO0"), hbm(a, 128, 64, [(1, 64)], "float32"), hbm(o, 128, 64, [(1, 64)], "float32"))
    timeline = simulate(p, TRN2, cache=False)
    assert len(ntff_format.allocation_table(timeline)["id"]) == 0
    device = build_device_trace(read_ntff(_write_profile(tmp_path / "profile", timeline)))
    assert device.memory["sbuf"]["peak_bytes"] == 0 and device.memory["psum"]["peak_bytes"] == 0
    assert device.memory["sbuf"]["allocations"] == 0
    titles = [t.name for t in device.trace.tracks]
    assert "SBUF usage" in titles and "PSUM usage" in titles
