"""Runs paired-windows.v2 arenas through the real ledger: the runner stops where the noise
guard decides, the decision carries the arena's sealed rules version, and a v2 ledger with a
guarded attempt replays to the same settlement on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replay_forgery import replay  # same directory
from runner_bench import ARENA as RUNNER_ARENA
from runner_bench import BLOCK, FAST_MLP, STOCK_NS, Bench, clean_tallies
from settled_ledger import ALICE, BOB, BURN, CAROL, VALIDATOR, intake, open_ledger

from engine_bridge.deltas import DeltaSpec
from engine_bridge.limits import window_runs
from engine_bridge.protocol import FakeEngine
from ledger import migrate
from machines import samples
from machines.attempt import AttemptState
from services.arena_ledger import ArenaLedger
from services.evaluation import evaluate

ARENA = "noisy-arena"
FEE = 1_000_000_000
#: Windows 1 and 2 differ by 5 % in one orientation: T ≈ 13.43 > χ²(0.999, 1) ≈ 10.83.
NOISY = (990_000_000, 940_000_000, 975_000_000, 975_000_000)
CALM = (990_000_000, 985_000_000, 975_000_000, 980_000_000)
SLOW = (1_060_000_000,) * 4  # R1 = 1.06 > 1 + f = 1.05: futility


def _commission_v2(ledger: ArenaLedger, arena_id: str, fee: int, **policy: Any) -> None:
    document = samples.commission_document(
        arena_id, fee_rao=fee, sealed=samples.policy_v2(**policy), emission_share_ppm=600_000)
    ledger.commission(document)


# --- the runner ------------------------------------------------------------------------------


@pytest.fixture
def bench(store_url: str) -> Iterator[Bench]:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="noise-guard-test") as ledger:
        yield Bench(ledger)


def _engine(costs: tuple[int, ...], runs: list[int]) -> FakeEngine:
    def cost(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 0 or delta is None:  # warm-up, and stock: 1 s
            return STOCK_NS
        runs.append(window)
        return costs[window - 1]

    engine = FakeEngine(cost_ns=cost)
    engine.tallies = clean_tallies()
    return engine


def test_the_runner_stops_where_the_guard_decides_and_the_submission_is_queued_again(
    bench: Bench,
) -> None:
    _commission_v2(bench.ledger, RUNNER_ARENA, 0)
    sid = bench.admit(FAST_MLP)
    runs: list[int] = []

    result = evaluate(bench.ledger, _engine(NOISY, runs), submission_id=sid,
                      attempt_id="att-1", block=BLOCK)

    assert result.decision == {
        "verdict": "NO_DECISION", "reason": "noise_above_seal", "disposition": "REQUEUE",
        "speedup": None, "pass_line": None, "look_window": 3,
    }
    assert (result.windows, result.audit_nodes, result.quality) == (3, 0, False)
    # Each window runs its slice window_runs times on each arm; window 4 never ran.
    assert runs == [window for window in (1, 2, 3) for _ in range(window_runs)]
    decided = bench.payloads("att-1", "AttemptDecided")
    assert [d["rules_version"] for d in decided] == ["paired-windows.v2"]
    assert bench.status(sid) == "QUEUED"
    explained = bench.ledger.explain_attempt("att-1")
    assert explained["rules_version"] == "paired-windows.v2"
    (check,) = explained["noise_guard"]["checks"]
    assert (check["window"], check["dof"], check["trips"]) == (3, 1, True)
    assert check["statistic"].startswith("13.42918829")

    again = evaluate(bench.ledger, _engine(CALM, []), submission_id=sid, attempt_id="att-2",
                     block=BLOCK)
    assert (again.decision["verdict"], again.decision["speedup"]) == ("PASS", "1.019129")
    assert bench.status(sid) == "QUALIFIED"


# --- replay on both backends ---------------------------------------------------------------


def _measure(ledger: ArenaLedger, sid: str, attempt_id: str, costs: tuple[int, ...]) -> None:
    ledger.claim(attempt_id=attempt_id, pair_id="pair-1", validator_hotkey=VALIDATOR,
                 block=1_100, submission_id=sid)
    state = ledger.fold.attempt(attempt_id)
    assert isinstance(state, AttemptState)
    while state.speed is None:
        index = state.last_window + 1
        window = samples.window(index, state.params.orientation(index), STOCK_NS,
                                costs[index - 1])
        ledger.record(attempt_id, window)
        state = ledger.fold.attempt(attempt_id)
        assert isinstance(state, AttemptState)
    if state.status == "AUDIT":
        ledger.record(attempt_id, samples.audit(calls=64))
        ledger.record(attempt_id, samples.quality())
    ledger.conclude(attempt_id, block=1_200)


def _build_v2(ledger: ArenaLedger) -> str:
    """A v2 arena: a PASS, a noisy attempt queued again then a PASS, a FAIL; one settlement."""
    _commission_v2(ledger, ARENA, FEE, futility_margin="0.05")
    sids = {name: intake(ledger, ARENA, hotkey, name, block, FEE)
            for name, hotkey, block in (("a", ALICE, 1_000), ("b", BOB, 1_010),
                                        ("c", CAROL, 1_020))}
    _measure(ledger, sids["a"], "att-a", CALM)
    _measure(ledger, sids["b"], "att-b1", NOISY)
    _measure(ledger, sids["b"], "att-b2", (960_000_000,) * 4)
    _measure(ledger, sids["c"], "att-c", SLOW)
    verdicts = {sid: ledger.fold.submission(sid).reason  # type: ignore[union-attr]
                for sid in sids.values()}
    assert list(verdicts.values()) == ["", "", "futility"]
    noisy = ledger.fold.attempt("att-b1")
    assert noisy is not None and noisy.decision is not None
    assert (noisy.decision.reason, noisy.decision.look_window) == ("noise_above_seal", 2)
    ledger.set_emission_policy(1_000, BURN, VALIDATOR)
    settlement, _ = ledger.settle(2_000)
    return settlement.settlement_digest


@pytest.mark.postgres
def test_a_v2_ledger_replays_to_the_same_settlement_on_sqlite_and_postgresql(
    tmp_path: Path, pg_database: str
) -> None:
    reports, heads, digests = [], [], []
    for url in (f"sqlite:///{tmp_path / 'ledger.db'}", pg_database):
        ledger = open_ledger(url)
        try:
            digests.append(_build_v2(ledger))
            heads.append(ledger.store.head().entry_hash)
        finally:
            ledger.close()
        reports.append(replay(url))
    on_sqlite, on_postgresql = reports
    assert on_sqlite.ok and on_sqlite.divergence is None
    assert on_sqlite.to_json() == on_postgresql.to_json()
    # att-a, att-b1 (noise_above_seal), att-b2, att-c: each decided and resolved.
    assert (on_sqlite.verdicts_checked, on_sqlite.resolutions_checked,
            on_sqlite.settlements_checked) == (4, 4, 1)
    assert heads[0] == heads[1] == on_sqlite.head_hash == on_postgresql.head_hash
    assert digests[0] == digests[1] == on_sqlite.settlement_digest
