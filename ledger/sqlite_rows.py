"""Writes many rows into one SQLite table with multi-row INSERTs (the store and the archive).

``executemany`` runs a one-row statement once per row, and each run opens cursors on the
table and its indexes and seeks them anew: a third of an append's insert time. A statement
of many rows does that once. Widths are powers of two (1,000 rows are 256 × 3 + 128 + 64 +
32 + 8), so a table is written through at most nine statement texts, which SQLite's
statement cache keeps; a width also stays within the build's bound on parameters.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

__all__ = ["insert_rows"]


def insert_rows(
    cursor: Any, into: str, rows: Sequence[Sequence[Any]], rows_max: int = 256
) -> None:
    """Inserts ``rows`` into ``into`` ("table (col, …)") in statements of ≤ ``rows_max`` rows.

    ``rows_max`` is a power of two; ``cursor`` is a sqlite3 cursor (its connection tells the
    build's bound on parameters).
    """
    if not rows:
        return
    columns = len(rows[0])
    width = rows_max
    params_max = cursor.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    while width > 1 and width * columns > params_max:
        width >>= 1
    start, total = 0, len(rows)
    while start < total:
        while width > total - start:
            width >>= 1
        values = list(itertools.chain.from_iterable(rows[start : start + width]))
        cursor.execute(_statement(into, columns, width), values)
        start += width


@lru_cache(maxsize=64)
def _statement(into: str, columns: int, rows: int) -> str:
    row = "(" + ", ".join(["?"] * columns) + ")"
    return f"INSERT INTO {into} VALUES " + ", ".join([row] * rows)
