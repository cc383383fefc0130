"""Implements ``evaluate`` and ``run-controls``: real evaluations through the engine bridge."""

from __future__ import annotations

import sys
from typing import Any

import typer

from cli.common import (
    INT_MAX,
    console,
    counted,
    decision_text,
    emit_json,
    emit_jsonl,
    handle_errors,
    options_named,
    state,
)
from services.arena_ledger import ArenaLedger

__all__ = ["register"]


def _printer(as_json: bool) -> Any:
    if as_json:
        return None
    interactive = sys.stdout.isatty()

    def show(stage: str, info: dict[str, Any]) -> None:
        if stage == "window":
            ratio = info["candidate_cost_ns"] / info["stock_cost_ns"]
            console.print(
                f"  window {info['window']} (orientation {info['orientation']}): "
                f"stock {info['stock_cost_ns']:,} ns, candidate "
                f"{info['candidate_cost_ns']:,} ns, ratio {ratio:.4f} (candidate ÷ stock: "
                "above 1 is slower)"
            )
        elif stage == "audit":
            console.print(f"  audit: {counted(info['nodes'], 'node')} graded")
        elif stage == "quality":
            console.print(
                f"  quality: agreement {info['argmax_agreement']}, regression "
                f"{info['regression']}, envelope {info['drift_within_envelope']}"
            )
        elif stage == "fault":
            console.print(f"  infrastructure fault {info['code']} at {info['stage']}")
        elif stage == "control":
            console.print(f"control {info['control_id']} ({info['kind']})")
        elif stage == "decided" and interactive:
            reason = f" {info['reason']}" if info["reason"] else ""
            console.print(f"  -> {info['verdict']}{reason}")

    return show


@handle_errors
def evaluate(
    submission_id: str = typer.Argument(..., help="The QUEUED submission to evaluate."),
    attempt_id: str | None = typer.Option(
        None, "--attempt", help="Attempt id (default: derived from the submission and block)."
    ),
    pair: str = typer.Option("pair-0", "--pair", help="The machine pair."),
    block: int = typer.Option(
        ..., "--block", min=0, max=INT_MAX, help="Finalized block of the claim."
    ),
    validator: str = typer.Option("validator", "--validator", help="Validator hotkey."),
    plan: str = typer.Option("normal", "--plan", help="normal or calibration_observation."),
    delta_file: str | None = typer.Option(
        None, "--delta-file", help="The submission's delta file, when it is not a registered delta."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Claims, measures, audits, grades and concludes one submission on the engine."""
    # The engine bridge loads at the first engine command, not at every CLI start.
    from services.evaluation import evaluate_submission

    named = options_named(
        attempt_id="--attempt",
        pair_id="--pair",
        validator_hotkey="--validator",
        claimed_block="--block",
        plan="--plan",
    )
    with named, ArenaLedger(state.db_url, actor=state.actor) as ledger:
        result = evaluate_submission(
            ledger, submission_id, block=block, attempt_id=attempt_id, pair_id=pair,
            validator_hotkey=validator, plan=plan, delta_file=delta_file,
            progress=_printer(as_json),
        )
    if as_json:
        emit_json(result.to_json())
        return
    console.print(f"attempt {result.attempt_id}: {decision_text(result.decision)}")


@handle_errors
def run_controls(
    arena_id: str = typer.Argument(..., help="The arena."),
    block: int = typer.Option(
        ..., "--block", min=0, max=INT_MAX, help="Finalized block of the runs."
    ),
    validator: str = typer.Option("validator", "--validator", help="Validator hotkey."),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines of the control report."),
) -> None:
    """Evaluates every registered control of an arena and prints expected vs observed."""
    from services.evaluation import run_arena_controls

    named = options_named(validator_hotkey="--validator", claimed_block="--block")
    with named, ArenaLedger(state.db_url, actor=state.actor) as ledger:
        rows = run_arena_controls(
            ledger, arena_id, block=block, validator_hotkey=validator,
            progress=_printer(as_json),
        )
    if as_json:
        emit_jsonl(rows)
        return
    for row in rows:
        console.print(
            f"{row['control_id']:<16} {row['kind']:<12} expected "
            f"{row['expected_verdict']:<12} observed {row.get('verdict') or '-':<12} "
            f"{row.get('reason') or '':<24} {row['outcome']}"
        )


def register(app: typer.Typer) -> None:
    """Adds the engine commands to the main app."""
    app.command("evaluate")(evaluate)
    app.command("run-controls")(run_controls)
