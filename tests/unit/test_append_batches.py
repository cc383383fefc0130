"""Unit tests of ``services.append``: how draft lines become batches, each one atomic append."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.records import EventDraft
from services.append import append_batches, batch_key, split_batches
from services.draft_lines import DraftLine
from vocabulary import limits
from vocabulary.errors import InvalidInput, LimitExceeded


def _lines(count: int, key: str | None = None) -> list[DraftLine]:
    return [DraftLine(i + 1, EventDraft(f"credit-c{i}", "CreditGranted", {}), key)
            for i in range(count)]


class _Untouched:
    """Stands where the ledger goes; any use of it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the ledger was used ({name}) before the input was checked")


def test_batches_split_in_order_and_none_means_one_batch() -> None:
    lines = _lines(5)
    assert [[line.line for line in b] for b in split_batches(lines, 2)] == [[1, 2], [3, 4], [5]]
    assert [[line.line for line in b] for b in split_batches(lines, None)] == [[1, 2, 3, 4, 5]]
    assert split_batches([], None) == []


def test_a_batch_carries_one_key_and_two_are_refused_at_the_second() -> None:
    assert batch_key(_lines(2, "k1")) == "k1" and batch_key(_lines(2)) is None
    mixed = [*_lines(1, "k2"), DraftLine(2, _lines(1)[0].draft, "k1")]
    with pytest.raises(InvalidInput) as caught:
        batch_key(mixed)
    assert caught.value.context["line"] == 1 and "--batch" in caught.value.message


@pytest.mark.parametrize("size", [None, limits.batch_events_max + 1])
def test_an_append_past_its_bound_is_refused_before_the_ledger_is_touched(
    size: int | None,
) -> None:
    too_many = limits.batch_events_max + 1
    with pytest.raises(LimitExceeded) as caught:
        append_batches(_Untouched(), _lines(too_many), size, actor="t")  # type: ignore[arg-type]
    assert f"would hold {too_many}" in caught.value.message
    assert f"--batch {limits.batch_events_max}" in caught.value.message


def test_no_lines_is_refused_before_the_ledger_is_touched() -> None:
    with pytest.raises(InvalidInput, match="holds no events"):
        append_batches(_Untouched(), [], None, actor="t")  # type: ignore[arg-type]
