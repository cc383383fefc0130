"""Checks that the long operations report advancing counts to a ``ledger.progress.Progress``
callback, on every backend: verify, export, bundle verification, import (two passes), a
batched append, and the chain check of ``db upgrade`` and ``db backup``.

The library draws nothing; the CLI turns these calls into bars (cli/progress.py). The step
between two reports is made small here (10 events) so that a small ledger shows the steps.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import ledger.bundle as bundle_module
import ledger.progress as progress_module
from ledger import migrate
from ledger.bundle import export_bundle, import_bundle, verify_bundle
from ledger.records import EventDraft
from ledger.store import EventStore
from services import operations as ops
from services.append import append_batches
from services.arena_ledger import ArenaLedger
from services.draft_lines import read_drafts

EVENTS = 35
STEP = 10

Calls = list[tuple[str, int, int]]


@pytest.fixture(autouse=True)
def _small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "progress_step_events", STEP)
    monkeypatch.setattr(bundle_module, "import_chunk_events", STEP)  # a bundle pass's chunk


def _recorder() -> tuple[Calls, Callable[[str, int, int], None]]:
    calls: Calls = []
    return calls, lambda stage, done, total: calls.append((stage, done, total))


def _counts(calls: Calls, stage: str, total: int) -> list[int]:
    """Returns the counts reported for ``stage``, checking that each names ``total``."""
    assert {t for s, _, t in calls if s == stage} == {total}, calls
    return [done for s, done, _ in calls if s == stage]


def _filled(store: EventStore, draft: Callable[..., EventDraft]) -> EventStore:
    store.append([draft(f"credit-c{n}", n) for n in range(EVENTS)])
    return store


def test_verify_reports_each_step_up_to_the_last_event(
    store: EventStore, draft: Callable[..., EventDraft],
) -> None:
    calls, progress = _recorder()
    assert _filled(store, draft).verify(progress=progress).ok
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
    calls.clear()
    assert store.verify(11, 30, progress=progress).ok  # a range: its own events counted
    assert _counts(calls, "verifying", 20) == [0, 10, 20]


def test_export_verify_and_import_of_a_bundle_report_each_pass(
    store: EventStore, spare_store: EventStore, draft: Callable[..., EventDraft], tmp_path: Path,
) -> None:
    calls, progress = _recorder()
    bundle = tmp_path / "bundle"
    export_bundle(_filled(store, draft), bundle, progress=progress)
    assert _counts(calls, "exporting", EVENTS) == [0, 10, 20, 30, EVENTS]
    calls.clear()
    verify_bundle(bundle, None, allow_unsigned=True, progress=progress)
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
    calls.clear()
    import_bundle(spare_store, bundle, None, allow_unsigned=True, progress=progress)
    assert [stage for stage, done, _ in calls if done == 0] == ["verifying", "importing"]
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
    assert _counts(calls, "importing", EVENTS) == [0, 10, 20, 30, EVENTS]
    assert spare_store.head().position == EVENTS


def test_a_batched_append_reports_the_lines_each_batch_appended(store: EventStore) -> None:
    drafts = b"".join(json.dumps({
        "stream": f"credit-g{n}", "type": "CreditGranted",
        "payload": {"credit_id": f"g{n}", "hotkey": "5Miner", "amount_rao": 1, "note": ""},
    }).encode() + b"\n" for n in range(25))
    lines = list(read_drafts(io.BytesIO(drafts)))
    calls, progress = _recorder()
    with ArenaLedger(store.url, actor="test") as ledger:
        append_batches(ledger, lines, 10, actor="test", progress=progress)
    assert _counts(calls, "appending", 25) == [0, 10, 20, 25]


def test_db_upgrade_and_backup_report_their_chain_check(
    store: EventStore, draft: Callable[..., EventDraft], tmp_path: Path, backend: str,
) -> None:
    _filled(store, draft)
    migrate.downgrade(store.url, "-1")
    calls, progress = _recorder()
    assert ops.upgrade(store.url, progress=progress).verified is not None
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
    if backend != "sqlite":
        return  # a PostgreSQL backup is pg_dump's: verified by restoring it
    calls.clear()
    ops.backup(store.url, tmp_path / "copy.db", progress=progress)
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
    calls.clear()
    ops.restore(f"sqlite:///{tmp_path / 'restored.db'}", tmp_path / "copy.db",
                progress=progress)
    assert _counts(calls, "verifying", EVENTS) == [0, 10, 20, 30, EVENTS]
