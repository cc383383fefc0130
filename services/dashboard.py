"""Serves read-only questions to a long-running process: the web dashboard (``web/``).

A request runs on one of a bounded pool of worker threads; each thread keeps an
``ArenaLedger`` of its own (its own connection pool, its own fold should the read models
be unable to answer), so no query shares mutable state with another thread and nothing is
locked. Nothing here appends: the dashboard is read-only by construction.
"""

from __future__ import annotations

import threading
from typing import Any

from ledger.store import safe_url
from services.arena_ledger import ArenaLedger

__all__ = ["Dashboard"]


class Dashboard:
    """Hands each worker thread its own read-only ``ArenaLedger`` over one ledger URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._opened: list[tuple[threading.Thread, ArenaLedger]] = []
        self._lock = threading.Lock()
        # Fail at start, not at the first request, when the URL names no ledger.
        self.ledger()

    def ledger(self) -> ArenaLedger:
        """Returns this thread's ledger, opening it on first use (and closing those of
        threads that have ended: the server's worker threads come and go with the load,
        and each ledger holds a connection pool)."""
        found: ArenaLedger | None = getattr(self._local, "ledger", None)
        if found is None:
            found = ArenaLedger(self.url, actor="serve")
            self._local.ledger = found
            with self._lock:
                ended = [led for thread, led in self._opened if not thread.is_alive()]
                self._opened = [(t, led) for t, led in self._opened if t.is_alive()]
                self._opened.append((threading.current_thread(), found))
            for ledger in ended:
                ledger.close()
        return found

    def ledgers(self) -> list[ArenaLedger]:
        """Returns the open ledgers (one per live thread that has asked for one)."""
        with self._lock:
            return [ledger for _, ledger in self._opened]

    def where(self) -> str:
        """Returns the ledger's URL as it may be shown (a password hidden)."""
        return safe_url(self.url)

    def head(self) -> dict[str, Any]:
        """Returns the head: position and the hash of the last event (what a page was
        rendered at, and what the live stream counts from)."""
        head = self.ledger().store.head()
        return {"position": head.position, "entry_hash": head.entry_hash}

    def close(self) -> None:
        """Closes every thread's ledger."""
        with self._lock:
            opened, self._opened = self._opened, []
        for _, ledger in opened:
            ledger.close()
