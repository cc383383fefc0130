"""Builds the ASGI app: routes, security headers, problem details, a bound on work in flight."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.build_info import package_version
from services.dashboard import Dashboard
from vocabulary.errors import LedgerError
from web.cache import BUDGET, PageCache
from web.pages import crash_problem, http_problem, ledger_problem, problem
from web.routes import ROUTERS
from web.security import SecurityHeaders

__all__ = ["WORKERS", "create_app"]

STATIC = Path(__file__).with_name("static")
#: Requests answered at once (threads, each with its own connection): bounds memory and the
#: database connections the server holds, whatever the load.
WORKERS = 8


class HeadAsGet:
    """Answers HEAD as GET without the body (HTTP requires HEAD wherever GET is served;
    FastAPI's routes answer only the methods they declare). Headers, Content-Length
    included, are GET's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        started = False

        async def headers_only(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        async def gone_once_answered() -> Message:
            # A HEAD client wants no body: once the headers are out, a streaming route (the
            # live event stream) sees the client gone and ends, instead of running forever.
            if started:
                return {"type": "http.disconnect"}
            return await receive()

        await self.app({**scope, "method": "GET"}, gone_once_answered, headers_only)


def create_app(url: str, *, dashboard: Dashboard | None = None,
               cache_bytes: int = BUDGET) -> FastAPI:
    """Returns the read-only app over the ledger at ``url``, keeping at most
    ``cache_bytes`` of answers per head position (0: none)."""
    board = dashboard if dashboard is not None else Dashboard(url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        to_thread.current_default_thread_limiter().total_tokens = WORKERS
        yield
        board.close()

    app = FastAPI(
        title="arena-ledger",
        version=package_version(),
        summary="Read-only views of an arena ledger: the JSON twin of every dashboard page.",
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI loads from a CDN; the OpenAPI document is enough
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.dashboard = board
    # Set by the server as it begins to stop (web.server): a response that never ends by
    # itself (the live event stream) ends at its next look instead of holding the shutdown.
    app.state.stopping = threading.Event()
    # Innermost first: a cached answer still gets the security headers, and HEAD is a GET
    # by the time the cache sees it.
    if cache_bytes > 0:
        app.add_middleware(PageCache, head=lambda: int(board.head()["position"]),
                           budget=cache_bytes)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(HeadAsGet)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in ROUTERS:
        app.include_router(router)

    @app.exception_handler(LedgerError)
    async def _ledger(request: Request, error: LedgerError) -> Response:
        return ledger_problem(request, error)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> Response:
        return http_problem(request, error)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> Response:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return problem(request, 400, "Bad request", f"{where}: {first.get('msg', 'invalid')}",
                       "invalid_input", path=where)

    @app.exception_handler(Exception)
    async def _crash(request: Request, error: Exception) -> Response:
        return crash_problem(request, error)

    return app
