"""A calibration through the library: recorded on a fake engine, read against an arena's
seal, and used to commission, with every refusal changing nothing (both backends)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine_bridge.deltas import DeltaSpec
from engine_bridge.protocol import FakeEngine
from ledger import migrate
from machines import samples
from machines.calibration import derive_conclusion
from services.arena_ledger import ArenaLedger
from services.calibration import commission_from_calibration, seal_check, seal_warning
from services.calibration_run import calibrate
from vocabulary.errors import InvalidInput, NotFound, Refused
from vocabulary.events import CalibrationConcluded

ARENA = "mlp-arena"


@pytest.fixture
def ledger(store_url: str) -> Iterator[ArenaLedger]:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="test") as opened:
        opened.append([(f"arena-{ARENA}", samples.commissioned(ARENA))])  # seal 0.01 / 0.01
        yield opened


def _record(ledger: ArenaLedger, ident: str, costs: tuple[tuple[int, int], ...],
            arena: bool = True, conclude: bool = True, **started: Any) -> None:
    """Records a calibration of the arena's engine (or, arena False, of no arena)."""
    stream = f"calibration-{ident}"
    target = samples.commissioned(ARENA) if arena else None
    event = samples.calibration_started(ident, arena=target, **started)
    ledger.append([(stream, e) for e in (event, *samples.calibration_windows(costs))])
    state = ledger.fold.calibration(ident)
    assert state is not None
    derived = derive_conclusion(state)
    if conclude and derived is not None:
        ledger.append([(stream, CalibrationConcluded.model_validate(
            {**derived, "concluded_block": 300}))])


def _wobble(lane: str, delta: DeltaSpec | None, window: int) -> int:
    # Lane A a little slower, and every window a little different: a few percent of noise.
    return 1_000_000_000 + (20_000_000 if lane == "A" else 0) + 7_000_000 * (window % 3)


def test_calibrate_records_every_window_and_the_derived_conclusion(
    ledger: ArenaLedger,
) -> None:
    head = ledger.store.head().position
    report = calibrate(ledger, FakeEngine(cost_ns=_wobble), calibration_id="cal-fake",
                       arena_id=ARENA, windows=4, boots=2, confidence="0.95", block=500,
                       validator_hotkey="5V")
    assert report.windows == 8
    assert ledger.store.head().position == head + 10  # started, 8 windows, concluded
    state = ledger.fold.calibration("cal-fake")
    assert state is not None and state.status == "CONCLUDED" and state.conclusion is not None
    assert report.conclusion["window_noise_bound"] == state.conclusion.window_noise_bound
    assert report.check is not None and report.check.calibration_id == "cal-fake"
    with pytest.raises(InvalidInput, match="already exists"):
        calibrate(ledger, FakeEngine(), calibration_id="cal-fake", arena_id=ARENA, windows=4,
                  boots=2, confidence="0.95", block=501, validator_hotkey="5V")


def test_a_seal_below_the_latest_calibration_is_named(ledger: ArenaLedger) -> None:
    assert seal_check(ledger.fold, ARENA) is None and seal_warning(ledger, ARENA) is None
    _record(ledger, "cal-1", samples.CALIBRATION_EXAMPLE_COSTS)  # bounds 0.032817, 0.048357
    check = seal_check(ledger.fold, ARENA)
    assert check is not None and check.calibration_id == "cal-1"
    assert [(s.field, s.sealed, s.bound) for s in check.shortfalls] == [
        ("window_noise", "0.01", "0.032817"), ("boot_noise", "0.01", "0.048357")]
    warning = seal_warning(ledger, ARENA)
    assert warning is not None and "--from-calibration cal-1" in warning
    # A later, unconcluded calibration changes nothing; a later quiet one covers the seal.
    _record(ledger, "cal-2", ((1_000_000_000, 1_000_000_000),) * 8, conclude=False)
    assert seal_check(ledger.fold, ARENA) == check
    _record(ledger, "cal-3", ((1_000_000_000, 1_000_000_000),) * 8)
    quiet = seal_check(ledger.fold, ARENA)
    assert quiet is not None and quiet.calibration_id == "cal-3" and quiet.shortfalls == ()
    assert seal_warning(ledger, ARENA) is None


@pytest.mark.parametrize(("ident", "change", "error", "match"), [
    ("cal-none", {}, NotFound, "does not exist"),
    ("cal-open", {}, Refused, "not concluded"),
    ("cal-1", {"hardware": {"gpu": "H100", "count": 1}}, InvalidInput, "not what calibration"),
    ("cal-1", {"window_noise": "0.03"}, InvalidInput,
     r"window_noise 0\.03 is below calibration cal-1's bound 0\.032817"),
    ("cal-loud", {}, Refused, "above what any policy version allows"),
])
def test_commission_from_calibration_refuses_and_writes_nothing(
    ledger: ArenaLedger, ident: str, change: dict[str, Any], error: type[Exception],
    match: str,
) -> None:
    _record(ledger, "cal-1", samples.CALIBRATION_EXAMPLE_COSTS)
    _record(ledger, "cal-open", samples.CALIBRATION_EXAMPLE_COSTS[:5], conclude=False)
    loud = tuple((a * 3 if i % 2 else a, b) for i, (a, b) in
                 enumerate(samples.CALIBRATION_EXAMPLE_COSTS))
    _record(ledger, "cal-loud", loud)
    document = samples.commission_document(ARENA, fee_rao=5)
    for name in ("window_noise", "boot_noise", "policy_version"):
        del document["policy"][name]
    policy_change = {k: v for k, v in change.items() if k not in ("hardware",)}
    document["policy"].update(policy_change)
    if "hardware" in change:
        document["hardware"] = change["hardware"]
    head = ledger.store.head().position
    with pytest.raises(error, match=match):
        commission_from_calibration(ledger, document, ident)
    assert ledger.store.head().position == head


def test_commission_from_calibration_seals_at_least_the_bounds(ledger: ArenaLedger) -> None:
    quiet = tuple((1_000_000_000 + 50_000 * i, 1_000_000_000) for i in range(8))
    _record(ledger, "cal-q", quiet, arena=False)
    state = ledger.fold.calibration("cal-q")
    assert state is not None and state.conclusion is not None
    assert state.conclusion.seal_policy_version == "paired-windows.v1"
    document = samples.commission_document(ARENA, fee_rao=5)
    for name in ("window_noise", "boot_noise"):
        del document["policy"][name]
    document["policy"]["boot_noise"] = "0.02"  # stated at or above the bound: kept
    commission_from_calibration(ledger, document, "cal-q")
    arena = ledger.fold.arena(ARENA)
    assert arena is not None
    sealed = arena.commission.event.policy
    assert (sealed.window_noise, sealed.boot_noise) == (
        state.conclusion.seal_window_noise, "0.02")
    # The arena-less calibration of the same engine is the arena's latest one now.
    check = seal_check(ledger.fold, ARENA)
    assert check is not None and check.calibration_id == "cal-q" and check.shortfalls == ()


def test_a_seal_above_v1_commissions_under_paired_windows_v2(ledger: ArenaLedger) -> None:
    _record(ledger, "cal-1", samples.CALIBRATION_EXAMPLE_COSTS)  # seal 0.0329 / 0.0484, v2
    document = samples.commission_document(ARENA, fee_rao=5)
    for name in ("window_noise", "boot_noise", "policy_version"):
        del document["policy"][name]
    document["policy"]["noise_guard_alpha"] = "0.001"  # v2's own field: the operator's call
    commission_from_calibration(ledger, document, "cal-1")
    arena = ledger.fold.arena(ARENA)
    assert arena is not None
    sealed = arena.commission.event.policy
    assert (sealed.policy_version, sealed.window_noise, sealed.boot_noise) == (
        "paired-windows.v2", "0.0329", "0.0484")
    assert seal_warning(ledger, ARENA) is None
