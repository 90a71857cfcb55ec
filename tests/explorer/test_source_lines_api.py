"""The explorer's source lines (API through Starlette's TestClient): the Source lines page's table,
the line in a slice's details (an execution, its op, its runtime call), the device view's table of
an NKI kernel's and a compiled graph's lines; and the memory of the training step (the emulator's
own allocations are not the program's)."""

from __future__ import annotations

from explorer_testdata import entry_by


def eid(listing, part: str) -> str:
    return entry_by(listing, relpath=lambda p: p.startswith(part))["id"]


def test_the_lines_page_adds_up_to_the_device_time(client, listing, line_marks):
    answer = client.get(f"/api/entries/{eid(listing, 'lines/')}/lines")
    assert answer.status_code == 200
    data = answer.json()
    assert data["recorded"] and data["with_line"] == data["executions"]
    assert abs(sum(r["device_ns"] for r in data["rows"]) - data["device_total_ns"]) < 1e-6 * data["device_total_ns"]
    eager = next(r for r in data["rows"] if r["number"] == line_marks["eager"] and not r["backward"])
    assert eager["line"] == f"lines_model.py:{line_marks['eager']} (step)" and eager["origin"] == "call"
    assert {o["op"] for o in eager["ops"]} == {"aten::addmm", "aten::gelu"} and eager["neffs"][0]["nc"] == 0
    assert eager["first_row"] >= 0


def test_a_profile_without_stacks_says_so(client, listing):
    data = client.get(f"/api/entries/{eid(listing, 'rmsnorm/naive')}/lines").json()
    assert not data["recorded"] and not data["frames"] and data["with_line"] == 0
    assert [r["line"] for r in data["rows"]] == ["(no source line)"]


def test_slice_details_carry_the_line(client, listing, line_marks):
    entry = eid(listing, "lines/")
    rows = client.get(f"/api/entries/{entry}/lines").json()["rows"]
    eager = next(r for r in rows if r["number"] == line_marks["eager"] and not r["backward"])
    execution = client.get(f"/api/entries/{entry}/slice/{eager['first_row']}").json()
    assert execution["source"] == {"line": eager["line"], "origin": "call"}
    # the op that launched it, and its runtime call, name the same line
    runtime = next(item for item in execution["upstream"] if item["name"] == "nrt_execute")
    assert client.get(f"/api/entries/{entry}/slice/{runtime['row']}").json()["source"]["line"] == eager["line"]
    op = client.get(f"/api/entries/{entry}/slice/{runtime['op']['row']}").json()
    assert op["source"]["line"] == eager["line"]


def test_device_views_group_instructions_by_line(client, listing, line_marks):
    entry = eid(listing, "lines/")
    neffs = client.get(f"/api/entries/{entry}/summary").json()["device"]["neffs"]
    kernel = next(n for n in neffs if n["name"] == "double")
    layout = client.get(f"/api/entries/{entry}/device/{kernel['neff_id']}/0/timeline").json()
    lines = {r["line"]: r for r in layout["line_table"]}
    assert set(lines) == {f"lines_model.py:{line_marks[k]} (double)" for k in ("nki_load", "nki_add", "nki_store")}
    assert all(r["origin"] == "nki" and r["instructions"] >= 1 for r in lines.values())
    graph = next(n for n in neffs if n["name"].startswith("fwd"))
    layout = client.get(f"/api/entries/{entry}/device/{graph['neff_id']}/0/timeline").json()
    assert f"lines_model.py:{line_marks['graph']}" in {r["line"] for r in layout["line_table"]}
    # an instruction's details name its line
    found = client.get(f"/api/entries/{entry}/device/{graph['neff_id']}/0/search", params={"q": "ACTIVATE"}).json()
    details = client.get(f"/api/entries/{entry}/device/{graph['neff_id']}/0/slice/{found['matches']['row'][0]}").json()
    assert details["source"] == {"line": f"lines_model.py:{line_marks['graph']}", "origin": "graph"}
    # one eager op's NEFF has no lines to show
    eager = next(n for n in neffs if n["name"].startswith("addmm"))
    assert client.get(f"/api/entries/{entry}/device/{eager['neff_id']}/0/timeline").json()["line_table"] == []


def test_the_training_steps_memory_is_the_devices(client, listing):
    """The host numerics' scratch tensors (allocated and freed inside emulator work, at one
    emulated instant) are not the program's memory: only the NeuronCore's series remains."""
    memory = client.get(f"/api/entries/{eid(listing, 'train/')}/summary").json()["memory"]
    assert [d["device"] for d in memory["devices"]] == ["neuron:0"]
    series = memory["devices"][0]
    assert series["peak_bytes"] > 0 and len(series["points"]) > 2
