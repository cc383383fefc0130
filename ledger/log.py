"""Configures structlog: snake_case events, bound ids, JSON when not on a terminal.

The library logs through the standard ``logging`` tree under ``arena_ledger``, so it stays
quiet unless an application (the CLI with ``--log-level``) turns it on.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]

_configured = False


def _ensure_structlog() -> None:
    global _configured
    if _configured:
        return
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(name: str = "arena_ledger", **bound: Any) -> Any:
    """Returns a structlog logger under the ``arena_ledger`` stdlib logger, with ``bound`` ids."""
    _ensure_structlog()
    return structlog.get_logger(name).bind(**bound)


def configure_logging(level: str = "WARNING", *, json: bool | None = None) -> None:
    """Sends arena-ledger logs to stderr at ``level``: JSON off a terminal, console on one."""
    _ensure_structlog()
    use_json = (not sys.stderr.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=renderer))
    root = logging.getLogger("arena_ledger")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
