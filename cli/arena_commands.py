"""Implements the arena commands: commission, intake, claim, conclude, holds, explain, lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from cli.common import (
    INT_MAX,
    as_of_option,
    console,
    counted,
    decision_text,
    emit_json,
    emit_jsonl,
    err_console,
    handle_errors,
    new_table,
    options_named,
    print_as_of,
    state,
)
from machines.control import UNEXPECTED, ControlRow, latest_complete_run
from services.arena_ledger import ArenaLedger, require_prefix_length
from services.calibration import commission_from_calibration, seal_warning
from vocabulary import limits
from vocabulary.codec import loads
from vocabulary.errors import IntegrityError, InvalidInput, read_input, read_limited

__all__ = ["register"]


_SID_HELP = "The submission (its id, all 64 characters)."
_BLOCK_HELP = "Finalized block it happens at."


def _ledger(as_of: int | None = None) -> ArenaLedger:
    return ArenaLedger(state.db_url, actor=state.actor, as_of=as_of)


def _read_json(path: str) -> Any:
    limit = limits.input_file_bytes_max
    if path == "-":
        data = read_limited(typer.get_binary_stream("stdin"), "standard input", limit)
    else:
        data = read_input(path, "file", limit=limit)
    return loads(data, where=path)


def _positions(result: Any) -> str:
    """Spells the positions of an append, each run of consecutive ones as ``first..last``
    (events recorded by separate appends, which an intake may answer with, need not follow
    on)."""
    runs: list[list[int]] = []
    for position in result.positions:
        if runs and runs[-1][1] + 1 == position:
            runs[-1][1] = position
        else:
            runs.append([position, position])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


@handle_errors
def commission(
    file: str = typer.Argument(..., help="ArenaCommissioned payload as JSON (or - for stdin)."),
    from_calibration: str | None = typer.Option(
        None, "--from-calibration", help="Seal noise at least this calibration's bounds "
        "(docs/calibration.md); its seal fills a policy's missing noise fields."
    ),
) -> None:
    """Commissions (or re-commissions) an arena from a JSON payload."""
    payload = _read_json(file)
    if not isinstance(payload, dict):
        raise InvalidInput("the commission must be a JSON object", path="$")
    with _ledger() as ledger:
        if from_calibration is not None:
            result = commission_from_calibration(ledger, payload, from_calibration)
        else:
            result = ledger.commission(payload)
        arena = ledger.fold.arena(str(payload["arena_id"]))
    digest = arena.commission_digest if arena is not None else "?"
    again = " (already recorded: nothing was written)" if result.already_recorded else ""
    console.print(
        f"commissioned {payload['arena_id']} at position {_positions(result)}; "
        f"commission_digest {digest}{again}"
    )


@handle_errors
def register_control(
    arena_id: str = typer.Argument(..., help="The arena."),
    control_id: str = typer.Option(
        ..., "--id", help="Control id: 1-64 of a-z, 0-9, '.', '_', '-'."
    ),
    kind: str = typer.Option(
        ...,
        "--kind",
        help="identity, honest, wrong_mlp, skip_mlp, "
        "wrong_cache, corrupted_cache, engine_kill, pod_restart, custom.",
    ),
    delta_digest: str = typer.Option(..., "--delta-digest", help="The control delta's digest."),
    expected_verdict: str = typer.Option(..., "--expect", help="PASS, FAIL or NO_DECISION."),
    expected_reason: str | None = typer.Option(None, "--expect-reason", help="Reason code."),
) -> None:
    """Registers a control delta with its expected verdict on an arena."""
    control: dict[str, Any] = {
        "control_id": control_id,
        "kind": kind,
        "delta_digest": delta_digest,
        "expected_verdict": expected_verdict,
    }
    if expected_reason is not None:
        control["expected_reason"] = expected_reason
    named = options_named(
        control_id="--id",
        kind="--kind",
        delta_digest="--delta-digest",
        expected_verdict="--expect",
        expected_reason="--expect-reason",
    )
    with named, _ledger() as ledger:
        result = ledger.register_control(arena_id, control)
    console.print(f"control {control_id} registered at position {_positions(result)}")


@handle_errors
def intake(
    file: str = typer.Argument(
        ..., help="SubmissionArrived fields as JSON (or - for stdin); submission_id is "
        "derived from them, so one stated must be that one."
    ),
    paid_rao: int | None = typer.Option(
        None,
        "--paid-rao",
        min=0, max=INT_MAX,
        help="Amount the chain shows for the payment_ref (omit: no payment found).",
    ),
    block: int | None = typer.Option(
        None, "--block", min=0, max=INT_MAX, help="Intake block (default: the arrival block)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Records an arrival and its intake outcome (admission with fee, or rejection)."""
    arrival = _read_json(file)
    if not isinstance(arrival, dict):
        raise InvalidInput("the arrival must be a JSON object", path="$")
    with _ledger() as ledger:
        outcome = ledger.intake(arrival, payment_amount_rao=paid_rao, block=block)
    if as_json:
        emit_json(outcome.to_json())
        return
    verb = "admitted" if outcome.admitted else f"rejected ({outcome.reason})"
    again = " (already recorded)" if outcome.already_recorded else ""
    console.print(
        f"submission {outcome.submission_id} {verb} at positions {_positions(outcome)}{again}"
    )


@handle_errors
def claim(
    attempt_id: str = typer.Option(..., "--attempt", help="New attempt id."),
    submission_id: str | None = typer.Option(None, "--submission", help="Submission to claim."),
    arena_id: str | None = typer.Option(None, "--arena", help="Claim the arena's next one."),
    pair_id: str = typer.Option("pair-0", "--pair", help="The machine pair."),
    validator: str = typer.Option(..., "--validator", help="Validator hotkey."),
    block: int = typer.Option(
        ..., "--block", min=0, max=INT_MAX, help="Finalized block of the claim."
    ),
    plan: str = typer.Option("normal", "--plan", help="normal or calibration_observation."),
) -> None:
    """Claims a QUEUED submission for an attempt (AttemptClaimed + QualificationStarted)."""
    if submission_id is None and arena_id is None:
        raise InvalidInput("claim needs --submission or --arena", path="--submission")
    named = options_named(
        attempt_id="--attempt",
        submission_id="--submission",
        pair_id="--pair",
        validator_hotkey="--validator",
        plan="--plan",
    )
    with named, _ledger() as ledger:
        claimed = ledger.claim(
            attempt_id=attempt_id,
            pair_id=pair_id,
            validator_hotkey=validator,
            block=block,
            submission_id=submission_id,
            arena_id=arena_id,
            plan=plan,
        )
    console.print(f"attempt {attempt_id} claims submission {claimed.submission_id}")


@handle_errors
def conclude(
    attempt_id: str = typer.Argument(..., help="The attempt."),
    block: int = typer.Option(
        ..., "--block", min=0, max=INT_MAX, help="Finalized block of the decision."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Appends the decision the attempt machine derives (AttemptDecided + SubmissionResolved)."""
    with _ledger() as ledger:
        decided = ledger.conclude(attempt_id, block)
    if as_json:
        emit_json(decided.model_dump())
        return
    console.print(f"attempt {attempt_id}: {decision_text(decided.model_dump())}")


@handle_errors
def hold(
    sid: str = typer.Argument(..., help=_SID_HELP),
    reason: str = typer.Option(..., "--reason", help="Why it is held (recorded as given)."),
    block: int = typer.Option(..., "--block", min=0, max=INT_MAX, help=_BLOCK_HELP),
) -> None:
    """Holds a non-terminal submission."""
    with options_named(reason="--reason"), _ledger() as ledger:
        result = ledger.hold(sid, reason, block)
    console.print(f"held at position {_positions(result)}")


@handle_errors
def release(
    sid: str = typer.Argument(..., help=_SID_HELP),
    reason: str = typer.Option(..., "--reason", help="Why it is released (recorded as given)."),
    block: int = typer.Option(..., "--block", min=0, max=INT_MAX, help=_BLOCK_HELP),
    operator: str = typer.Option(..., "--operator", help="Operator hotkey."),
) -> None:
    """Releases a hold; the submission is queued again."""
    with options_named(reason="--reason", operator="--operator"), _ledger() as ledger:
        result = ledger.release(sid, reason, block, operator)
    console.print(f"released at position {_positions(result)}")


@handle_errors
def requeue(
    sid: str = typer.Argument(..., help=_SID_HELP),
    reason: str = typer.Option(..., "--reason", help="Why it is queued again (recorded as given)."),
    block: int = typer.Option(..., "--block", min=0, max=INT_MAX, help=_BLOCK_HELP),
) -> None:
    """Queues a completed NO_DECISION again."""
    with options_named(reason="--reason"), _ledger() as ledger:
        result = ledger.requeue(sid, reason, block)
    console.print(f"requeued at position {_positions(result)}")


@handle_errors
def expire(
    block: int = typer.Option(..., "--block", min=0, max=INT_MAX, help=_BLOCK_HELP),
    sid: str | None = typer.Option(None, "--submission", help="Only this one."),
) -> None:
    """Expires submissions whose SLA has passed at the finalized block."""
    with options_named(submission_id="--submission"), _ledger() as ledger:
        expired = ledger.expire(block, sid)
    console.print(f"expired {counted(len(expired), 'submission')}"
                  + "".join(f"\n  {s}" for s in expired))


@handle_errors
def explain(
    kind: str = typer.Argument(..., help="submission or attempt"),
    ident: str = typer.Argument(..., help="Its id (a submission's: all 64 characters, or a "
                                "prefix of 8 or more that only it starts with, as the tables "
                                "show)."),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Explains a verdict: every window, look, audit node, quality and the decision."""
    # Checked before the store is opened: a mistyped kind is named as such, not hidden
    # behind a store error, and no ledger is folded for nothing.
    if kind not in ("submission", "attempt"):
        raise InvalidInput(f"explain takes 'submission' or 'attempt', not {kind!r}", path=kind)
    if kind == "submission":
        require_prefix_length(ident)
    with _ledger(as_of) as ledger:
        if kind == "submission":
            document = ledger.explain_submission(ident)
        else:
            document = ledger.explain_attempt(ident)
        position = ledger.guard.fold.position
    if as_json:
        emit_json(document)
        return
    from cli.render import render_explain

    print_as_of(as_of, position)
    render_explain(kind, document)


@handle_errors
def submissions(
    arena_id: str | None = typer.Option(None, "--arena", help="Only this arena's."),
    hotkey: str | None = typer.Option(None, "--hotkey", help="Only this miner hotkey's."),
    status: str | None = typer.Option(
        None, "--status", help="Only those in this status (QUEUED, QUALIFIED, FAILED, …)."
    ),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines, one submission a line."),
) -> None:
    """Lists submissions in arrival order with status, stated cause and next step."""
    with options_named(status="--status", hotkey="--hotkey"), _ledger(as_of) as ledger:
        rows = ledger.submissions(arena_id, hotkey, status)
        position = ledger.guard.fold.position
    if as_json:
        emit_jsonl(rows)
        return
    print_as_of(as_of, position)
    table = new_table("submission", "arena", "hotkey", "status", "reason", "cause", "next step")
    for row in rows:
        table.add_row(
            row["submission_id"][:16],
            row["arena_id"],
            row["hotkey"],
            row["status"],
            row["reason"],
            row["cause"],
            row["next_step"],
        )
    console.print(table)


@handle_errors
def controls(
    arena_id: str | None = typer.Argument(
        None, help="The arena (default: every commissioned arena)."
    ),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines."),
) -> None:
    """Shows each control run's expected and observed verdict (as_expected / unexpected /
    pending), with the block and attempt of each run.

    Exits 4 when the latest complete control run (the rows of the latest block none of
    whose rows is pending) of the arena, or without ARENA of any arena, has an unexpected
    outcome: the check the controls exist for failed, so the grader cannot be trusted on
    that machine (and settlement-rules.v2 suspends the arena's pool). A run still pending
    (one that was interrupted, say) neither passes nor fails it.
    """
    with _ledger(as_of) as ledger:
        if arena_id is None:
            arena_ids = sorted(arena.arena_id for arena in ledger.fold.arenas())
        else:
            arena_ids = [arena_id]
        by_arena = {a: ledger.controls(a) for a in arena_ids}
        position = ledger.guard.fold.position
        below = [line for a in arena_ids if (line := seal_warning(ledger, a)) is not None]
    every = arena_id is None
    if as_json:
        emit_jsonl([{"arena_id": a, **row} if every else row
                    for a, rows in by_arena.items() for row in rows])
    else:
        print_as_of(as_of, position)
        _controls_table(by_arena, every)
    for line in below:  # the seal lets noise pass as speed: said, not an exit code
        (err_console if as_json else console).print(line)
    failed = []
    for arena, rows in by_arena.items():
        latest = latest_complete_run([ControlRow(**row) for row in rows])
        unexpected = [row.control_id for row in latest if row.outcome == UNEXPECTED]
        if unexpected:
            failed.append((arena, latest[0].block, unexpected))
    if failed:
        first, block, ids = failed[0]
        message = (
            f"the latest complete control run of {first} (block {block}) has an unexpected "
            f"outcome: {', '.join(ids)}"
        )
        if every:
            runs = "; ".join(f"{a} (block {b}): {', '.join(c)}" for a, b, c in failed)
            message = (f"the latest complete control run of {counted(len(failed), 'arena')} "
                       f"has an unexpected outcome: {runs}")
        raise IntegrityError(message, arena_id=first, block=block, controls=ids,
                             arenas=[a for a, _, _ in failed])


def _controls_table(by_arena: dict[str, list[dict[str, Any]]], every: bool) -> None:
    """Prints the control rows, with an arena column when they are every arena's."""
    columns = ("control", "block", "attempt", "expected", "observed", "outcome")
    table = new_table(*(("arena", *columns) if every else columns))
    for arena, rows in by_arena.items():
        for row in rows:
            expected = f"{row['expected_verdict']} {row.get('expected_reason') or ''}".strip()
            observed = f"{row.get('verdict') or '-'} {row.get('reason') or ''}".strip()
            block = "-" if row["block"] is None else str(row["block"])
            cells = (row["control_id"], block, row["attempt_id"] or "-", expected, observed,
                     row["outcome"])
            table.add_row(*((arena, *cells) if every else cells))
    console.print(table)


@handle_errors
def grant_credit(
    credit_id: str = typer.Option(..., "--id", help="Credit id (each granted once)."),
    hotkey: str = typer.Option(..., "--hotkey", help="The miner hotkey credited."),
    amount_rao: int = typer.Option(
        ..., "--amount-rao", min=0, max=INT_MAX, help="Amount in rao; intake spends it as fees."
    ),
    note: str = typer.Option("", "--note", help="Why it is granted (recorded as given)."),
) -> None:
    """Grants an evaluation credit to a hotkey."""
    named = options_named(credit_id="--id", hotkey="--hotkey", note="--note")
    with named, _ledger() as ledger:
        result = ledger.grant_credit(credit_id, hotkey, amount_rao, note)
    again = " (already recorded: nothing was written)" if result.already_recorded else ""
    console.print(f"credit {credit_id} granted at position {_positions(result)}{again}")


def register(app: typer.Typer) -> None:
    """Adds the arena commands to the main app."""
    commands: list[tuple[str, Callable[..., Any]]] = [
        ("commission", commission),
        ("register-control", register_control),
        ("intake", intake),
        ("claim", claim),
        ("conclude", conclude),
        ("hold", hold),
        ("release", release),
        ("requeue", requeue),
        ("expire", expire),
        ("explain", explain),
        ("submissions", submissions),
        ("controls", controls),
        ("grant-credit", grant_credit),
    ]
    for name, func in commands:
        app.command(name)(func)
