"""Holds the bounds of what the shell reads and shows, unit last."""

from __future__ import annotations

__all__ = [
    "unlisted_shown_max",
]

#: Names of files that are not part of a bundle that one line lists (the rest are counted).
unlisted_shown_max = 10
