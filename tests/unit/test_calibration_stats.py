"""The A/A calibration arithmetic (docs/calibration.md): the worked example to the digit,
checked against an independent float computation, lane bias, boot spread and the bounds."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from machines import samples
from machines.calibration import (
    CalibrationState,
    derive_conclusion,
    estimate,
    log_ratio,
    seal_of,
    step,
)
from machines.refusal import Refusal
from vocabulary.events import CalibrationConcluded

BILLION = 1_000_000_000


def _state(costs: tuple[tuple[int, int], ...], windows: int = 4, boots: int = 2,
           confidence: str = "0.95") -> CalibrationState:
    state: CalibrationState | Refusal = step(None, samples.calibration_started(
        windows=windows, boots=boots, confidence=confidence))
    for event in samples.calibration_windows(costs, windows):
        assert isinstance(state, CalibrationState)
        state = step(state, event)
    assert isinstance(state, CalibrationState)
    return state


def _groups(costs: tuple[tuple[int, int], ...], windows: int = 4
            ) -> dict[tuple[int, int], list[Decimal]]:
    groups: dict[tuple[int, int], list[Decimal]] = {}
    for event in samples.calibration_windows(costs, windows):
        key = (event.boot, event.orientation)
        groups.setdefault(key, []).append(
            log_ratio(event.orientation, event.lane_a_cost_ns, event.lane_b_cost_ns))
    return groups


def _chi2_lower(alpha: float, dof: int) -> float:
    """The lower alpha quantile for dof 2 or 4, by bisection of the closed-form CDF."""
    def cdf(x: float) -> float:
        return 1 - math.exp(-x / 2) * (1 + (x / 2 if dof == 4 else 0))
    low, high = 0.0, 50.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < alpha else (low, middle)
    return high


def _float_estimate(costs: tuple[tuple[int, int], ...], windows: int = 4,
                    confidence: float = 0.95) -> tuple[float, float, float, float]:
    """σw, σb and their bounds in floats, from the formulas, not from the module."""
    groups: dict[tuple[int, int], list[float]] = {}
    for index, (lane_a, lane_b) in enumerate(costs):
        window = index % windows + 1
        orientation = 1 if window <= windows // 2 else 2
        y = math.log(lane_a / lane_b) if orientation == 1 else math.log(lane_b / lane_a)
        groups.setdefault((index // windows + 1, orientation), []).append(y)
    means = {key: sum(v) / len(v) for key, v in groups.items()}
    ss_w = sum((y - means[key]) ** 2 for key, v in groups.items() for y in v)
    boots = sorted({b for b, _ in groups})
    ss_b = 0.0
    for o in (1, 2):
        centre = sum(means[b, o] for b in boots) / len(boots)
        ss_b += sum((means[b, o] - centre) ** 2 for b in boots)
    dof_w, dof_b = len(costs) - len(groups), len(groups) - 2
    n1, n2 = windows // 2, windows - windows // 2
    var_w = ss_w / dof_w
    var_b = max(0.0, ss_b / dof_b - var_w * (1 / n1 + 1 / n2) / 2)
    alpha = 1 - confidence
    return (math.sqrt(var_w), math.sqrt(var_b), math.sqrt(ss_w / _chi2_lower(alpha, dof_w)),
            math.sqrt(ss_b / _chi2_lower(alpha, dof_b)))


def test_the_worked_example_to_the_digit() -> None:
    derived = derive_conclusion(_state(samples.CALIBRATION_EXAMPLE_COSTS))
    assert derived == {
        "window_noise": "0.013833", "boot_noise": "0.004926",
        "window_noise_bound": "0.032817", "boot_noise_bound": "0.048357",
        "window_dof": 4, "boot_dof": 2, "seal_window_noise": "0.0329",
        "seal_boot_noise": "0.0484", "seal_policy_version": "paired-windows.v2",
        "rules_version": "calibration.v1",
    }
    found = estimate(_groups(samples.CALIBRATION_EXAMPLE_COSTS), Decimal("0.95"))
    expected = _float_estimate(samples.CALIBRATION_EXAMPLE_COSTS)
    got = (found.window_noise, found.boot_noise, found.window_noise_bound,
           found.boot_noise_bound)
    for exact, approx in zip(got, expected, strict=True):
        assert float(exact) == pytest.approx(approx, rel=1e-9)


def test_a_lane_faster_by_itself_cancels() -> None:
    # Lane A 10% slower on every window: y moves +ln 1.1 in orientation 1, -ln 1.1 in 2.
    biased = tuple((a * 11 // 10, b) for a, b in samples.CALIBRATION_EXAMPLE_COSTS)
    plain = derive_conclusion(_state(samples.CALIBRATION_EXAMPLE_COSTS))
    assert derive_conclusion(_state(biased)) == plain


def test_a_boot_that_shifts_its_windows_shows_as_boot_noise_only() -> None:
    # Boot round 2's orientation 1 pair runs 5% slower throughout: within-boot spread is
    # unchanged, the spread between boots grows.
    shifted = tuple((a * 105 // 100, b) if 4 <= i < 6 else (a, b)
                    for i, (a, b) in enumerate(samples.CALIBRATION_EXAMPLE_COSTS))
    plain = estimate(_groups(samples.CALIBRATION_EXAMPLE_COSTS), Decimal("0.95"))
    moved = estimate(_groups(shifted), Decimal("0.95"))
    assert abs(moved.window_noise - plain.window_noise) < Decimal("1e-6")
    assert moved.boot_noise > plain.boot_noise + Decimal("0.01")
    assert float(moved.boot_noise) == pytest.approx(_float_estimate(shifted)[1], rel=1e-9)


def test_identical_windows_measure_no_noise_and_seal_the_smallest_step() -> None:
    flat = ((BILLION, BILLION),) * 8
    derived = derive_conclusion(_state(flat))
    assert derived is not None
    assert derived["window_noise"] == derived["boot_noise"] == "0.000000"
    assert derived["window_noise_bound"] == derived["boot_noise_bound"] == "0.000000"
    # v2 needs σw > 0: the seal keeps one step of 0.0001.
    assert (derived["seal_window_noise"], derived["seal_boot_noise"],
            derived["seal_policy_version"]) == ("0.0001", "0", "paired-windows.v1")


@pytest.mark.parametrize(("low", "high"), [("0.5", "0.9"), ("0.9", "0.95"), ("0.95", "0.99"),
                                           ("0.99", "0.9999")])
def test_bounds_grow_with_the_confidence(low: str, high: str) -> None:
    groups = _groups(samples.CALIBRATION_EXAMPLE_COSTS)
    lower, upper = estimate(groups, Decimal(low)), estimate(groups, Decimal(high))
    assert upper.window_noise_bound > lower.window_noise_bound > lower.window_noise
    assert upper.boot_noise_bound > lower.boot_noise_bound
    assert upper.window_noise == lower.window_noise  # the estimates do not move


@pytest.mark.parametrize(("window", "boot", "expected"), [
    ("0.02", "0.019", ("0.02", "0.019", "paired-windows.v1")),
    ("0.0200001", "0.01", ("0.0201", "0.01", "paired-windows.v2")),
    ("0.25", "0.0001", ("0.25", "0.0001", "paired-windows.v2")),
    ("0.01", "0.2500001", ("0.01", "0.2501", None)),
])
def test_the_seal_rounds_bounds_up_and_picks_the_version(
    window: str, boot: str, expected: tuple[str, str, str | None]
) -> None:
    assert seal_of(Decimal(window), Decimal(boot)) == expected


def test_the_fold_refuses_a_conclusion_it_does_not_derive() -> None:
    state = _state(samples.CALIBRATION_EXAMPLE_COSTS)
    derived = derive_conclusion(state)
    assert derived is not None
    right = CalibrationConcluded.model_validate({**derived, "concluded_block": 300})
    for field, wrong in (("window_noise_bound", "0.032816"), ("seal_boot_noise", "0.02"),
                         ("seal_policy_version", "paired-windows.v1")):
        refused = step(state, right.model_copy(update={field: wrong}))
        assert isinstance(refused, Refusal)
        assert refused.code == "calibration_mismatch" and refused.detail.startswith(field)
    early = step(state, right.model_copy(update={"concluded_block": 1}))
    assert isinstance(early, Refusal) and early.detail.startswith("concluded_block")
    done = step(state, right)
    assert isinstance(done, CalibrationState) and done.status == "CONCLUDED"
    again = step(done, samples.calibration_windows()[0])
    assert isinstance(again, Refusal) and again.code == "terminal_state"


def test_a_calibration_needs_two_boots_and_both_orientations() -> None:
    with pytest.raises(ValueError, match="boot rounds"):
        estimate({(1, 1): [Decimal(0), Decimal(1)], (1, 2): [Decimal(0), Decimal(1)]},
                 Decimal("0.95"))
