"""Reads calibrations against arenas' seals, and commissions from a calibration.

A calibration (docs/calibration.md) records the σw and σb upper bounds a host supports. An
arena whose sealed ``window_noise`` or ``boot_noise`` is below the bounds of its latest
calibration (one that measured its current engine, model and hardware) lets noise pass as
speed: ``seal_check`` names the shortfall, ``calibrate`` and ``controls`` report it, and
``commission_from_calibration`` seals at least the bounds. Nothing here boots an engine
(``services.calibration_run`` does).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ledger.records import AppendResult
from machines.calibration import CONCLUDED, CalibrationState, Shortfall, seal_shortfall
from machines.calibration import measured_digest as digest_of
from machines.projection import LedgerFold
from services.arena_ledger import ArenaLedger
from vocabulary.errors import InvalidInput, NotFound, Refused

__all__ = [
    "SealCheck",
    "commission_from_calibration",
    "concluded_calibration",
    "latest_calibration",
    "seal_check",
    "seal_warning",
]


@dataclass(frozen=True)
class SealCheck:
    """Compares an arena's sealed noise with its latest calibration's bounds."""

    arena_id: str
    calibration_id: str
    shortfalls: tuple[Shortfall, ...]

    def text(self) -> str:
        """Returns one line for a person: each sealed noise below its bound, or that none is."""
        if not self.shortfalls:
            return (f"arena {self.arena_id}: its sealed noise covers calibration "
                    f"{self.calibration_id}'s bounds")
        below = "; ".join(f"{s.field} {s.sealed} is below the bound {s.bound}"
                          for s in self.shortfalls)
        return (f"arena {self.arena_id}: sealed noise is below what calibration "
                f"{self.calibration_id} measured ({below}): noise can pass as speed; "
                f"re-commission with --from-calibration {self.calibration_id}")


def concluded_calibration(fold: LedgerFold, calibration_id: str) -> CalibrationState:
    """Returns a concluded calibration, or raises NotFound / Refused naming it."""
    found = fold.calibration(calibration_id)
    if found is None:
        raise NotFound(f"calibration {calibration_id!r} does not exist",
                       calibration_id=calibration_id)
    if found.status != CONCLUDED or found.conclusion is None:
        raise Refused(f"calibration {calibration_id} is not concluded (it has "
                      f"{len(found.measured)} of {found.windows * found.boots} windows); "
                      "nothing was written", reason="calibration_incomplete",
                      calibration_id=calibration_id)
    return found


def latest_calibration(fold: LedgerFold, arena_id: str) -> CalibrationState | None:
    """Returns the latest concluded calibration of the arena's current engine, model and
    hardware, made for the arena or for no arena (``calibrate --engine``), or None."""
    arena = fold.arena(arena_id)
    if arena is None:
        return None
    sealed = arena.commission.event
    current = digest_of(sealed.engine.model_dump(), sealed.model.model_dump(),
                        sealed.hardware.model_dump())
    found = [c for c in fold.calibrations()
             if c.arena_id in (arena_id, None) and c.status == CONCLUDED
             and c.measured_digest == current]
    return found[-1] if found else None


def seal_check(fold: LedgerFold, arena_id: str) -> SealCheck | None:
    """Returns how the arena's seal compares with its latest calibration (None: none)."""
    arena = fold.arena(arena_id)
    calibration = latest_calibration(fold, arena_id)
    if arena is None or calibration is None or calibration.conclusion is None:
        return None
    policy = arena.commission.event.policy
    short = seal_shortfall(policy.window_noise, policy.boot_noise, calibration.conclusion)
    return SealCheck(arena_id, calibration.calibration_id, tuple(short))


def seal_warning(ledger: ArenaLedger, arena_id: str) -> str | None:
    """Returns the line ``controls`` prints when the arena's seal is below its latest
    calibration's bounds, else None."""
    check = seal_check(ledger.fold, arena_id)
    return check.text() if check is not None and check.shortfalls else None


def commission_from_calibration(ledger: ArenaLedger, payload: dict[str, Any],
                                calibration_id: str) -> AppendResult:
    """Commissions with noise sealed at least at a calibration's bounds.

    The calibration must be concluded and must have measured the commission's engine, model
    and hardware (taken from the calibration when the payload leaves them out). Policy
    ``window_noise``, ``boot_noise`` and ``policy_version`` left out are the calibration's
    seal; a stated noise below the calibration's bound is refused, naming both numbers.
    """
    calibration = concluded_calibration(ledger.fold, calibration_id)
    conclusion = calibration.conclusion
    assert conclusion is not None
    document = copy.deepcopy(payload)
    target = _target(calibration)
    for name in ("engine", "model", "hardware"):
        document.setdefault(name, target[name])
    engine, model, hardware = (document.get(name) for name in ("engine", "model", "hardware"))
    if not (isinstance(engine, dict) and isinstance(model, dict) and isinstance(hardware, dict)
            ) or digest_of(engine, model, hardware) != calibration.measured_digest:
        raise InvalidInput(
            f"the commission's engine, model and hardware are not what calibration "
            f"{calibration_id} measured; calibrate this engine, or leave them out to take the "
            "calibration's", path="$.engine", calibration_id=calibration_id)
    policy = document.get("policy")
    if not isinstance(policy, dict):
        raise InvalidInput("the commission needs a policy object", path="$.policy")
    for name, bound in (("window_noise", conclusion.window_noise_bound),
                        ("boot_noise", conclusion.boot_noise_bound)):
        stated = policy.get(name, bound)
        if not isinstance(stated, str) or _below(stated, bound):
            raise InvalidInput(
                f"policy {name} {stated} is below calibration {calibration_id}'s bound "
                f"{bound}; seal at least {bound} (its seal is "
                f"{getattr(conclusion, 'seal_' + name)}) or leave it out",
                path=f"$.policy.{name}", sealed=stated, bound=bound)
    missing = {"policy_version", "window_noise", "boot_noise"} - set(policy)
    if missing and conclusion.seal_policy_version is None:
        raise Refused(
            f"calibration {calibration_id} bounds (window_noise {conclusion.window_noise_bound}, "
            f"boot_noise {conclusion.boot_noise_bound}) are above what any policy version "
            "allows, so it cannot fill the policy's " + ", ".join(sorted(missing)) +
            "; nothing was written", reason="calibration_noise_unsealable")
    policy.setdefault("policy_version", conclusion.seal_policy_version)
    policy.setdefault("window_noise", conclusion.seal_window_noise)
    policy.setdefault("boot_noise", conclusion.seal_boot_noise)
    return ledger.commission(document)


def _below(stated: str, bound: str) -> bool:
    try:
        return Decimal(stated) < Decimal(bound)
    except ArithmeticError:
        return True  # not a number: the schema names it; below is the safe answer here


def _target(calibration: CalibrationState) -> dict[str, Any]:
    """Returns the engine, model and hardware the calibration measured, as recorded."""
    started = calibration.started
    return {name: getattr(started, name).model_dump() for name in ("engine", "model", "hardware")}
