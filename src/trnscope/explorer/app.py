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

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route

from ..analysis import ProfileError, TraceCache
from ..trace.timeunits import TIME_LIMIT_NS
from . import columns, notes, payloads
from .assets import Assets
from .catalog import Catalog, OutsideRoots
from .ranks_view import RunNotFound, Runs
from .security import (
    LoopbackHostMiddleware,
    SecurityHeadersMiddleware,
    TokenMiddleware,
    check_token,
    security_headers,
)
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

    def session(self, entry_id: str) -> Session:
        entry = self.catalog.get(entry_id)
        if entry is None:
            raise NotFound(f"no profile or trace with id {entry_id!r}")
        return self.sessions.get(entry)

    def view(self, request: Request) -> TimelineView:
        session = self.session(request.path_params["eid"])
        neff = request.path_params.get("neff")
        if neff is None:
            return session.system
        return session.device(neff, request.path_params["nc"])


def create_app(roots: list[str | Path], *, token: str | None = None, loopback_only: bool = False,
               cache: TraceCache | None = None, max_loaded: int = 8) -> Starlette:
    """The explorer app serving ``roots``. ``token``: require it on every request.
    ``loopback_only``: refuse requests whose Host header is not a loopback name."""
    check_token(token)
    explorer = Explorer(roots, cache, max_loaded=max_loaded)
    assets = Assets(STATIC_DIR)

    async def index(request: Request) -> Response:
        return Response(assets.index, media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})

    async def static(request: Request) -> Response:
        found = assets.get(request.path_params["path"])
        if found is None:
            return OrjsonResponse({"error": {"problem": "no such file"}}, status_code=404)
        asset, cache_control = found
        headers = {"cache-control": cache_control, "etag": asset.etag}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)

    async def health(request: Request) -> Response:
        return OrjsonResponse({"ok": True, "roots": len(explorer.catalog.roots)})

    async def entries(request: Request) -> Response:
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

    def session_endpoint(build):
        async def endpoint(request: Request) -> Response:
            session = await run_in_threadpool(explorer.session, request.path_params["eid"])
            return OrjsonResponse(await run_in_threadpool(build, session, request))
        return endpoint

    def view_endpoint(build, binary: bool = False):
        """``binary``: answer Accept: application/x-trnscope-columns with columns as typed arrays."""
        async def endpoint(request: Request) -> Response:
            view = await run_in_threadpool(explorer.view, request)
            if binary and columns.wants_columns(request.headers.get("accept")):
                def packed() -> bytes:
                    return columns.encode(build(view, request))
                return Response(await run_in_threadpool(packed), media_type=columns.MEDIA_TYPE,
                                headers={"cache-control": "no-store"})
            return OrjsonResponse(await run_in_threadpool(build, view, request))
        return endpoint

    def timeline(view: TimelineView, request: Request) -> dict:
        layout = view.describe()
        if "px" in request.query_params:
            layout["initial_lod"] = view.initial_lod(_int(request.query_params, "px"))
        return layout

    def lod(view: TimelineView, request: Request) -> dict:
        q = request.query_params
        return view.lod(_float(q, "t0"), _float(q, "t1"), _int(q, "px"), _lanes(q))

    def slice_details(view: TimelineView, request: Request) -> dict:
        return view.details(request.path_params["row"])

    def select(view: TimelineView, request: Request) -> dict:
        q = request.query_params
        return view.select(_float(q, "t0"), _float(q, "t1"), _lanes(q))

    def search(view: TimelineView, request: Request) -> dict:
        q = request.query_params
        return view.search(q.get("q", ""), q.get("regex", "") in ("1", "true"), _lanes(q))

    def query(session: Session, request: Request) -> dict:
        from ..analysis.sql import QueryError

        q = request.query_params
        try:
            return session.database.query(q.get("sql", ""), max_rows=min(_int_or(q, "max_rows", 2000), 10_000)).to_dict()
        except QueryError as exc:
            raise BadRequest(str(exc)) from None

    def query_tables(session: Session, request: Request) -> dict:
        from ..analysis.sql import TABLES

        return {"tables": [{"name": name, "about": about, "columns": [{"name": c, "about": m} for c, m in columns.items()]}
                           for name, (about, columns) in TABLES.items()]}

    def notes_file(entry_id: str):
        entry = explorer.catalog.get(entry_id)
        if entry is None:
            raise NotFound(f"no profile or trace with id {entry_id!r}")
        is_root = entry.relpath == "."
        return notes.notes_path(entry.path, is_root), (entry.path if is_root and entry.path.is_dir() else None)

    async def notes_endpoint(request: Request) -> Response:
        path, keep = notes_file(request.path_params["eid"])
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

    def execution(session: Session, request: Request) -> dict:
        view = session.system
        row = view.execution_row(request.path_params["seq"])
        if row is None:
            raise NotFound(f"no execution {request.path_params['seq']} in this profile")
        return view.slice_summary(row)

    async def compare(request: Request) -> Response:
        base_id, test_id = request.query_params.get("base"), request.query_params.get("test")
        if not base_id or not test_id:
            raise BadRequest("compare needs ?base=<id>&test=<id>")
        base = await run_in_threadpool(explorer.session, base_id)
        test = await run_in_threadpool(explorer.session, test_id)
        return OrjsonResponse(await run_in_threadpool(payloads.compare, base, test))

    async def raw_file(request: Request) -> Response:
        path = await run_in_threadpool(explorer.catalog.resolve_file, request.path_params["root"],
                                       request.path_params["path"])
        # Always a download, never a page: a file from a served folder must not run script in the
        # explorer's origin (sandbox stops it even where a browser would render it anyway).
        return FileResponse(path, media_type="application/octet-stream", filename=path.name,
                            content_disposition_type="attachment",
                            headers={"content-security-policy": "sandbox; default-src 'none'"})

    entry_routes = [
        Route("/card", session_endpoint(lambda s, r: payloads.card(s))),
        Route("/summary", session_endpoint(lambda s, r: payloads.summary(s))),
        Route("/ops", session_endpoint(lambda s, r: payloads.ops(s))),
        Route("/execution/{seq:int}", session_endpoint(execution)),
        Route("/notes", notes_endpoint, methods=["GET", "PUT"]),
        Route("/roofline", session_endpoint(lambda s, r: s.analysis.roofline.to_dict())),
        Route("/query", session_endpoint(query)),
        Route("/query/tables", session_endpoint(query_tables)),
    ]
    for prefix in ("", "/device/{neff}/{nc:int}"):
        entry_routes += [
            Route(f"{prefix}/timeline", view_endpoint(timeline, binary=True)),
            Route(f"{prefix}/lod", view_endpoint(lod, binary=True)),
            Route(f"{prefix}/slice/{{row:int}}", view_endpoint(slice_details)),
            Route(f"{prefix}/select", view_endpoint(select)),
            Route(f"{prefix}/search", view_endpoint(search)),
        ]
    runs = Runs(explorer.catalog.roots)  # multi-rank runs: the #/run/<id> page (ranks_view)

    async def run_list(request: Request) -> Response:
        return OrjsonResponse({"runs": await run_in_threadpool(runs.list)})

    async def run_page(request: Request) -> Response:
        return OrjsonResponse(await run_in_threadpool(runs.get, request.path_params["rid"]))

    routes = [
        Route("/", index),
        Route("/api/runs", run_list),
        Route("/api/runs/{rid}", run_page),
        Route("/api/health", health),
        Route("/api/entries", entries),
        Mount("/api/entries/{eid}", routes=entry_routes),
        Route("/api/compare", compare),
        Route("/raw/{root:int}/{path:path}", raw_file),
        Route("/static/{path:path}", static),
    ]

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

    app = Starlette(routes=routes, exception_handlers={
        ProfileError: profile_error, notes.NotesError: notes_error, NotFound: not_found, FileNotFoundError: not_found,
        RunNotFound: not_found, BadRequest: bad_request,
        OutsideRoots: outside, HTTPException: http_error, Exception: internal,
    })
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


def _float(query, name: str) -> float:
    try:
        value = float(query[name])
    except KeyError:
        raise BadRequest(f"missing parameter {name}") from None
    except ValueError:
        raise BadRequest(f"{name} must be a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise BadRequest(f"{name} must be finite")
    # Times are int64 nanoseconds relative to the view's origin (itself below TIME_LIMIT_NS): a
    # range reaching past half that limit selects what one ending there does, and origin + t
    # stays inside int64.
    limit = TIME_LIMIT_NS // 2
    return min(max(value, -limit), limit)


def _int(query, name: str) -> int:
    text = query.get(name)
    if text is None:
        raise BadRequest(f"missing parameter {name}")
    if len(text) > 20:
        raise BadRequest(f"{name} must be an integer of at most 64 bits")
    try:
        return int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer") from None


def _int_or(query, name: str, default: int) -> int:
    return _int(query, name) if name in query else default


def _lanes(query) -> list[str] | None:
    text = query.get("lanes")
    return [part for part in text.split(",") if part] if text else None
