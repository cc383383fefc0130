"""Names the build replay runs on here: pure Python, or setup.py's optional mypyc modules.

A replay's speed may depend on it (0-15% faster compiled on the four hosts measured:
docs/benchmarks.md, "Replay builds"), so the replay command and the benchmarks say which
one they measured.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = ["REPLAY_MODULES", "build_name", "compiled_modules", "package_version", "throughput"]

#: The modules setup.py compiles when asked (``ARENA_LEDGER_COMPILE=1``), as modules; a
#: test checks that setup.py's list names the same files.
REPLAY_MODULES = (
    "ledger.chain",
    "services.replay",
    "services.settlements",
    "machines.intake",
    "machines.projection",
)


def package_version() -> str:
    """Returns the installed package's version, or a phrase saying it was never installed."""
    try:
        return version("arena-ledger")
    except PackageNotFoundError:  # run from a source tree that pip never installed
        return "unknown (not installed)"


def compiled_modules() -> list[str]:
    """Returns which of ``REPLAY_MODULES`` this interpreter imports as compiled extensions."""
    compiled = []
    for name in REPLAY_MODULES:
        path = str(getattr(importlib.import_module(name), "__file__", "") or "")
        if path.endswith(tuple(EXTENSION_SUFFIXES)):
            compiled.append(name)
    return compiled


def build_name() -> str:
    """Returns "pure Python", or "mypyc-compiled" with the compiled modules in brackets."""
    compiled = compiled_modules()
    if not compiled:
        return "pure Python"
    return f"mypyc-compiled ({', '.join(compiled)})"


def throughput(events: int, seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """Returns a replay's timing as the replay command reports it (JSON-ready).

    ``seconds`` is wall-clock time, ``cpu_seconds`` this process's CPU time over the same
    span (on a busy machine the wall clock also counts other work); events per second are
    by the wall clock, rounded down, 0 when no time was measured.
    """
    rate = int(events / seconds) if seconds > 0 else 0
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "events_per_second": rate,
        "build": build_name(),
    }
