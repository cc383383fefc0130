"""Holds every bound the verdict machines enforce, as named constants with the unit last."""

from __future__ import annotations

__all__ = [
    "admissions_per_epoch_max",
    "requeues_max",
]

#: Automatic re-queues a submission may take (NO_DECISION with disposition REQUEUE).
requeues_max = 3

#: Admissions a hotkey may have in one epoch; the next one is rejected.
admissions_per_epoch_max = 16
