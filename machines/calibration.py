"""Folds ``calibration-<calibration_id>`` streams and derives the A/A noise estimates.

A calibration runs stock against stock (A/A) on the engine an arena seals: ``boots`` boot
rounds, each ``windows`` windows laid out like an attempt's (orientation 1 is windows
1..floor(W/2), orientation 2 the rest, lanes booted fresh per orientation and round). Each
window gives y = ln(cost of the lane in the candidate's role / cost of the lane in stock's
role), i.e. ln(A/B) in orientation 1 and ln(B/A) in orientation 2, as a speed window's
ratio would be. A group is one (boot round, orientation): one pair of lane boots.

- σw² = pooled within-group variance SS_w / (N − G), N windows in G = 2·boots groups;
- σb² = SS_b / (G − 2) − σw² · (1/n1 + 1/n2) / 2, floored at 0, where SS_b is the spread of
  the group means around their orientation's mean (so a lane that is faster by itself, which
  shifts the two orientations in opposite directions, cancels as it does in the speedup) and
  n1, n2 are the windows per group of each orientation;
- one-sided upper bounds at the confidence c: σ_U = sqrt(SS / χ²_{1−c}(dof)), with the
  chi-square quantile of ``machines.chi_square``. σb's bound bounds the whole spread of the
  group means, σw²/n included: it errs high, never low;
- the seal they support: each bound rounded up to 4 places (σw at least 0.0001, since v2
  needs σw > 0), under ``paired-windows.v1`` when both are at most 0.02, else
  ``paired-windows.v2`` when both are at most 0.25, else none.

Everything is computed in the rules' one 34-digit context (``machines.decimal_context``);
CalibrationConcluded is accepted only when it equals ``derive_conclusion`` (docs/calibration.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, NamedTuple

from machines.chi_square import chi2_quantile
from machines.decimal_context import CONTEXT
from machines.refusal import ABSENT, Refusal
from machines.table import Guard, Table, evolve
from vocabulary.codec import canonical_decimal, digest, fixed6
from vocabulary.events import (
    CalibrationConcluded,
    CalibrationStarted,
    CalibrationWindowMeasured,
    Event,
)

__all__ = [
    "CALIBRATION_RULES",
    "CALIBRATION_TABLE",
    "CONCLUDED",
    "MEASURING",
    "TARGET_DOMAIN",
    "CalibrationState",
    "NoiseEstimate",
    "Shortfall",
    "derive_conclusion",
    "estimate",
    "fold_calibration",
    "log_ratio",
    "measured_digest",
    "plan",
    "seal_of",
    "seal_shortfall",
    "step",
]

CALIBRATION_RULES = "calibration.v1"
TARGET_DOMAIN = "arena-ledger.calibration-target"
MEASURING = "MEASURING"
CONCLUDED = "CONCLUDED"

_C = CONTEXT
_ZERO = Decimal(0)
_ONE = Decimal(1)
_TWO = Decimal(2)
_SEAL_STEP = Decimal("0.0001")
_SIX = Decimal("0.000001")
#: The largest seal each policy version accepts (v2 is added beside v1, never instead).
_SEAL_MAX = (("paired-windows.v1", Decimal("0.02")), ("paired-windows.v2", Decimal("0.25")))


class NoiseEstimate(NamedTuple):
    """Is what a calibration's windows say, at full precision (34 digits)."""

    windows: int
    window_noise: Decimal
    boot_noise: Decimal
    window_noise_bound: Decimal
    boot_noise_bound: Decimal
    window_dof: int
    boot_dof: int


class Shortfall(NamedTuple):
    """Names a sealed noise below the bound a calibration supports."""

    field: str
    sealed: str
    bound: str


@dataclass(frozen=True)
class CalibrationState:
    """Is one calibration: its plan, the windows measured so far, and its conclusion."""

    calibration_id: str
    arena_id: str | None
    measured_digest: str
    block: int
    windows: int
    boots: int
    confidence: str
    #: The opening event: the engine, model and hardware measured, as recorded.
    started: CalibrationStarted
    #: (boot, window, orientation, lane A cost ns, lane B cost ns) in measured order.
    measured: tuple[tuple[int, int, int, int, int], ...] = ()
    conclusion: CalibrationConcluded | None = None
    status: str = MEASURING


def measured_digest(engine: Mapping[str, Any], model: Mapping[str, Any],
                    hardware: Mapping[str, Any]) -> str:
    """Returns the digest of what a calibration measures: engine, model and hardware."""
    return digest(TARGET_DOMAIN, {"engine": dict(engine), "hardware": dict(hardware),
                                  "model": dict(model)})


def plan(windows: int, boots: int) -> list[tuple[int, int, int]]:
    """Returns every (boot, window, orientation) of a calibration, in measuring order."""
    return [(boot, window, 1 if window <= windows // 2 else 2)
            for boot in range(1, boots + 1) for window in range(1, windows + 1)]


def log_ratio(orientation: int, lane_a_cost_ns: int, lane_b_cost_ns: int) -> Decimal:
    """Returns y = ln(candidate-role lane cost / stock-role lane cost) of one A/A window."""
    a, b = Decimal(lane_a_cost_ns), Decimal(lane_b_cost_ns)
    ratio = _C.divide(a, b) if orientation == 1 else _C.divide(b, a)
    return _C.ln(ratio)


def _mean(values: Sequence[Decimal]) -> Decimal:
    total = _ZERO
    for value in values:
        total = _C.add(total, value)
    return _C.divide(total, Decimal(len(values)))


def _squares(values: Sequence[Decimal], centre: Decimal) -> Decimal:
    total = _ZERO
    for value in values:
        gap = _C.subtract(value, centre)
        total = _C.add(total, _C.multiply(gap, gap))
    return total


def estimate(groups: Mapping[tuple[int, int], Sequence[Decimal]],
             confidence: Decimal) -> NoiseEstimate:
    """Returns σw, σb and their upper bounds from y values grouped by (boot, orientation).

    Every boot round must hold both orientations with the same count per orientation, at
    least two boot rounds, and more windows than groups (else a ValueError).
    """
    boots = sorted({boot for boot, _ in groups})
    sizes = {o: {len(groups[b, o]) for b in boots if (b, o) in groups} for o in (1, 2)}
    if (len(boots) < 2 or any(len(s) != 1 or 0 in s for s in sizes.values())
            or len(groups) != 2 * len(boots)):
        raise ValueError("a calibration needs >= 2 boot rounds, each with both orientations "
                         "and the same windows per orientation")
    n1, n2 = sizes[1].pop(), sizes[2].pop()
    count = len(boots) * (n1 + n2)
    window_dof, boot_dof = count - len(groups), len(groups) - 2
    if window_dof < 1:
        raise ValueError("a calibration needs more windows than lane boots")
    means = {key: _mean(values) for key, values in groups.items()}
    ss_w = _ZERO
    for key, values in groups.items():
        ss_w = _C.add(ss_w, _squares(values, means[key]))
    ss_b = _ZERO
    for o in (1, 2):
        of_o = [means[b, o] for b in boots]
        ss_b = _C.add(ss_b, _squares(of_o, _mean(of_o)))
    var_w = _C.divide(ss_w, Decimal(window_dof))
    shrink = _C.divide(_C.add(_C.divide(_ONE, Decimal(n1)), _C.divide(_ONE, Decimal(n2))), _TWO)
    var_b = max(_ZERO, _C.subtract(_C.divide(ss_b, Decimal(boot_dof)),
                                   _C.multiply(var_w, shrink)))
    alpha = _C.subtract(_ONE, confidence)
    return NoiseEstimate(
        windows=count,
        window_noise=_C.sqrt(var_w),
        boot_noise=_C.sqrt(var_b),
        window_noise_bound=_C.sqrt(_C.divide(ss_w, chi2_quantile(alpha, window_dof))),
        boot_noise_bound=_C.sqrt(_C.divide(ss_b, chi2_quantile(alpha, boot_dof))),
        window_dof=window_dof,
        boot_dof=boot_dof,
    )


def _up(value: Decimal, step: Decimal) -> Decimal:
    return value.quantize(step, rounding=ROUND_CEILING, context=_C)


def seal_of(window_bound: Decimal, boot_bound: Decimal) -> tuple[str, str, str | None]:
    """Returns (window_noise, boot_noise, policy_version) the bounds support as a seal."""
    window = max(_up(window_bound, _SEAL_STEP), _SEAL_STEP)
    boot = _up(boot_bound, _SEAL_STEP)
    version = next((name for name, top in _SEAL_MAX if window <= top and boot <= top), None)
    return canonical_decimal(window), canonical_decimal(boot), version


def _groups(state: CalibrationState) -> dict[tuple[int, int], list[Decimal]]:
    groups: dict[tuple[int, int], list[Decimal]] = {}
    for boot, _, orientation, lane_a, lane_b in state.measured:
        groups.setdefault((boot, orientation), []).append(log_ratio(orientation, lane_a, lane_b))
    return groups


def derive_conclusion(state: CalibrationState) -> dict[str, Any] | None:
    """Returns what CalibrationConcluded must carry (less ``concluded_block``), or None
    while planned windows are still missing."""
    if len(state.measured) != state.windows * state.boots:
        return None
    found = estimate(_groups(state), Decimal(state.confidence))
    window_bound = _up(found.window_noise_bound, _SIX)
    boot_bound = _up(found.boot_noise_bound, _SIX)
    seal_window, seal_boot, version = seal_of(found.window_noise_bound, found.boot_noise_bound)
    return {
        "window_noise": fixed6(found.window_noise),
        "boot_noise": fixed6(found.boot_noise),
        "window_noise_bound": fixed6(window_bound),
        "boot_noise_bound": fixed6(boot_bound),
        "window_dof": found.window_dof,
        "boot_dof": found.boot_dof,
        "seal_window_noise": seal_window,
        "seal_boot_noise": seal_boot,
        "seal_policy_version": version,
        "rules_version": CALIBRATION_RULES,
    }


def seal_shortfall(window_noise: str, boot_noise: str,
                   conclusion: CalibrationConcluded) -> list[Shortfall]:
    """Returns each sealed noise that is below the bound the calibration supports."""
    found = []
    for name, sealed, bound in (("window_noise", window_noise, conclusion.window_noise_bound),
                                ("boot_noise", boot_noise, conclusion.boot_noise_bound)):
        if Decimal(sealed) < Decimal(bound):
            found.append(Shortfall(name, sealed, bound))
    return found


# --- the machine ---------------------------------------------------------------------------


def _measure(state: CalibrationState, event: CalibrationWindowMeasured,
             _: None) -> CalibrationState | Refusal:
    planned = plan(state.windows, state.boots)
    done = len(state.measured)
    got = (event.boot, event.window, event.orientation)
    if done == len(planned) or got != planned[done]:
        expected = "none: every planned window is measured" if done == len(planned) else (
            "boot {}, window {}, orientation {}".format(*planned[done]))
        return CALIBRATION_TABLE.refuse(
            state.status, event.event_type, "calibration_window_out_of_order",
            f"(boot, window, orientation): expected {expected}, got {got}",
        )
    row = (*got, event.lane_a_cost_ns, event.lane_b_cost_ns)
    return evolve(state, measured=(*state.measured, row))


def _conclude(state: CalibrationState, event: CalibrationConcluded,
              _: None) -> CalibrationState | Refusal:
    derived = derive_conclusion(state)
    if derived is None:
        return CALIBRATION_TABLE.refuse(
            state.status, event.event_type, "calibration_incomplete",
            f"{len(state.measured)} of {state.windows * state.boots} windows measured",
        )
    recorded = event.model_dump()
    for name, value in derived.items():
        if recorded[name] != value:
            return CALIBRATION_TABLE.refuse(
                state.status, event.event_type, "calibration_mismatch",
                f"{name}: derived {value!r}, recorded {recorded[name]!r}",
            )
    if event.concluded_block < state.block:
        return CALIBRATION_TABLE.refuse(
            state.status, event.event_type, "calibration_mismatch",
            f"concluded_block: {event.concluded_block} is before the start's {state.block}",
        )
    return evolve(state, conclusion=event, status=CONCLUDED)


#: The calibration machine (MEASURING → CONCLUDED).
CALIBRATION_TABLE: Table[CalibrationState, None] = Table(
    machine="calibration",
    states=(MEASURING, CONCLUDED),
    initial=MEASURING,
    opening="CalibrationStarted",
    terminals=frozenset({CONCLUDED}),
    rules={
        (MEASURING, "CalibrationWindowMeasured"): Guard((MEASURING,), _measure,
                                                        "the next planned window"),
        (MEASURING, "CalibrationConcluded"): Guard((CONCLUDED,), _conclude,
                                                   "every window measured; equals the derived"),
    },
    refusals={(MEASURING, "CalibrationStarted"): "stream_already_started"},
)


def _start(event: CalibrationStarted, arena_digest: str | None) -> CalibrationState | Refusal:
    own = measured_digest(event.engine.model_dump(), event.model.model_dump(),
                          event.hardware.model_dump())
    if event.measured_digest != own:
        return CALIBRATION_TABLE.refuse(
            ABSENT, event.event_type, "calibration_target_mismatch",
            f"measured_digest: recorded {event.measured_digest[:16]}, its engine, model and "
            f"hardware give {own[:16]}",
        )
    if event.arena_id is not None and arena_digest != own:
        return CALIBRATION_TABLE.refuse(
            ABSENT, event.event_type, "calibration_target_mismatch",
            f"measured_digest: arena {event.arena_id}'s current commission measures "
            f"{(arena_digest or '')[:16]}, the calibration {own[:16]}",
        )
    return CalibrationState(
        event.calibration_id, event.arena_id, own, event.block, event.windows, event.boots,
        event.confidence, event,
    )


def step(state: CalibrationState | None, event: Event,
         arena_digest: str | None = None) -> CalibrationState | Refusal:
    """Returns the calibration after ``event``, or the refusal of it.

    ``arena_digest`` is the ``measured_digest`` of the current commission of the arena a
    CalibrationStarted names (None when that arena is not commissioned).
    """
    if state is None:
        if isinstance(event, CalibrationStarted):
            return _start(event, arena_digest)
        return CALIBRATION_TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    return CALIBRATION_TABLE.step(state, event, None)


def fold_calibration(events: Sequence[Event],
                     arena_digest: str | None = None) -> CalibrationState | None:
    """Folds a whole calibration stream; refused events leave the state unchanged."""
    state: CalibrationState | None = None
    for event in events:
        result = step(state, event, arena_digest)
        state = state if isinstance(result, Refusal) else result
    return state
