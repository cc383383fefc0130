"""Writes a realistic domain ledger as the JSON Lines drafts ``arena-ledger append`` reads.

The events come from the benchmark's generator (``bench/fold.py``: arenas, payments, credits,
rejections, attempts with windows, holds, requeues, expiries), which the machines accept in
order, so ``append`` takes them through the guard as an operator's file would go.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]


def generated_drafts(events: int, seed: int) -> list[dict[str, Any]]:
    """Returns about ``events`` drafts ({stream, type, payload}) in ledger order."""
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    fold = importlib.import_module("bench.fold")
    return [
        {"stream": stream, "type": kind,
         "payload": event.model_dump(mode="json", exclude_unset=True)}
        for _, stream, kind, event in fold.generate(events, seed, 16, emission_share_ppm=150_000)
    ]
