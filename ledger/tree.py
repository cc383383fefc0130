"""Keeps the name shipped revision 0002 imports the stored tree's frontier code by.

A shipped Alembic revision is never edited (its bytes are pinned), and 0002 backfills the
Merkle frontier with ``advance_frontier`` imported from this module's name; the code lives
in ``stored_tree``.
Nothing else imports this module.
"""

from __future__ import annotations

from ledger.stored_tree import advance_frontier

__all__ = ["advance_frontier"]
