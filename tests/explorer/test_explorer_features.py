"""The timeline features' API: slice search, selection shares that add up, flags and notes saved
beside the profile (through Starlette's TestClient; the browser side is in
test_explorer_timeline_browser.py)."""

from __future__ import annotations

import os
import shutil

import orjson
import pytest
from starlette.testclient import TestClient

from explorer_testdata import entry_by
from trnscope.explorer import create_app
from trnscope.explorer.notes import SUFFIX


def eid(listing, part: str) -> str:
    return entry_by(listing, relpath=lambda p: part in p)["id"]


def test_search_by_substring_and_regex_in_time_order(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    found = client.get(f"/api/entries/{entry}/search", params={"q": "ATEN::MUL"}).json()
    m = found["matches"]
    assert found["count"] == len(m["row"]) == 6 and set(m["name"]) == {"aten::mul"}  # case-insensitive
    assert m["ts"] == sorted(m["ts"])
    regex = client.get(f"/api/entries/{entry}/search", params={"q": r"^aten::(mul|pow)$", "regex": "1"}).json()
    pow_ = client.get(f"/api/entries/{entry}/search", params={"q": "aten::pow"}).json()["count"]
    assert set(regex["matches"]["name"]) == {"aten::mul", "aten::pow"} and regex["count"] == 6 + pow_ > 6
    # each match is what the slice endpoint says about that row
    row = m["row"][2]
    details = client.get(f"/api/entries/{entry}/slice/{row}").json()
    assert (details["ts"], details["dur"], details["lane"]) == (m["ts"][2], m["dur"][2], m["lane"][2])
    # restricted to lanes: none of these is on the hardware lane
    hw = [lane["id"] for lane in client.get(f"/api/entries/{entry}/timeline").json()["lanes"]
          if lane["title"].startswith("neuron_hw")]
    only = client.get(f"/api/entries/{entry}/search", params={"q": "aten::mul", "lanes": ",".join(hw)}).json()
    assert only["count"] == 0


@pytest.mark.parametrize("params, problem", [
    ({}, "search needs"), ({"q": "(", "regex": "1"}, "not a valid regular expression"), ({"q": "x" * 501}, "longer than"),
])
def test_search_rejects_bad_queries(client, listing, params, problem):
    entry = eid(listing, "rmsnorm/naive")
    answer = client.get(f"/api/entries/{entry}/search", params=params)
    assert answer.status_code == 400 and problem in answer.json()["error"]["problem"]


def test_selection_shares_add_up_with_nesting(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    layout = client.get(f"/api/entries/{entry}/timeline").json()
    sel = client.get(f"/api/entries/{entry}/select", params={"t0": layout["start"], "t1": layout["end"]}).json()
    assert sum(n["share"] for n in sel["names"]) == pytest.approx(1.0)
    names = {n["name"]: n for n in sel["names"]}
    # an op's self time leaves out the runtime calls nested in it
    mul = names["aten::mul"]
    assert 0 < mul["self_ns"] < mul["time_ns"]
    assert sum(n["self_ns"] for n in sel["names"]) == sel["self_ns"]


def test_flags_and_notes_are_saved_beside_the_profile(client, listing, explorer_root):
    entry = entry_by(listing, relpath=lambda p: p.startswith("rmsnorm/fused"))
    path = explorer_root / entry["relpath"]
    beside = path.with_name(path.name + SUFFIX)
    beside.unlink(missing_ok=True)
    empty = client.get(f"/api/entries/{entry['id']}/notes").json()
    assert empty["flags"] == [] and not empty["saved"]
    flags = {"flags": [{"id": "f1", "view": "system", "ts": 1234.5, "note": "slow launch here", "row": 3},
                       {"id": "f2", "view": "device/abc123/0", "ts": 10, "note": "", "row": None}]}
    mtime = path.stat().st_mtime_ns
    saved = client.put(f"/api/entries/{entry['id']}/notes", content=orjson.dumps(flags),
                       headers={"content-type": "application/json"})
    assert saved.status_code == 200, saved.text
    assert orjson.loads(beside.read_bytes())["flags"] == flags["flags"]
    assert client.get(f"/api/entries/{entry['id']}/notes").json()["flags"] == flags["flags"]
    assert path.stat().st_mtime_ns == mtime  # the profile is not taken for changed (and reloaded)
    # the notes file is not listed as a trace
    assert not any(e["relpath"].endswith(SUFFIX) for e in client.get("/api/entries").json()["entries"])


@pytest.mark.parametrize("body, headers, status, problem", [
    (b'{"flags": [{"id": "x", "view": "system", "ts": "soon", "note": ""}]}', {"content-type": "application/json"},
     422, "ts must be"),
    (b'{"flags": [{"id": "../x", "view": "system", "ts": 1, "note": ""}]}', {"content-type": "application/json"},
     422, "id must be"),
    (b"not json", {"content-type": "application/json"}, 422, "not valid JSON"),
    (b'{"flags": []}', {"content-type": "text/plain"}, 400, "application/json"),
    (b'{"flags": []}', {"content-type": "application/json", "origin": "http://evil.example"}, 403, "own page"),
])
def test_notes_refuse_bad_or_cross_site_writes(client, listing, body, headers, status, problem):
    entry = eid(listing, "rmsnorm/fused")
    answer = client.put(f"/api/entries/{entry}/notes", content=body, headers=headers)
    assert answer.status_code == status and problem in answer.json()["error"]["problem"]


def test_notes_of_a_profile_served_as_the_root_stay_inside_it(rmsnorm, tmp_path):
    root = tmp_path / "one"
    shutil.copytree(rmsnorm["naive"], root)
    with TestClient(create_app([root])) as c:
        entry = c.get("/api/entries").json()["entries"][0]
        assert entry["relpath"] == "."
        mtime = os.stat(root).st_mtime_ns
        saved = c.put(f"/api/entries/{entry['id']}/notes", content=b'{"flags": []}',
                      headers={"content-type": "application/json"})
        assert saved.status_code == 200 and (root / saved.json()["file"]).exists()
        assert os.stat(root).st_mtime_ns == mtime


def test_overlapping_slices_get_sub_lanes_and_none_is_dropped(tmp_path):
    """Two slices on one thread that overlap without nesting (clock skew, with_stack frames) are
    drawn on two levels, and both come back at every zoom."""
    events = [{"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "cat": "cpu_op"}
              for name, ts, dur in (("outer", 0, 100), ("a", 10, 50), ("b", 40, 50), ("c", 120, 10))]
    (tmp_path / "overlap.pt.trace.json").write_bytes(orjson.dumps({"traceEvents": events}))
    with TestClient(create_app([tmp_path])) as c:
        entry = c.get("/api/entries").json()["entries"][0]["id"]
        layout = c.get(f"/api/entries/{entry}/timeline").json()
        lane = next(lane for lane in layout["lanes"] if lane["kind"] == "slices" and not lane["runtime_only"])
        assert lane["depth"] == 3  # outer; a; b below a, since it overlaps a without nesting in it
        for px in (4, 1000):
            lod = c.get(f"/api/entries/{entry}/lod", params={"t0": layout["start"], "t1": layout["end"], "px": px,
                                                            "lanes": lane["id"]}).json()
            got = lod["lanes"][lane["id"]]
            shown = {lod["strings"][str(n)]: d for n, d in zip(got["name"], got["depth"])}
            assert sum(got["merged"]) == 4  # every slice drawn or counted in a merged one
            if px == 1000:
                assert shown == {"outer": 0, "a": 1, "b": 2, "c": 0}


def test_sql_endpoint(client, listing):
    entry = eid(listing, "rmsnorm/naive")
    answer = client.get(f"/api/entries/{entry}/query", params={"sql": "SELECT name, calls FROM ops WHERE name = 'aten::mul'"})
    assert answer.status_code == 200 and answer.json()["rows"] == [["aten::mul", 6]]
    refused = client.get(f"/api/entries/{entry}/query", params={"sql": "DELETE FROM slices"})
    assert refused.status_code == 400 and "read-only" in refused.json()["error"]["problem"]
    tables = client.get(f"/api/entries/{entry}/query/tables").json()["tables"]
    assert {"slices", "ops", "executions", "instructions"} <= {t["name"] for t in tables}


def test_every_sql_table_and_column_is_documented():
    from pathlib import Path

    from trnscope.analysis.sql import TABLES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "file-formats.md").read_text()
    section = doc[doc.index("## SQL tables"):]
    for table, (_, columns) in TABLES.items():
        assert f"`{table}`" in section, table
        for column in columns:
            assert f"`{column}`" in section, (table, column)
