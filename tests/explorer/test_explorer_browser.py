"""End to end in headless Chromium (Playwright, Debian's /usr/bin/chromium): the RMSNorm profiles
from the profile cards to an aten op's NEFF device trace, and naive vs fused in Compare.

Screenshots land in test-artifacts/explorer/ (git-ignored) so a person can look at what the
tests saw. Needs: `apt-get install chromium` and the `playwright` Python package (no Playwright
browser download: the system Chromium is used).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from explorer_testdata import entry_by

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "explorer"
# resources the tests request on purpose (damaged files, unknown ids) answer 4xx; the browser logs those
EXPECTED_CONSOLE = ("status of 422", "status of 404")
TIMELINE_READY = ("() => window.__trnscope && window.__trnscope.timelines.length > 0 && "
                  "window.__trnscope.timelines.every((t) => t.data !== null)")


def _requirements():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install playwright)")


@pytest.fixture(scope="module")
def server(explorer_root):
    _requirements()
    import uvicorn

    from trnscope.explorer import create_app
    from trnscope.explorer.server import free_port

    port = free_port()
    app = create_app([explorer_root], loopback_only=True)
    instance = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert time.monotonic() < deadline, "the explorer did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/", app
    instance.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    _requirements()
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data dir
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 950})
        yield context
        context.close()


@pytest.fixture()
def page(browser, server):
    url, _ = server
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" and not any(e in msg.text for e in EXPECTED_CONSOLE) else None)
    page.base_url = url
    yield page
    page.close()
    assert not problems, problems


@pytest.fixture(scope="module")
def ids(server):
    _, app = server
    listing = {"entries": [e.describe() for e in app.state.explorer.catalog.entries()]}
    return {
        "naive": entry_by(listing, relpath=lambda p: p.startswith("rmsnorm/naive"))["id"],
        "fused": entry_by(listing, relpath=lambda p: p.startswith("rmsnorm/fused"))["id"],
        "train": entry_by(listing, relpath=lambda p: p.startswith("train/"))["id"],
        "steps": entry_by(listing, relpath=lambda p: p.startswith("steps/"))["id"],
        "lines": entry_by(listing, relpath=lambda p: p.startswith("lines/"))["id"],
        "retimed": entry_by(listing, relpath=lambda p: p.startswith("retimed/"))["id"],
        "alexnet": entry_by(listing, relpath=lambda p: "critical_path_alexnet" in p)["id"],
        "cpu_only": entry_by(listing, relpath=lambda p: "cpu_only" in p)["id"],
        "truncated": entry_by(listing, relpath=lambda p: "truncated" in p)["id"],
    }


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def open_hash(page, fragment: str) -> None:
    page.goto(page.base_url + fragment)
    page.wait_for_selector("body[data-ready='1']")


def wait_timeline(page) -> None:
    page.wait_for_function(TIMELINE_READY, timeout=30_000)
    page.wait_for_timeout(150)  # one more animation frame after the data


def locate(page, name: str, lane: str | None = None, index: int = -1):
    point = page.evaluate("([name, lane, index]) => window.__trnscope.timelines.at(index).locate(name, lane)",
                          [name, lane, index])
    assert point, f"no visible slice named {name}"
    return point


def select_range(page, x0: float, x1: float, y: float = 150) -> None:
    """Shift+drag on the last timeline from x0 to x1 (px from the canvas's left), then wait for the
    selection summary."""
    box = page.locator("canvas.tl-canvas").last.bounding_box()
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + x0, box["y"] + y)
    page.mouse.down()
    page.mouse.move(box["x"] + x1, box["y"] + y, steps=6)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_selector(".details.selection")


def test_profiles_page_shows_a_card_per_profile(page, ids):
    open_hash(page, "#/")
    naive = page.locator(f"article.card[data-id='{ids['naive']}']")
    naive.locator(".figures").wait_for()
    assert "18" in naive.locator(".figures").inner_text()  # NEFF dispatches in the window
    assert "Many small dispatches" in naive.inner_text()
    broken = page.locator(f"article.card[data-id='{ids['truncated']}']")
    broken.locator(".problem").wait_for()
    assert "not valid JSON" in broken.inner_text() and "truncated" in broken.inner_text().lower()
    assert page.locator("article.card").count() >= 8
    # named by the run's folder, not <host>_pid_<pid>/<timestamp>, which every run shares
    assert naive.locator("h2").inner_text() == "rmsnorm/naive"
    page.wait_for_timeout(500)
    shot(page, "01-profiles")


def test_aten_op_to_its_neff_device_trace_via_the_system_trace(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    shot(page, "02-system-trace")
    view = page.evaluate("""() => { const t = window.__trnscope.timelines.at(-1);
        return { t0: t.t0, t1: t.t1, layout: { start: t.layout.start, end: t.layout.end, focus_start: t.layout.focus_start,
                 focus_end: t.layout.focus_end }, lanes: t.layout.lanes.map((l) => l.title) }; }""")
    layout = view["layout"]
    # the view opens on the recorded activity (with a small margin), not on whatever stretch of
    # the profiler's own session span lies before it (none in modelled host time)
    assert layout["start"] <= layout["focus_start"] < layout["focus_end"] <= layout["end"]
    margin = (layout["focus_end"] - layout["focus_start"]) * 0.011
    assert layout["focus_start"] - margin <= view["t0"] <= layout["focus_start"]
    assert layout["focus_end"] < view["t1"] <= layout["focus_end"] + margin
    # one lane per NeuronCore that ran something, not one per core of the chip
    assert [t for t in view["lanes"] if t.startswith("neuron_hw/")] == ["neuron_hw/NC:0"]
    page.wait_for_selector(".details-pane.idle")  # nothing selected: the hint takes one line
    point = locate(page, "aten::mul", "framework/")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(".details h3:text('aten::mul')")
    details = page.locator(".details").inner_text()
    assert "nc_exec_running" in details and "neuron_hw/NC:0" in details and "nrt_execute" in details
    # the call stack is links to the enclosing slices (it once printed the page's URL)
    row = page.locator(".details table.facts tr:has(th:text-is('Row')) td").inner_text()
    with urllib.request.urlopen(f"{page.base_url}api/entries/{ids['naive']}/slice/{row}") as answer:
        launch = next(d["from_row"] for d in json.load(answer)["downstream"] if d["name"] == "nrt_execute")
    page.evaluate("(row) => window.__trnscope.timelines.at(-1).select(row)", launch)  # the op's runtime call
    page.wait_for_selector(".details h3:text('nrt_execute')")
    with urllib.request.urlopen(f"{page.base_url}api/entries/{ids['naive']}/slice/{launch}") as answer:
        enclosing = [item["name"] for item in json.load(answer)["stack"]]
    stack = page.locator(".details .stack")
    assert "aten::mul" in enclosing and stack.locator("a.link").all_inner_texts() == enclosing
    assert "http" not in stack.inner_text()
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(".details h3:text('aten::mul')")
    arrows = page.evaluate("() => window.__trnscope.timelines.at(-1).arrows().length")
    assert arrows >= 3  # op's runtime call -> stream, -> neuron_rt -> neuron_hw
    page.wait_for_timeout(200)
    shot(page, "03-system-op-selected")
    page.locator("button.device-link").first.click()
    page.wait_for_selector("body[data-page='device']")
    wait_timeline(page)
    title = page.locator(".device-title h1").inner_text()
    assert title.startswith("mul.Tensor")
    layout = page.evaluate("() => window.__trnscope.timelines.at(-1).layout.lanes.map((l) => l.title)")
    for lane in ("Tensor (LoadStationary)", "TensorMatrix (MultiplyMoving)", "Vector", "Scalar", "GpSimd", "Sync",
                 "DMA throughput", "Pending DMAs", "SBUF usage", "PSUM usage"):
        assert lane in layout
    assert any(t.startswith("q") for t in layout)  # DMA queues
    legend = page.locator(".device-info .legend").inner_text()
    assert "aten::mul.Tensor" in legend and "semaphore wait" in legend
    facts = page.locator(".device-facts").inner_text()
    assert "SBUF peak" in facts and "PSUM peak" in facts
    shot(page, "04-device-trace")
    # the usage rows are drawn: scroll to them, and their hover names bytes and share of capacity
    page.evaluate("() => { const t = window.__trnscope.timelines.at(-1); t.scroller.scrollTop = t.contentHeight; }")
    page.wait_for_timeout(200)
    sbuf = page.evaluate("""() => { const t = window.__trnscope.timelines.at(-1);
        const row = t.rows.find((r) => r.type === 'lane' && r.lane.title === 'SBUF usage');
        const box = t.canvas.getBoundingClientRect();
        const d = t.data.lanes[row.lane.id].series[String(row.lane.series[0].id)];
        let peak = 0; for (let i = 1; i < d.v.length; i++) if (d.v[i] > d.v[peak]) peak = i;
        return { y: box.top + t.rowCenter(row.lane.id, 0) + 8, x: box.left + t.x(d.ts[peak]) + 1, max: row.lane.series[0].max,
                 visible: t.rowCenter(row.lane.id, 0) < t.height }; }""")
    assert sbuf["visible"] and sbuf["max"] > 0
    page.mouse.move(sbuf["x"], sbuf["y"])
    page.wait_for_selector(".tl-tooltip:has-text('percent')")
    tip = page.locator(".tl-tooltip").inner_text()
    assert re.search(r"bytes: [\d.]+ (KiB|MiB)", tip) and re.search(r"percent: [\d.]+%", tip), tip
    shot(page, "04b-device-memory-counters")
    point = locate(page, "TENSOR_TENSOR", "Vector")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(".details h3:text('TENSOR_TENSOR')")
    details = page.locator(".details").inner_text()
    assert "Predecessors" in details and "qSyncIO" in details and "operands" in details
    page.wait_for_timeout(200)
    shot(page, "05-device-instruction-dependencies")


def test_aten_op_to_device_trace_via_the_operator_table(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/ops")
    page.locator("table.ops-table span.op-name:text-is('aten::pow')").click()
    page.wait_for_selector("tr.detail-row button.device-link")
    shot(page, "06-operators")
    page.locator("tr.detail-row button.device-link").first.click()
    page.wait_for_selector("body[data-page='device']")
    wait_timeline(page)
    assert page.locator(".device-title h1").inner_text().startswith("pow.Tensor_Scalar")
    # and back: an execution of this NEFF, selected in the system trace
    page.locator(".executions summary").click()
    page.locator(".executions a.link").first.click()
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    page.wait_for_selector(".details h3")
    assert page.locator(".details h3").inner_text().startswith("pow.Tensor_Scalar")


def test_operator_table_downloads_as_csv_as_shown(page, ids, server):
    import csv
    import io
    import json
    import urllib.request

    open_hash(page, f"#/p/{ids['naive']}/ops")
    page.locator("table.ops-table").wait_for()
    page.locator("input.filter").fill("aten::")
    page.locator("table.ops-table th[data-key='calls']").click()  # sort by calls, descending
    page.locator("table.ops-table th[data-key='calls']").click()  # and again: ascending
    with page.expect_download() as info:
        page.locator("button.csv-download").first.click()
    download = info.value
    assert download.suggested_filename.endswith("-operators.csv")
    rows = list(csv.DictReader(io.StringIO(open(download.path(), encoding="utf-8").read())))
    shown = page.locator("table.ops-table tbody tr.expandable span.op-name").all_inner_texts()
    assert [r["name"] for r in rows] == shown  # what the table shows, in its order
    assert rows and all(r["name"].startswith("aten::") for r in rows)
    calls = [int(r["calls"]) for r in rows]
    assert calls == sorted(calls)
    url, _ = server
    with urllib.request.urlopen(f"{url}api/entries/{ids['naive']}/ops") as answer:
        api_rows = {r["name"]: r for r in json.load(answer)["ops"]}
    for r in rows:  # raw values, not the formatted cells
        expected = api_rows[r["name"]]
        assert int(r["device_self_ns"]) == expected["device_self_ns"] and int(r["bytes"]) == expected["bytes"]
        assert r["programs"] == ";".join(expected["programs"])
    page.locator("table.ops-table").scroll_into_view_if_needed()
    shot(page, "06b-operators-filtered-for-csv")


def test_opened_by_url_a_timeline_asks_for_its_data_first(page, ids, server):
    """A system or device trace opened by its URL: boot.js asks for the layout and first level of
    detail before the modules load, and the page uses that answer (no second request)."""
    _, app = server
    session = app.state.explorer.session(ids["naive"])
    neff = session.analysis.device.neffs[0].neff_id
    for fragment in (f"#/p/{ids['naive']}/system", f"#/p/{ids['naive']}/device/{neff}/0"):
        page.goto("about:blank")
        page.goto(page.base_url + fragment)
        page.wait_for_selector("body[data-ready='1']")
        wait_timeline(page)
        timing = page.evaluate("""() => {
            const all = performance.getEntriesByType('resource');
            const layouts = all.filter((e) => e.name.includes('/timeline?px='));
            const main = all.find((e) => e.name.endsWith('/js/main.js'));
            return { layouts: layouts.map((e) => e.startTime), main: main ? main.startTime : null,
                     boot: window.__trnscopeBoot === null }; }""")
        assert len(timing["layouts"]) == 1, fragment  # the boot request, picked up by the page
        assert timing["boot"], fragment
        assert timing["layouts"][0] <= timing["main"], fragment  # asked before the modules
        lanes = page.evaluate("() => window.__trnscope.timelines.at(-1).layout.lanes.length")
        assert lanes >= 4


def test_zoom_pan_keys_and_range_selection(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    span = "() => { const t = window.__trnscope.timelines.at(-1); return [t.t0, t.t1]; }"
    t0, t1 = page.evaluate(span)
    box = page.locator("canvas.tl-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 150)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(200)
    z0, z1 = page.evaluate(span)
    assert z1 - z0 < (t1 - t0) * 0.7  # wheel zoomed in
    page.keyboard.press("s")
    s0, s1 = page.evaluate(span)
    assert s1 - s0 > z1 - z0  # S zooms out
    page.keyboard.press("d")
    d0, _ = page.evaluate(span)
    assert d0 > s0  # D pans right
    page.mouse.move(box["x"] + 700, box["y"] + 150)
    page.mouse.down()
    page.mouse.move(box["x"] + 800, box["y"] + 150, steps=4)
    page.mouse.up()
    p0, _ = page.evaluate(span)
    assert p0 < d0  # dragging right pans back in time
    page.evaluate("() => window.__trnscope.timelines.at(-1).fit()")
    select_range(page, 300, box["width"] - 50)
    text = page.locator(".details.selection").inner_text()
    assert "Selection:" in text and "aten::mul" in text
    page.wait_for_function("() => location.hash.includes('t0=')", timeout=5_000)  # the window goes in the URL (debounced)
    page.wait_for_timeout(200)
    shot(page, "07-range-selection")
    page.keyboard.press("Escape")
    assert page.evaluate("() => window.__trnscope.timelines.at(-1).range") is None


def test_compare_naive_vs_fused(page, ids):
    open_hash(page, "#/")
    page.locator(f"input[data-id='{ids['naive']}']").check()
    page.locator(f"input[data-id='{ids['fused']}']").check()
    page.locator("button:text('Compare selected')").click()
    page.wait_for_selector("table.compare-summary")
    row = page.locator("table.compare-summary tr[data-key='dispatches']").inner_text().split("\t")
    assert [cell.strip() for cell in row[1:4]] == ["18", "3", "−15"]
    # differences of percentages are percentage points, not a relative change
    busy = page.locator("table.compare-summary tr[data-key='busy_share'] td.delta").inner_text()
    assert busy.endswith(" pp") or busy == "–", busy
    assert "better" in page.locator("table.compare-summary tr[data-key='hbm_bytes']").get_attribute("class")
    ops = page.locator("table.compare-ops").inner_text()
    assert "aten::rms_norm" in ops and "test only" in ops and "base only" in ops
    wait_timeline(page)
    assert page.evaluate("() => window.__trnscope.timelines.length") == 2
    page.wait_for_timeout(300)
    shot(page, "08-compare")
    page.locator("h2:text('Timelines')").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    shot(page, "09-compare-timelines")


def test_summary_page(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/summary")
    page.wait_for_selector("ol.recs li")
    text = page.locator("main").inner_text()
    # dispatch overhead sets the pace: the host submits every 13 us (modelled), later than the 20 us
    # launch latency would need, so each gap is the next NEFF's launch latency
    assert "Many small dispatches" in text and "launch-latency bound" in text
    assert "launch latency" in text
    # the ops to fuse, not the ProfilerStep annotations wrapping them
    assert "ProfilerStep" not in page.locator("ol.recs").inner_text()
    shot(page, "10-summary")


def test_kineto_cuda_and_cpu_traces_open(page, ids):
    open_hash(page, f"#/p/{ids['alexnet']}/system")
    wait_timeline(page)
    groups = page.evaluate("() => window.__trnscope.timelines.at(-1).layout.groups.map((g) => g.title)")
    assert groups[:3] == ["CPU threads", "CUDA runtime", "GPU streams"]
    shot(page, "11-kineto-cuda")
    open_hash(page, f"#/p/{ids['cpu_only']}/system")
    wait_timeline(page)
    groups = page.evaluate("() => window.__trnscope.timelines.at(-1).layout.groups.map((g) => g.id)")
    assert groups[0] == "cpu" and "gpu" not in groups


def test_damaged_file_gets_an_error_page(page, ids):
    open_hash(page, f"#/p/{ids['truncated']}/system")
    page.wait_for_selector(".error-panel")
    text = page.locator(".error-panel").inner_text()
    assert "not valid JSON" in text and "export the trace again" in text
    shot(page, "12-error-page")
    open_hash(page, f"#/p/{ids['fused']}/summary")  # and everything else still works
    page.wait_for_selector("ol.recs li")


def teardown_module(module):
    # keep only this run's screenshots beside each other (older runs' files would confuse)
    if ARTIFACTS.exists() and not any(ARTIFACTS.iterdir()):
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
