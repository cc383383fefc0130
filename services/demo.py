"""Runs the main job end to end on the CPU reference engine: the `arena-ledger demo` command.

One demo session commissions a reference arena on the torch engine, registers controls,
takes several miners' submissions through intake (paid, credit-paid, a reused payment that
is rejected, a duplicate of a failed one), evaluates the admitted ones for real, settles,
signs a checkpoint, replays the whole ledger from nothing and verifies its chain. Every
step goes through the same library calls the CLI uses. A second run on the same database
appends a new session (a new arena, later blocks) instead of failing or duplicating.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine_bridge.deltas import registered
from engine_bridge.extra import require_engine_extra
from engine_bridge.protocol import Engine
from ledger import migrate
from ledger.checkpoint import load_signer, public_key_path, sign_tree, write_key_files
from machines.calibration import measured_digest
from machines.settlement_rules import settlement_payload
from services.arena_ledger import CONTROL_HOTKEY, ArenaLedger
from services.calibration import commission_from_calibration
from services.calibration_run import calibrate
from services.evaluation import controls_at, evaluate, make_engine, run_controls
from services.replay import replay_events
from vocabulary.codec import digest
from vocabulary.errors import InvalidInput

if TYPE_CHECKING:
    from ledger.note import Signer

__all__ = ["DemoSummary", "credits_by_payer", "demo_commission", "run_demo",
           "session_submissions"]

Notify = Callable[[str, dict[str, Any]], None]

#: Blocks between two demo sessions on one database (keeps every session's chain time apart).
session_blocks = 100_000
#: Evaluation fee of the demo arena, in rao (0.1 TAO).
demo_fee_rao = 100_000_000
#: The demo arena's share of emissions, in parts per million (the rest is burned).
demo_emission_share_ppm = 600_000
#: The A/A calibration the demo seals its noise from: windows per boot round, boot rounds
#: (each boots both orientations' lanes afresh) and the bounds' one-sided confidence.
calibration_windows = 4
calibration_boots = 6
calibration_confidence = "0.95"
#: A later session on the same database reuses a calibration of the same engine no older
#: than this (the host, not the session, is what it measures).
calibration_reuse_blocks = 2 * session_blocks
#: settlement-rules.v2: an arena settles only on a complete control run at most this old.
control_max_age_blocks = 7_200

_CONTROLS = (  # (delta, kind, expected verdict, expected reason, listed audit control)
    ("faithful", "identity", "FAIL", None, False),
    ("wrong_mlp", "wrong_mlp", "FAIL", "slot_audit_failed", True),
    ("skip_mlp", "skip_mlp", "FAIL", "slot_audit_failed", True),
    ("engine_kill", "engine_kill", "NO_DECISION", "engine_killed", False),
)
#: (hotkey, delta, its parameters, how the fee is paid); none is a control delta.
_MINERS: tuple[tuple[str, str, dict[str, str], str], ...] = (
    ("5Alice", "fast_mlp", {}, "payment"),
    ("5Bob", "fused_gate_up", {}, "credit"),
    ("5Carol", "scaled", {"epsilon": "0.01"}, "payment"),
)


@dataclass
class DemoSummary:
    """Is what a person reads at the end: verdicts, controls, fees, weights, digests."""

    session: int
    arena_id: str
    #: This session's own submissions and control runs (never another session's).
    submissions: list[dict[str, Any]] = field(default_factory=list)
    controls: list[dict[str, Any]] = field(default_factory=list)
    #: The arena's fees over every session; ``credits`` splits their credits by payer.
    fees: dict[str, Any] = field(default_factory=dict)
    credits: dict[str, int] = field(default_factory=dict)
    #: The validator's key files: the public one checks the checkpoint (``verify-bundle
    #: --key``, ``replay --key``).
    keys: dict[str, str] = field(default_factory=dict)
    weights_ppm: dict[str, int] = field(default_factory=dict)
    #: The A/A calibration the arena's noise seal came from (``reused``: an earlier one).
    calibration: dict[str, Any] = field(default_factory=dict)
    #: settlement-rules.v2's suspended arenas (their pool went to the burn hotkey) and why.
    suspensions: list[dict[str, Any]] = field(default_factory=list)
    settlement_digest: str = ""
    checkpoint: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Tells whether the replay reproduced the settlement and the chain verified."""
        return (
            bool(self.replay.get("ok"))
            and bool(self.verify.get("ok"))
            and (self.replay.get("settlement_digest") == self.settlement_digest)
        )

    def to_json(self) -> dict[str, Any]:
        """Returns the summary as a JSON-ready object."""
        return {
            "ok": self.ok,
            "session": self.session,
            "arena_id": self.arena_id,
            "submissions": self.submissions,
            "controls": self.controls,
            "fees": self.fees,
            "credits": self.credits,
            "keys": self.keys,
            "weights_ppm": self.weights_ppm,
            "calibration": self.calibration,
            "suspensions": self.suspensions,
            "settlement_digest": self.settlement_digest,
            "checkpoint": self.checkpoint,
            "replay": self.replay,
            "verify": self.verify,
        }


def demo_commission(arena_id: str, block: int) -> dict[str, Any]:
    """Returns the reference arena's commission: torch engine, sealed paired-windows policy."""
    listed = sorted(registered(d).digest for d, _, _, _, is_listed in _CONTROLS if is_listed)
    return {
        "arena_id": arena_id,
        "commissioned_block": block,
        "model": {"name": "arena-ledger/reference-llama-1m", "revision": "seed-20250101"},
        "hardware": {"gpu": "cpu", "count": 1},
        "engine": {
            "runtime": "torch-reference",
            "runtime_version": "torch-2.13.0",
            "image_digest": "sha256:" + digest("arena-ledger.demo-image", {"arena": "reference"}),
            # CPU time is the steadier cost on a shared CPU host; GPU hosts use wall time.
            "engine_config": {"cost_clock": "thread_time"},
            "engine_env": {},
        },
        # Noise is left out: the calibration seals it (commission_from_calibration).
        "policy": {
            "policy_version": "paired-windows.v2",
            "windows": 4,
            "z": {"3": "2", "4": "1.5"},
            "noise_guard_alpha": "0.001",
            "required_gain": "0",
            "futility_margin": "0.05",
            "audit": {
                "bar": "0.99999",
                "near_miss_band": "0.03",
                "near_miss_rate_max": "0.01",
                "min_calls": 8,
            },
            "reward_margin": "0.015",
            "audit_control_delta_digests": listed,
            "sla_blocks": 500_000,
        },
        "fee_rao": demo_fee_rao,
        "incumbent_digest": digest("arena-ledger.delta", {"stock": "reference-mlp"}),
        "emission_share_ppm": demo_emission_share_ppm,
    }


#: The demo's arena; every session re-commissions it (attempts stay bound to their commission).
demo_arena_id = "reference"


def _session(ledger: ArenaLedger) -> int:
    arena = ledger.fold.arena(demo_arena_id)
    return 1 if arena is None else len(arena.commissions) + 1


def _arrival(
    arena_id: str,
    hotkey: str,
    delta: str,
    block: int,
    index: int,
    payment_ref: str | None,
    content_hash: str | None = None,
    params: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec = registered(delta, **(params or {}))
    arrival: dict[str, Any] = {
        "arena_id": arena_id,
        "miner_hotkey": hotkey,
        "content_hash": content_hash
        or digest("arena-ledger.demo-content", {"hotkey": hotkey, "delta": delta, "b": block}),
        "delta_digest": spec.digest,
        "target": "model.layers.*.mlp",
        "arrival": {"block": block, "event_index": index, "event_subindex": 0},
    }
    if payment_ref is not None:
        arrival["payment_ref"] = payment_ref
    return arrival


def _intake_miners(
    ledger: ArenaLedger, arena_id: str, base: int, miners: int, notify: Notify, own: list[str]
) -> list[tuple[str, str, str, Any]]:
    """Takes the miners' submissions through intake; returns (sid, hotkey, delta, spec) of
    the admitted ones and adds every submission id, rejected ones too, to ``own``."""
    admitted = []
    tag = f"{arena_id}-{base}"
    for index, (hotkey, delta, params, paid_by) in enumerate(_MINERS[:miners], start=1):
        ref = f"pay-{tag}-{index}" if paid_by == "payment" else None
        if paid_by == "credit":
            ledger.grant_credit(f"cr-{tag}-{index}", hotkey, demo_fee_rao, "demo grant")
        arrival = _arrival(arena_id, hotkey, delta, base + 10, index, ref, params=params)
        outcome = ledger.intake(arrival, payment_amount_rao=demo_fee_rao if ref else None)
        notify("intake", {"hotkey": hotkey, "delta": delta, **outcome.to_json()})
        own.append(outcome.submission_id)
        if outcome.admitted:
            admitted.append((outcome.submission_id, hotkey, delta, registered(delta, **params)))
    if miners == 0:
        return admitted
    # Dave reuses the first paid submission's payment: refused, nothing consumed twice.
    reused = ledger.intake(
        _arrival(arena_id, "5Dave", "slow", base + 11, 1, f"pay-{tag}-1"),
        payment_amount_rao=demo_fee_rao,
    )
    notify("intake", {"hotkey": "5Dave", "delta": "slow", **reused.to_json()})
    own.append(reused.submission_id)
    return admitted


def _duplicate_of_failed(
    ledger: ArenaLedger, arena_id: str, base: int, notify: Notify, own: list[str]
) -> None:
    """Submits again the content of one of ``own`` that FAILED: refused as a duplicate."""
    fold = ledger.fold
    subs = [fold.submission(sid) for sid in own]
    failed = [sub for sub in subs if sub is not None and sub.status == "FAILED"]
    if not failed:
        return
    first = failed[0]
    arrival = _arrival(
        arena_id,
        "5Erin",
        "fast_mlp",
        base + 30,
        1,
        f"pay-{arena_id}-{base}-dup",
        content_hash=first.content_hash,
    )
    arrival["delta_digest"] = first.delta_digest
    outcome = ledger.intake(arrival, payment_amount_rao=demo_fee_rao)
    notify("intake", {"hotkey": "5Erin", "delta": f"copy of {first.hotkey}'s", **outcome.to_json()})
    own.append(outcome.submission_id)


def run_demo(
    url: str,
    workdir: Path,
    *,
    miners: int = len(_MINERS),
    controls: bool = True,
    notify: Notify | None = None,
    engine: Engine | None = None,
) -> DemoSummary:
    """Runs one demo session on the ledger at ``url``; returns the summary.

    Nothing is written before two checks: the engine extra is installed (EngineUnavailable
    names it otherwise), and the validator key in ``workdir`` is made (or read), a workdir
    that cannot hold it being refused (InvalidInput naming ``workdir``). The summary reports
    this session's own submissions and control runs, found by the ids it recorded: an earlier
    session's, an interrupted one's pending runs or a demo running at the same time are not
    counted. ``engine`` replaces the torch reference engine (a FakeEngine in tests; its
    caller shuts it down).
    """
    say = notify or (lambda stage, info: None)
    if engine is None:
        require_engine_extra("the demo")
    signer = _validator_signer(workdir)
    migrate.upgrade(url)
    with ArenaLedger(url, actor="demo") as ledger:
        session = _session(ledger)
        arena_id, base = demo_arena_id, session * session_blocks
        summary = DemoSummary(session, arena_id, keys=_key_paths(workdir))
        own: list[str] = []
        booted = engine or make_engine(
            "torch-reference", engine_config={"cost_clock": "thread_time"}
        )
        try:
            commission = demo_commission(arena_id, base)
            summary.calibration = _calibration(ledger, booted, commission, base, say)
            commission_from_calibration(ledger, commission,
                                        summary.calibration["calibration_id"])
            sealed = ledger.fold.arena(arena_id)
            assert sealed is not None  # just commissioned
            policy = sealed.commission.event.policy
            say("commissioned", {"arena_id": arena_id, "block": base, "session": session,
                                 "policy_version": policy.policy_version,
                                 "window_noise": policy.window_noise,
                                 "boot_noise": policy.boot_noise})
            _emission_policy(ledger)
            if session == 1:
                _register_controls(ledger, arena_id)
            if controls:
                run_controls(ledger, booted, arena_id=arena_id, block=base + 5, progress=say)
            admitted = _intake_miners(ledger, arena_id, base, miners, say, own)
            for sid, hotkey, delta, spec in admitted:
                say("evaluate", {"hotkey": hotkey, "delta": delta, "submission_id": sid})
                evaluate(
                    ledger,
                    booted,
                    submission_id=sid,
                    attempt_id=f"a-{sid[:12]}-{base}",
                    block=base + 20,
                    candidate=spec,
                    progress=say,
                )
        finally:
            if engine is None:
                booted.shutdown()
        _duplicate_of_failed(ledger, arena_id, base, say, own)
        summary.controls = controls_at(ledger, arena_id, base + 5) if controls else []
        summary.submissions = session_submissions(ledger, arena_id, own)
        _finish(ledger, summary, signer, base, say)
    return summary


def _calibration(ledger: ArenaLedger, engine: Engine, commission: dict[str, Any], block: int,
                 say: Notify) -> dict[str, Any]:
    """Returns the conclusion of an A/A calibration of the demo's engine: a recent one of the
    same engine, model and hardware on this ledger, else one run now (before the commission,
    which seals its noise from it)."""
    target = {name: commission[name] for name in ("engine", "model", "hardware")}
    wanted = measured_digest(target["engine"], target["model"], target["hardware"])
    for state in reversed(ledger.fold.calibrations()):
        done = state.conclusion
        if (done is not None and state.measured_digest == wanted
                and block - state.block <= calibration_reuse_blocks):
            conclusion = {"calibration_id": state.calibration_id, **done.model_dump(),
                          "reused": True}
            say("calibrated", conclusion)
            return conclusion
    say("calibrate", {"windows": calibration_windows, "boots": calibration_boots})
    report = calibrate(
        ledger, engine, calibration_id=f"cal-demo-{block}", arena_id=None,
        windows=calibration_windows, boots=calibration_boots,
        confidence=calibration_confidence, block=block, validator_hotkey="5DemoValidator",
        target=target, progress=lambda stage, info: say(f"calibration_{stage}", info),
    )
    conclusion = {"calibration_id": report.calibration_id, **report.conclusion,
                  "reused": False}
    say("calibrated", conclusion)
    return conclusion


def _emission_policy(ledger: ArenaLedger) -> None:
    """Sets the settlement-rules.v2 emission policy unless it is already the latest (a
    ledger an earlier release's demo wrote has a v1 one): controls gate the settlement."""
    latest = ledger.guard.emission_policy
    if latest is not None and latest.rules_version == "settlement-rules.v2":
        return
    ledger.set_emission_policy(7_200, "5BurnBurnBurn", "5DemoValidator",
                               rules_version="settlement-rules.v2",
                               control_max_age_blocks=control_max_age_blocks)


def session_submissions(
    ledger: ArenaLedger, arena_id: str, own: list[str]
) -> list[dict[str, Any]]:
    """Returns the submission rows of ``own`` (a session's submission ids), in arrival order.

    By id, not by block: a demo running at the same time has later blocks, and its
    submissions would otherwise be listed, in flight, in this session's summary.
    """
    mine = set(own)
    return [row for row in ledger.submissions(arena_id) if row["submission_id"] in mine]


def credits_by_payer(ledger: ArenaLedger, arena_id: str) -> dict[str, int]:
    """Splits the arena's spent credits (``fees``' ``credits_spent_rao``) by who they paid
    for: the validator's control runs (``CONTROL_HOTKEY``) and the miners. Returns
    ``{"control_runs", "control_runs_rao", "miners", "miners_rao"}``.

    A credit counts as the fees do: spent on a submission of the arena, for that
    submission's fee.
    """
    split = {"control_runs": 0, "control_runs_rao": 0, "miners": 0, "miners_rao": 0}
    fold = ledger.fold
    for credit in fold.credits():
        sub = None if credit.submission_id is None else fold.submission(credit.submission_id)
        if sub is None or sub.fee is None or sub.arena_id != arena_id:
            continue
        payer = "control_runs" if sub.hotkey == CONTROL_HOTKEY else "miners"
        split[payer] += 1
        split[f"{payer}_rao"] += sub.fee.amount_rao
    return split


def _key_paths(workdir: Path) -> dict[str, str]:
    key = workdir / "validator.key"
    return {"private": str(key), "public": str(public_key_path(key))}


def _validator_signer(workdir: Path) -> Signer:
    """Returns the demo validator's signer, its key made in ``workdir`` when missing.

    Each refusal names ``workdir`` (the CLI's ``--workdir``) and what is wrong with it.
    """
    key = workdir / "validator.key"
    try:
        if workdir.exists() and not workdir.is_dir():
            raise InvalidInput(
                f"{workdir} exists and is not a directory (the demo keeps its validator key "
                "in it)"
            )
        workdir.mkdir(parents=True, exist_ok=True)
        if not key.exists():
            write_key_files("demo.arena-ledger.local", key)
        return load_signer(key)
    except OSError as exc:
        raise InvalidInput(
            f"workdir: cannot use {workdir} for the demo's validator key: "
            f"{exc.strerror or exc}",
            path="workdir",
        ) from None
    except InvalidInput as exc:
        raise InvalidInput(f"workdir: {exc.message}", path="workdir") from None


def _register_controls(ledger: ArenaLedger, arena_id: str) -> None:
    for delta, kind, verdict, reason, _ in _CONTROLS:
        control: dict[str, Any] = {
            "control_id": delta.replace("_", "-"),
            "kind": kind,
            "delta_digest": registered(delta).digest,
            "expected_verdict": verdict,
        }
        if reason is not None:
            control["expected_reason"] = reason
        ledger.register_control(arena_id, control)


def _finish(
    ledger: ArenaLedger, summary: DemoSummary, signer: Signer, base: int, say: Notify
) -> None:
    summary.fees = ledger.fees(summary.arena_id)
    summary.credits = credits_by_payer(ledger, summary.arena_id)
    settlement, _ = ledger.settle(base + 1_000)
    payload = settlement_payload(settlement)
    summary.weights_ppm = dict(payload["weights_ppm"])
    summary.suspensions = list(payload.get("suspensions", []))
    summary.settlement_digest = payload["settlement_digest"]
    say("settled", {"digest": summary.settlement_digest})
    summary.checkpoint = sign_tree(ledger.store, signer).to_json()
    say("checkpoint", {"tree_size": summary.checkpoint["tree_size"]})
    report = replay_events(ledger.store.read_all())
    summary.replay = report.to_json()
    summary.verify = ledger.store.verify().to_json()
    say("replayed", summary.replay)
