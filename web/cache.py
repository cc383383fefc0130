"""Keeps the answers of the ledger's pages per head position: the ledger is append-only and
the read models are written in the append transaction, so what a page says at a head
position never changes. A page asked again at the same head is sent from memory; the first
event appended after it makes every later request compute afresh (the head is read per
request: one indexed row).

Only GET answers of the pages and JSON routes that are functions of the events are kept
(not checkpoints, proofs or tiles, which also depend on the checkpoints an operator signs;
not the live stream; not static files), only 200s, each at most ``BODY_MAX`` bytes, and at
most ``BUDGET`` bytes in all, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from anyio import to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BODY_MAX", "BUDGET", "CACHED_PREFIXES", "PageCache"]

#: The paths kept (with their ``/api`` twins), by prefix.
CACHED_PREFIXES = ("/arenas", "/submissions", "/hotkeys", "/settlements", "/events")
BODY_MAX = 2 * 1024 * 1024
BUDGET = 64 * 1024 * 1024

Key = tuple[str, bytes, bool, int]
Entry = tuple[int, list[tuple[bytes, bytes]], bytes]


def cacheable(path: str) -> bool:
    """Tells whether answers at ``path`` are a function of the events alone."""
    bare = path[4:] if path.startswith("/api/") else path
    if bare == "/events/stream":
        return False
    return bare in ("/", "/api") or bare.startswith(CACHED_PREFIXES)


class PageCache:
    """An ASGI middleware that answers a repeated GET at an unchanged head from memory."""

    def __init__(self, app: ASGIApp, head: Callable[[], int], budget: int = BUDGET) -> None:
        self.app = app
        self.head = head
        self.budget = budget
        self.used = 0
        self.entries: OrderedDict[Key, Entry] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or not cacheable(scope["path"]):
            await self.app(scope, receive, send)
            return
        position = await to_thread.run_sync(self.head)
        accept = dict(scope["headers"]).get(b"accept", b"")
        key: Key = (scope["path"], scope["query_string"], b"text/html" in accept, position)
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
        if found is not None:
            status, headers, body = found
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        start: Message = {}
        chunks: list[bytes] = []
        size = 0

        async def keep(message: Message) -> None:
            nonlocal size
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body" and size <= BODY_MAX:
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if not message.get("more_body", False) and start.get("status") == 200:
                    self._store(key, (200, list(start.get("headers", [])), b"".join(chunks)))
            await send(message)

        await self.app(scope, receive, keep)

    def _store(self, key: Key, entry: Entry) -> None:
        size = len(entry[2])
        if size > BODY_MAX:
            return
        with self.lock:
            if key in self.entries:
                return
            self.entries[key] = entry
            self.used += size
            while self.used > self.budget and self.entries:
                _, (_, _, body) = self.entries.popitem(last=False)
                self.used -= len(body)
