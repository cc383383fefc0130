"""A settlement-rules.v2 settlement on the dashboard: its page and its list row name each
suspended arena and why, and its JSON twin carries the recorded suspensions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from ledger import migrate
from machines import samples
from services.arena_ledger import ArenaLedger
from web.app import create_app

ARENA = "gated-arena"
OTHER = "quiet-arena"
SETTLE_BLOCK = 5_000


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, int]]:
    """Returns a client on a ledger whose one v2 settlement suspends ``ARENA`` (no control
    run at all), and the settlement's position; ``OTHER`` registers no control and is
    suspended too."""
    url = f"sqlite:///{tmp_path_factory.mktemp('gated') / 'ledger.db'}"
    migrate.upgrade(url)
    with ArenaLedger(url) as ledger:
        for arena in (ARENA, OTHER):
            ledger.commission(samples.commission_document(arena, fee_rao=0))
        ledger.register_control(ARENA, {
            "control_id": "identity", "kind": "identity", "delta_digest": "ab" * 32,
            "expected_verdict": "FAIL"})
        ledger.set_emission_policy(100, "5Burn", "5Validator",
                                   rules_version="settlement-rules.v2",
                                   control_max_age_blocks=1_000)
        _, result = ledger.settle(SETTLE_BLOCK)
        position = result.first
    with TestClient(create_app(url, cache_bytes=0)) as client:
        yield client, position


def test_the_twin_carries_each_suspension_and_why(gated: tuple[TestClient, int]) -> None:
    client, position = gated
    document = client.get(f"/api/settlements/{position}").json()
    assert document["suspended"] == [ARENA, OTHER]
    assert document["payload"]["suspensions"] == [
        {"arena_id": ARENA, "control_ids": [], "reason": "controls_stale", "run_block": None},
        {"arena_id": OTHER, "control_ids": [], "reason": "controls_stale", "run_block": None},
    ]
    arenas = {a["arena_id"]: a for a in document["arenas"]}
    assert arenas[ARENA]["suspension"]["why"] == "it has no complete control run"
    assert document["rules"]["settlement_rules_version"] == "settlement-rules.v2"
    assert document["weights"] == [{"hotkey": "5Burn", "weight_ppm": 1_000_000}]


def test_the_page_and_the_list_say_which_arenas_are_suspended(
        gated: tuple[TestClient, int]) -> None:
    client, position = gated
    page = client.get(f"/settlements/{position}").text
    assert (f"{ARENA}, {OTHER}: their pools went to the burn hotkey") in page
    assert ('<p class="FAIL suspension" data-reason="controls_stale">Suspended '
            "(controls_stale): it has no complete control run; its pool went to the burn "
            "hotkey.</p>") in page
    listing = client.get("/settlements").text
    assert f"suspended: {ARENA}, {OTHER}" in listing
