"""Computes the decision arithmetic of ``paired-windows.v1`` and ``.v2`` (docs/machines.md).

v2 is v1 plus the noise guard (``noise_check``): at each point where v1 could decide, a
chi-square test of the windows' spread against the sealed σw; its critical values are
compiled once per commission (``PolicyParams.noise_lines``).

Every operation goes through one fixed ``decimal.Context`` (precision 34, ROUND_HALF_EVEN,
traps on invalid operations, division by zero and overflow), called explicitly rather than
through the thread's current context, so no caller's ``decimal`` settings can change a digit.
``Context.ln``, ``exp`` and ``sqrt`` are correctly rounded, so every platform reproduces
every digit. Decisions compare full-precision values; recorded results use ``fixed6``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, DecimalException
from typing import NamedTuple

from machines.chi_square import chi2_quantile
from machines.decimal_context import CONTEXT
from machines.reasons import NOISE_ABOVE_SEAL, verdict_disposition
from vocabulary.codec import fixed6
from vocabulary.events import AttemptDecided, AuditNodeGraded, Policy, PolicyV2

__all__ = [
    "CONTEXT",
    "FAULT_DISPOSITIONS",
    "RULES_VERSION",
    "RULES_VERSION_V2",
    "Decision",
    "Look",
    "NodeTally",
    "NoiseCheck",
    "NoiseLine",
    "PolicyParams",
    "QuickLine",
    "SpeedLine",
    "SpeedResult",
    "audit_outcome",
    "classify_final",
    "compile_policy",
    "fault_disposition",
    "fixed",
    "futile",
    "futility_limit",
    "line_out_of_range",
    "ln",
    "look",
    "node_outcome",
    "noise_check",
    "noise_checks",
    "quality_outcome",
    "quick_fixed",
    "quick_outcome",
    "quick_speedup",
    "ratio",
]

RULES_VERSION = "paired-windows.v1"
RULES_VERSION_V2 = "paired-windows.v2"

_C = CONTEXT
_ONE = Decimal(1)
_TWO = Decimal(2)
_FOUR = Decimal(4)

#: Disposition of a NO_DECISION caused by each InfrastructureFault code (docs/machines.md).
FAULT_DISPOSITIONS: Mapping[str, str] = {
    "engine_killed": "COMPLETE",
    "pod_service_restart": "COMPLETE",
    "adapter_start_failed": "REQUEUE",
    "adapter_request_failed": "REQUEUE",
    "adapter_timeout": "COMPLETE",
    "work_mismatch": "COMPLETE",
    "evidence_unavailable": "HOLD",
    "unproven_infrastructure_failure": "HOLD",
}


def fault_disposition(code: str) -> str:
    """Returns the disposition of a fault: REQUEUE when nothing ran, HOLD when unproven."""
    return FAULT_DISPOSITIONS[code]


class NoiseLine(NamedTuple):
    """Holds the noise guard's policy-fixed numbers at one window where it checks (v2)."""

    window: int
    dof: int
    critical: Decimal


class SpeedLine(NamedTuple):
    """Holds the policy-fixed numbers of the look at one orientation-2 window."""

    window: int
    n1: int
    n2: int
    se: Decimal
    z: Decimal | None
    pass_line: Decimal | None


@dataclass(frozen=True)
class PolicyParams:
    """Is a sealed policy compiled to Decimals, with every look's SE and pass line precomputed.

    SE and L depend only on the policy and the window index (n1 is fixed at W // 2 once
    looks begin), so they are computed once per commission, not once per look.
    """

    windows: int
    orientation1_windows: int
    window_noise: Decimal
    boot_noise: Decimal
    required_gain: Decimal
    futility_margin: Decimal | None
    lines: tuple[SpeedLine | None, ...]
    audit_bar: Decimal
    near_miss_band: Decimal
    near_miss_rate_max: Decimal
    min_calls: int
    reward_margin: Decimal
    calibration_digests: frozenset[str]
    sla_blocks: int
    #: Float thresholds per look for the fold's quick pre-check (derived from ``lines``).
    quick: tuple[QuickLine | None, ...] = field(default=(), compare=False, repr=False)
    #: The sealed policy_version: an AttemptDecided must carry it as its rules_version.
    rules_version: str = RULES_VERSION
    #: v2's noise guard level α (None under v1: no guard).
    noise_guard_alpha: Decimal | None = None
    #: v2: the guard's sealed numbers by window index (None where it does not check).
    noise_lines: tuple[NoiseLine | None, ...] = ()

    def orientation(self, window: int) -> int:
        """Returns the orientation paired-windows.v1 prescribes for ``window`` (1-based)."""
        return 1 if window <= self.orientation1_windows else 2


#: Relative distance from a threshold under which a float estimate does not decide. The
#: estimate of S is within a few units in the last place (about 1e-15 relative) of the
#: Decimal value, and each float threshold within one; 1e-11 leaves four orders of margin.
_QUICK_TOLERANCE = 1e-11
#: Range of S (and of the thresholds) the quick path handles; anything else goes exact.
_QUICK_LOW = 1e-9
_QUICK_HIGH = 1e9
_QUICK_LOW_EXACT = Decimal("1e-9")
_QUICK_HIGH_EXACT = Decimal("1e9")


class QuickLine(NamedTuple):
    """Holds one look's thresholds as floats, for deciding a look without ``ln`` and ``exp``.

    ``gate`` is 1 + L (None: the look cannot pass); ``slower`` is the FAIL split of the last
    look, 1 / (1 + L) as ``classify_final`` computes it (1 without a line); ``line_text`` is
    ``fixed(L)``.
    """

    gate: float | None
    slower: float
    line_text: str | None


def _quick_line(line: SpeedLine | None) -> QuickLine | None:
    if line is None:
        return None
    pass_line = line.pass_line
    if pass_line is None:
        return QuickLine(None, 1.0, None)
    gate = _C.add(_ONE, pass_line)
    if not _QUICK_LOW_EXACT < gate < _QUICK_HIGH_EXACT:
        return None  # an extreme policy: its looks take the Decimal path only
    return QuickLine(float(gate), float(_C.divide(_ONE, gate)), fixed(pass_line))


def _speed_line(window: int, n1: int, policy: Policy | PolicyV2) -> SpeedLine:
    n2 = window - n1
    sw = Decimal(policy.window_noise)
    sb = Decimal(policy.boot_noise)
    inverse_sum = _C.add(_C.divide(_ONE, Decimal(n1)), _C.divide(_ONE, Decimal(n2)))
    variance = _C.add(
        _C.multiply(_C.multiply(sw, sw), inverse_sum), _C.multiply(_TWO, _C.multiply(sb, sb))
    )
    se = _C.sqrt(_C.divide(variance, _FOUR))
    z_text = policy.z.get(str(window))
    if z_text is None:
        return SpeedLine(window, n1, n2, se, None, None)
    z = Decimal(z_text)
    gain = _C.add(_ONE, Decimal(policy.required_gain))
    line = _C.subtract(_C.multiply(gain, _C.exp(_C.multiply(z, se))), _ONE)
    return SpeedLine(window, n1, n2, se, z, line)


def line_out_of_range(policy: Policy | PolicyV2) -> int | None:
    """Returns the first look window whose pass line cannot be decided with, else None.

    A pass line L = (1 + g) · exp(z · SE) − 1 must be computable in the 34-digit context
    (exp overflows past about 10^(10^6)) and recordable with 6 places (``fixed6`` holds
    fewer than 28 integer digits): a look that failed against a larger line could never
    record its FAIL, and the attempt would stay undecided. The schema bounds neither z nor
    g; the arena machine refuses such a commission (``pass_line_out_of_range``).
    """
    n1 = policy.windows // 2
    for window in range(n1 + 1, policy.windows + 1):
        try:
            line = _speed_line(window, n1, policy).pass_line
            if line is not None:
                fixed(line)
        except DecimalException:  # Overflow in exp, InvalidOperation in the quantize
            return window
    return None


def _noise_dof(window: int, n1: int) -> int:
    """Returns Σ_o (n_o − 1) over the orientations holding two or more of windows 1..window."""
    in1 = min(window, n1)
    in2 = max(window - n1, 0)
    return max(in1 - 1, 0) + max(in2 - 1, 0)


def _noise_lines(policy: PolicyV2, n1: int) -> tuple[NoiseLine | None, ...]:
    """Returns v2's guard numbers per window: where v1 could decide (futility after window
    n1 when a margin is sealed, every look) and the windows so far give dof >= 1."""
    level = _C.subtract(_ONE, Decimal(policy.noise_guard_alpha))
    first = n1 if policy.futility_margin is not None else n1 + 1
    lines: list[NoiseLine | None] = [None] * (policy.windows + 1)
    for window in range(first, policy.windows + 1):
        dof = _noise_dof(window, n1)
        if dof >= 1:
            lines[window] = NoiseLine(window, dof, chi2_quantile(level, dof))
    return tuple(lines)


def compile_policy(policy: Policy | PolicyV2) -> PolicyParams:
    """Turns a sealed policy into ``PolicyParams`` (Decimals, per-look lines, v2's guard)."""
    n1 = policy.windows // 2
    lines: list[SpeedLine | None] = [None] * (policy.windows + 1)
    for window in range(n1 + 1, policy.windows + 1):
        lines[window] = _speed_line(window, n1, policy)
    margin = policy.futility_margin
    alpha: Decimal | None = None
    noise_lines: tuple[NoiseLine | None, ...] = ()
    if isinstance(policy, PolicyV2):
        alpha = Decimal(policy.noise_guard_alpha)
        noise_lines = _noise_lines(policy, n1)
    return PolicyParams(
        windows=policy.windows,
        orientation1_windows=n1,
        window_noise=Decimal(policy.window_noise),
        boot_noise=Decimal(policy.boot_noise),
        required_gain=Decimal(policy.required_gain),
        futility_margin=None if margin is None else Decimal(margin),
        lines=tuple(lines),
        audit_bar=Decimal(policy.audit.bar),
        near_miss_band=Decimal(policy.audit.near_miss_band),
        near_miss_rate_max=Decimal(policy.audit.near_miss_rate_max),
        min_calls=policy.audit.min_calls,
        reward_margin=Decimal(policy.reward_margin),
        calibration_digests=frozenset(policy.audit_control_delta_digests),
        sla_blocks=policy.sla_blocks,
        quick=tuple(_quick_line(line) for line in lines),
        rules_version=policy.policy_version,
        noise_guard_alpha=alpha,
        noise_lines=noise_lines,
    )


def ratio(candidate_cost_ns: int, stock_cost_ns: int) -> Decimal:
    """Returns candidate / stock cost at precision 34 (above 1: candidate slower)."""
    return _C.divide(Decimal(candidate_cost_ns), Decimal(stock_cost_ns))


#: Spells a result with exactly 6 places. ``fixed6`` quantizes in a 34-digit half-even
#: context of its own, never the thread's, so a caller's low-precision or trapping context
#: changes (or fails) no recorded digit.
fixed = fixed6


def ln(value: Decimal) -> Decimal:
    """Returns the natural logarithm of ``value``, correctly rounded to 34 digits."""
    return _C.ln(value)


def futility_limit(params: PolicyParams) -> Decimal | None:
    """Returns 1 + futility_margin, or None when the policy sets no margin."""
    margin = params.futility_margin
    return None if margin is None else _C.add(_ONE, margin)


def futile(params: PolicyParams, r1: Decimal) -> bool:
    """Tells whether R1 > 1 + futility_margin (never, when the policy sets no margin)."""
    limit = futility_limit(params)
    return limit is not None and r1 > limit


class NoiseCheck(NamedTuple):
    """Holds one check of v2's noise guard at full precision: T, its dof and the bound."""

    window: int
    dof: int
    statistic: Decimal
    critical: Decimal
    trips: bool


def _squares_about_mean(logs: Sequence[Decimal]) -> Decimal:
    """Returns Σ (y_i − ȳ)² over ``logs`` in window order (0 for fewer than two)."""
    count = len(logs)
    if count < 2:
        return Decimal(0)
    total = Decimal(0)
    for value in logs:
        total = _C.add(total, value)
    mean = _C.divide(total, Decimal(count))
    squares = Decimal(0)
    for value in logs:
        gap = _C.subtract(value, mean)
        squares = _C.add(squares, _C.multiply(gap, gap))
    return squares


def noise_check(params: PolicyParams, window: int, logs: Sequence[Decimal]) -> NoiseCheck | None:
    """Returns the guard's check after ``window`` (None where v2 does not check, and in v1).

    ``logs`` are y_i = ln r_i of windows 1..window. T = Σ_o Σ_i (y_i − ȳ_o)² / σw² within
    each orientation; the check trips when T > chi2_quantile(1 − α, dof), a bound compiled
    with the commission.
    """
    lines = params.noise_lines
    line = lines[window] if window < len(lines) else None
    if line is None:
        return None
    n1 = params.orientation1_windows
    squares = _C.add(_squares_about_mean(logs[:n1]), _squares_about_mean(logs[n1:window]))
    noise = params.window_noise
    statistic = _C.divide(squares, _C.multiply(noise, noise))
    return NoiseCheck(window, line.dof, statistic, line.critical, statistic > line.critical)


def noise_checks(params: PolicyParams, logs: Sequence[Decimal]) -> tuple[NoiseCheck, ...]:
    """Returns every check the guard made over windows 1..len(logs), in window order."""
    seen = (noise_check(params, window, logs) for window in range(1, len(logs) + 1))
    return tuple(check for check in seen if check is not None)


class Look(NamedTuple):
    """Holds every number of one look at full precision, and its outcome.

    ``outcome`` is ``pass``, ``continue`` (no pass, more windows to come), or at the last
    window ``candidate_slower`` / ``speed_threshold_not_met``.
    """

    window: int
    n1: int
    n2: int
    r1: Decimal
    r2: Decimal
    speedup: Decimal
    se: Decimal
    z: Decimal | None
    pass_line: Decimal | None
    outcome: str


def classify_final(speedup: Decimal, pass_line: Decimal | None) -> str:
    """Classifies a FAIL at window W: ``candidate_slower`` if S <= 1/(1+L), else not met.

    A last window without a z entry has no pass line; then the neutral point S <= 1 decides.
    """
    if pass_line is None:
        return "candidate_slower" if speedup <= _ONE else "speed_threshold_not_met"
    slower_line = _C.divide(_ONE, _C.add(_ONE, pass_line))
    return "candidate_slower" if speedup <= slower_line else "speed_threshold_not_met"


def look(params: PolicyParams, window: int, r1: Decimal, ln_r1: Decimal, r2: Decimal) -> Look:
    """Computes the look after orientation-2 ``window``: S, SE, L and the outcome."""
    line = params.lines[window]
    assert line is not None, "looks happen only after orientation-2 windows"
    mean = _C.divide(_C.add(ln_r1, _C.ln(r2)), _TWO)
    speedup = _C.exp(_C.minus(mean))
    if line.pass_line is not None and _C.subtract(speedup, _ONE) >= line.pass_line:
        outcome = "pass"
    elif window == params.windows:
        outcome = classify_final(speedup, line.pass_line)
    else:
        outcome = "continue"
    return Look(
        window, line.n1, line.n2, r1, r2, speedup, line.se, line.z, line.pass_line, outcome
    )


def quick_speedup(
    stock1_ns: int, candidate1_ns: int, stock2_ns: int, candidate2_ns: int
) -> float:
    """Returns S = sqrt(stock1 · stock2 / (candidate1 · candidate2)) as a float.

    Mathematically S = exp(−(ln R1 + ln R2) / 2) with R_o = candidate_o / stock_o; the
    integer products are exact and ``int / int`` and ``math.sqrt`` are correctly rounded, so
    the estimate is within about 2 units in the last place of the true value. It only ever
    decides what the Decimal computation would decide when far from every threshold.
    """
    return math.sqrt((stock1_ns * stock2_ns) / (candidate1_ns * candidate2_ns))


def _clear(value: float, threshold: float) -> int:
    """Returns 1 (value clearly above), -1 (clearly below) or 0 (too close to call)."""
    gap = value - threshold
    if gap > _QUICK_TOLERANCE * threshold:
        return 1
    if gap < -_QUICK_TOLERANCE * threshold:
        return -1
    return 0


def quick_outcome(quick: QuickLine, speedup: float, last: bool) -> str | None:
    """Returns the outcome ``look`` would give for an S estimate, or None if too close.

    The Decimal look compares S − 1 ≥ L (the pass test) and, at the last window,
    S ≤ 1 / (1 + L); both are decided here only when the estimate is clearly on one side.
    """
    if not _QUICK_LOW < speedup < _QUICK_HIGH:
        return None
    gate = quick.gate
    if gate is not None:
        if not _QUICK_LOW < gate < _QUICK_HIGH:
            return None
        side = _clear(speedup, gate)
        if side == 0:
            return None
        if side > 0:
            return "pass"
    if not last:
        return "continue"
    if not _QUICK_LOW < quick.slower < _QUICK_HIGH:
        return None
    side = _clear(speedup, quick.slower)
    if side == 0:
        return None
    return "candidate_slower" if side < 0 else "speed_threshold_not_met"


def quick_fixed(speedup: float) -> str | None:
    """Returns ``fixed(S)`` from an estimate of S, or None if S is too near a rounding tie.

    Rounding to 6 places is ambiguous only within the estimate's error of a half-way point
    (…5 in the 7th place); elsewhere the nearest 6-place value is the same for the estimate
    and for the Decimal value.
    """
    if not _QUICK_LOW < speedup < _QUICK_HIGH:
        return None
    scaled = speedup * 1_000_000.0
    below = math.floor(scaled)
    if abs(scaled - below - 0.5) <= _QUICK_TOLERANCE * scaled + 1e-6:
        return None
    units = below + 1 if scaled - below > 0.5 else below
    whole, places = divmod(units, 1_000_000)
    return f"{whole}.{places:06d}"


#: ``tuple.__new__(Cls, values)`` builds a named tuple without its Python-level ``__new__``
#: (about a third of the cost); the fold builds several per attempt.
_new_tuple = tuple.__new__


class SpeedResult(NamedTuple):
    """Is the speed stage's decision with the numbers AttemptDecided will carry."""

    verdict: str
    reason: str
    speedup: str | None
    pass_line: str | None
    look_window: int

    @classmethod
    def of_look(cls, decided: Look) -> SpeedResult:
        """Returns the speed result a deciding look records (fixed to 6 places)."""
        passed = decided.outcome == "pass"
        line = decided.pass_line
        return _new_tuple(cls, (
            "PASS" if passed else "FAIL",
            "" if passed else decided.outcome,
            fixed(decided.speedup),
            None if line is None else fixed(line),
            decided.window,
        ))

    @classmethod
    def futility(cls, params: PolicyParams) -> SpeedResult:
        """Returns the futility FAIL: no speedup, no line, the last orientation-1 window."""
        return _new_tuple(cls, ("FAIL", "futility", None, None, params.orientation1_windows))

    @classmethod
    def noise_above_seal(cls, window: int) -> SpeedResult:
        """Returns v2's guard NO_DECISION at ``window``: no speedup, no line (the windows
        spread wider than the seal, so no speed number is worth recording)."""
        return _new_tuple(cls, ("NO_DECISION", NOISE_ABOVE_SEAL, None, None, window))


class NodeTally(NamedTuple):
    """Sums one audited node's AuditNodeGraded counts over its ranks."""

    calls: int = 0
    violations: int = 0
    near_misses: int = 0
    uncomparable: int = 0
    #: The lowest ``min_score`` over the node's ranks, as recorded (explain shows it).
    min_score: str | None = None

    def add(self, graded: AuditNodeGraded) -> NodeTally:
        """Returns the tally with one more rank's counts added."""
        calls, violations, near_misses, uncomparable, low = self
        # The fields through ``__dict__``: pydantic models define ``__getattr__``, which puts
        # every attribute read on CPython's slow path.
        fields = graded.__dict__
        score = fields["min_score"]
        # Equal strings are equal values: skip the Decimal comparison.
        if low is None or (score != low and _C.compare(Decimal(score), Decimal(low)) < 0):
            low = score
        return _new_tuple(NodeTally, (
            calls + fields["calls"],
            violations + fields["violations"],
            near_misses + fields["near_misses"],
            uncomparable + fields["uncomparable"],
            low,
        ))


def node_outcome(params: PolicyParams, tally: NodeTally) -> str:
    """Returns one node's audit outcome: ``slot_audit_failed``, ``audit_not_covered`` or ""."""
    if tally.violations or tally.uncomparable:
        return "slot_audit_failed"
    allowed = _C.multiply(params.near_miss_rate_max, Decimal(tally.calls))
    if Decimal(tally.near_misses) > allowed:
        return "slot_audit_failed"
    if tally.calls < params.min_calls:
        return "audit_not_covered"
    return ""


def audit_outcome(params: PolicyParams, tallies: Mapping[str, NodeTally]) -> str:
    """Returns the audit outcome: any failing node fails it, then coverage, else "" (PASS)."""
    outcomes = [node_outcome(params, tally) for tally in tallies.values()]
    if "slot_audit_failed" in outcomes:
        return "slot_audit_failed"
    if not outcomes or "audit_not_covered" in outcomes:
        return "audit_not_covered"
    return ""


def quality_outcome(drift_within_envelope: bool, regression: bool) -> str:
    """Returns ``quality_drift`` (checked first), ``quality_regression`` or "" (PASS)."""
    if not drift_within_envelope:
        return "quality_drift"
    if regression:
        return "quality_regression"
    return ""


class Decision(NamedTuple):
    """Is exactly what an AttemptDecided must carry (besides block and rules version)."""

    verdict: str
    reason: str
    disposition: str
    speedup: str | None
    pass_line: str | None
    look_window: int | None

    @classmethod
    def of_event(cls, event: AttemptDecided) -> Decision:
        """Returns the decision an AttemptDecided records."""
        fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
        return _new_tuple(cls, (
            fields["verdict"],
            fields["reason"],
            fields["disposition"],
            fields["speedup"],
            fields["pass_line"],
            fields["look_window"],
        ))

    @classmethod
    def of_speed(cls, verdict: str, reason: str, speed: SpeedResult) -> Decision:
        """Returns a COMPLETE decision carrying the speed stage's numbers."""
        _, _, speedup, pass_line, look_window = speed
        return _new_tuple(cls, (verdict, reason, "COMPLETE", speedup, pass_line, look_window))

    @classmethod
    def of_speed_stage(cls, speed: SpeedResult) -> Decision:
        """Returns the decision a speed result that ends the attempt in SPEED records: a
        FAIL (COMPLETE), or v2's guard NO_DECISION with its reason's disposition."""
        verdict, reason, speedup, pass_line, look_window = speed
        disposition = verdict_disposition(reason) if verdict == "NO_DECISION" else "COMPLETE"
        verdict = "NO_DECISION" if verdict == "NO_DECISION" else "FAIL"
        return _new_tuple(cls, (verdict, reason, disposition, speedup, pass_line, look_window))

    def differences(self, other: Decision) -> list[str]:
        """Names the fields, in AttemptDecided order, where ``other`` differs."""
        names = ("verdict", "reason", "disposition", "speedup", "pass_line", "look_window")
        return [n for n in names if getattr(self, n) != getattr(other, n)]
