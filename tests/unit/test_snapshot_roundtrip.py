"""Holds a pickled fold (what ``services.fold_cache`` writes) to the fold it was taken from.

A snapshot may be taken at any position: mid-attempt, with a submission held, a payment
consumed but not yet admitted, a requeue pending. Whatever the cut, the fold restored from
the pickle and fed the rest of the ledger must end where the fold that never stopped ends,
projection for projection, refusal for refusal. The ledger is bench/fold.py's generated one
(payments, credits, rejections, holds, requeues, expiries, faults, a re-commission).
"""

from __future__ import annotations

import importlib
import pickle
import sys
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from machines.projection import LedgerFold

_ROOT = Path(__file__).resolve().parents[2]
EVENTS = 5_000


@cache
def _records() -> tuple[tuple[int, str, Any], ...]:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    generate = importlib.import_module("bench.fold").generate
    return tuple(
        (position, stream, event)
        for position, stream, _, event in generate(EVENTS, 3, 48, 150_000)
    )


def _fold(records: tuple[tuple[int, str, Any], ...], fold: LedgerFold | None = None) -> LedgerFold:
    fold = LedgerFold() if fold is None else fold
    for position, stream, event in records:
        fold.apply(position, stream, event)
    return fold


#: Attributes holding the fold's own bound methods (equal only to themselves).
_BOUND = ("_routes", "_dispatch")


def _assert_same_state(restored: LedgerFold, taken: LedgerFold) -> None:
    """Every attribute equal, not only what ``snapshot()`` shows (indexes such as a
    submission's spent credit decide the next event); aliases kept (an attribute that is
    another one's object in the fold is in the copy); bound methods bound to the copy."""
    state = {k: v for k, v in _attributes(taken).items() if k not in _BOUND}
    copied = {k: v for k, v in _attributes(restored).items() if k not in _BOUND}
    assert copied == state
    assert sorted(_attributes(restored)) == sorted(_attributes(taken))
    aliases = [(a, b) for a in state for b in state if a < b and state[a] is state[b]]
    assert [(a, b) for a, b in aliases if copied[a] is not copied[b]] == []
    for name in _BOUND:
        table = getattr(taken, name)
        copy = getattr(restored, name)
        assert list(copy) == list(table)
        assert all(_bound_to(value) is restored for value in copy.values())


def _attributes(fold: LedgerFold) -> dict[str, Any]:
    """Returns the fold's attributes by name, read directly (not through what pickle asks
    for): ``vars`` of the Python class, or every attribute mypyc's native class declares
    (the optional compiled build, which has no ``__dict__``)."""
    names = getattr(type(fold), "__mypyc_attrs__", None)
    if names is None:
        return dict(vars(fold))
    return {name: getattr(fold, name) for name in names}


def _bound_to(route: Any) -> Any:
    """Returns the object a route's method is bound to (a route may be a tuple holding it)."""
    if isinstance(route, tuple):
        return next(_bound_to(item) for item in route if callable(item))
    return route.__self__


@cache
def _whole() -> dict[str, Any]:
    fold = _fold(_records())
    return {"snapshot": fold.snapshot(), "refusals": list(fold.refusals)}


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=0, max_value=EVENTS))
def test_a_fold_restored_at_any_position_ends_where_the_unbroken_fold_ends(cut: int) -> None:
    records = _records()
    taken = _fold(records[:cut])
    restored = pickle.loads(pickle.dumps(taken, protocol=pickle.HIGHEST_PROTOCOL))
    assert restored.snapshot() == taken.snapshot()
    _assert_same_state(restored, taken)
    assert restored.position == taken.position == (records[cut - 1][0] if cut else 0)
    _fold(records[cut:], restored)
    assert {"snapshot": restored.snapshot(), "refusals": list(restored.refusals)} == _whole()


def test_the_generated_ledger_is_accepted_whole_and_reaches_every_kind_of_state() -> None:
    """The property above means something only if the ledger exercises the fold: no
    refusals (a refused event changes nothing), and the statuses a cut can fall between."""
    whole = _whole()
    assert whole["refusals"] == []
    statuses = {sub.status for sub in whole["snapshot"]["submissions"].values()}
    live_and_done = {"QUALIFIED", "FAILED", "REJECTED", "QUALIFYING", "QUEUED", "NO_DECISION"}
    assert live_and_done <= statuses, statuses
    kinds = {event.event_type for _, _, event in _records()}
    assert {"HoldReleased", "SubmissionRequeued", "CreditSpent",
            "PaymentConsumed", "InfrastructureFault", "EmissionPolicySet"} <= kinds, kinds
