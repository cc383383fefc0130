"""Checks store and guard rules at their edges; expectations come from the docstrings,
docs/cli.md, docs/concepts.md and docs/storage.md."""
from __future__ import annotations

from ledger.checkpoint import sign_tree
from ledger.note import Signer
from ledger.store import EventStore
from services import operations as ops


def test_a_checkpoint_of_exactly_the_bound_size_is_included(store: EventStore, draft) -> None:
    """store.checkpoints(tree_size_max=N): "only those whose tree covers AT MOST that many
    positions" -> a checkpoint over exactly N positions is one of them; and ops.stats right
    after signing the head reports that checkpoint, age 0 (the common `checkpoint`; `stats`)."""
    store.append([draft(f"credit-c{i}", i) for i in range(5)])
    issued = sign_tree(store, Signer.generate("gaps.test"))
    assert issued.tree_size == 5
    found = store.checkpoints(tree_size_max=5)
    assert [c["id"] for c in found] == [issued.id]
    doc = ops.stats(store.url)
    assert doc["last_checkpoint"]["id"] == issued.id
    assert doc["last_checkpoint"]["age_positions"] == 0
    assert ops.stats(store.url, as_of=5)["last_checkpoint"]["id"] == issued.id


def test_intake_records_the_intake_block_it_is_given(store_url: str) -> None:
    """docs/cli.md `intake --block`: "Intake block (default: the arrival block)" -> the
    SubmissionAdmitted / SubmissionRejected block is the one given, not the arrival's."""
    from desk import Desk  # tests/integration, on sys.path

    from ledger import migrate
    from machines import samples
    from services.arena_ledger import ArenaLedger

    migrate.upgrade(store_url)
    with ArenaLedger(store_url) as ledger:
        ledger.commission(samples.commissioned("mlp-arena").model_dump(exclude_unset=True))
        arrival = Desk.arrival(arena_id="mlp-arena", content="late", payment_ref="pay-late")
        at = arrival["arrival"]["block"] + 77
        admitted = ledger.intake(arrival, payment_amount_rao=10**12, block=at)
        assert admitted.admitted
        rejected = ledger.intake(Desk.arrival(arena_id="mlp-arena", content="nopay"), block=at + 1)
        assert not rejected.admitted
        for outcome, block in ((admitted, at), (rejected, at + 1)):
            decided = ledger.read_stream(f"submission-{outcome.submission_id}")[1]
            assert decided.type in ("SubmissionAdmitted", "SubmissionRejected")
            assert decided.payload["block"] == block


def _desk(store_url: str):
    from desk import open_desk  # tests/integration, on sys.path

    return open_desk(store_url)


def test_a_view_as_of_a_streams_last_position_reads_that_event(store_url: str) -> None:
    """ArenaLedger.as_of: "every query answers what the events up to it say" and
    read_stream: "up to as_of" -> the event AT position as_of is part of the view."""
    from services.arena_ledger import ArenaLedger

    for desk in _desk(store_url):
        desk.commission(fee_rao=0)
        sid = desk.intake(None, content="v1", block=720).submission_id
        stream = f"submission-{sid}"
        whole = desk.ledger.read_stream(stream)
        last = whole[-1].position
        desk.intake(None, content="v2", block=721)  # the head moves past it
        with ArenaLedger(store_url, as_of=last) as view:
            assert [r.position for r in view.read_stream(stream)] == [r.position for r in whole]
        with ArenaLedger(store_url, as_of=last - 1) as view:
            assert [r.position for r in view.read_stream(stream)] == [
                r.position for r in whole[:-1]]


def test_a_prefix_two_submissions_share_is_refused(store_url: str, monkeypatch) -> None:
    """_resolve_prefix: "InvalidInput when more than one submission starts with it" ->
    exactly two is already ambiguous (the suite only checks a prefix shared by 3+)."""
    from collections import Counter

    import pytest

    from services import arena_ledger as domain
    from vocabulary.errors import InvalidInput

    for desk in _desk(store_url):
        desk.commission(fee_rao=0)
        sids = [desk.intake(None, content=f"p{i}", block=720 + i).submission_id
                for i in range(17)]
        counts = Counter(s[:n] for s in sids for n in range(1, 9))
        shared = next(p for p, c in sorted(counts.items()) if c == 2)
        monkeypatch.setattr(domain, "submission_prefix_min", 1)
        head = desk.head
        with pytest.raises(InvalidInput) as ambiguous:
            desk.ledger.explain_submission(shared)
        assert ambiguous.value.message == (
            f"2 submissions start with {shared!r}; give more of the id")
        assert desk.head == head
