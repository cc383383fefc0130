"""Collects the structlog event dicts one stdlib logger logs (shared by the tracker tests)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class LogEvents(logging.Handler):
    """Keeps the structlog event dicts logged to one stdlib logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):
            self.events.append(record.msg)


@contextmanager
def captured(name: str) -> Iterator[LogEvents]:
    """Yields a LogEvents attached to logger ``name`` for the block, detached after it."""
    logger = logging.getLogger(name)
    handler = LogEvents()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
