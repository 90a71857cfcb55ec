"""The explorer's pages, one registry: a page is its module here plus its front-end module.

Each module in this package declares ``PAGE = Page(...)``: its URL, its tab, the JavaScript module
that draws it (``static/js/<script>``, whose default export renders the page) and the API it
needs. :func:`pages` finds them all; nothing else lists pages:

* ``app.create_app`` mounts every page's :class:`Api` endpoints and, for a page with a timeline,
  the timeline endpoints (``timeline``, ``lod``, ``slice/<row>``, ``select``, ``search``) under
  its ``timeline`` route;
* ``assets.Assets`` writes :func:`manifest` into ``index.html``, where the boot script reads it
  (a timeline page's first answer is asked for before the modules load) and ``main.js`` routes,
  draws the tabs and loads each page's module when first shown.

Adding a page: ``pages/<name>.py`` with its ``PAGE`` and ``static/js/views/<name>.js`` exporting
``default async function (main, {id, query, ...params})`` (docs/explorer.md, "Adding a page").
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from ... import caches

ENTRY = "entry"    # a page of one profile or trace: #/p/<id>/<name>/<params...>
GLOBAL = "global"  # a page of the explorer: #/<name>/<params...> (the home page: #/)
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Api:
    """One JSON endpoint of a page: ``path`` under ``/api/entries/<id>`` with scope ENTRY
    (``handler(session, request) -> dict``), under ``/api`` with scope GLOBAL
    (``handler(explorer, request) -> dict``); None: the page's scope. Handlers run in a worker
    thread; :class:`~trnscope.explorer.views.BadRequest` is a 400, ``NotFound`` a 404."""
    path: str
    handler: Callable
    scope: str | None = None


@dataclass(frozen=True)
class Page:
    name: str  # the URL segment (letters, digits, '-')
    title: str  # the tab's label
    script: str  # the front-end module under static/js/ (its default export draws the page)
    scope: str = ENTRY
    params: tuple[str, ...] = ()  # URL segments after the name, handed to the script by these names
    order: int = 100  # position of the tab
    nav: bool = True  # False: a tab only while the page is shown (it is reached through links)
    nav_title: str = ""  # the tab's label while shown, with {param}s of the URL (default: title)
    home: bool = False  # the page of an empty URL (global) or of #/p/<id> (entry)
    kinds: tuple[str, ...] = ()  # entry kinds the tab is offered for (neuron, kineto, parquet); () = all
    # a timeline page: the route of its timeline API under /api/entries/<id> ("" for the entry
    # itself; Starlette's syntax, e.g. "/device/{neff}/{nc:int}") and the view that answers it,
    # view(session, path_params) -> TimelineView
    timeline: str | None = None
    view: Callable | None = None
    api: tuple[Api, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"page name {self.name!r}: use lower-case letters, digits and '-'")
        if self.scope not in (ENTRY, GLOBAL):
            raise ValueError(f"page {self.name}: scope must be {ENTRY!r} or {GLOBAL!r}")
        if (self.timeline is None) != (self.view is None):
            raise ValueError(f"page {self.name}: a timeline page gives both its timeline route and its view")

    def describe(self) -> dict:
        """What the browser knows of the page (see :func:`manifest`)."""
        return {"name": self.name, "title": self.title, "script": self.script, "scope": self.scope,
                "params": list(self.params), "nav": self.nav, "nav_title": self.nav_title or self.title,
                "home": self.home, "kinds": list(self.kinds), "timeline": self.timeline}


@cache
def pages() -> tuple[Page, ...]:
    """Every page of this package, in tab order (global pages first)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        page = getattr(module, "PAGE", None)
        if isinstance(page, Page):
            found.append(page)
    found.sort(key=lambda p: (p.scope != GLOBAL, p.order, p.name))
    for scope in (ENTRY, GLOBAL):
        mine = [p for p in found if p.scope == scope]
        names = [p.name for p in mine]
        if len(set(names)) != len(names):
            raise ValueError(f"two {scope} pages share a name: {sorted(names)}")
        if sum(p.home for p in mine) != 1:
            raise ValueError(f"exactly one {scope} page must be home=True (found {[p.name for p in mine if p.home]})")
    return tuple(found)


caches.register("explorer.pages: the pages found", pages.cache_clear)


def manifest() -> list[dict]:
    """The pages as the front-end reads them (written into index.html)."""
    return [p.describe() for p in pages()]
