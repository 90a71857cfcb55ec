"""The explorer's page of a multi-rank run: its API on a profiled 2-rank run with a straggler, and the
page in headless Chromium (per-rank lanes, a collective linked across ranks, the straggler named).
The screenshot lands in test-artifacts/explorer/ranks_page.png for a person to look at."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from .conftest import ROOT, trnscope_run, worker_env

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "explorer"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("page") / "straggler_run"
    p = trnscope_run("--nproc", 2, "--profile", run, ROOT / "examples/distributed/straggler.py",
                     "--steps", 2, "--warmup", 1, "--mib", 4, "--ops", 3,
                     env=worker_env(TRNSCOPE_RANK_SLOWDOWN="1:1.5"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def client(run_dir):
    from starlette.testclient import TestClient

    from trnscope.explorer import create_app

    return TestClient(create_app([run_dir.parent]))


def test_the_run_api_gives_every_rank_on_one_clock(client, run_dir):
    from trnscope.analysis.ranks import load_run

    runs = client.get("/api/runs").json()["runs"]
    assert [r["name"] for r in runs] == [f"{run_dir.parent.name}/straggler_run"]
    data = client.get(f"/api/runs/{runs[0]['id']}").json()
    a = load_run(run_dir)
    assert data["straggler"] == a.straggler() == 1 and data["problems"] == []
    assert [r["rank"] for r in data["ranks"]] == [0, 1] and data["world_size"] == 2
    assert len(data["collectives"]) == len(a.collectives)
    for c in data["collectives"]:
        arrivals = {int(r): t for r, t in c["arrivals"].items()}
        waits = {int(r): w for r, w in c["waits"].items()}
        start = max(arrivals.values())
        # one clock: the waits are the arrival gaps (trace times are whole ns written as us: 1 ns rounding)
        assert waits.keys() == arrivals.keys()
        assert all(abs(waits[r] - (start - t)) <= 2 for r, t in arrivals.items())
        if c["kind"] == "all_reduce" and c["late_by_ns"] > 0:
            assert c["last_rank"] == 1
        # each rank's lane has this collective from its arrival, its transfer starting when the last arrived
        for rank in data["ranks"]:
            mine = [s for s in rank["collectives"] if s[3] == c["id"]]
            assert len(mine) == 1
            arrive, transfer, end, _ = mine[0]
            assert arrive == arrivals[rank["rank"]] and abs(transfer - start) <= 2 and end - transfer == \
                pytest.approx(c["duration_ns"], abs=2)
    assert all(r["compute"] for r in data["ranks"])
    assert {o["rank"] for o in data["overlap"]} == {0, 1}
    assert client.get("/api/runs/nope").status_code == 404


def test_the_run_page_links_a_collective_across_ranks(run_dir):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not installed at {CHROMIUM} (apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    import uvicorn

    from trnscope.explorer import create_app
    from trnscope.explorer.ranks_view import run_id
    from trnscope.explorer.server import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app([run_dir], loopback_only=True), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the explorer did not start"
        time.sleep(0.05)
    errors: list[str] = []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{port}/#/run/{run_id(0, '.')}")
            page.wait_for_function("() => document.body.dataset.ready === '1' && window.__trnscope "
                                   "&& window.__trnscope.run")
            assert page.inner_text("[data-testid=straggler]") == "rank 1"
            # the last all_reduce: click it on rank 0's lane
            cid = page.evaluate("() => { const d = window.__trnscope.run.data; "
                                "return d.collectives.filter((c) => c.kind === 'all_reduce').pop().id; }")
            page.evaluate(f"() => window.__trnscope.run.select({cid}, true)")  # frame it
            page.evaluate("() => window.__trnscope.run.select(null, false)")
            pos = page.evaluate(f"() => window.__trnscope.run.slicePosition(0, {cid})")
            page.mouse.click(pos["x"], pos["y"])
            detail = page.locator("[data-testid=collective-detail]")
            detail.wait_for()
            text = detail.inner_text()
            assert "all_reduce" in text and "rank 1 arrived last" in text
            assert detail.locator(".badge.last").count() == 1
            assert "rank 1" in detail.locator("tr.straggler").inner_text()
            assert page.evaluate("() => window.__trnscope.run.selected") == cid
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "ranks_page.png"), full_page=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert not errors, errors


def test_a_run_folder_without_rank_traces_says_so(tmp_path):
    from starlette.testclient import TestClient

    from trnscope.explorer import create_app

    run = tmp_path / "failed_run"
    run.mkdir()
    (run / "run.json").write_text('{"schema": "trnscope-multirank-run", "complete": false}')
    client = TestClient(create_app([tmp_path]))
    runs = client.get("/api/runs").json()["runs"]
    assert [r["name"] for r in runs] == [f"{tmp_path.name}/failed_run"]
    answer = client.get(f"/api/runs/{runs[0]['id']}")
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["problem"].startswith("no rank traces") and "--profile RUN" in error["hint"]
    assert error["file"] == "failed_run" and str(tmp_path) not in str(error)
    # a damaged rank trace is named, relative to the served folder
    (run / "rank_0").mkdir()
    (run / "rank_0" / "trace.json").write_text('{"distributedInfo": {"rank": 0}, "traceEv')
    error = client.get(f"/api/runs/{runs[0]['id']}").json()["error"]
    assert error["problem"].startswith("not a JSON trace") and error["file"] == "failed_run/rank_0/trace.json"
