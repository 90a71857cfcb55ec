"""The explorer's ASGI application: a JSON API over the catalog and loaded sessions, plus the
single-page front-end shipped in ``static/``.

Handlers stay thin: they parse parameters, run the work in a thread (loading and querying are
CPU-bound numpy work) and map the project's exceptions to HTTP statuses:

=====================  ======  ==========================================================
ProfileError           422     the file is damaged or not a profile (message + hint)
BadRequest             400     a malformed query parameter
NotFound / unknown id  404
OutsideRoots           403     a path outside the directories the explorer was given
anything else          500     logged; the server keeps serving
=====================  ======  ==========================================================

docs/explorer.md lists every endpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route

from ..analysis import ProfileError, TraceCache
from . import columns, notes
from .assets import Assets
from .catalog import Catalog, OutsideRoots
from .ranks_view import Runs
from .security import (
    LoopbackHostMiddleware,
    SecurityHeadersMiddleware,
    TokenMiddleware,
    check_token,
    security_headers,
)
from .pages import ENTRY, Page, manifest, pages
from .params import integer, lanes, number
from .sessions import NotFound, Session, SessionStore
from .views import BadRequest, TimelineView

STATIC_DIR = Path(__file__).parent / "static"
log = logging.getLogger("trnscope.explorer")


class OrjsonResponse(JSONResponse):
    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class Explorer:
    """State shared by the handlers: the catalog of entries and the loaded sessions."""

    def __init__(self, roots: list[str | Path], cache: TraceCache | None, max_loaded: int = 8) -> None:
        self.catalog = Catalog(roots)
        self.sessions = SessionStore(cache, max_loaded=max_loaded)
        self.runs = Runs(self.catalog.roots)  # the multi-rank runs under the roots (pages/runs.py)

    def session(self, entry_id: str) -> Session:
        entry = self.catalog.get(entry_id)
        if entry is None:
            raise NotFound(f"no profile or trace with id {entry_id!r}")
        return self.sessions.get(entry)


# the timeline API every timeline page answers (see pages.Page.timeline)
def timeline(view: TimelineView, request: Request) -> dict:
    layout = view.describe()
    if "px" in request.query_params:
        layout["initial_lod"] = view.initial_lod(integer(request.query_params, "px"))
    return layout


def lod(view: TimelineView, request: Request) -> dict:
    q = request.query_params
    return view.lod(number(q, "t0"), number(q, "t1"), integer(q, "px"), lanes(q))


def slice_details(view: TimelineView, request: Request) -> dict:
    return view.details(request.path_params["row"])


def select(view: TimelineView, request: Request) -> dict:
    q = request.query_params
    return view.select(number(q, "t0"), number(q, "t1"), lanes(q))


def search(view: TimelineView, request: Request) -> dict:
    q = request.query_params
    return view.search(q.get("q", ""), q.get("regex", "") in ("1", "true"), lanes(q))


class _Endpoints:
    """The app's request handlers, over the explorer's state and the front-end's assets."""

    def __init__(self, explorer: Explorer, assets: Assets) -> None:
        self.explorer = explorer
        self.assets = assets

    async def index(self, request: Request) -> Response:
        return Response(self.assets.index, media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})

    async def static(self, request: Request) -> Response:
        found = self.assets.get(request.path_params["path"])
        if found is None:
            return OrjsonResponse({"error": {"problem": "no such file"}}, status_code=404)
        asset, cache_control = found
        headers = {"cache-control": cache_control, "etag": asset.etag}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)

    async def health(self, request: Request) -> Response:
        return OrjsonResponse({"ok": True, "roots": len(self.explorer.catalog.roots)})

    async def entries(self, request: Request) -> Response:
        explorer = self.explorer
        found = await run_in_threadpool(explorer.catalog.entries)
        items = []
        for entry in found:
            item = entry.describe()
            item["status"] = explorer.sessions.status(entry)
            error = explorer.sessions.error(entry)
            if error is not None:
                item["error"] = _error_body(error, entry.relpath)
            items.append(item)
        return OrjsonResponse({"roots": [str(r) for r in explorer.catalog.roots], "entries": items,
                               "truncated": explorer.catalog.truncated})

    def session_endpoint(self, build):
        """An entry's page API: ``build(session, request)`` on the entry's loaded session."""
        explorer = self.explorer

        async def endpoint(request: Request) -> Response:
            session = await run_in_threadpool(explorer.session, request.path_params["eid"])
            return OrjsonResponse(await run_in_threadpool(build, session, request))
        return endpoint

    def explorer_endpoint(self, build):
        """A page API over everything served: ``build(explorer, request)``."""
        explorer = self.explorer

        async def endpoint(request: Request) -> Response:
            return OrjsonResponse(await run_in_threadpool(build, explorer, request))
        return endpoint

    def view_endpoint(self, page: Page, build, binary: bool = False):
        """``binary``: answer Accept: application/x-trnscope-columns with columns as typed arrays."""
        make_view = page.view
        assert make_view is not None, f"page {page.name} has no timeline view"
        explorer = self.explorer

        def view_of(request: Request) -> TimelineView:
            return make_view(explorer.session(request.path_params["eid"]), request.path_params)

        async def endpoint(request: Request) -> Response:
            view = await run_in_threadpool(view_of, request)
            if binary and columns.wants_columns(request.headers.get("accept")):
                def packed() -> bytes:
                    return columns.encode(build(view, request))
                return Response(await run_in_threadpool(packed), media_type=columns.MEDIA_TYPE,
                                headers={"cache-control": "no-store"})
            return OrjsonResponse(await run_in_threadpool(build, view, request))
        return endpoint

    def notes_file(self, entry_id: str):
        entry = self.explorer.catalog.get(entry_id)
        if entry is None:
            raise NotFound(f"no profile or trace with id {entry_id!r}")
        is_root = entry.relpath == "."
        return notes.notes_path(entry.path, is_root), (entry.path if is_root and entry.path.is_dir() else None)

    async def notes_endpoint(self, request: Request) -> Response:
        path, keep = self.notes_file(request.path_params["eid"])
        if request.method == "GET":
            return OrjsonResponse(await run_in_threadpool(notes.read_notes, path))
        # a write changes files: only from this page (a JSON body cannot be sent cross-site without
        # a CORS preflight, which this server never grants; an Origin must be this server's own)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise BadRequest("notes are saved as application/json")
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host", ""):
            return OrjsonResponse({"error": {"problem": "notes can only be saved from the explorer's own page"}},
                                  status_code=403)
        body = await request.body()
        try:
            saved = await run_in_threadpool(notes.write_notes, path, body, keep)
        except OSError as exc:
            return OrjsonResponse({"error": {"problem": f"cannot save notes beside the profile ({exc.strerror or exc})",
                                             "hint": f"make {path.parent} writable", "file": path.name}}, status_code=403)
        return OrjsonResponse(saved)

    async def raw_file(self, request: Request) -> Response:
        path = await run_in_threadpool(self.explorer.catalog.resolve_file, request.path_params["root"],
                                       request.path_params["path"])
        # Always a download, never a page: a file from a served folder must not run script in the
        # explorer's origin (sandbox stops it even where a browser would render it anyway).
        return FileResponse(path, media_type="application/octet-stream", filename=path.name,
                            content_disposition_type="attachment",
                            headers={"content-security-policy": "sandbox; default-src 'none'"})


def _page_routes(ep: _Endpoints) -> tuple[list[Route], list[Route]]:
    """(routes under an entry, routes over everything served): every page's endpoints
    (explorer/pages), its API and the timeline API of a timeline page."""
    entry_routes = [Route("/notes", ep.notes_endpoint, methods=["GET", "PUT"])]
    global_routes = []
    for page in pages():
        for api in page.api:
            if (api.scope or page.scope) == ENTRY:
                entry_routes.append(Route(api.path, ep.session_endpoint(api.handler)))
            else:
                global_routes.append(Route(f"/api{api.path}", ep.explorer_endpoint(api.handler)))
        if page.timeline is not None:
            prefix = page.timeline
            entry_routes += [
                Route(f"{prefix}/timeline", ep.view_endpoint(page, timeline, binary=True)),
                Route(f"{prefix}/lod", ep.view_endpoint(page, lod, binary=True)),
                Route(f"{prefix}/slice/{{row:int}}", ep.view_endpoint(page, slice_details)),
                Route(f"{prefix}/select", ep.view_endpoint(page, select)),
                Route(f"{prefix}/search", ep.view_endpoint(page, search)),
            ]
    return entry_routes, global_routes


def _exception_handlers(explorer: Explorer, assets: Assets) -> dict[Any, Any]:
    """The project's exceptions mapped to HTTP statuses (the table in this module's docstring)."""

    async def profile_error(request: Request, exc: ProfileError) -> Response:
        return OrjsonResponse({"error": _error_body(exc, _relative(explorer, exc.path))}, status_code=422)

    async def not_found(request: Request, exc: Exception) -> Response:
        return OrjsonResponse({"error": {"problem": str(exc) or "not found"}}, status_code=404)

    async def bad_request(request: Request, exc: BadRequest) -> Response:
        return OrjsonResponse({"error": {"problem": str(exc)}}, status_code=400)

    async def notes_error(request: Request, exc: Exception) -> Response:
        return OrjsonResponse({"error": {"problem": str(exc)}}, status_code=422)

    async def outside(request: Request, exc: OutsideRoots) -> Response:
        return OrjsonResponse({"error": {"problem": "that path is outside the directories this explorer serves"}},
                              status_code=403)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return OrjsonResponse({"error": {"problem": exc.detail}}, status_code=exc.status_code)

    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("error serving %s", request.url.path)
        # The message may hold file-system paths (the served roots'): the log has it, the body not.
        # Starlette answers a 500 outside every middleware: the security headers are added here.
        return OrjsonResponse({"error": {"problem": f"internal error ({type(exc).__name__}); the explorer's log "
                                                    f"has the details"}}, status_code=500,
                              headers={k.decode(): v.decode() for k, v in security_headers((assets.boot_hash,))})

    # each handler takes its own exception class (Starlette's annotation says Exception for all)
    return {
        ProfileError: profile_error, notes.NotesError: notes_error, NotFound: not_found, FileNotFoundError: not_found, BadRequest: bad_request,
        OutsideRoots: outside, HTTPException: http_error, Exception: internal,
    }


def create_app(roots: list[str | Path], *, token: str | None = None, loopback_only: bool = False,
               cache: TraceCache | None = None, max_loaded: int = 8) -> Starlette:
    """The explorer app serving ``roots``. ``token``: require it on every request.
    ``loopback_only``: refuse requests whose Host header is not a loopback name."""
    check_token(token)
    explorer = Explorer(roots, cache, max_loaded=max_loaded)
    assets = Assets(STATIC_DIR, pages=manifest())
    ep = _Endpoints(explorer, assets)
    entry_routes, global_routes = _page_routes(ep)
    routes = [
        Route("/", ep.index),
        Route("/api/health", ep.health),
        Route("/api/entries", ep.entries),
        Mount("/api/entries/{eid}", routes=entry_routes),
        *global_routes,
        Route("/raw/{root:int}/{path:path}", ep.raw_file),
        Route("/static/{path:path}", ep.static),
    ]
    app = Starlette(routes=routes, exception_handlers=_exception_handlers(explorer, assets))
    if token:
        app.add_middleware(TokenMiddleware, token=token)
    if loopback_only:
        app.add_middleware(LoopbackHostMiddleware)
    # added last, so outermost: the 401 and 403 answers of the checks above carry the headers too
    app.add_middleware(SecurityHeadersMiddleware, script_hashes=(assets.boot_hash,))
    app.state.explorer = explorer
    return app


def _error_body(exc: ProfileError, file: str) -> dict:
    return {"problem": exc.problem, "hint": exc.hint, "file": file}


def _relative(explorer: Explorer, path: str) -> str:
    """A file named relative to the root it is under (absolute paths say more than users need)."""
    target = Path(path)
    for root in explorer.catalog.roots:
        base = root.parent if root.is_file() else root
        if target.is_relative_to(base):
            return target.relative_to(base).as_posix()
    return target.name
