"""Checks paired-windows.v2's noise guard (docs/machines.md): where it checks, its dof and
statistic, the exact bound, the decision it makes, and that v1 and its bytes stay as they were.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from machines import arena, samples
from machines import attempt as A
from machines.arithmetic import (
    CONTEXT,
    Decision,
    NoiseLine,
    PolicyParams,
    SpeedResult,
    compile_policy,
    futile,
    ln,
    look,
    noise_check,
    ratio,
)
from machines.chi_square import chi2_quantile
from machines.refusal import Refusal
from machines.scenario import Scenario
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes
from vocabulary.errors import SchemaError
from vocabulary.events import ArenaCommissioned, AttemptDecided, Policy, PolicyV2

BILLION = 1_000_000_000
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
#: The v1 worked example: consistent windows (T ≈ 0.128 at look 3, far below 10.83).
CALM = samples.WORKED_EXAMPLE_COSTS
#: Windows 1 and 2 differ by 5 % in one orientation: T ≈ 13.43 > χ²(0.999, 1) ≈ 10.83.
NOISY = ((BILLION, 990_000_000), (BILLION, 940_000_000), (BILLION, 975_000_000),
         (BILLION, 975_000_000))
SLOW = ((BILLION, 1_040_000_000),) * 4
FLAT = ((BILLION, 998_000_000),) * 4


def _params(**overrides: Any) -> PolicyParams:
    return compile_policy(samples.policy_v2(**overrides))


def _run(params: PolicyParams, costs: Any, plan: str = "normal") -> A.AttemptState:
    """Measures windows 1.. until speed is decided (or the costs run out)."""
    state = A.claim(samples.claimed("a" * 64, "c" * 64, plan=plan), params)
    for index, (stock, candidate) in enumerate(costs, start=1):
        if state.speed is not None or index > params.windows:
            break
        result = A.step(state, samples.window(index, params.orientation(index), stock, candidate))
        assert not isinstance(result, Refusal), str(result)
        state = result
    return state


def _statistic(costs: Any, n1: int, noise: str) -> Decimal:
    """T the pairwise way: Σ_o Σ_{i<j} (y_i − y_j)² / n_o / σw², a different order of sums."""
    logs = [ln(ratio(candidate, stock)) for stock, candidate in costs]
    total = Decimal(0)
    for group in (logs[:n1], logs[n1:]):
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                gap = CONTEXT.subtract(a, b)
                pair = CONTEXT.divide(CONTEXT.multiply(gap, gap), Decimal(len(group)))
                total = CONTEXT.add(total, pair)
    sigma = Decimal(noise)
    return CONTEXT.divide(total, CONTEXT.multiply(sigma, sigma))


# --- compiled once per commission ------------------------------------------------------------


def test_the_bounds_are_compiled_with_the_commission_where_v1_could_decide() -> None:
    level = Decimal(1) - Decimal("0.001")
    params = _params(windows=5, futility_margin="0.05", z={"3": "2", "4": "2", "5": "2"})
    # n1 = 2: orientation 1 gives dof 1 from window 2 on; orientation 2 adds one per window
    # past its first. Window 1 decides nothing under v1, so the guard does not check there.
    assert params.noise_lines == (
        None, None,
        NoiseLine(2, 1, chi2_quantile(level, 1)), NoiseLine(3, 1, chi2_quantile(level, 1)),
        NoiseLine(4, 2, chi2_quantile(level, 2)), NoiseLine(5, 3, chi2_quantile(level, 3)),
    )
    assert params.noise_lines[2].critical == Decimal("10.82756617066273229311292322202396")
    assert (params.rules_version, params.noise_guard_alpha) == ("paired-windows.v2",
                                                                Decimal("0.001"))


def test_without_futility_the_guard_first_checks_at_the_first_look() -> None:
    params = _params()  # W = 4, no futility margin: nothing decides at window 2
    assert [line and (line.window, line.dof) for line in params.noise_lines] == [
        None, None, None, (3, 1), (4, 2)]


def test_with_three_windows_only_the_last_look_has_a_degree_of_freedom() -> None:
    params = _params(windows=3, z={"2": "2", "3": "2"}, futility_margin="0.05")
    # n1 = 1: orientation 1 never holds two windows; orientation 2 does at window 3.
    assert [line and (line.window, line.dof) for line in params.noise_lines] == [
        None, None, None, (3, 1)]


def test_a_v1_policy_compiles_without_a_guard() -> None:
    params = compile_policy(samples.policy(futility_margin="0.05"))
    assert (params.rules_version, params.noise_guard_alpha, params.noise_lines) == (
        "paired-windows.v1", None, ())
    assert noise_check(params, 3, [Decimal(0)] * 3) is None


# --- the statistic and its degrees of freedom --------------------------------------------------


@pytest.mark.parametrize("costs", [
    ((BILLION, 990_000_000), (BILLION, 940_000_000), (BILLION, 975_000_000),
     (BILLION, 1_100_000_000), (BILLION, 900_000_000)),
    ((BILLION, 1_010_000_000), (BILLION, 1_000_000_000), (BILLION, 1_005_000_000),
     (BILLION, 1_006_000_000), (BILLION, 995_000_000)),
])
def test_t_sums_squares_within_each_orientation_and_counts_dof_per_orientation(
    costs: Any,
) -> None:
    params = _params(windows=5, futility_margin="10", z={}, window_noise="0.2")
    logs = [ln(ratio(candidate, stock)) for stock, candidate in costs]
    for window, dof in ((2, 1), (3, 1), (4, 2), (5, 3)):
        check = noise_check(params, window, logs[:window])
        assert check is not None and (check.window, check.dof) == (window, dof)
        expected = _statistic(costs[:window], 2, "0.2")
        assert abs(check.statistic - expected) <= Decimal("1e-28") * max(expected, Decimal(1))


def test_a_shift_between_orientations_is_not_noise() -> None:
    # A real speedup and the lanes' swap move a whole orientation: the means absorb it.
    params = _params()
    steady = ((BILLION, 900_000_000), (BILLION, 900_000_000), (BILLION, 800_000_000),
              (BILLION, 800_000_000))
    state = _run(params, steady)
    assert [(c.window, c.statistic) for c in state.noise_checks] == [(3, Decimal(0))]
    assert state.speed is not None and state.speed.verdict == "PASS"  # at look 3


# --- exactly at the bound ----------------------------------------------------------------------


def _with_bound(params: PolicyParams, window: int, critical: Decimal) -> PolicyParams:
    lines = list(params.noise_lines)
    line = lines[window]
    assert line is not None
    lines[window] = line._replace(critical=critical)
    return dataclasses.replace(params, noise_lines=tuple(lines))


def test_t_equal_to_the_bound_does_not_trip_and_one_unit_above_it_does() -> None:
    params = _params()
    exact = noise_check(params, 3, [ln(ratio(c, s)) for s, c in NOISY[:3]])
    assert exact is not None
    t = exact.statistic
    for bound, trips in ((t, False), (CONTEXT.next_plus(t), False), (CONTEXT.next_minus(t), True)):
        moved = _with_bound(params, 3, bound)
        state = _run(moved, NOISY)
        (check,) = state.noise_checks
        assert (check.statistic, check.critical, check.trips) == (t, bound, trips)
        assert state.speed is not None
        # Not tripped, the look decides as v1 would (a PASS: S ≈ 1.0309 clears L).
        assert (state.speed.reason, state.speed.look_window) == (
            ("noise_above_seal", 3) if trips else ("", 3))


def test_the_sealed_bound_splits_neighbouring_nanosecond_costs() -> None:
    # Window 2's candidate cost moves T = ln(c / 1e9)² / 2 / σw² across χ²(0.999, 1): find
    # the cost where it crosses, then the machine trips at it and not one ns cheaper-side.
    params = _params(futility_margin="0.5")  # the check at window 2 decides
    critical = params.noise_lines[2].critical  # type: ignore[union-attr]

    def t_of(cost: int) -> Decimal:
        return _statistic(((BILLION, BILLION), (BILLION, cost)), 2, "0.01")

    low, high = 900_000_000, BILLION  # T(low) > critical >= T(high)
    assert t_of(low) > critical >= t_of(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if t_of(middle) > critical else (low, middle)
    assert t_of(low) > critical >= t_of(high)
    tripped = _run(params, ((BILLION, BILLION), (BILLION, low)))
    calm = _run(params, ((BILLION, BILLION), (BILLION, high)))
    assert tripped.speed == SpeedResult("NO_DECISION", "noise_above_seal", None, None, 2)
    assert calm.speed is None and calm.noise_checks[0].trips is False


# --- the decision ----------------------------------------------------------------------------


def test_a_tripped_guard_decides_no_decision_requeue_and_stops_the_windows() -> None:
    state = _run(_params(), NOISY)
    assert (state.status, state.last_window) == (A.SPEED, 3)
    assert A.derive_decision(state) == Decision(
        "NO_DECISION", "noise_above_seal", "REQUEUE", None, None, 3)
    refusal = A.step(state, samples.window(4, 2, BILLION, 975_000_000))
    assert isinstance(refusal, Refusal) and refusal.code == "window_after_speed_decided"
    assert state.looks[-1].outcome == "noise_above_seal"  # explain: the look never compared
    assert A.explain(state)["looks"][-1]["outcome"] == "noise_above_seal"


def test_the_guard_comes_before_futility_at_the_end_of_orientation_1() -> None:
    params = _params(futility_margin="0.02")
    # R1 = 1.05 > 1.02 (futile) and the two windows differ by 10 %: the guard decides.
    noisy_and_slow = ((BILLION, 1_000_000_000), (BILLION, 1_100_000_000))
    assert futile(params, ratio(2_100_000_000, 2 * BILLION))
    state = _run(params, noisy_and_slow)
    assert state.speed == SpeedResult("NO_DECISION", "noise_above_seal", None, None, 2)
    assert state.looks == ()


def test_without_futility_noisy_windows_are_judged_at_the_first_look() -> None:
    state = _run(_params(), NOISY)
    assert [(c.window, c.trips) for c in state.noise_checks] == [(3, True)]
    early = _run(_params(futility_margin="0.05"), NOISY)
    assert [(c.window, c.trips) for c in early.noise_checks] == [(2, True)]
    assert early.last_window == 2


def test_a_calibration_observation_stays_in_speed_when_the_guard_trips() -> None:
    state = _run(_params(), NOISY, plan="calibration_observation")
    assert state.status == A.SPEED
    refusal = A.step(state, samples.audit())
    assert isinstance(refusal, Refusal) and refusal.code == "audit_out_of_stage"
    assert A.derive_decision(state) == Decision(
        "NO_DECISION", "noise_above_seal", "REQUEUE", None, None, 3)


@pytest.mark.parametrize(("costs", "futility", "reason", "look_window"), [
    (CALM, None, "", 3),
    (SLOW, None, "candidate_slower", 4),
    (FLAT, None, "speed_threshold_not_met", 4),
    (SLOW, "0.02", "futility", 2),
])
def test_consistent_windows_decide_under_v2_exactly_as_under_v1(
    costs: Any, futility: str | None, reason: str, look_window: int
) -> None:
    v1 = _run(compile_policy(samples.policy(futility_margin=futility)), costs)
    v2 = _run(_params(futility_margin=futility), costs)
    assert v2.speed is not None and v2.speed == v1.speed
    assert (v2.speed.reason, v2.speed.look_window) == (reason, look_window)
    assert v2.noise_checks and not any(c.trips for c in v2.noise_checks)
    assert v2.looks == v1.looks and v2.status == v1.status
    assert A.derive_decision(v2) == A.derive_decision(v1)


def test_v1_decides_the_noisy_windows_as_it_always_did() -> None:
    v1 = _run(compile_policy(samples.policy()), NOISY)
    # v1 has no guard: the look at window 3 passes (S ≈ 1.0309 ≥ 1 + L), as before v2.
    r1 = ratio(990_000_000 + 940_000_000, 2 * BILLION)
    seen = look(v1.params, 3, r1, ln(r1), ratio(975_000_000, BILLION))
    assert v1.speed == SpeedResult.of_look(seen) and seen.outcome == "pass"
    assert (v1.logs, v1.noise_checks) == ((), ())
    assert A.explain(v1)["noise_guard"] is None
    assert A.explain(v1)["rules_version"] == "paired-windows.v1"


# --- the rules version AttemptDecided carries ----------------------------------------------


@pytest.mark.parametrize(("sealed", "other"), [
    (samples.policy_v2(), "paired-windows.v1"),
    (samples.policy(), "paired-windows.v2"),
])
def test_attempt_decided_must_carry_its_commissions_version(
    sealed: Policy | PolicyV2, other: str
) -> None:
    state = _run(compile_policy(sealed), SLOW)
    decision = A.derive_decision(state)
    assert decision is not None
    refusal = A.step(state, samples.decided(decision, rules_version=other))
    assert isinstance(refusal, Refusal) and refusal.code == "rules_version_mismatch"
    accepted = A.step(state, samples.decided(decision, rules_version=sealed.policy_version))
    assert isinstance(accepted, A.AttemptState) and accepted.status == A.DECIDED


def test_a_noisy_v2_submission_is_queued_again_in_the_ledger() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0, sealed=samples.policy_v2())
    sid = sc.arrive()
    sub = sc.evaluate(sid, "att-1", NOISY)
    assert (sub.status, sub.reason) == ("QUEUED", "noise_above_seal")
    again = sc.evaluate(sid, "att-2", CALM, samples.audit(), samples.quality())
    assert (again.status, again.reason) == ("QUALIFIED", "")


# --- commissions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "message"), [
    ({"window_noise": "0"}, "window_noise must lie in (0, 0.25]"),
    ({"window_noise": "0.26"}, "window_noise must lie in (0, 0.25]"),
    ({"boot_noise": "0.2500001"}, "boot_noise must lie in [0, 0.25]"),
    ({"boot_noise": "-0.01"}, "boot_noise must lie in [0, 0.25]"),
    ({"noise_guard_alpha": "0"}, "noise_guard_alpha must lie in [0.000000001, 0.5)"),
    ({"noise_guard_alpha": "0.5"}, "noise_guard_alpha must lie in [0.000000001, 0.5)"),
    ({"noise_guard_alpha": "-0.001"}, "noise_guard_alpha must lie in [0.000000001, 0.5)"),
    ({"noise_guard_alpha": "0.0000000009"}, "noise_guard_alpha must lie in [0.000000001, 0.5)"),
    ({"windows": 2, "z": {"2": "2"}}, "greater than or equal to 3"),
    ({"noise_guard_alpha": None}, "Input should be a valid string"),
])
def test_an_invalid_v2_policy_is_refused_naming_its_problem(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        samples.policy_v2(**overrides)
    payload = samples.commission_document(sealed=samples.policy_v2())
    payload["policy"] = {**payload["policy"], **overrides}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, payload)
    assert caught.value.context["path"].startswith("$.payload.policy")
    assert "paired-windows" not in caught.value.context["path"]  # the union's tag is no key


def test_the_v2_bounds_at_their_edges_are_sealable() -> None:
    for overrides in ({"window_noise": "0.25", "boot_noise": "0.25"}, {"boot_noise": "0"},
                      {"noise_guard_alpha": "0.000000001"}, {"noise_guard_alpha": "0.4999"}):
        assert compile_policy(samples.policy_v2(**overrides)).noise_lines[3] is not None


def test_an_unknown_policy_version_is_refused_at_policy_version() -> None:
    payload = samples.commission_document()
    payload["policy"] = {**payload["policy"], "policy_version": "paired-windows.v9"}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, payload)
    assert caught.value.context["path"] == "$.payload.policy.policy_version"


def test_the_arena_machine_refuses_a_v2_commission_v1_would_refuse() -> None:
    huge = samples.commissioned(sealed=samples.policy_v2(z={"3": "100000"}))
    refusal = arena.decide(None, huge)
    assert refusal is not None and refusal.code == "pass_line_out_of_range"
    negative = samples.commissioned(sealed=samples.policy_v2(reward_margin="-0.1"))
    refusal = arena.decide(None, negative)
    assert refusal is not None and refusal.code == "reward_margin_negative"
    state = arena.start(samples.commissioned(sealed=samples.policy_v2()))
    assert state.params.rules_version == "paired-windows.v2"
    assert isinstance(state.commission.event.policy, PolicyV2)


# --- v1 bytes unchanged --------------------------------------------------------------------


def test_v1_fixtures_keep_their_bytes_model_and_digests() -> None:
    # Digests computed before paired-windows.v2 existed (main at 937e248).
    raw = (GOLDEN / "ArenaCommissioned.v1.json").read_bytes()
    payload = json.loads(raw)
    assert CATALOGUE.validate("ArenaCommissioned", 1, payload) + b"\n" == raw
    event = ArenaCommissioned.model_validate(payload)
    assert type(event.policy) is Policy
    assert arena.commission_digest(event, payload) == (
        "df55507bd94709b04d725c53134b0d2170e2f4acaf11134af4bb4020ca2bce60")
    assert arena.policy_digest(event.policy) == (
        "347e1d1b1f3796b86f3323aa81022359d566b0c5047124a3dafef84219b2097c")
    sample = samples.commissioned()
    assert (arena.commission_digest(sample), arena.policy_digest(sample.policy)) == (
        "872b73f34acb6a766a5d6eb30dfe7b59137448b83438238975ff4ff74ab3870a",
        "46b690cb0cd4c8fb5ae6b6102cca19f330c603362249ea5bed73d682f904e647",
    )
    decided_raw = (GOLDEN / "AttemptDecided.v1.json").read_bytes()
    decided = AttemptDecided.model_validate(json.loads(decided_raw))
    assert canonical_bytes(decided.model_dump(mode="json")) + b"\n" == decided_raw
    assert decided.rules_version == "paired-windows.v1"


def test_the_v1_policy_model_is_untouched_by_v2() -> None:
    assert list(Policy.model_fields) == [
        "policy_version", "windows", "z", "window_noise", "boot_noise", "required_gain",
        "futility_margin", "audit", "reward_margin", "audit_control_delta_digests",
        "sla_blocks"]
    with pytest.raises(ValidationError, match=r"\[0, 0.02\]"):
        samples.policy(window_noise="0.03")  # v1's seal range did not widen
    with pytest.raises(ValidationError):
        samples.policy(noise_guard_alpha="0.001")  # nor did it gain the guard


# --- the quick path never decides v2 differently -------------------------------------------


def _reference(params: PolicyParams, costs: list[tuple[int, int]]) -> SpeedResult | None:
    """Decides speed the straightforward way: the guard by the pairwise T and the bound
    recomputed here, then v1's futility and the Decimal look (never the float estimate)."""
    n1, alpha = params.orientation1_windows, params.noise_guard_alpha
    assert alpha is not None
    for window in range(1, min(len(costs), params.windows) + 1):
        seen = costs[:window]
        counts = (min(window, n1), max(window - n1, 0))
        dof = sum(max(n - 1, 0) for n in counts)
        checks = window > n1 or (window == n1 and params.futility_margin is not None)
        if checks and dof >= 1:
            bound = chi2_quantile(Decimal(1) - alpha, dof)
            if _statistic(seen, n1, str(params.window_noise)) > bound:
                return SpeedResult.noise_above_seal(window)
        stock1 = sum(s for s, _ in seen[:n1])
        candidate1 = sum(c for _, c in seen[:n1])
        if window == n1 and futile(params, ratio(candidate1, stock1)):
            return SpeedResult.futility(params)
        if window > n1:
            r1 = ratio(candidate1, stock1)
            r2 = ratio(sum(c for _, c in seen[n1:]), sum(s for s, _ in seen[n1:]))
            decided = look(params, window, r1, ln(r1), r2)
            if decided.outcome != "continue":
                return SpeedResult.of_look(decided)
    return None


@settings(max_examples=60, deadline=None)
@given(
    windows=st.integers(3, 5),
    noise=st.sampled_from(["0.005", "0.01", "0.03", "0.1"]),
    alpha=st.sampled_from(["0.001", "0.01", "0.2"]),
    futility=st.sampled_from([None, "0.02", "0.1"]),
    ratios=st.lists(st.integers(850_000, 1_150_000), min_size=5, max_size=5),
)
def test_the_machine_decides_v2_as_the_exact_reference_does(
    windows: int, noise: str, alpha: str, futility: str | None, ratios: list[int]
) -> None:
    z = {str(k): "1.5" for k in range(windows // 2 + 1, windows + 1)}
    params = _params(windows=windows, z=z, window_noise=noise, noise_guard_alpha=alpha,
                     futility_margin=futility)
    costs = [(BILLION, r * 1_000) for r in ratios]
    assert _run(params, costs).speed == _reference(params, costs)
