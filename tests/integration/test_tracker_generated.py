"""Holds the settlement tracker on an archiving fold to the full recomputation, on a big ledger.

The unit properties (tests/unit/test_settlement_incremental.py) rarely finish a submission;
this drives the tracker through the benchmark's generated ledger (bench/fold.py: payments,
credits, rejections, holds, requeues, expiries, a re-commission), where thousands finish, are
archived to a ``DiskArchive`` that flushes often, and leave the tracker's memory. Its reward
scans keep only a few walked submissions, so requeues reach their dropped prefix and whole
arenas are rebuilt from the archive. At every check its payload must equal what
``settle.compute`` gives from a fold that keeps everything.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.archive import DiskArchive
from machines import samples
from machines.projection import LedgerFold
from machines.settlement_rules import settlement_payload
from services.settlements import SettlementTracker, compute
from vocabulary.events import EmissionPolicySet, PaymentReleased

_ROOT = Path(__file__).resolve().parents[2]
EVENTS = 30_000
CHECK_EVERY = 1_500
POLICY = EmissionPolicySet(half_life_blocks=7_200, burn_hotkey="5Burn", validator_hotkey="5Val")
#: settlement-rules.v2: the tracker keeps each arena's control submissions as well (the
#: generated ledger's controls give both suspension reasons at these blocks).
POLICY_V2 = POLICY.model_copy(update={"rules_version": "settlement-rules.v2",
                                      "control_max_age_blocks": 720})


class _CountingArchive(DiskArchive):
    """Counts the archived submissions read back (a finished one found by its id)."""

    read_back = 0

    def get(self, space: str, key: str) -> bytes | None:
        found = super().get(space, key)
        if space == "submission" and found is not None:
            self.read_back += 1
        return found


def _generator() -> Any:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    return importlib.import_module("bench.fold")


@pytest.mark.parametrize(("keep_walked", "mark_every", "policy"),
                         [(0, 1, POLICY), (8, 4, POLICY), (8, 4, POLICY_V2)],
                         ids=["v1-0-1", "v1-8-4", "v2-8-4"])
def test_the_archived_tracker_equals_a_full_recomputation_on_a_generated_ledger(
    keep_walked: int, mark_every: int, policy: EmissionPolicySet
) -> None:
    generated = _generator().generate(EVENTS, seed=11, concurrency=64, emission_share_ppm=150_000)
    kept = LedgerFold()
    finished: list[int] = []
    with _CountingArchive(flush_entries=64) as archive:
        archived = LedgerFold(archive=archive)
        archived.archive_listeners.append(lambda record: finished.append(1))
        tracker = SettlementTracker(archived)
        tracker.keep_walked, tracker.mark_every_walked = keep_walked, mark_every
        checks = 0
        for position, stream, _, event in generated:
            tracker.note(stream, event)  # before the fold folds it
            assert kept.apply(position, stream, event) is None
            assert archived.apply(position, stream, event) is None
            if position % CHECK_EVERY == 0:
                block = 20_000 + position // 10
                expected = settlement_payload(compute(kept, policy, block))
                assert tracker.payload(policy, block) == expected, position
                checks += 1
        scans = list(tracker._scans.values())
        assert checks == EVENTS // CHECK_EVERY
        assert len(finished) > 2_000  # thousands of submissions left memory...
        assert archived.live_submissions() == len(archived._subs) < len(kept._subs) // 5
        # The tracker took every finished submission from its record as it left: nothing
        # was read back (the fold itself reads none back on a well-formed ledger).
        assert archive.read_back == 0
        dropped = sum(scan.dropped for scan in scans)
        assert dropped > sum(len(scan) for scan in scans)  # ...and most of what scans walked
        # The tracker keeps a fee row only for what the fold holds in memory (spent credits
        # leave with the submission they paid for).
        assert len(tracker._payments) <= len(archived.held_payment_refs())
        assert len(tracker._credits) <= len(archived.held_credit_ids())
        assert any(record.credit is not None for record in archived.finished_records())
        assert tracker.arena_builds == len(kept.arenas())  # built once, at the first check

        # An arrival recorded late, before everything the scans dropped: its arena's scan
        # turns stale and is built again from the archive, and still settles the same.
        arena_id = kept.arenas()[0].arena_id
        late = samples.arrived(arena_id, hotkey="5Late", content="late", block=10_000)
        _append_and_settle(kept, archived, tracker, f"submission-{late.submission_id}", late,
                           policy)
        assert tracker.arena_builds == len(kept.arenas()) + 1

        # A payment refunded after its submission was archived: the amounts the sums took
        # when it left come out, the refund goes in.
        payment = next(record.payment for record in archived.finished_records()
                       if record.payment is not None and record.payment.status == "CONSUMED")
        refund = PaymentReleased(submission_id=payment.submission_id, reason="operator_refund")
        _append_and_settle(kept, archived, tracker, f"payment-{payment.payment_ref}", refund,
                           policy)


def _append_and_settle(
    kept: LedgerFold, archived: LedgerFold, tracker: SettlementTracker, stream: str, event: Any,
    policy: EmissionPolicySet,
) -> None:
    """Folds one more event into both folds; all three settle it alike."""
    tracker.note(stream, event)
    for fold in (kept, archived):
        assert fold.apply(fold.position + 1, stream, event) is None
    expected = settlement_payload(compute(kept, policy, 30_000))
    assert tracker.payload(policy, 30_000) == expected
    assert settlement_payload(compute(archived, policy, 30_000)) == expected
