"""Renders pages with Jinja2 (every value escaped) and answers every error as problem details.

Every page has a JSON twin under ``/api``; a page's template receives the same document its
twin returns, so the two cannot drift apart. Errors are RFC 9457 problem details
(``application/problem+json``) for the API and for any client that does not ask for HTML;
a browser gets the same fields as a page. No traceback ever leaves the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import structlog
from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape
from starlette.exceptions import HTTPException as StarletteHTTPException

from vocabulary.errors import (
    ConcurrencyConflict,
    IntegrityError,
    InvalidInput,
    LedgerError,
    NotFound,
    Refused,
    StoreError,
)

__all__ = ["BIDI_CONTROLS", "PROBLEM", "html", "problem", "query_string", "render", "segment",
           "visible", "wants_html"]

log = structlog.get_logger("web")

TEMPLATES = Path(__file__).with_name("templates")
PROBLEM = "application/problem+json"

# Autoescape everything: a hotkey, note or reason is whatever a miner or operator wrote.
env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def query_string(**params: Any) -> str:
    """Returns ``?a=1&b=2`` for the params that are not None (or "" for none)."""
    kept = {k: v for k, v in params.items() if v is not None}
    return "?" + urlencode(kept) if kept else ""


def segment(text: str) -> str:
    """Returns ``text`` quoted as one path segment: a hotkey may hold ``/ ? # %``, and a
    link must lead to that hotkey's page, not to another path or a fragment."""
    return quote(text, safe="")


#: Characters that reorder the text around them (bidi embeddings, overrides, isolates and
#: marks), by the name a reader is shown in their place.
BIDI_CONTROLS = {
    "\u061c": "ARABIC LETTER MARK", "\u200e": "LEFT-TO-RIGHT MARK",
    "\u200f": "RIGHT-TO-LEFT MARK", "\u202a": "LEFT-TO-RIGHT EMBEDDING",
    "\u202b": "RIGHT-TO-LEFT EMBEDDING", "\u202c": "POP DIRECTIONAL FORMATTING",
    "\u202d": "LEFT-TO-RIGHT OVERRIDE", "\u202e": "RIGHT-TO-LEFT OVERRIDE",
    "\u2066": "LEFT-TO-RIGHT ISOLATE", "\u2067": "RIGHT-TO-LEFT ISOLATE",
    "\u2068": "FIRST STRONG ISOLATE", "\u2069": "POP DIRECTIONAL ISOLATE",
}


def visible(text: str) -> Markup:
    """Returns ``text`` escaped, each bidi control shown as a marked ``[U+XXXX]``.

    A right-to-left override kept as text would still reorder what follows it on the page
    (``\\u202egnp.exe`` reads as ``exe.png``), so an operator would read something the
    ledger does not say: shown by its code point, the note reads as written. The JSON twin
    keeps the note's exact characters.
    """
    parts: list[Markup] = []
    for char in text:
        name = BIDI_CONTROLS.get(char)
        if name is None:
            parts.append(escape(char))
        else:
            code = f"U+{ord(char):04X}"
            parts.append(Markup('<span class="bidi" title="{}">[{}]</span>').format(
                f"{code} {name}", code))
    return Markup("").join(parts)


env.globals["query_string"] = query_string
env.globals["segment"] = segment
env.filters["visible"] = visible


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Renders ``template`` with ``context`` plus the request and the twin's path."""
    context.setdefault("json_twin", "/api" + request.url.path
                       + (f"?{request.url.query}" if request.url.query else ""))
    context.setdefault("title", "arena-ledger")
    body = env.get_template(template).render(request=request, **context)
    return HTMLResponse(body, status_code=status)


def html(request: Request) -> bool:
    """Tells whether to answer ``request`` with a page: not an API path, and asked for HTML."""
    if request.url.path.startswith("/api/") or request.url.path == "/api":
        return False
    return wants_html(request)


def wants_html(request: Request) -> bool:
    """Tells whether the client prefers HTML (a browser) to JSON."""
    accept = request.headers.get("accept", "")
    return "text/html" in accept


#: A library error's HTTP status, by class (the first match in order wins).
STATUS: tuple[tuple[type[LedgerError], int], ...] = (
    (NotFound, 404),
    (InvalidInput, 400),
    (ConcurrencyConflict, 409),
    (Refused, 409),
    (IntegrityError, 500),
    (StoreError, 503),
)


def problem(request: Request, status: int, title: str, detail: str, code: str,
            **extra: Any) -> Response:
    """Answers one problem: problem+json, or an error page for a browser on a page path."""
    body = {"type": f"about:blank#{code}", "title": title, "status": status,
            "detail": detail, "code": code, "instance": request.url.path, **extra}
    if html(request):
        return render(request, "error.html", status=status, problem=body,
                      title=f"{status} {title}", json_twin=None)
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def ledger_problem(request: Request, error: LedgerError) -> Response:
    """Answers a library error with its status and its own one-line message."""
    status = next((s for cls, s in STATUS if isinstance(error, cls)), 500)
    extra = {k: v for k, v in error.context.items()
             if isinstance(v, str | int | bool) and k in ("path", "line", "reason")}
    return problem(request, status, _TITLES.get(status, "Error"), error.message, error.code,
                   **extra)


def http_problem(request: Request, error: StarletteHTTPException) -> Response:
    """Answers a routing error (404 for an unknown path, 405 for a write method, …)."""
    detail = error.detail if isinstance(error.detail, str) else ""
    if error.status_code == 404 and detail in ("", "Not Found"):
        detail = f"nothing is served at {request.url.path}"
    elif error.status_code == 405:
        detail = f"{request.method} is not allowed: the dashboard is read-only"
    response = problem(request, error.status_code, _TITLES.get(error.status_code, "Error"),
                       detail, _CODES.get(error.status_code, "http_error"))
    if error.headers:
        response.headers.update(error.headers)
    return response


def crash_problem(request: Request, error: Exception) -> Response:
    """Answers an unexpected exception: logged here with its traceback, never sent."""
    log.error("request_failed", path=request.url.path, error=type(error).__name__,
              exc_info=error)
    return problem(request, 500, "Internal error",
                   "the server failed to answer this request; its log says why",
                   "internal_error")


_TITLES = {400: "Bad request", 404: "Not found", 405: "Method not allowed",
           409: "Conflict", 422: "Bad request", 500: "Internal error",
           503: "Store unavailable"}
_CODES = {404: "not_found", 405: "method_not_allowed", 400: "invalid_input",
          422: "invalid_input"}
