"""Holds ``evaluate``, ``run-controls`` and ``demo`` to the rule for bad input, as typed.

Each refusal is one ``error[…]`` line naming the option the person typed (not the event
field it feeds), exit 1, and the ledger's head where it was: ``run-controls`` grants no
credit and admits no submission when its claim refuses ``--validator``, and ``demo
--workdir`` naming a file is one error line, not a traceback. None of these boots the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from evaluate_queue import ARENA, queued  # same directory

SHAPE = "String should match pattern "


@pytest.fixture(scope="module")
def arena(cli_factory: Callable[[str], Any]) -> dict[str, Any]:
    """Returns a ledger with a commissioned arena, a control and a QUEUED submission."""
    cli = cli_factory("engine-inputs")
    intake = queued(cli)
    return {"cli": cli, "sid": intake["submission_id"], "head": cli.head()}


def test_a_bad_option_is_named_as_typed_and_nothing_is_written(arena: dict[str, Any]) -> None:
    cli, sid = arena["cli"], arena["sid"]
    calls = [
        (("run-controls", ARENA, "--block", "300000", "--validator", ""),
         f"[path --validator]: --validator: {SHAPE}"),
        (("run-controls", ARENA, "--block", "300000", "--validator", "a b"),
         f"[path --validator]: --validator: {SHAPE}"),
        (("evaluate", sid, "--block", "1100", "--validator", "a b"),
         f"[path --validator]: --validator: {SHAPE}"),
        (("evaluate", sid, "--block", "1100", "--pair", "Pair 0"),
         f"[path --pair]: --pair: {SHAPE}"),
        (("evaluate", sid, "--block", "1100", "--attempt", "Bad Attempt"),
         f"[path --attempt]: --attempt: {SHAPE}"),
        (("evaluate", sid, "--block", "1100", "--plan", "fast"),
         "[path --plan]: --plan: Input should be 'normal' or 'calibration_observation'"),
    ]
    done = cli.many([(args, 1) for args, _ in calls])
    for (args, line), result in zip(calls, done, strict=True):
        error = cli.error_line(result.stderr, "schema_invalid")
        assert line in error, (args, error)
    hotkey = "(a hotkey is 1-64 printable non-space ASCII characters; got {})"
    assert hotkey.format("''") in done[0].stderr
    assert hotkey.format("'a b'") in done[1].stderr
    assert cli.head() == arena["head"]
    # The control never started: no credit, no submission, no attempt.
    [control] = cli.jsonl("controls", ARENA)
    assert (control["control_id"], control["submission_id"], control["outcome"]) == (
        "kill", None, "pending")
    assert cli.jsonl("events", "--type", "CreditGranted") == []
