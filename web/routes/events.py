"""The recorded events: a page at a time newest first, one event with the hash it chains to,
and the live stream of those that commit while a page is open.

``/api/events`` lists the objects ``arena-ledger events --json`` prints
(``RecordedEvent.to_json``), filtered as ``events`` filters (the same checks, naming the
query parameter). ``/api/events/stream`` is a server-sent event stream fed by
``services.follow``: ``id:`` is the event's position, so a browser that reconnects resumes
after the last event it saw (``Last-Event-ID``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any
from urllib.parse import urlencode

import anyio
import orjson
from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ledger.records import RecordedEvent
from services.dashboard import Dashboard
from services.event_pages import QUERY_NAMES, EventFilter, event_detail, event_page
from services.follow import Follower
from vocabulary.errors import InvalidInput
from vocabulary.limits import json_integer_abs_max
from web.deps import DEFAULT_PAGE, Board, Limit
from web.pages import render

__all__ = [
    "live_batch_events_max",
    "live_keep_alive_s",
    "live_poll_interval_s",
    "live_stream_s_max",
    "router",
]

router = APIRouter()

#: Seconds between the live stream's looks at the head while nothing new has committed.
live_poll_interval_s = 1.0
#: Seconds of quiet after which the stream sends a comment, so proxies and browsers keep it.
live_keep_alive_s = 15.0
#: Most events one write of the stream carries; a client far behind catches up in steps.
live_batch_events_max = 100
#: Seconds a stream lasts before the server ends it; the browser reconnects with
#: Last-Event-ID and misses nothing. Bounds how long one client holds a connection.
live_stream_s_max = 3_600.0

#: A position as a query parameter: JSON's integer range (positions are stored as such).
Position = Annotated[int, Path(ge=1, le=json_integer_abs_max, description="A position.")]
After = Annotated[int | None, Query(
    ge=0, le=json_integer_abs_max,
    description="Only events after this position: the next newer page (its oldest first "
    "in the ledger, shown newest first); on the stream, where to start.")]
Before = Annotated[int | None, Query(
    ge=1, le=json_integer_abs_max, description="Only events before this position: the next "
    "older page.")]
AsOf = Annotated[int | None, Query(
    ge=0, le=json_integer_abs_max, description="The ledger as of this position: nothing "
    "after it is listed.")]
Stream = Annotated[str | None, Query(description="Only this stream (a whole name).")]
StreamPrefix = Annotated[str | None, Query(description="Only streams starting with this, "
                                           "e.g. attempt-.")]
Types = Annotated[list[str] | None, Query(alias="type", description="Only this type "
                                          "(repeatable).")]


def _filter(stream: str | None, stream_prefix: str | None, types: list[str] | None
            ) -> EventFilter:
    """Returns the checked filter; an empty field (a form left blank) is no filter."""
    return EventFilter.checked(stream or None, stream_prefix or None,
                               [name for name in types or () if name], names=QUERY_NAMES)


def _href(path: str, chosen: EventFilter, limit: int, **extra: int | None) -> str:
    """Returns a link to ``path`` with the page's filters (and limit, when not the default)
    plus ``extra`` (a cursor, an as_of)."""
    params: list[tuple[str, Any]] = [(k, v) for k, v in (
        ("stream", chosen.stream), ("stream_prefix", chosen.stream_prefix)) if v is not None]
    params += [("type", name) for name in chosen.types]
    params += [(k, v) for k, v in extra.items() if v is not None]
    if limit != DEFAULT_PAGE:
        params.append(("limit", limit))
    return path + ("?" + urlencode(params) if params else "")


@router.get("/api/events", tags=["events"], summary="Recorded events, newest first")
def events_json(board: Board, stream: Stream = None, stream_prefix: StreamPrefix = None,
                types: Types = None, after: After = None, before: Before = None,
                as_of: AsOf = None, limit: Limit = DEFAULT_PAGE) -> dict[str, Any]:
    """Returns a page of events, newest first, as ``arena-ledger events --json`` prints
    them; ``older_before`` and ``newer_after`` are the cursors of the pages beside it."""
    chosen = _filter(stream, stream_prefix, types)
    return event_page(board.ledger().store, chosen, limit, after=after, before=before,
                      as_of=as_of).to_json()


@router.get("/api/events/stream", tags=["events"], summary="Events as they commit (SSE)",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "A server-sent event stream: `id:` the "
                             "position, `event: ledger`, `data:` the event's JSON."}})
async def events_stream(
    request: Request, board: Board, stream: Stream = None, stream_prefix: StreamPrefix = None,
    types: Types = None, after: After = None,
    last_event_id: Annotated[str | None, Header(description="Set by a reconnecting "
                                                "EventSource: resume after this position.")]
    = None,
) -> Response:
    """Streams the matching events that commit after ``after`` (or ``Last-Event-ID``, which
    wins; by default, the head), one ``ledger`` message each, with a keep-alive comment
    every 15 s of quiet."""
    chosen = _filter(stream, stream_prefix, types)
    start = _resume_point(last_event_id)
    if start is None:
        start = after
    if start is None:
        start = await run_in_threadpool(lambda: board.ledger().store.head().position)
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    follower = Follower(start, chosen, live_batch_events_max)
    return StreamingResponse(_messages(request, board, follower),
                             media_type="text/event-stream", headers=headers)


def _resume_point(header: str | None) -> int | None:
    """Returns the position a ``Last-Event-ID`` names (None without one); refuses another."""
    if header is None or header == "":
        return None
    if not header.isascii() or not header.isdigit() or int(header) > json_integer_abs_max:
        raise InvalidInput(f"Last-Event-ID must be a position (an event's id), not "
                           f"{header[:40]!r}", path="Last-Event-ID")
    return int(header)


async def _messages(request: Request, board: Dashboard, follower: Follower
                    ) -> AsyncIterator[str]:
    """Yields the stream's text: a batch of messages per poll that found events, a comment
    after each ``live_keep_alive_s`` of quiet; ends when the client goes, when the server
    stops, or when the stream has lasted ``live_stream_s_max``."""
    # The store is read on a worker thread (its own ledger), never on the event loop.
    poll: Callable[[], list[RecordedEvent]] = lambda: follower.poll(board.ledger().store)  # noqa: E731
    started = quiet_since = anyio.current_time()
    yield f": following after position {follower.position}\n\n"
    stopping = request.app.state.stopping  # set as the server begins to stop
    while not stopping.is_set() and not await request.is_disconnected():
        batch = await run_in_threadpool(poll)
        now = anyio.current_time()
        if batch:
            yield "".join(_message(recorded) for recorded in batch)
            quiet_since = now
        elif now - quiet_since >= live_keep_alive_s:
            yield ": keep-alive\n\n"
            quiet_since = now
        if now - started >= live_stream_s_max:
            return
        if len(batch) < follower.batch_events_max:  # a full batch may have more behind it
            await anyio.sleep(live_poll_interval_s)


def _message(recorded: RecordedEvent) -> str:
    """Returns one event as a server-sent message (JSON on one line: no newline inside)."""
    data = orjson.dumps(recorded.to_json()).decode()
    return f"id: {recorded.position}\nevent: ledger\ndata: {data}\n\n"


@router.get("/api/events/{position}", tags=["events"], summary="One event")
def event_json(board: Board, position: Position) -> dict[str, Any]:
    """Returns the event at ``position`` (as ``events --json`` prints it), the entry hash it
    chains to (``previous_hash``), the head, and where its inclusion proof is."""
    return _detail(board, position)


def _detail(board: Dashboard, position: int) -> dict[str, Any]:
    detail = event_detail(board.ledger().store, position)
    detail["inclusion_proof"] = f"/api/proofs/inclusion?position={position}&download=1"
    return detail


@router.get("/events", response_class=HTMLResponse, include_in_schema=False)
def events_page(request: Request, board: Board, stream: Stream = None,
                stream_prefix: StreamPrefix = None, types: Types = None, after: After = None,
                before: Before = None, as_of: AsOf = None,
                limit: Limit = DEFAULT_PAGE) -> HTMLResponse:
    chosen = _filter(stream, stream_prefix, types)
    page = event_page(board.ledger().store, chosen, limit, after=after, before=before,
                      as_of=as_of)
    newest = after is None and before is None and as_of is None
    return render(
        request, "events.html", title="events", page=page.to_json(), newest=newest,
        href=lambda **extra: _href("/events", chosen, limit, **extra),
        # Only the newest page grows as events commit: an older or as-of page stays still.
        live_src=_href("/api/events/stream", chosen, DEFAULT_PAGE, after=page.head)
        if newest else None,
    )


@router.get("/events/{position}", response_class=HTMLResponse, include_in_schema=False)
def event_page_html(request: Request, board: Board, position: Position) -> HTMLResponse:
    detail = _detail(board, position)
    return render(request, "event.html", title=f"event {position}", detail=detail,
                  payload=_shown_json(detail["event"]["payload"]))


def _shown_json(value: Any) -> str:
    """Returns ``value`` as indented JSON for a person (the template shows it through
    ``visible``: escaped, a bidi control by its code point)."""
    return json.dumps(value, indent=2, ensure_ascii=False)
