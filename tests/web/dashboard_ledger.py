"""Builds the ledger the dashboard suites read: the hand-computed settled ledger
(tests/integration/settled_ledger.py, loaded by path), plus what a dashboard must show
safely: a control, a hostile hotkey with a credit whose note carries markup, quotes and a
right-to-left override, a held submission of that hotkey, and a signed checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scenario_loader import settlement_scenario

from ledger.checkpoint import load_signer, sign_tree, write_key_files
from machines import samples
from services.arena_ledger import ArenaLedger

#: Strings a miner or operator controls; each must reach the page as text, never as markup.
HOSTILE_HOTKEY = '<script>alert("hk")</script>'
HOSTILE_NOTE = "\"quoted\" 'single' \u202egnp.exe <img src=x onerror=alert(1)> </textarea>"


@dataclass(frozen=True)
class DashboardLedger:
    """Is what the suites look up: the URL, the named submission ids, the key's files."""

    url: str
    sids: dict[str, str]
    settlements: list[tuple[dict[str, object], int]]
    public_key: Path
    checkpoint_size: int


def build(url: str, keys: Path) -> DashboardLedger:
    """Builds the dashboard ledger at ``url`` (migrating it first); keys go under ``keys``."""
    scenario = settlement_scenario()
    ledger: ArenaLedger = scenario.open_ledger(url)
    try:
        built = scenario.build_settled(ledger)
        sids = dict(built.sids)
        arena = scenario.ARENA_A
        ledger.register_control(arena, {
            "control_id": "ctl-wrong-mlp", "kind": "wrong_mlp",
            "delta_digest": samples.hex64("delta:control"), "expected_verdict": "FAIL",
        })
        ledger.grant_credit("cr-hostile", HOSTILE_HOTKEY, scenario.FEE_A, HOSTILE_NOTE)
        sids["hostile"] = scenario.intake(ledger, arena, HOSTILE_HOTKEY, "hostile", 3_100, None)
        ledger.hold(sids["hostile"], "operator", 3_101)
        files = write_key_files("dashboard-test", keys / "validator.key")
        issued = sign_tree(ledger.store, load_signer(files.private_path))
        return DashboardLedger(url, sids, built.settlements, files.public_path, issued.tree_size)
    finally:
        ledger.close()
