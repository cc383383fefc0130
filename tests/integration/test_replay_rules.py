"""Pins replay rules a mutation review of services/replay.py found unpinned.

Each test here failed on a small change to ``services/replay.py`` that the other replay tests
let pass; every expected value comes from the module's docstrings, docs/settlement.md
("Read the result") and DOMAIN §2 (gapless positions, the hash chain), not from what the
code happens to print. Ledgers are built either by the guarded path of
test_settlement_ledger.py and then forged around the guard through a plain ``EventStore``
(as test_replay.py does), or as raw rows whose entry hashes are chained here, so that
only the rule under test can tell them from an honest ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from tampering import triggers_bypassed
from test_settlement_ledger import (  # the shared builder (same directory, prepend import mode)
    ALICE,
    ARENA_A,
    CAROL,
    FEE_A,
    VALIDATOR,
    build_before_policy,
    build_settled,
    evaluate,
    intake,
    open_ledger,
)

from ledger.bundle import export_bundle
from ledger.chain import chain_rows, chained
from ledger.records import EventDraft
from ledger.store import EventStore
from machines import samples
from machines.settlement_rules import settlement_payload
from services.replay import replay_bundle, replay_events, replay_rows, replay_store
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes, loads
from vocabulary.errors import LedgerError, LimitExceeded, Refused
from vocabulary.events import ArenaRetired, AttemptDecided, ControlRegistered

HEAD = 92  # build_settled: 92 events, settlements at 81, 91 and 92


def _rows(events: list[tuple[str, Any]]) -> list[Any]:
    """Returns the rows of a ledger recording ``(stream, event)`` canonically, chained."""
    drafts = [
        (stream, e.event_type, CATALOGUE.types[e.event_type],
         canonical_bytes(e.model_dump(mode="json", exclude_unset=True)))
        for stream, e in events
    ]
    versions = dict.fromkeys((d[0] for d in drafts), 0)
    rows, _ = chain_rows(bytes(32), 0, versions, drafts, "2026-01-01T00:00:00Z", "tester")
    return list(rows)


def _rechained(rows: list[Any]) -> list[Any]:
    """Returns ``rows`` with every entry hash recomputed over the rows as they now are."""
    return [(*row[:8], computed.hex()) for row, computed in chained(bytes(32), rows)]


def _controls(count: int) -> list[tuple[str, Any]]:
    """Returns an arena's commission and ``count`` controls: a ledger that folds cleanly."""
    return [("arena-mlp", samples.commissioned("mlp"))] + [
        ("arena-mlp", ControlRegistered(control_id=f"ctl-{n}", kind="identity",
                                        delta_digest=samples.hex64(f"delta-{n}"),
                                        expected_verdict="PASS"))
        for n in range(1, count + 1)
    ]


# --- DOMAIN §2.2: positions are gapless and increasing; a repeated one is a gap too ---------


def test_a_consistently_rechained_ledger_that_repeats_a_position_is_a_gap() -> None:
    # Positions 1, 2, 2, 3: every entry hash checks out over its row, yet the third row is
    # not position 3. The first divergence is at 3 (where the ledger must hold position 3),
    # recorded 2, recomputed 3, and nothing past position 2 is counted.
    rows = _rows(_controls(3))
    honest = replay_rows(rows)
    assert honest.ok and (honest.events, honest.last_position) == (4, 4)
    repeated = _rechained([rows[0], rows[1], (2, *rows[2][1:]), (3, *rows[3][1:])])

    report = replay_rows(repeated)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        3, "arena-mlp", "ControlRegistered", "position", 2, 3, "gap")
    assert (report.events, report.last_position) == (2, 2)
    assert report.head_hash == repeated[1][8]


# --- the progress callback sees every position read, the last one included ------------------


def test_progress_is_called_once_per_position_up_to_the_last() -> None:
    # The replay command's bar is advanced to each position and ends on the last one
    # (CHANGELOG: "updated every 1/200 of the ledger and at its end").
    seen: list[int] = []
    report = replay_rows(_rows(_controls(4)), progress=seen.append)
    assert report.ok
    assert seen == [1, 2, 3, 4, 5]


def test_progress_reaches_the_position_where_a_chain_divergence_stops_the_replay() -> None:
    rows = _rows(_controls(3))
    tampered = [*rows[:2], (*rows[2][:8], "0" * 64), rows[3]]  # position 3's hash altered
    seen: list[int] = []

    report = replay_rows(tampered, progress=seen.append)

    d = report.divergence
    assert d is not None and (d.position, d.code) == (3, "hash_mismatch")
    assert seen == [1, 2, 3]


def test_progress_reaches_the_position_of_an_unreadable_payload() -> None:
    rows = _rows(_controls(3))
    unreadable = _rechained([*rows[:2], (*rows[2][:5], b'{"control_id":', *rows[2][6:]),
                             rows[3]])
    seen: list[int] = []

    report = replay_rows(unreadable, progress=seen.append)

    d = report.divergence
    assert d is not None and (d.position, d.code, d.field) == (3, "non_canonical", "event")
    assert seen == [1, 2, 3]


# --- an AttemptDecided the machines cannot derive at all -----------------------------------


def test_a_decision_recorded_before_any_window_is_not_derivable(store_url: str) -> None:
    # An attempt claimed and given no window has no decision to derive; a recorded PASS for
    # it is the first divergence, naming the verdict: recorded PASS, recomputed nothing.
    ledger = open_ledger(store_url)
    try:
        build_before_policy(ledger)
        a6 = intake(ledger, ARENA_A, ALICE, "a6", 1_060, FEE_A)
        ledger.claim(attempt_id="att-a6", pair_id="pair-1", validator_hotkey=VALIDATOR,
                     block=1_100, submission_id=a6)
        assert ledger.fold.derive_decision("att-a6") is None
        decided = AttemptDecided(verdict="PASS", reason="", disposition="COMPLETE",
                                 speedup="1.030928", pass_line="0.018884", look_window=3,
                                 decided_block=1_200, rules_version="paired-windows.v1")
        batch = [EventDraft.of("attempt-att-a6", decided)]
        head = ledger.store.head().position
        with pytest.raises(Refused):  # the guarded path refuses it
            ledger.store.append(batch)
    finally:
        ledger.close()
    with EventStore(store_url) as unguarded:
        position = unguarded.append(batch).first
        assert position == head + 1

        report = replay_store(unguarded)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        position, "attempt-att-a6", "AttemptDecided", "verdict", "PASS", None,
        "decision_not_derivable")
    assert report.verdicts_checked == 7  # a1..a5 and b2 before it, then this one


# --- a payload orjson reads but cannot write back is read by codec.loads ---------------------


def test_a_payload_nested_beyond_what_codec_loads_reads_is_its_error() -> None:
    # parse_payload's docstring: anything not given back byte for byte by the fast path
    # "takes codec.loads itself, which raises or returns exactly as it always did". This
    # canonical ASCII document is nested deeper than orjson writes (so it is not given
    # back) and deeper than codec.loads reads: the divergence is codec.loads's error.
    depth = 1_020
    data = b'{"control_id":' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(LimitExceeded) as refused:
        loads(data)
    rows = _rows(_controls(1))
    deep = _rechained([rows[0], (*rows[1][:5], data, *rows[1][6:])])

    report = replay_rows(deep)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        2, "arena-mlp", "ControlRegistered", "event", None, refused.value.message,
        "limit_exceeded")
    assert (report.events, report.last_position) == (1, 1)


# --- the replay loop's fast parse takes canonical ASCII only -------------------------------


def test_replay_hands_a_non_ascii_payload_to_codec_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # parse_payload's docstring, which the loop inlines: non-ASCII "takes codec.loads
    # itself". A canonical UTF-8 payload (a retirement reason in French) goes there; the
    # ASCII commission before it does not.
    import services.replay as replay_module

    seen: list[bytes] = []

    def counted(data: bytes) -> Any:
        seen.append(data)
        return loads(data)

    monkeypatch.setattr(replay_module, "loads", counted)
    retired = ArenaRetired(block=200, reason="déjà remplacée")
    rows = _rows([("arena-mlp", samples.commissioned("mlp")), ("arena-mlp", retired)])
    data = rows[1][5]
    assert not data.isascii() and data == canonical_bytes(retired.model_dump(mode="json"))

    report = replay_rows(rows)

    assert seen == [data]
    assert report.ok and (report.events, report.last_position) == (2, 2)


# --- the temporary archive is deleted when the replay ends, however it ends ----------------


@pytest.mark.parametrize("damaged", [False, True])
def test_replay_closes_its_temporary_archive(
    monkeypatch: pytest.MonkeyPatch, damaged: bool
) -> None:
    # docs/settlement.md: finished submissions go to "a private temporary file
    # (ledger.archive.DiskArchive, deleted when replay ends)"; DiskArchive.close deletes it.
    from ledger.archive import DiskArchive

    opened: list[DiskArchive] = []
    closed: list[DiskArchive] = []
    original_init, original_close = DiskArchive.__init__, DiskArchive.close

    def init(self: DiskArchive, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        opened.append(self)

    def close(self: DiskArchive) -> None:
        closed.append(self)
        original_close(self)

    monkeypatch.setattr(DiskArchive, "__init__", init)
    monkeypatch.setattr(DiskArchive, "close", close)
    rows = _rows(_controls(2))
    if damaged:
        rows = [*rows[:2], (*rows[2][:8], "0" * 64)]

    report = replay_rows(rows)

    assert report.ok is not damaged
    assert len(opened) == 1 and closed == opened


# --- a schema version the catalogue does not know is a divergence, even for a valid body -----


def test_a_valid_payload_under_an_unknown_schema_version_is_a_divergence() -> None:
    # DOMAIN §2.8 and the module: the payload is decoded at its recorded version (upcast,
    # or refused); one the catalogue does not know is the catalogue's error at its position,
    # even when the body would validate as the current version.
    retired = ArenaRetired(block=200, reason="replaced")
    unknown = CATALOGUE.types["ArenaRetired"] + 1
    payload = retired.model_dump(mode="json")
    with pytest.raises(LedgerError) as refused:
        CATALOGUE.decode("ArenaRetired", unknown, payload)
    rows = _rows([("arena-mlp", samples.commissioned("mlp")), ("arena-mlp", retired)])
    assert replay_rows(rows).ok
    rows = _rechained([rows[0], (*rows[1][:4], unknown, *rows[1][5:])])

    report = replay_rows(rows)

    d = report.divergence
    assert d is not None and report.ok is False
    assert refused.value.code == "unknown_event_type"  # docs/verification.md names it
    # The error names no payload path: the field is the event as a whole.
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        2, "arena-mlp", "ArenaRetired", "event", None, refused.value.message,
        "unknown_event_type")
    assert (report.events, report.last_position) == (1, 1)


# --- replay keeps the settlement inputs up to date as it folds -------------------------------


@pytest.mark.parametrize("archive_finished", [True, False])
def test_an_honest_replay_checks_every_settlement_without_the_full_projection(
    store_url: str, monkeypatch: pytest.MonkeyPatch, archive_finished: bool
) -> None:
    # docs/settlement.md: replay keeps the settlement inputs up to date as it folds,
    # re-projecting only what events touched since the previous settlement; only a
    # settlement that does not match is checked again by the full projection. On an honest
    # ledger every settlement matches the inputs replay kept, so that never happens.
    import services.settlements

    full: list[int] = []
    original = services.settlements.check_recorded

    def counted(fold: Any, *args: Any) -> Any:
        full.append(fold.position + 1)
        return original(fold, *args)

    ledger_ = open_ledger(store_url)
    try:
        build_settled(ledger_)
        # A PASS between two settlements: a6 arrives, is evaluated (every window at 0.97:
        # PASS "1.030928") and qualifies while it stays live, then the ledger settles again.
        a6 = intake(ledger_, ARENA_A, CAROL, "a6", 1_060, FEE_A)
        evaluate(ledger_, a6, "att-a6", 970_000_000)
        settlement, _ = ledger_.settle(4_000)
        last = settlement_payload(settlement)["settlement_digest"]
        monkeypatch.setattr(services.settlements, "check_recorded", counted)

        report = replay_store(ledger_.store, archive_finished=archive_finished)
    finally:
        ledger_.close()

    assert report.ok and report.settlements_checked == 4
    assert report.settlement_digest == last
    assert full == []


# --- a refusal's field: "field: …" names one, any other detail the event ---------------------


@pytest.mark.parametrize(("detail", "field"), [
    ("window: expected 2, got 3", "window"),  # the docstring's own example
    ("control_id: ctl-1", "control_id"),
    # A real machine detail (machines/attempt.py) with a colon after words, not a field.
    ("calibration_observation after a speed FAIL: quality never runs", "event"),
    ("intake gives Rejection(reason='fee_missing')", "event"),
    ("node 3 rank 0", "event"),
    ("mlp", "event"),  # an id alone
])
def test_a_refusal_names_the_field_its_detail_starts_with_or_the_event(
    detail: str, field: str
) -> None:
    # docs/settlement.md: for a machine's refusal "`field` the field it names, as in
    # `window: expected 2, got 3`, or `event` when the detail names none".
    from machines.refusal import Refusal
    from services.replay import _refused

    refusal = Refusal("attempt", "RUNNING", "WindowMeasured", "window_gap", detail)
    d = _refused(7, "attempt-att-1", "WindowMeasured", refusal)
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        7, "attempt-att-1", "WindowMeasured", field, None, detail, "window_gap")


# --- decoded_rows trusts the bytes and parses them as RecordedEvent.payload does ------------


def test_decoded_rows_parse_a_respelled_payload_as_recorded_event_payload_does(
    store_url: str,
) -> None:
    # decoded_rows's docstring: "the payload parsed as RecordedEvent.payload parses it
    # (orjson)", the bytes trusted ("neither the hash chain nor the canonical form is
    # checked"). A payload respelled around the triggers with a repeated key (which
    # codec.loads would refuse) is read as orjson reads it: the last value wins.
    from services.replay import decoded_rows

    open_ledger(store_url).close()  # migrated
    retired = ArenaRetired(block=200, reason="replaced")
    respelled = b'{"block":200,"reason":"first","reason":"replaced"}'
    with EventStore(store_url) as store:
        store.append([EventDraft.of("arena-mlp", samples.commissioned("mlp")),
                      EventDraft.of("arena-mlp", retired)])
        with triggers_bypassed(store) as conn:
            conn.execute(text("UPDATE events SET payload = :p WHERE position = 2"),
                         {"p": respelled})
        recorded = store.get(2)
        assert recorded.payload_bytes == respelled

        decoded = list(decoded_rows(store, 2, 2))

    assert len(decoded) == 1
    row, payload, event = decoded[0]
    assert (row[0], row[1], row[3]) == (2, "arena-mlp", "ArenaRetired")
    assert payload == recorded.payload == {"block": 200, "reason": "replaced"}
    assert event == retired


# --- --as-of the head is a replay to the head; --expect holds from every source ---------------


def test_a_replay_as_of_the_head_position_checks_the_head_row(store_url: str) -> None:
    # replay_store: "a replay to the head must end on the head row's entry hash". The replay
    # command passes the head position itself as as_of when none is given; that is still a
    # replay to the head, and a rewritten head row fails it.
    ledger_ = open_ledger(store_url)
    try:
        build_settled(ledger_)
        store = ledger_.store
        last = store.head().entry_hash
        assert replay_store(store, HEAD).ok
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"),
                         {"h": "e" * 64})

        report = replay_store(store, HEAD)
    finally:
        ledger_.close()

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        HEAD, "", "", "entry_hash", "e" * 64, last, "head_mismatch")


def test_the_expected_digest_is_checked_from_a_store_and_from_a_bundle(
    store_url: str, tmp_path: Path
) -> None:
    # docs/settlement.md step 3: `--expect D` compares D with the digest of the last
    # settlement checked, from the database and straight from a bundle alike.
    ledger_ = open_ledger(store_url)
    try:
        built = build_settled(ledger_)
        first, last = (built.settlements[i][0]["settlement_digest"] for i in (0, -1))
        bundle = tmp_path / "bundle"
        export_bundle(ledger_.store, bundle)
        from_store = [replay_store(ledger_.store, 81, expect=d) for d in (first, last)]
    finally:
        ledger_.close()
    from_bundle = [replay_bundle(bundle, 81, expect=d) for d in (first, last)]

    for right, wrong in (from_store, from_bundle):
        assert (right.ok, right.expected_digest, right.settlement_digest) == (True, first, first)
        assert (wrong.ok, wrong.expected_digest, wrong.settlement_digest) == (False, last, first)
        assert wrong.divergence is None and wrong.to_json()["ok"] is False


def test_every_store_entry_point_reports_progress_per_position(store_url: str) -> None:
    # The replay command hands its progress bar to replay_store; replay_events reads the
    # same rows as records. Both call it once per position, ending on the last.
    open_ledger(store_url).close()  # migrated
    with EventStore(store_url) as store:
        store.append([EventDraft.of(stream, event) for stream, event in _controls(2)])
        through_store: list[int] = []
        through_records: list[int] = []
        assert replay_store(store, progress=through_store.append).ok
        assert replay_events(store.read_all(1), progress=through_records.append).ok
    assert through_store == through_records == [1, 2, 3]
