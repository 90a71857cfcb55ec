"""One registry of the explorer's pages: a new page is its module in ``explorer/pages`` plus its
front-end module, and nothing else changes (routes, tabs, the boot script's early request all
come from the registry)."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
import threading
import time
from html import unescape
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from test_explorer_browser import browser  # noqa: F401 - the shared headless Chromium
from trnscope.explorer import app as app_module
from trnscope.explorer import create_app, pages
from trnscope.explorer.pages import ENTRY, GLOBAL, Page

PAGE_MODULE = '''
"""A page added for the test: its module, nothing else."""
from trnscope.explorer.pages import Api, Page


def answer(session, request):
    return {"name": session.entry.display_name, "thing": request.query_params.get("thing", "")}


PAGE = Page(name="demo", title="Demo", script="views/demo.js", order=50, params=("thing",),
            timeline="/demo/{thing}", view=lambda session, params: session.system,
            api=(Api("/demo", answer),))
'''

PAGE_SCRIPT = '''
import { getJSON } from "../api.js";
import { el, fill } from "../format.js";

export default async function demoView(main, { id, thing }) {
  const data = await getJSON(`/api/entries/${encodeURIComponent(id)}/demo?thing=${encodeURIComponent(thing)}`);
  fill(main, el("h1.demo", {}, `demo of ${data.name}: ${data.thing}`));
  return {};
}
'''


def test_the_registry_lists_every_page_once():
    found = pages.pages()
    names = [(p.scope, p.name) for p in found]
    assert len(set(names)) == len(names)
    assert {p.name for p in found if p.scope == ENTRY} >= {"system", "ops", "lines", "summary", "query", "device"}
    assert {p.name for p in found if p.scope == GLOBAL} == {"profiles", "compare", "runs", "run"}
    static = Path(app_module.STATIC_DIR)
    assert all((static / "js" / p.script).is_file() for p in found)
    assert [p.name for p in found if p.home] == ["profiles", "system"]
    with pytest.raises(ValueError, match="timeline route and its view"):
        Page(name="x", title="X", script="views/x.js", timeline="/x")
    with pytest.raises(ValueError, match="lower-case"):
        Page(name="Bad Name", title="X", script="views/x.js")


@pytest.fixture()
def with_demo_page(tmp_path, monkeypatch):
    """The demo page added as a module and a JS file, in copies of the package's folders."""
    package = tmp_path / "pages"
    package.mkdir()
    (package / "demo.py").write_text(textwrap.dedent(PAGE_MODULE))
    static = tmp_path / "static"
    shutil.copytree(app_module.STATIC_DIR, static)
    (static / "js" / "views" / "demo.js").write_text(PAGE_SCRIPT)
    monkeypatch.setattr(pages, "__path__", [*pages.__path__, str(package)])
    monkeypatch.setattr(app_module, "STATIC_DIR", static)
    pages.pages.cache_clear()
    yield
    pages.pages.cache_clear()


def _manifest(html: str) -> list[dict]:
    return json.loads(unescape(re.search(r'data-pages="([^"]*)"', html).group(1)))


def test_a_new_page_is_its_module_and_its_script(with_demo_page, explorer_root):
    with TestClient(create_app([explorer_root])) as client:
        entry = next(e for e in client.get("/api/entries").json()["entries"] if e["relpath"].startswith("rmsnorm/naive"))
        answer = client.get(f"/api/entries/{entry['id']}/demo", params={"thing": "x"})
        assert answer.status_code == 200 and answer.json() == {"name": entry["name"], "thing": "x"}
        demo = next(p for p in _manifest(client.get("/").text) if p["name"] == "demo")
        assert demo == {"name": "demo", "title": "Demo", "script": "views/demo.js", "scope": "entry", "params": ["thing"],
                        "nav": True, "nav_title": "Demo", "home": False, "kinds": [], "timeline": "/demo/{thing}"}
        # a timeline page gets the timeline API under its route
        layout = client.get(f"/api/entries/{entry['id']}/demo/anything/timeline")
        assert layout.status_code == 200 and layout.json()["lanes"]


def test_a_page_naming_a_missing_script_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "pages"
    package.mkdir()
    (package / "ghost.py").write_text("from trnscope.explorer.pages import Page\n"
                                      "PAGE = Page(name='ghost', title='Ghost', script='views/ghost.js')\n")
    monkeypatch.setattr(pages, "__path__", [*pages.__path__, str(package)])
    pages.pages.cache_clear()
    try:
        with pytest.raises(ValueError, match="views/ghost.js"):
            create_app([tmp_path])
    finally:
        pages.pages.cache_clear()


@pytest.mark.browser
def test_the_new_page_has_a_tab_and_draws(with_demo_page, explorer_root, browser):
    import uvicorn

    from trnscope.explorer.server import free_port

    port = free_port()
    app = create_app([explorer_root], loopback_only=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        entry = next(e for e in app.state.explorer.catalog.entries() if e.relpath.startswith("rmsnorm/naive"))
        page.goto(f"http://127.0.0.1:{port}/#/p/{entry.id}/demo/seven")
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("h1.demo").inner_text() == f"demo of {entry.display_name}: seven"
        assert page.locator("nav a.tab.active").inner_text() == "Demo"
        # the boot script asked for the demo page's timeline before the modules loaded
        assert page.evaluate("() => window.__trnscopeBoot && window.__trnscopeBoot.base") \
            == f"/api/entries/{entry.id}/demo/seven"
        # and every page's tab is there, from the registry
        tabs = page.locator("nav a.tab").all_inner_texts()
        assert tabs[:2] == ["Profiles", "Compare"] and {"System trace", "Source lines", "SQL", "Demo"} <= set(tabs)
    finally:
        page.close()
        server.should_exit = True
        thread.join(timeout=10)
    assert not errors, errors
