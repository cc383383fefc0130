"""Computes an attempt's speed looks twice: through the Attempt machine, and the
straightforward way the fast paths replace, so tests can hold one to the other.
"""

from __future__ import annotations

from decimal import Decimal

from machines import attempt, samples
from machines.arithmetic import (
    Look,
    PolicyParams,
    SpeedResult,
    futile,
    ln,
    look,
    ratio,
)
from machines.refusal import Refusal


def reference_looks(
    params: PolicyParams, costs: list[tuple[int, int]]
) -> list[tuple[SpeedResult | None, tuple[Look, ...], Decimal | None]]:
    """Returns (speed, looks, ln R1) after each window, computed the straightforward way."""
    a = b = c = d = 0
    r1: Decimal | None = None
    ln_r1: Decimal | None = None
    looks: list[Look] = []
    speed: SpeedResult | None = None
    after = []
    n1 = params.orientation1_windows
    for index, (stock, candidate) in enumerate(costs, start=1):
        if speed is not None or index > params.windows:
            break
        if index <= n1:
            a, b = a + stock, b + candidate
        else:
            c, d = c + stock, d + candidate
        if index == n1:
            r1 = ratio(b, a)
            if futile(params, r1):
                speed = SpeedResult.futility(params)
        elif index > n1:
            assert r1 is not None
            ln_r1 = ln(r1)
            seen = look(params, index, r1, ln_r1, ratio(d, c))
            looks.append(seen)
            if seen.outcome != "continue":
                speed = SpeedResult.of_look(seen)
        after.append((speed, tuple(looks), ln_r1))
    return after


def machine_looks(
    params: PolicyParams, costs: list[tuple[int, int]]
) -> list[tuple[SpeedResult | None, tuple[Look, ...], Decimal | None]]:
    state = attempt.claim(samples.claimed("a" * 64, "c" * 64), params)
    after = []
    for index, (stock, candidate) in enumerate(costs, start=1):
        if state.speed is not None or index > params.windows:
            break
        event = samples.window(index, params.orientation(index), stock, candidate)
        result = attempt.step(state, event)
        assert not isinstance(result, Refusal), str(result)
        state = result
        after.append((state.speed, state.looks, state.ln_r1))
    return after
