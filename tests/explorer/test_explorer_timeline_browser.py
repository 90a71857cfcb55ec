"""The timeline's features in headless Chromium: slice search with next/previous, folding one
lane, flags with notes saved beside the profile, range shares that add up, an idle gap marked
from the summary, "show first call" framing the kernel too, distinct colours, and the dark theme.
Screenshots land in test-artifacts/explorer/ beside the other browser tests'."""

from __future__ import annotations

import json
import re
import time

import pytest

from test_explorer_browser import (  # noqa: F401 - fixtures shared with the other browser tests
    browser, ids, locate, open_hash, page, select_range, server, shot, wait_timeline,
)
from trnscope.explorer.notes import SUFFIX

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TL = "window.__trnscope.timelines.at(-1)"


def test_search_steps_through_matches_next_and_previous(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    page.locator("input.tl-search").fill("aten::mul")
    page.locator("input.tl-search").press("Enter")
    page.wait_for_selector(".details h3:text('aten::mul')")
    first = page.evaluate(f"() => {TL}.selected")
    count = page.locator(".tl-count").inner_text()
    assert re.fullmatch(r"\d+ / 6", count), count
    page.locator("button.tl-next").click()
    page.wait_for_function(f"(ts) => {TL}.selected && {TL}.selected.ts > ts", arg=first["ts"])
    second = page.evaluate(f"() => {TL}.selected")
    assert second["row"] != first["row"]
    # the match is on screen
    t0, t1 = page.evaluate(f"() => [{TL}.t0, {TL}.t1]")
    assert t0 <= second["ts"] and second["ts"] + second["dur"] <= t1
    page.locator("input.tl-search").press("Shift+Enter")
    page.wait_for_function(f"(row) => {TL}.selected && {TL}.selected.row === row", arg=first["row"])
    page.wait_for_timeout(200)
    shot(page, "20-search")
    # a regular expression, and one that does not compile says so
    page.locator(".tl-regex input").check()
    page.locator("input.tl-search").fill("^aten::(mul|pow)$")
    page.wait_for_function(f"() => {TL}.matchesFor === '^aten::(mul|pow)$'")
    total = int(page.locator(".tl-count").inner_text().split("/ ")[1])
    assert total > 6
    page.locator("input.tl-search").fill("aten::(")
    page.wait_for_function("() => document.querySelector('input.tl-search').classList.contains('bad')")
    assert "regular expression" in page.locator(".tl-count").inner_text()


def test_any_single_lane_folds_to_its_top_level(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    before = page.evaluate(f"""() => {{ const t = {TL};
        const row = t.rows.find((r) => r.type === 'lane' && r.lane.depth > 1);
        const others = t.rows.filter((r) => r !== row).map((r) => r.h);
        const box = t.canvas.getBoundingClientRect();
        return {{ id: row.lane.id, h: row.h, depth: row.lane.depth, others,
                  x: box.left + 60, y: box.top + 26 + row.y - t.scrollTop + 8 }}; }}""")
    page.mouse.click(before["x"], before["y"])  # on the lane's label
    after = page.evaluate(f"""(id) => {{ const t = {TL}; const row = t.rows.find((r) => r.lane && r.lane.id === id);
        return {{ h: row.h, collapsed: row.collapsed, others: t.rows.filter((r) => r !== row).map((r) => r.h),
                  groups: t.collapsed.size }}; }}""", before["id"])
    assert after["collapsed"] and after["h"] < before["h"]
    assert after["others"] == before["others"]  # only that lane folded; its group stays open
    page.wait_for_timeout(150)
    shot(page, "21-lane-folded")
    page.mouse.click(before["x"], before["y"])
    assert page.evaluate(f"(id) => {TL}.rows.find((r) => r.lane && r.lane.id === id).h", before["id"]) == before["h"]


def test_flags_with_notes_are_saved_beside_the_profile(page, ids, server, explorer_root):
    _, app = server
    entry = app.state.explorer.catalog.get(ids["fused"])
    notes = entry.path.with_name(entry.path.name + SUFFIX)
    notes.unlink(missing_ok=True)
    open_hash(page, f"#/p/{ids['fused']}/system")
    wait_timeline(page)
    point = locate(page, "aten::rms_norm", "framework/")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_selector(".details h3:text('aten::rms_norm')")
    page.locator("button.tl-flag").click()
    page.locator(".flag-item input.flag-note").fill("the fused kernel")
    saved = wait_for_file(notes, lambda flags: flags and flags[0]["note"])
    selected = page.evaluate(f"() => {TL}.selected")
    assert len(saved) == 1 and saved[0]["note"] == "the fused kernel" and saved[0]["view"] == "system"
    assert saved[0]["row"] == selected["row"] and saved[0]["ts"] == round(selected["ts"])
    page.wait_for_timeout(200)
    shot(page, "22-flags")
    # a new page finds it again, drawn on the timeline
    page.reload()
    page.wait_for_selector("body[data-ready='1']")
    wait_timeline(page)
    page.wait_for_function(f"() => {TL}.flags.length === 1")
    assert page.locator(".tl-flags summary").inner_text() == "Flags (1)"
    page.locator(".tl-flags summary").click()
    page.locator(".flag-delete").click()
    assert wait_for_file(notes, lambda flags: flags == []) == []


def wait_for_file(path, ready, timeout=10.0):
    """The flags in ``path`` once ``ready(flags)`` holds (the page saves in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        flags = json.loads(path.read_text())["flags"] if path.exists() else None
        if flags is not None and ready(flags) or time.monotonic() > deadline:
            return flags
        time.sleep(0.1)


def test_range_shares_add_up(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    box = page.locator("canvas.tl-canvas").bounding_box()
    select_range(page, 280, box["width"] - 20)
    shares = page.locator("table.by-name tr td:last-child").all_inner_texts()
    total = sum(float(s.rstrip("%")) for s in shares)
    assert 99.0 <= total <= 100.5, shares  # 200 names at most: all of these fit


def test_idle_gap_from_the_summary_is_marked(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/summary")
    page.locator("table.gaps-table tbody tr").first.click()
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    r = page.evaluate(f"() => {TL}.range")
    assert r and r["t1"] > r["t0"] and r["label"].startswith("idle gap")
    t0, t1 = page.evaluate(f"() => [{TL}.t0, {TL}.t1]")
    assert t0 < r["t0"] < r["t1"] < t1
    page.wait_for_selector(".details.selection")  # what the host did meanwhile
    page.wait_for_timeout(200)
    shot(page, "23-gap-marked")


def test_show_first_call_frames_the_call_and_its_kernel(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/ops")
    page.locator("table.ops-table span.op-name:text-is('aten::mul')").click()
    page.locator("button.first-call").click()
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    page.wait_for_selector(".details h3:text('aten::mul')")
    t0, t1 = page.evaluate(f"() => [{TL}.t0, {TL}.t1]")
    # the op and the device execution it launched are both on screen
    hw = page.evaluate(f"""() => {{ const t = {TL}; const lane = t.layout.lanes.find((l) => l.title.startsWith('neuron_hw'));
        return t.details.downstream.filter((d) => d.lane === lane.id); }}""")
    assert hw, "no execution downstream of the op"
    assert all(t0 <= d["ts"] and d["ts"] + d["dur"] <= t1 for d in hw)
    op = page.evaluate(f"() => {TL}.selected")
    assert t0 < op["ts"] and (t1 - t0) > 1.2 * (max(d["ts"] + d["dur"] for d in hw) - op["ts"])  # with context
    page.wait_for_timeout(200)
    shot(page, "24-first-call")


def test_colours_of_the_names_on_screen_differ(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    colours = page.evaluate(f"""() => {{ const t = {TL};
        return t.layout.color_order.slice(0, 16).map((n) => [n, t.colorOfName ? t.colorOfName(n) : null]); }}""")
    names = page.evaluate(f"() => {TL}.layout.color_order.slice(0, 16)")
    picked = page.evaluate("""async (names) => { const m = await import(document.querySelector('link[rel=modulepreload][href*="colors.js"]').href);
        return names.map((n) => m.colorFor(n)); }""", names)
    assert colours and len(set(picked)) == len(picked), dict(zip(names, picked))


def test_dark_theme(page, ids):
    open_hash(page, f"#/p/{ids['naive']}/system")
    wait_timeline(page)
    page.locator("button.theme-toggle").click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    page.wait_for_timeout(200)
    # the canvas follows: its background is the dark one
    pixel = page.evaluate(f"""() => {{ const t = {TL}; const d = t.ctx.getImageData(t.width - 5, t.height - 5, 1, 1).data;
        return [d[0], d[1], d[2]]; }}""")
    assert sum(pixel) < 150, pixel
    shot(page, "25-dark-system")
    open_hash(page, f"#/p/{ids['naive']}/summary")  # kept across pages
    page.wait_for_selector("ol.recs li")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    shot(page, "26-dark-summary")
    page.locator("button.theme-toggle").click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"


def test_sql_page_runs_a_query_and_opens_a_row(page, ids, monkeypatch):
    import test_explorer_browser

    # the refused query below answers 400, which the browser logs
    monkeypatch.setattr(test_explorer_browser, "EXPECTED_CONSOLE", (*test_explorer_browser.EXPECTED_CONSOLE, "status of 400"))
    open_hash(page, f"#/p/{ids['naive']}/query")
    page.locator("textarea.sql-editor").fill("SELECT row, name, dur_ns FROM slices WHERE name = 'aten::pow' ORDER BY ts_ns")
    page.locator("textarea.sql-editor").press("Control+Enter")
    page.wait_for_selector("table.sql-table tbody tr")
    assert page.locator(".sql-status").inner_text().startswith("3 row(s)")
    assert page.locator("table.sql-table thead th, table.sql-table th").first.inner_text().startswith("row")
    page.locator(".sql-tables details summary:has-text('instructions')").click()
    page.wait_for_timeout(100)
    shot(page, "27-sql")
    page.locator("table.sql-table tbody tr").first.click()  # a slice row: into the system trace
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    page.wait_for_selector(".details h3:text('aten::pow')")
    # a refused query says why
    open_hash(page, f"#/p/{ids['naive']}/query")
    page.locator("textarea.sql-editor").fill("DROP TABLE slices")
    page.locator("button.sql-run").click()
    page.wait_for_selector("pre.sql-error")
    assert "read-only" in page.locator("pre.sql-error").inner_text()


def test_roofline_chart_points_open_their_device_trace(page, ids):
    open_hash(page, f"#/p/{ids['train']}/summary")
    page.wait_for_selector("svg.roofline-svg circle.point")
    chart = page.locator("section.roofline-section")
    chart.scroll_into_view_if_needed()
    names = chart.locator("circle.point").evaluate_all("(cs) => cs.map((c) => c.dataset.name)")
    assert any(n.startswith("addmm") for n in names) and any(n.startswith("add.Tensor") for n in names)
    assert "compute" in chart.inner_text() or chart.locator("text.roof-label").count() == 2
    # the suite compiles FP32 matmuls with auto-cast off (tests/conftest.py): the Linear's matmuls
    # streamed FP32, so the chart has FP32's ceiling under BF16's and the table holds them to it
    roofs = chart.locator("polyline.roof").evaluate_all("(ps) => ps.map((p) => p.dataset.dtype)")
    assert roofs == ["BF16", "FP32"]
    assert "FP32 39.3 TFLOP/s (ridge 54 FLOP/B)" in chart.locator(".roofline-caption").inner_text()
    rows = chart.locator("table.roofline-table tbody tr").all_inner_texts()
    addmm_row = next(r for r in rows if r.startswith("addmm"))
    assert "FP32 39.3 TFLOP/s" in addmm_row and "54 FLOP/B" in addmm_row and "compute" in addmm_row
    # the key metrics and the limiter table say which peak the MFU is a share of
    metrics = page.locator("div.metrics").inner_text()
    assert "MFU of FP32 peak 39.3 TFLOP/s" in metrics
    limits = page.locator("table.limits-table tbody tr").all_inner_texts()
    assert any(r.startswith("aten::addmm") and "FP32 39.3 TFLOP/s" in r and "TensorE compute" in r for r in limits)
    page.wait_for_timeout(150)
    shot(page, "28-roofline")
    chart.locator("button[data-kind='op']").click()
    ops = chart.locator("circle.point").evaluate_all("(cs) => cs.map((c) => c.dataset.name)")
    assert "aten::addmm" in ops
    addmm = chart.locator("circle.point[data-name='aten::addmm']")
    addmm.dispatch_event("click")
    page.wait_for_selector("body[data-page='device']")
    wait_timeline(page)
    assert page.locator(".device-title h1").inner_text().startswith("addmm")


def test_step_overview_bars_open_their_step(page, ids):
    open_hash(page, f"#/p/{ids['steps']}/summary")
    page.wait_for_selector("svg.steps-svg g.step-bar")
    bars = page.locator("svg.steps-svg g.step-bar")
    assert bars.evaluate_all("(gs) => gs.map((g) => g.dataset.step)") == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    # each column is busy + host + launch + idle stacked to its step's height
    heights = bars.first.evaluate("(g) => [...g.querySelectorAll('rect:not(.step-hit)')].map((r) => +r.getAttribute('height'))")
    assert len(heights) >= 2 and all(h > 0 for h in heights)
    page.locator("section.steps-section").scroll_into_view_if_needed()
    page.wait_for_timeout(150)
    shot(page, "29-step-overview")
    bars.nth(1).dispatch_event("click")
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    page.wait_for_selector(".details h3:text('ProfilerStep#2')")
    step = page.evaluate(f"() => {TL}.selected")
    t0, t1 = page.evaluate(f"() => [{TL}.t0, {TL}.t1]")
    assert t0 <= step["ts"] and step["ts"] + step["dur"] <= t1


def test_compiled_neff_instructions_grouped_by_op_and_source_line(page, ids, server):
    _, app = server
    session = app.state.explorer.session(ids["steps"])
    neff = session.analysis.device.neffs[0]
    open_hash(page, f"#/p/{ids['steps']}/device/{neff.neff_id}/{next(iter(neff.ntff))}")
    wait_timeline(page)
    page.wait_for_selector("details.op-times table.op-time tr td")
    ops = page.locator("details.op-times table.op-time tr td:first-child").all_inner_texts()
    # the fused RMSNorm graph's members (a script run with `python -c` has no source file, so no
    # line is added here; the label is `<op> (<file>:<line>)` when the FX node's stack trace has one)
    assert len(ops) >= 3 and "(no op)" not in ops, ops
    assert any(op.startswith("aten::mul") for op in ops) and any(op.startswith("aten::rsqrt") for op in ops), ops
    legend = page.locator(".device-info .legend").inner_text()
    assert ops[0] in legend  # the colours of the timeline are these ops'
    page.wait_for_timeout(150)
    shot(page, "30-compiled-neff-by-op")


def test_source_lines_page_to_the_line_in_a_slices_details(page, ids, line_marks):
    open_hash(page, f"#/p/{ids['lines']}/lines")
    page.wait_for_selector("table.lines-table tbody tr")
    line = f"lines_model.py:{line_marks['eager']} (step)"
    row = page.locator("table.lines-table tbody tr").filter(has_text=line).filter(has_text="forward").first
    assert "line" in row.inner_text() and "aten::addmm" in row.inner_text()
    row.click()
    page.wait_for_selector("table.line-ops")
    assert {"aten::addmm", "aten::gelu"} <= set(page.locator("table.line-ops td:first-child").all_inner_texts())
    page.wait_for_timeout(150)
    shot(page, "40-source-lines")
    page.locator("button.first-call").first.click()
    page.wait_for_selector("body[data-page='system']")
    wait_timeline(page)
    page.wait_for_selector(".details table.facts tr:has(th:text-is('Source line'))")
    fact = page.locator(".details table.facts tr:has(th:text-is('Source line')) td").inner_text()
    assert fact.startswith(line), fact
    page.wait_for_timeout(150)
    shot(page, "41-source-line-in-details")


def test_an_nki_kernels_device_view_has_a_table_per_source_line(page, ids, server, line_marks):
    _, app = server
    session = app.state.explorer.session(ids["lines"])
    kernel = next(n for n in session.analysis.device.neffs if n.name == "double")
    open_hash(page, f"#/p/{ids['lines']}/device/{kernel.neff_id}/0")
    wait_timeline(page)
    page.wait_for_selector("details.line-times table.line-time tr td")
    lines = page.locator("details.line-times table.line-time tr td:first-child").all_inner_texts()
    assert sorted(lines) == sorted(f"lines_model.py:{line_marks[k]} (double)" for k in ("nki_load", "nki_add", "nki_store"))
    page.wait_for_timeout(150)
    shot(page, "42-nki-source-lines")


def test_memory_charts_draw_every_series(page, ids):
    open_hash(page, f"#/p/{ids['train']}/summary")
    charts = page.locator("svg.sparkline path")
    charts.first.wait_for()
    boxes = page.evaluate("() => [...document.querySelectorAll('svg.sparkline path')].map((p) => "
                          "{ const b = p.getBBox(); return [b.width, b.height]; })")
    assert boxes and all(w > 0 and h > 0 for w, h in boxes), boxes
    # an allocation freed at the same instant keeps a width (a zero-width rise and fall drew nothing)
    path = page.evaluate("async () => (await import('/static/js/views/summary.js'))"
                         ".sparklinePath([[0, 100], [0, 0], [10, 100], [10, 0]], 100, [0, 10])")
    points = [tuple(map(float, p.split(","))) for p in re.findall(r"[\d.]+,[\d.]+", path)]
    peaks = [x for x, y in points if y == 4.0]
    assert len(peaks) == 4 and peaks[1] - peaks[0] >= 2 and peaks[3] - peaks[2] >= 2, path
    page.locator("div.memory").scroll_into_view_if_needed()
    page.wait_for_timeout(150)
    shot(page, "43-memory")


def test_a_profile_and_its_retimed_copy_side_by_side(page, ids):
    open_hash(page, f"#/compare/{ids['naive']}/{ids['retimed']}")
    page.wait_for_selector("table.compare-kernels tbody tr")
    heads = page.locator("table.compare-summary thead th").all_inner_texts()
    assert "(trn2)" in heads[1] and "(trn1; retimed from trn2)" in heads[2], heads
    assert "host intervals" in page.locator(".retime-note").inner_text()
    status = page.locator("table.compare-kernels tbody tr td:nth-child(2)").all_inner_texts()
    assert status and set(status) == {"both"}  # every NEFF on both targets
    # figures are formatted, never raw numbers
    busy = page.locator("table.compare-summary tr[data-key='busy_ns'] td").all_inner_texts()
    assert all(re.search(r"[µnm]s$", v) for v in busy[1:3]), busy
    page.wait_for_timeout(200)
    shot(page, "44-compare-retimed")
    open_hash(page, "#/")
    card = page.locator(f"article.card[data-id='{ids['retimed']}']")
    card.locator(".recording .retimed").wait_for()
    assert "retimed from trn2" in card.inner_text()
