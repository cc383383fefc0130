"""Implements ``arena-ledger demo``: the main job on the embedded default, readable in seconds."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer
from rich.rule import Rule
from rich.text import Text

from cli.common import (
    console,
    counted,
    emit_json,
    handle_errors,
    new_table,
    options_named,
    shown,
    state,
)
from cli.render import within_summary_width
from ledger.store import DEFAULT_URL, safe_url
from machines.settlement_rules import describe_suspension

__all__ = ["register"]


#: How to read the numbers the narration prints: the two are inverse ways round.
RATIO_LEGEND = (
    "a window's ratio is candidate ÷ stock cost (above 1: the candidate is slower);\n"
    "speedup is stock ÷ candidate (above 1: the candidate is faster)"
)


def _narrate(stage: str, info: dict[str, Any]) -> None:
    if stage == "calibrate":
        console.print(Text.assemble(
            ("calibrate", "bold"),
            f" the engine's noise: stock against stock, {info['boots']} boot rounds of "
            f"{info['windows']} windows",
        ))
    elif stage == "calibration_window":
        ratio = info["lane_a_cost_ns"] / info["lane_b_cost_ns"]
        console.print(f"    boot {info['boot']} window {info['window']} (orientation "
                      f"{info['orientation']}) lane A ÷ lane B {ratio:.4f}")
    elif stage == "calibrated":
        how = "reused " if info["reused"] else ""
        console.print(Text.assemble(("calibrated", "bold"), f" ({how}{info['calibration_id']})"))
        console.print(f"    window noise {info['window_noise']} (bound "
                      f"{info['window_noise_bound']}), boot noise {info['boot_noise']} (bound "
                      f"{info['boot_noise_bound']})")
    elif stage == "commissioned":
        console.print(Text.assemble(
            ("commissioned", "bold"),
            f" {info['arena_id']} at block {info['block']} (torch reference engine, "
            f"{info['policy_version']})",
        ))
        console.print(f"    noise sealed from the calibration: window {info['window_noise']}, "
                      f"boot {info['boot_noise']}")
        console.print(RATIO_LEGEND)
    elif stage == "control":
        console.print(Text.assemble(("control", "bold"), f" {info['control_id']} ({info['kind']})"))
    elif stage == "evaluate":
        console.print(Text.assemble(
            ("evaluate", "bold"),
            f" {info['hotkey']} {info['delta']} {info['submission_id'][:16]}…",
        ))
    elif stage == "intake":
        verdict = "admitted" if info["admitted"] else f"rejected: {info['reason']}"
        fee = info.get("fee") or {}
        paid = f" ({fee.get('kind')} {fee.get('amount_rao', 0):,} rao)" if fee else ""
        console.print(Text.assemble(
            ("intake", "bold"), f" {info['hotkey']} {info['delta']}: {verdict}{paid}"
        ))
    elif stage == "window":
        ratio = info["candidate_cost_ns"] / info["stock_cost_ns"]
        console.print(
            f"    window {info['window']} (orientation {info['orientation']}) ratio {ratio:.4f}"
        )
    elif stage == "audit":
        console.print(f"    audit: {counted(info['nodes'], 'node')} graded")
    elif stage == "quality":
        console.print(f"    quality: agreement {info['argmax_agreement']}")
    elif stage == "fault":
        console.print(f"    infrastructure fault: {info['code']}")
    elif stage == "decided":
        console.print(Text.assemble(
            "    -> ", (str(info["verdict"]), "bold"),
            f" {info['reason']}" if info["reason"] else "",
            f" speedup {shown(info['speedup'])}",
        ))


def _render(summary: Any) -> None:
    console.print(Rule("summary"), width=min(console.width, 80))  # not across a pipe's width
    table = new_table("hotkey", "status", "reason", "cause", box=None)
    for row in summary.submissions:
        table.add_row(row["hotkey"], row["status"], row["reason"] or "-", row["cause"])
    console.print(table)
    for line in _control_lines(summary.controls):
        console.print(line)
    for line in suspension_lines(summary.suspensions):
        console.print(line)
    fees, credits = summary.fees["total"], summary.credits
    # Fees and credits are the arena's over every session: what a settlement counts.
    console.print(
        f"fees (every session): {fees['net_rao']:,} rao net ({fees['consumed_rao']:,} "
        f"consumed, {fees['released_rao']:,} released)"
    )
    console.print(
        f"credits spent (every session): {fees['credits_spent_rao']:,} rao (waived fees, not "
        "revenue)"
    )
    console.print(
        f"  {counted(credits['control_runs'], 'control run')} {credits['control_runs_rao']:,} "
        f"rao, {counted(credits['miners'], 'miner')} {credits['miners_rao']:,} rao"
    )
    console.print(
        "weights (ppm): " + ", ".join(f"{k} {v:,}" for k, v in sorted(summary.weights_ppm.items()))
    )
    console.print(f"settlement digest: {summary.settlement_digest}")
    cp = summary.checkpoint
    console.print(f"checkpoint: size {cp['tree_size']} root {cp['root_hash']} ({cp['origin']})")
    # A path is copied, not read: it is never folded inside, even past the summary's rule.
    console.print(f"validator public key: {summary.keys['public']}", overflow="ignore",
                  crop=False)
    console.print("  (for verify-bundle --key and replay --key)")
    replay = summary.replay
    console.print(
        f"replay: {'reproduced' if summary.ok else 'DIVERGED'} "
        f"({counted(replay['events'], 'event')}, "
        f"{counted(replay['verdicts_checked'], 'verdict')}, "
        f"{counted(replay['settlements_checked'], 'settlement')}); chain "
        f"{'verified' if summary.verify.get('ok') else 'BROKEN'}"
    )
    # The command is copied, not read: never folded, even past the summary's rule.
    console.print(f"dashboard: {serve_command(state.db_url)}", overflow="ignore", crop=False)
    console.print("  then open http://127.0.0.1:8080/")


def serve_command(db_url: str) -> str:
    """Returns the command that serves the dashboard over ``db_url`` (the password, if any,
    hidden: the summary never prints one)."""
    if db_url == DEFAULT_URL:
        return "arena-ledger serve"
    return f"arena-ledger --db {shlex.quote(safe_url(db_url))} serve"


def suspension_lines(suspensions: list[dict[str, Any]]) -> list[str]:
    """Returns the summary's plain sentence on each arena the settlement suspended
    (settlement-rules.v2): whose controls failed or went stale, and where its pool went."""
    return [f"ARENA {item['arena_id']} IS SUSPENDED: {describe_suspension(item)}; its pool "
            "went to the burn hotkey." for item in suspensions]


def _control_lines(controls: list[dict[str, Any]]) -> list[str]:
    """Returns the summary's lines on this session's control runs (never an earlier one's)."""
    if not controls:
        return ["controls: none run this session (`arena-ledger controls reference` lists "
                "every run)"]
    expected = sum(1 for c in controls if c["outcome"] == "as_expected")
    lines = [f"controls run this session (block {controls[0]['block']}): {expected} of "
             f"{len(controls)} as expected"]
    for c in controls:
        observed = " ".join(filter(None, (c.get("verdict") or "-", c.get("reason"))))
        lines.append(f"  {c['control_id']}: {observed} ({c['outcome']})")
    return lines


@handle_errors
def demo(
    workdir: Path = typer.Option(
        Path("arena-ledger-demo"),
        "--workdir",
        help="Where the validator key is kept (created if missing).",
    ),
    miners: int = typer.Option(3, "--miners", min=0, max=3, help="Miners to evaluate (0-3)."),
    controls: bool = typer.Option(
        True, "--controls/--no-controls", help="Evaluate the registered controls."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON only."),
) -> None:
    """Runs a whole arena session for real on the CPU reference engine and summarises it."""
    from services.demo import run_demo

    with options_named(workdir="--workdir"):
        summary = run_demo(
            state.db_url,
            workdir,
            miners=miners,
            controls=controls,
            notify=None if as_json else _narrate,
        )
    if as_json:
        emit_json(summary.to_json())
    else:
        with within_summary_width():
            _render(summary)
    if not summary.ok:
        raise typer.Exit(4)


def register(app: typer.Typer) -> None:
    """Adds the demo command to the main app."""
    app.command("demo")(demo)
