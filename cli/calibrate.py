"""Implements ``calibrate``: A/A noise calibration of an arena's engine, recorded in the ledger."""

from __future__ import annotations

from typing import Any

import typer

from cli.common import INT_MAX, console, emit_json, handle_errors, options_named, state
from services.arena_ledger import ArenaLedger
from vocabulary import limits
from vocabulary.errors import IntegrityError, InvalidInput

__all__ = ["register"]


def _printer(as_json: bool) -> Any:
    if as_json:
        return None

    def show(stage: str, info: dict[str, Any]) -> None:
        if stage == "window":
            console.print(
                f"  boot {info['boot']} window {info['window']} (orientation "
                f"{info['orientation']}): lane A {info['lane_a_cost_ns']:,} ns, lane B "
                f"{info['lane_b_cost_ns']:,} ns"
            )

    return show


@handle_errors
def calibrate(
    arena_id: str | None = typer.Option(
        None, "--arena", help="The arena whose commissioned engine is measured."
    ),
    engine: str | None = typer.Option(
        None, "--engine",
        help="Without --arena: torch-reference (the reference model on this host's CPU).",
    ),
    windows: int = typer.Option(
        4, "--windows", min=limits.calibration_windows_min, max=limits.calibration_windows_max,
        help="Windows per boot round, laid out as an attempt's W.",
    ),
    boots: int = typer.Option(
        3, "--boots", min=limits.calibration_boots_min, max=limits.calibration_boots_max,
        help="Boot rounds (each boots both lanes afresh per orientation).",
    ),
    confidence: str = typer.Option("0.95", "--confidence", help="Of the upper bounds."),
    block: int = typer.Option(
        ..., "--block", min=0, max=INT_MAX, help="Finalized block of the calibration."
    ),
    calibration_id: str | None = typer.Option(
        None, "--id", help="Calibration id (default cal-<arena or reference>-<block>)."
    ),
    validator: str = typer.Option("validator", "--validator", help="Validator hotkey."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Measures stock against stock (A/A) and records the noise the host supports.

    Runs --boots boot rounds of --windows windows, lanes booted fresh per orientation and
    round, and prints σw and σb, their one-sided upper bounds at --confidence and the seal
    they support (docs/calibration.md). Exits 4 when the arena's sealed window_noise or
    boot_noise is below the bounds measured (the check fails as a control run would: noise
    can pass as speed on that host); the calibration is recorded all the same.
    """
    if (arena_id is None) == (engine is None):
        raise InvalidInput("calibrate needs --arena, or --engine torch-reference without one",
                           path="--arena")
    if engine is not None and engine != "torch-reference":
        raise InvalidInput(f"--engine {engine!r}: only torch-reference runs without an arena",
                           path="--engine")
    from services.calibration_run import run_calibration  # the engine bridge loads here

    named = options_named(
        calibration_id="--id", validator_hotkey="--validator", windows="--windows",
        boots="--boots", confidence="--confidence", block="--block", arena_id="--arena",
    )
    with named, ArenaLedger(state.db_url, actor=state.actor) as ledger:
        report = run_calibration(
            ledger, arena_id=arena_id, windows=windows, boots=boots, confidence=confidence,
            block=block, validator_hotkey=validator, calibration_id=calibration_id,
            progress=_printer(as_json),
        )
    if as_json:
        emit_json(report.to_json())
    else:
        c = report.conclusion
        console.print(
            f"calibration {report.calibration_id}: {report.windows} A/A windows\n"
            f"  window noise σw {c['window_noise']} (upper bound {c['window_noise_bound']}, "
            f"{c['window_dof']} dof)\n"
            f"  boot noise   σb {c['boot_noise']} (upper bound {c['boot_noise_bound']}, "
            f"{c['boot_dof']} dof)\n"
            f"  supports the seal window_noise {c['seal_window_noise']}, boot_noise "
            f"{c['seal_boot_noise']} under {c['seal_policy_version'] or 'no policy version'}"
        )
    check = report.check
    if check is not None and check.shortfalls:
        raise IntegrityError(check.text(), arena_id=check.arena_id,
                             calibration_id=check.calibration_id)
    if check is not None and not as_json:
        console.print(check.text())


def register(app: typer.Typer) -> None:
    """Adds the calibrate command to the main app."""
    app.command("calibrate")(calibrate)
