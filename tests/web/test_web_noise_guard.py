"""A paired-windows.v2 arena on the dashboard: the arena pages show the sealed noise guard
level, and a submission's page shows each attempt's rules version and noise checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ledger import migrate
from machines import samples
from machines.attempt import AttemptState
from services.arena_ledger import ArenaLedger
from web.app import create_app

ARENA = "noisy-arena"
#: Windows 1 and 2 differ by 5 %: T ≈ 13.43 > χ²(0.999, 1) ≈ 10.83 at look 3.
NOISY = (990_000_000, 940_000_000, 975_000_000)


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Returns (url, submission id) of a ledger whose one v2 attempt the guard decided."""
    url = f"sqlite:///{tmp_path_factory.mktemp('noisy') / 'ledger.db'}"
    migrate.upgrade(url)
    with ArenaLedger(url) as ledger:
        ledger.commission(samples.commission_document(
            ARENA, fee_rao=0, sealed=samples.policy_v2(noise_guard_alpha="0.001")))
        arrival = samples.arrived(ARENA).model_dump(mode="json", exclude_unset=True)
        del arrival["submission_id"]
        sid = ledger.intake(arrival).submission_id
        ledger.claim(attempt_id="att-1", pair_id="pair-1", validator_hotkey="5Validator",
                     block=1_100, submission_id=sid)
        for index, cost in enumerate(NOISY, start=1):
            state = ledger.fold.attempt("att-1")
            assert isinstance(state, AttemptState) and state.speed is None
            ledger.record("att-1", samples.window(index, state.params.orientation(index),
                                                  1_000_000_000, cost))
        ledger.conclude("att-1", block=1_200)
    return url, sid


@pytest.fixture(scope="module")
def client(noisy: tuple[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(noisy[0]), raise_server_exceptions=False) as found:
        yield found


Page = Callable[..., str]


def test_the_arena_pages_show_the_sealed_guard_level(html_page: Page) -> None:
    for path in ("/", f"/arenas/{ARENA}"):
        shown = html_page(path)
        assert re.search(r'data-field="noise_guard_alpha">0\.001<', shown), path
        assert "paired-windows.v2" in shown


def test_the_submission_page_shows_the_rules_version_and_the_tripped_check(
    client: TestClient, html_page: Page, noisy: tuple[str, str]
) -> None:
    shown = html_page(f"/submissions/{noisy[1]}")
    assert "<dt>rules</dt><dd><code>paired-windows.v2</code></dd>" in shown
    table = shown.split('<table class="noise">', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    assert cells == ["3", "1", "13.429188", "10.827566", "yes"]
    assert "noise_above_seal" in shown
    document = client.get(f"/api/submissions/{noisy[1]}").json()
    (attempt,) = document["attempts"]
    assert attempt["rules_version"] == "paired-windows.v2"
    assert attempt["noise_guard"]["checks"][0]["trips"] is True
    assert attempt["decision"]["reason"] == "noise_above_seal"
    assert document["status"] == "QUEUED"  # REQUEUE: it waits for its next attempt


def test_a_v1_attempt_page_has_no_guard_section(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v1.db'}"
    migrate.upgrade(url)
    with ArenaLedger(url) as ledger:
        ledger.commission(samples.commission_document(ARENA, fee_rao=0))
        arrival = samples.arrived(ARENA).model_dump(mode="json", exclude_unset=True)
        del arrival["submission_id"]
        sid = ledger.intake(arrival).submission_id
        ledger.claim(attempt_id="att-1", pair_id="pair-1", validator_hotkey="5Validator",
                     block=1_100, submission_id=sid)
        for index, cost in enumerate(NOISY, start=1):
            ledger.record("att-1", samples.window(index, 1 if index <= 2 else 2,
                                                  1_000_000_000, cost))
    with TestClient(create_app(url), raise_server_exceptions=False) as v1_client:
        response = v1_client.get(f"/submissions/{sid}", headers={"accept": "text/html"})
    assert response.status_code == 200
    shown = response.text
    assert "<dt>rules</dt><dd><code>paired-windows.v1</code></dd>" in shown
    assert "Noise guard" not in shown and 'class="noise"' not in shown
