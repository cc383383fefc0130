"""Appends event drafts in batches: each batch one atomic append under one idempotency key.

This is what ``arena-ledger append`` runs. Every batch is checked (schema, limits, keys)
before the first one is written, so input a batch would refuse changes nothing; a batch the
store or a machine refuses stops the run, and the error says which earlier batches stay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ledger.progress import Progress
from ledger.records import AppendResult, EventDraft
from services.arena_ledger import ArenaLedger
from services.draft_lines import DraftLine
from vocabulary import limits
from vocabulary.errors import InvalidInput, LedgerError, LimitExceeded, Refused

__all__ = ["BatchAppended", "append_batches", "batch_key", "split_batches"]


@dataclass(frozen=True, slots=True)
class BatchAppended:
    """Is one batch the store took: its input lines and what the append returned."""

    first_line: int
    last_line: int
    result: AppendResult


def split_batches(lines: Sequence[DraftLine], size: int | None) -> list[list[DraftLine]]:
    """Returns ``lines`` in batches of ``size`` (None: one batch of them all)."""
    if size is None:
        return [list(lines)] if lines else []
    return [list(lines[i : i + size]) for i in range(0, len(lines), size)]


def batch_key(batch: Sequence[DraftLine]) -> str | None:
    """Returns the one idempotency key ``batch`` carries, if any; two keys are refused."""
    keys = {line.idempotency_key for line in batch if line.idempotency_key is not None}
    if len(keys) > 1:
        second = next(line for line in batch if line.idempotency_key not in (None, min(keys)))
        raise InvalidInput(
            "one batch carries one idempotency key; split the file with --batch",
            line=second.line,
            path="$.idempotency_key",
        )
    return keys.pop() if keys else None


def append_batches(
    ledger: ArenaLedger,
    lines: Sequence[DraftLine],
    size: int | None = None,
    *,
    actor: str,
    on_batch: Callable[[BatchAppended], None] | None = None,
    progress: Progress | None = None,
) -> list[BatchAppended]:
    """Appends ``lines`` in batches of ``size``; returns what each batch appended.

    ``on_batch`` hears of each batch once the ledger holds it, ``progress`` how many of
    the lines are appended. An error names the input line it came from and, when earlier
    batches of this run committed, which ones stay.
    """
    if not lines:
        raise InvalidInput("the input holds no events")
    most = limits.batch_events_max
    if len(lines) > most and (size is None or size > most):
        raise LimitExceeded(
            f"one append takes at most {most} events and this one would hold "
            f"{len(lines) if size is None else size}: give --batch {most} (or fewer) to "
            "append the input in batches, each one atomic",
            path="$",
        )
    batches = split_batches(lines, size)
    for batch in batches:
        with _lines_named(batch):
            batch_key(batch)
            ledger.store.prepare([line.draft for line in batch])
    ledger.store.require_writable()  # before the fold: a read-only file is said at once
    done: list[BatchAppended] = []
    appended_lines = 0
    if progress is not None:
        progress("appending", 0, len(lines))
    try:
        for batch in batches:
            with _lines_named(batch):
                result = ledger.store.append(
                    [line.draft for line in batch], idempotency_key=batch_key(batch),
                    actor=actor,
                )
                ledger.guard.confirm(result)
            appended = BatchAppended(batch[0].line, batch[-1].line, result)
            if on_batch is not None:
                on_batch(appended)
            done.append(appended)
            appended_lines += len(batch)
            if progress is not None:
                progress("appending", appended_lines, len(lines))
    except LedgerError as exc:
        written = _spans(done)
        if written:  # earlier batches of this run committed: say so, in the one line
            exc.message += "; earlier batches appended " + ", ".join(
                f"lines {lines_[0]}..{lines_[1]} (positions {at[0]}..{at[1]})"
                for lines_, at in written
            ) + ", which stay"
            exc.context["appended_through_line"] = written[-1][0][1]
        raise
    return done


def _spans(done: list[BatchAppended]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Returns the (lines, positions) ranges batches wrote, not counting ones already
    recorded; batches that follow on in both are one range."""
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for batch in done:
        result = batch.result
        if result.already_recorded:
            continue
        lines, at = (batch.first_line, batch.last_line), (result.first, result.last)
        if spans and spans[-1][1][1] + 1 == at[0]:
            lines, at = (spans[-1][0][0], lines[1]), (spans[-1][1][0], at[1])
            spans.pop()
        spans.append((lines, at))
    return spans


@contextlib.contextmanager
def _lines_named(batch: list[DraftLine]) -> Iterator[None]:
    """Names the input line of an error the store raises for one event of ``batch``, and
    the stream a ``stream_id_mismatch`` event belongs on."""
    try:
        yield
    except LedgerError as exc:
        index = exc.context.get("index")
        if isinstance(index, int) and 0 <= index < len(batch):
            exc.context["line"] = batch[index].line
            if isinstance(exc, Refused) and exc.context.get("reason") == "stream_id_mismatch":
                _name_expected_stream(exc, batch[index].draft)
        raise


#: The payload field that carries a stream's id, by stream category (the machines hold a
#: stream's first event to it: ``stream_id_mismatch``).
_STREAM_ID_FIELDS = {
    "arena": "arena_id",
    "submission": "submission_id",
    "attempt": "attempt_id",
    "payment": "payment_ref",
    "credit": "credit_id",
}


def _name_expected_stream(error: Refused, draft: EventDraft) -> None:
    """Says which stream the refused event belongs on: the machine's detail gives only an id."""
    category = draft.stream.partition("-")[0]
    field = _STREAM_ID_FIELDS.get(category)
    value = draft.payload.get(field) if field and isinstance(draft.payload, dict) else None
    if not isinstance(value, str):
        return
    expected = f"{category}-{value}"
    why = (f"the event's {field} is {value}, so it belongs on stream {expected}, not "
           f"{draft.stream}")
    tail = "; nothing was written"
    head = error.message.removesuffix(tail)
    error.message = f"{head}: {why}{tail if head != error.message else ''}"
    error.context["expected_stream"] = expected
