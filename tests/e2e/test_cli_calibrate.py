"""Drives ``arena-ledger calibrate`` on the real CPU engine, ``commission --from-calibration``
and the seal-below line of ``controls``, as an operator would.

One module-wide SQLite ledger: an arena sealed with noise no host supports (window_noise
0.0001, boot_noise 0), calibrated with 3 windows x 2 boot rounds (6 A/A windows, 4 lane-pair
boots: about 30 s on a busy 2-core host, most of it lane boots). Only outcomes that do not
depend on CPU timing are asserted: real clocks never give six identical ratios, so the
bounds exceed that seal. The success path of ``--from-calibration`` reads a calibration
recorded through the library with costs chosen to fit ``paired-windows.v1``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from evaluate_queue import commission

from machines import samples
from machines.calibration import derive_conclusion
from services.arena_ledger import ArenaLedger
from vocabulary.events import CalibrationConcluded

pytestmark = pytest.mark.slow
ARENA = "cli-eval"
CALIBRATION = "cal-cli-eval-1100"


def _tight() -> dict[str, Any]:
    document = commission()
    document["policy"] = {**document["policy"], "window_noise": "0.0001", "boot_noise": "0"}
    return document


@pytest.fixture(scope="module")
def ledger(cli_factory: Callable[[str], Any]) -> dict[str, Any]:
    """Commissions the tight arena and calibrates it once (exit 4: the seal is below)."""
    cli = cli_factory("calibrate")
    cli("init")
    cli("commission", cli.write("commission.json", _tight()))
    done = cli("calibrate", "--arena", ARENA, "--windows", "3", "--boots", "2", "--block",
               "1100", "--json", expect=4)
    return {"cli": cli, "report": json.loads(done.stdout), "stderr": done.stderr}


def test_calibrate_records_the_windows_and_the_derived_conclusion(
    ledger: dict[str, Any]
) -> None:
    cli, report = ledger["cli"], ledger["report"]
    assert report["calibration_id"] == CALIBRATION and report["arena_id"] == ARENA
    assert report["windows"] == 6
    assert (report["window_dof"], report["boot_dof"]) == (2, 2)
    assert Decimal(report["window_noise_bound"]) > Decimal(report["window_noise"]) > 0
    assert Decimal(report["seal_window_noise"]) >= Decimal(report["window_noise_bound"])
    types = [e["type"] for e in cli.jsonl("events") if e["stream"] == f"calibration-{CALIBRATION}"]
    assert types == ["CalibrationStarted", *["CalibrationWindowMeasured"] * 6,
                     "CalibrationConcluded"]


def test_a_seal_below_the_bounds_exits_4_naming_both_numbers(ledger: dict[str, Any]) -> None:
    report, stderr = ledger["report"], ledger["stderr"]
    fields = {s["field"] for s in report["seal_below_bounds"]}
    assert "window_noise" in fields
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("error[integrity_failure]")
    assert f"window_noise 0.0001 is below the bound {report['window_noise_bound']}" in line


def test_controls_says_the_seal_is_below_the_latest_calibration(ledger: dict[str, Any]) -> None:
    done = ledger["cli"]("controls", ARENA)
    assert f"sealed noise is below what calibration {CALIBRATION} measured" in done.stdout


def test_the_ledger_still_replays_and_checks_its_read_models_with_calibrations(
    ledger: dict[str, Any]
) -> None:
    cli = ledger["cli"]
    done = cli.many([(("replay",), 0), (("projections", "check"), 0)])
    assert "read models match" in done[0].stdout
    assert done[1].stdout.startswith("ok")


def test_commission_from_calibration_refuses_a_seal_below_the_bounds(
    ledger: dict[str, Any]
) -> None:
    cli, report = ledger["cli"], ledger["report"]
    done = cli("commission", cli.write("again.json", _tight()), "--from-calibration",
               CALIBRATION, expect=1)
    line = cli.error_line(done.stderr, "invalid_input")
    assert f"0.0001 is below calibration {CALIBRATION}'s bound {report['window_noise_bound']}" \
        in line


def test_commission_from_calibration_seals_the_calibration(
    cli_factory: Callable[[str], Any]
) -> None:
    cli = cli_factory("from-calibration")
    cli("init")
    started = samples.calibration_started("cal-quiet", boots=2)
    quiet = ((1_000_000_000 + 137 * i * i, 1_000_000_000 + 91 * i) for i in range(8))
    windows = samples.calibration_windows(tuple(quiet))
    with ArenaLedger(cli.db) as library:
        library.append([("calibration-cal-quiet", e) for e in (started, *windows)])
        state = library.fold.calibration("cal-quiet")
        assert state is not None
        derived = derive_conclusion(state)
        assert derived is not None and derived["seal_policy_version"] == "paired-windows.v1"
        library.append([("calibration-cal-quiet", CalibrationConcluded.model_validate(
            {**derived, "concluded_block": 300}))])
    document = samples.commission_document("quiet-arena")
    for name in ("engine", "model", "hardware"):
        del document[name]  # taken from the calibration
    for name in ("window_noise", "boot_noise", "policy_version"):
        del document["policy"][name]
    cli("commission", cli.write("c.json", document), "--from-calibration", "cal-quiet")
    sealed = next(e for e in cli.jsonl("events") if e["type"] == "ArenaCommissioned")
    policy = sealed["payload"]["policy"]
    assert (policy["window_noise"], policy["boot_noise"]) == (
        derived["seal_window_noise"], derived["seal_boot_noise"])
    assert sealed["payload"]["hardware"] == started.hardware.model_dump()
    # That arena's seal covers its calibration: controls has nothing to say.
    assert "below" not in cli("controls", "quiet-arena").stdout
