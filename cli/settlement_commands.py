"""Implements settlement and replay: emission-policy, weights, settle, rewards, earnings, fees,
replay."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.common import (
    INT_MAX,
    as_of_option,
    console,
    counted,
    emit_json,
    emit_jsonl,
    handle_errors,
    new_table,
    options_named,
    print_as_of,
    state,
)
from cli.progress import watched
from services.arena_ledger import ArenaLedger
from vocabulary.errors import InvalidInput

if TYPE_CHECKING:
    from machines.settlement_rules import Settlement, Suspension
    from services.replay import ReplayReport
    from services.weights_preview import RecordedSettlement

__all__ = ["register"]


def _ledger(as_of: int | None = None) -> ArenaLedger:
    return ArenaLedger(state.db_url, actor=state.actor, as_of=as_of)


@handle_errors
def emission_policy(
    half_life_blocks: int = typer.Option(
        ..., "--half-life-blocks", min=1, max=INT_MAX,
        help="Blocks after which a claim keeps half its credit (hyperbolic decay).",
    ),
    burn_hotkey: str = typer.Option(
        ..., "--burn-hotkey", help="Hotkey that gets the weight no claim earns."
    ),
    validator_hotkey: str = typer.Option(
        ..., "--validator-hotkey", help="The validator the policy is set for."
    ),
    rules_version: str = typer.Option(
        "settlement-rules.v1", "--rules",
        help="Settlement rules: settlement-rules.v1, or settlement-rules.v2 (v1 plus the "
        "control gate; needs --control-max-age-blocks).",
    ),
    control_max_age_blocks: int | None = typer.Option(
        None, "--control-max-age-blocks", min=1, max=INT_MAX,
        help="settlement-rules.v2: an arena whose latest complete control run is older "
        "than this many blocks at the settlement block is suspended (its pool burns).",
    ),
) -> None:
    """Sets the emission policy settlements use from this position on."""
    named = options_named(burn_hotkey="--burn-hotkey", validator_hotkey="--validator-hotkey",
                          rules_version="--rules",
                          control_max_age_blocks="--control-max-age-blocks")
    with named, _ledger() as ledger:
        result = ledger.set_emission_policy(
            half_life_blocks, burn_hotkey, validator_hotkey, rules_version,
            control_max_age_blocks,
        )
    rules = "" if control_max_age_blocks is None else (
        f" ({rules_version}, controls at most {control_max_age_blocks:,} blocks old)")
    console.print(f"emission policy{rules} set at position {result.first}")


def _render_settlement(
    settlement: Settlement, as_json: bool, position: int | None = None
) -> None:
    from machines.settlement_rules import settlement_payload

    payload = settlement_payload(settlement)
    if as_json:
        emit_json({**payload, "position": position})
        return
    table = new_table(
        "hotkey",
        "weight (ppm)",
        title=f"weights at block {settlement.block} as of position {settlement.as_of_position}",
    )
    for hotkey, ppm in sorted(payload["weights_ppm"].items()):
        table.add_row(hotkey, f"{ppm:,}")
    console.print(table)
    for claim in payload["claims"]:
        console.print(
            f"  claim {claim['hotkey']} arena {claim['arena_id']} speedup_ppm "
            f"{claim['speedup_ppm']} credit {claim['credit']}"
        )
    for suspension in settlement.suspensions:
        console.print(f"  suspended arena {suspension.arena_id}: {_suspended(suspension)}")
    if settlement.rules_version != "settlement-rules.v1":
        console.print(f"rules {settlement.rules_version}: "
                      f"{counted(len(settlement.suspensions), 'arena')} suspended")
    console.print(f"settlement_digest {payload['settlement_digest']}")
    if position is not None:
        console.print(f"recorded at position {position}")


def _suspended(suspension: Suspension) -> str:
    """Says why settlement-rules.v2 suspended an arena, e.g. "control_unexpected (run at
    block 1,300: wrong-mlp); its pool went to the burn hotkey"."""
    if suspension.run_block is None:
        why = "no complete control run"
    else:
        why = f"run at block {suspension.run_block:,}"
        if suspension.control_ids:
            why += f": {', '.join(suspension.control_ids)}"
    return f"{suspension.reason} ({why}); its pool went to the burn hotkey"


@handle_errors
def weights(
    block: int | None = typer.Option(
        None, "--block", min=0, max=INT_MAX,
        help="Settlement block (default: the head's block, the block of the latest event "
        "that carries one).",
    ),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Previews the settlement at a block without appending it (as of a recorded settlement's
    as_of_position: that settlement again, digest and all)."""
    from services.weights_preview import preview_weights

    with _ledger(as_of) as ledger:
        preview = preview_weights(ledger, block)
    settlement = preview.settlement
    if as_json:
        _render_settlement(settlement, as_json)
        return
    if preview.head_block is not None:
        head = preview.head_block
        console.print(f"block {head.block}: the head's block (the latest event that carries "
                      f"one: {head.type} at position {head.position})")
    _render_settlement(settlement, as_json)
    _explain_digest(settlement, preview.recorded)


def _explain_digest(settlement: Settlement, recorded: RecordedSettlement | None) -> None:
    """Says why a preview's digest may differ from a recorded settlement's with the same
    weights: the digest covers as_of_position too."""
    console.print(f"the digest covers as_of_position ({settlement.as_of_position}) as well as "
                  "the block, claims, weights and fees: a settlement of the same block as of "
                  "another position has another digest")
    if recorded is None:
        return
    if recorded.as_of_position == settlement.as_of_position:
        console.print(f"the settlement recorded at position {recorded.position} for block "
                      f"{recorded.block} was computed as of this position too")
        return
    console.print(f"the settlement recorded at position {recorded.position} for block "
                  f"{recorded.block} was computed as of position {recorded.as_of_position} "
                  f"(digest {recorded.settlement_digest}): `arena-ledger weights --block "
                  f"{recorded.block} --as-of {recorded.as_of_position}` reproduces it")


@handle_errors
def settle(
    block: int = typer.Option(..., "--block", min=0, max=INT_MAX, help="Settlement block."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Computes the settlement at a block as of the head and appends SettlementComputed."""
    with _ledger() as ledger:
        settlement, result = ledger.settle(block)
    _render_settlement(settlement, as_json, result.first)


_HOTKEY_HELP = "Only this hotkey's."


@handle_errors
def rewards(
    arena_id: str | None = typer.Option(None, "--arena", help="Only this arena's."),
    hotkey: str | None = typer.Option(None, "--hotkey", help=_HOTKEY_HELP),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines."),
) -> None:
    """Shows every PASS with its group, the best before it and its reward status."""
    with options_named(hotkey="--hotkey"), _ledger(as_of) as ledger:
        rows = ledger.rewards(arena_id, hotkey)
        position = ledger.guard.fold.position
    if as_json:
        emit_jsonl(rows)
        return
    print_as_of(as_of, position)
    table = new_table(
        "submission", "arena", "hotkey", "speedup", "best before", "status", "blocked by"
    )
    for row in rows:
        table.add_row(
            str(row.get("submission_id", ""))[:16],
            str(row.get("arena_id")),
            str(row.get("hotkey")),
            str(row.get("speedup")),
            _best(row.get("best_before")),
            str(row.get("status")),
            ", ".join(b[:16] for b in row.get("blocked_by") or []) or "-",
        )
    console.print(table)
    console.print(_rewards_count(rows, arena_id, hotkey))


def _rewards_count(rows: list[dict[str, Any]], arena_id: str | None,
                   hotkey: str | None = None) -> str:
    """Returns "3 PASS verdicts: 1 rewarded, 2 pending" (of a hotkey, in an arena, when
    asked), so an empty table reads as none yet rather than as a listing that failed."""
    where = "" if hotkey is None else f" of {hotkey}"
    where += "" if arena_id is None else f" in arena {arena_id}"
    statuses = Counter(str(row.get("status")) for row in rows)
    parts = ", ".join(f"{count:,} {status}" for status, count in sorted(statuses.items()))
    return f"{counted(len(rows), 'PASS verdict')}{where}{': ' if parts else ''}{parts}"


@handle_errors
def earnings(
    hotkey: str = typer.Option(..., "--hotkey", help="The miner's hotkey."),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Shows one hotkey's submissions by status, PASS rewards, weight in each settlement,
    fees paid and credits."""
    from services.earnings import hotkey_earnings

    with options_named(hotkey="--hotkey"), _ledger(as_of) as ledger:
        document = hotkey_earnings(ledger, hotkey)
    if as_json:
        emit_json(document)
        return
    print_as_of(as_of, document["as_of_position"])
    console.print(f"hotkey {hotkey}")
    console.print(f"submissions: {_counts(document['submissions'])}")
    console.print(f"PASS verdicts: {_counts(document['passes'])}")
    fee = document["fees"]
    console.print(f"fees: consumed {fee['consumed_rao']:,} rao, refunded "
                  f"{fee['released_rao']:,} rao, net {fee['net_rao']:,} rao; paid by credits "
                  f"{fee['credits_spent_rao']:,} rao")
    credit = document["credits"]
    console.print(f"credits: {counted(credit['granted'], 'grant')} "
                  f"({credit['granted_rao']:,} rao), {credit['spent']:,} spent")
    settled = document["settlements"]
    shown = settled["with_weight"]
    console.print(f"settlements: a weight in {len(shown):,} of "
                  f"{counted(settled['recorded'], 'settlement')} recorded")
    if shown:
        table = new_table("position", "block", "as of", "weight (ppm)", "claims (credit)")
        for row in shown:
            claims = ", ".join(f"{c['submission_id'][:16]} ({c['credit']:,})"
                               for c in row["claims"]) or "-"
            table.add_row(str(row["position"]), str(row["block"]), str(row["as_of_position"]),
                          f"{row['weight_ppm']:,}", claims)
        console.print(table)


def _counts(counts: dict[str, int]) -> str:
    """Returns "3 (QUALIFIED 2, HELD 1)": the total, then each count that is not zero."""
    parts = ", ".join(f"{name} {n:,}" for name, n in counts.items() if n and name != "total")
    return f"{counts['total']:,}" + (f" ({parts})" if parts else "")


@handle_errors
def fees(
    arena_id: str | None = typer.Option(None, "--arena", help="Only this arena's."),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Shows payments consumed and released, credits, and totals per arena."""
    with _ledger(as_of) as ledger:
        summary = ledger.fees(arena_id)
        position = ledger.guard.fold.position
    if as_json:
        emit_json(summary)
        return
    print_as_of(as_of, position)
    table = new_table("arena", "consumed rao", "released rao", "net rao", "credits rao")
    rows = [*summary["arenas"].items(), ("TOTAL", summary["total"])]
    for name, row in rows:
        table.add_row(
            name,
            f"{row['consumed_rao']:,}",
            f"{row['released_rao']:,}",
            f"{row['net_rao']:,}",
            f"{row['credits_spent_rao']:,}",
        )
    console.print(table)


@handle_errors
def replay(
    as_of: int | None = typer.Option(
        None, "--as-of", min=1, max=INT_MAX, help="Replay up to position N."
    ),
    expect: str | None = typer.Option(
        None, "--expect", help="Settlement digest to expect (64 hex characters)."
    ),
    from_bundle: str | None = typer.Option(
        None, "--from-bundle", help="Replay an exported bundle instead of the database."
    ),
    key: Path | None = typer.Option(
        None,
        "--key",
        help="With --from-bundle: the publisher's public key (KEY.pub); the bundle is first "
        "verified whole as verify-bundle does (checkpoint signature, Merkle root).",
    ),
    origin: str | None = typer.Option(
        None, "--origin", help="With --key: the checkpoint origin to expect "
        "(default: arena-ledger/<key name>)."
    ),
    in_memory: bool = typer.Option(
        False,
        "--in-memory",
        help="Keep finished submissions in memory (faster; memory grows with the ledger) "
        "instead of a temporary file (memory follows live submissions).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Rebuilds every machine from nothing and re-derives every verdict and settlement."""
    from services.build_info import throughput
    from services.replay import expected_digest

    expect = expected_digest(expect)  # before anything is read: a bad one could never match
    if key is not None and from_bundle is None:
        raise InvalidInput("--key checks a bundle's signature: give --from-bundle", path="--key")
    if origin is not None and key is None:
        raise InvalidInput("--origin names the origin --key's signature must have: give --key",
                           path="--origin")
    started, cpu = time.perf_counter(), time.process_time()
    if from_bundle is not None:
        report = _replay_bundle(from_bundle, as_of, expect, as_json, in_memory, key, origin)
    else:
        report = _replay_store(as_of, expect, as_json, in_memory)
    # Timed here, not in the report: the report is the same on every machine and source.
    timing = throughput(
        report.events, time.perf_counter() - started, time.process_time() - cpu
    )
    bundle = None if from_bundle is None else _bundle_json(from_bundle, report.bundle)
    if as_json:
        emit_json({**report.to_json(), "timing": timing, **({"bundle": bundle} if bundle else {})})
    else:
        _render_replay(report, timing, bundle)
    if not report.ok:
        raise typer.Exit(4)


def _replay_bundle(
    bundle: str,
    as_of: int | None,
    expect: str | None,
    quiet: bool,
    in_memory: bool,
    key: Path | None,
    origin: str | None,
) -> ReplayReport:
    from ledger.bundle import read_manifest
    from ledger.checkpoint import load_verifier
    from services.replay import replay_bundle

    path = Path(bundle)
    if not path.exists():
        raise InvalidInput(f"bundle {bundle} does not exist", path=bundle)
    verifier = None if key is None else load_verifier(key)
    events = read_manifest(path).events
    with _progress(events if as_of is None else min(as_of, events), quiet) as advance:
        return replay_bundle(
            path, as_of, expect=expect, progress=advance, archive_finished=not in_memory,
            verifier=verifier, origin=origin,
        )


def _bundle_json(path: str, checked: Any) -> dict[str, Any]:
    """Says what was checked of a replayed bundle beyond its lines and manifest totals."""
    if checked is None:
        return {"path": path, "signature_checked": False, "checkpoint_origin": None}
    return {**checked.to_json(), "path": path}


def _replay_store(
    as_of: int | None, expect: str | None, quiet: bool, in_memory: bool
) -> ReplayReport:
    from ledger.store import EventStore
    from services.replay import replay_store

    with EventStore(state.db_url) as store:
        store.require_initialised()
        head = store.head().position
        total = head if as_of is None else min(as_of, head)
        with _progress(total, quiet) as advance:
            return replay_store(
                store, total, expect=expect, progress=advance, archive_finished=not in_memory,
                check_read_models=as_of is None,
            )


class _progress:
    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.enabled = watched(quiet)  # as every long command's bar (cli/progress.py)
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.progress import Progress

        from cli.common import err_console

        self.bar = Progress(console=err_console, transient=True)
        self.bar.start()
        task = self.bar.add_task("replaying", total=self.total)
        step = max(1, self.total // 200)

        def advance(position: int) -> None:
            if position % step == 0 or position == self.total:
                self.bar.update(task, completed=position)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _render_replay(
    report: ReplayReport, timing: dict[str, Any], bundle: dict[str, Any] | None = None
) -> None:
    status = "OK" if report.ok else "DIVERGED"
    console.print(
        f"replay {status}: {counted(report.events, 'event')} to position "
        f"{report.last_position}, {counted(report.verdicts_checked, 'verdict')}, "
        f"{counted(report.resolutions_checked, 'resolution')}, "
        f"{counted(report.settlements_checked, 'settlement')} checked"
    )
    console.print(
        f"took {timing['seconds']:.2f} s, {timing['events_per_second']:,} events/s "
        f"({timing['cpu_seconds']:.2f} s of CPU; {timing['build']} build)",
    )
    console.print(f"head hash {report.head_hash}")
    console.print(f"settlement digest {report.settlement_digest or '-'}")
    if bundle is not None:
        console.print(
            f"bundle signature verified: checkpoint of {bundle['checkpoint_origin']}"
            if bundle["signature_checked"]
            else "bundle signature not checked (--key KEY.pub checks it, as verify-bundle does)"
        )
    if report.read_models is not None:
        console.print(f"read models {report.read_models.detail}")
    if report.divergence is not None:
        d = report.divergence
        where = f"{d.stream}, {d.type}" if d.stream else "no event: the store's head row"
        console.print(
            f"first divergence at position {d.position} ({where}): "
            f"{d.code} field {d.field}: recorded {d.recorded!r}, recomputed "
            f"{d.recomputed!r}",
        )
    elif report.expected_digest is not None and not report.ok:
        console.print(f"expected digest {report.expected_digest} differs")


def _best(best: Any) -> str:
    if not best:
        return "-"
    return f"{best['speedup']} ({str(best['submission_id'])[:12]}…)"


def register(app: typer.Typer) -> None:
    """Adds the settlement and replay commands to the main app."""
    commands: list[tuple[str, Callable[..., Any]]] = [
        ("emission-policy", emission_policy),
        ("weights", weights),
        ("settle", settle),
        ("rewards", rewards),
        ("earnings", earnings),
        ("fees", fees),
        ("replay", replay),
    ]
    for name, func in commands:
        app.command(name)(func)
