"""Holds every bounded field of the event catalogue to its limits, one step inside and out.

The bounds come from docs/concepts.md (Identities), docs/machines.md (the sealed policy,
windows and looks 1..5) and from the field limits docs/events.md documents (names, targets,
notes, details). Each value is validated as an appender's payload (``CATALOGUE.validate``): the
last value inside a bound is accepted, the first outside is refused with a SchemaError
naming the field's JSON path, so moving a bound by one in vocabulary/events.py or
vocabulary/fields.py fails here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from machines import samples
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import InvalidInput, SchemaError
from vocabulary.events import Policy


def _commission() -> dict[str, Any]:
    return samples.commission_document()


def _admitted() -> dict[str, Any]:
    return {"block": 1, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": 1}}


def _arrived() -> dict[str, Any]:
    return samples.arrived().model_dump(mode="json", exclude_none=True)


def _rejected() -> dict[str, Any]:
    return {"block": 1, "reason": "missing_eval_cost_payment"}


def _credit() -> dict[str, Any]:
    return {"credit_id": "c-1", "hotkey": "5Hot", "amount_rao": 1, "note": ""}


def _window() -> dict[str, Any]:
    return samples.window(1, 1, 100, 90).model_dump(mode="json", exclude_none=True)


def _audit() -> dict[str, Any]:
    return samples.audit().model_dump(mode="json")


def _fault() -> dict[str, Any]:
    return {"code": "engine_killed", "stage": "speed", "detail": ""}


def _decided() -> dict[str, Any]:
    return {"verdict": "FAIL", "reason": "futility", "disposition": "COMPLETE",
            "speedup": None, "pass_line": None, "look_window": 2, "decided_block": 1,
            "rules_version": "paired-windows.v1"}


Base = Callable[[], dict[str, Any]]

#: Every integer field stays within ±(2**53 − 1), where JSON numbers are exact everywhere.
_INT_MAX = 2**53 - 1

#: (event type, base payload, dotted field, values accepted, values refused)
BOUNDS: list[tuple[str, Base, str, list[Any], list[Any]]] = [
    ("ArenaCommissioned", _commission, "arena_id",
     ["a", "a" + "-" * 62, "0" + "z" * 62], ["", "a" * 64, "-a", "A", "a_b"]),
    ("ArenaCommissioned", _commission, "emission_share_ppm", [0, 1_000_000], [-1, 1_000_001]),
    ("ArenaCommissioned", _commission, "policy.windows", [4, 5], [1, 6]),  # 2: z below
    ("ArenaCommissioned", _commission, "model.name", ["m", "m" * 256], ["", "m" * 257]),
    ("ArenaCommissioned", _commission, "model.revision", ["r", "r" * 256], ["", "r" * 257]),
    ("ArenaCommissioned", _commission, "hardware.gpu", ["g", "g" * 128], ["", "g" * 129]),
    ("ArenaCommissioned", _commission, "hardware.count", [1], [0]),
    ("ArenaCommissioned", _commission, "engine.runtime_version", ["v", "v" * 128],
     ["", "v" * 129]),
    ("ArenaCommissioned", _commission, "engine.image_digest", ["i", "i" * 256],
     ["", "i" * 257]),
    ("ArenaCommissioned", _commission, "incumbent_digest", ["0" * 64],
     ["0" * 63, "0" * 65, "A" * 64]),
    ("SubmissionArrived", _arrived, "target", ["t", "t" * 256], ["", "t" * 257]),
    ("SubmissionArrived", _arrived, "miner_hotkey", ["h", "h" * 64, "~!"],
     ["", "h" * 65, "a b", "a\tb"]),
    ("SubmissionArrived", _arrived, "payment_ref", ["p", "p" * 64, "a.b_c-9"],
     ["", "p" * 65, "P", "a/b"]),
    ("SubmissionAdmitted", _admitted, "fee.ref", ["", "r" * 64], ["r" * 65]),
    ("SubmissionAdmitted", _admitted, "block", [0, _INT_MAX], [-1, _INT_MAX + 1]),
    ("SubmissionRejected", _rejected, "reason", ["", "r" * 256], ["r" * 257]),
    ("CreditGranted", _credit, "credit_id", ["c", "c" * 64], ["", "c" * 65]),
    ("CreditGranted", _credit, "note", ["", "n" * 512], ["n" * 513]),
    ("WindowMeasured", _window, "window", [1, 5], [0, 6]),
    ("WindowMeasured", _window, "orientation", [1, 2], [0, 3]),
    ("WindowMeasured", _window, "stock_cost_ns", [1, _INT_MAX], [0, _INT_MAX + 1]),
    ("WindowMeasured", _window, "stock_output_tokens", [0, _INT_MAX], [-1, _INT_MAX + 1]),
    ("AuditNodeGraded", _audit, "node", ["n", "n" * 256], ["", "n" * 257]),
    ("AuditNodeGraded", _audit, "rank", [0], [-1]),
    ("InfrastructureFault", _fault, "stage", ["s", "s" * 64], ["", "s" * 65]),
    ("InfrastructureFault", _fault, "detail", ["", "d" * 2048], ["d" * 2049]),
    ("AttemptDecided", _decided, "look_window", [None, 1, 5], [0, 6]),
]


def _with(document: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    *parents, leaf = dotted.split(".")
    target = changed
    for name in parents:
        target = target[name]
    target[leaf] = value
    return changed


@pytest.mark.parametrize(("event_type", "base", "field", "accepted", "refused"), BOUNDS,
                         ids=[f"{case[0]}.{case[2]}" for case in BOUNDS])
def test_each_bound_accepts_its_last_value_and_refuses_the_next(
    event_type: str, base: Base, field: str, accepted: list[Any], refused: list[Any],
) -> None:
    document = base()
    CATALOGUE.validate(event_type, 1, document)  # the base itself is valid
    for value in accepted:
        CATALOGUE.validate(event_type, 1, _with(document, field, value))
    for value in refused:
        # SchemaError, or for an integer past 2**53 - 1 the codec's CanonicalFormError,
        # which refuses it before the schema is consulted.
        with pytest.raises(InvalidInput) as caught:
            CATALOGUE.validate(event_type, 1, _with(document, field, value))
        assert caught.value.context["path"] == f"$.payload.{field}", (value, caught.value)


# ------------------------------------------------------------------- the sealed policy


def _policy_with(**changes: Any) -> dict[str, Any]:
    return _with(_commission(), "policy", {**_commission()["policy"], **changes})


@pytest.mark.parametrize("changes", [
    {"window_noise": "0.02", "boot_noise": "0.02"},
    {"window_noise": "0", "boot_noise": "0.000001"},
    {"window_noise": "0.000001", "boot_noise": "0"},
    {"required_gain": "0"},
    {"windows": 2, "z": {"2": "2"}},
    {"windows": 5, "z": {"1": "3", "2": "2.5", "3": "2", "4": "1.5", "5": "1"}},
])
def test_the_policy_accepts_the_edges_domain_6_allows(changes: dict[str, Any]) -> None:
    CATALOGUE.validate("ArenaCommissioned", 1, _policy_with(**changes))


@pytest.mark.parametrize(("changes", "message"), [
    ({"window_noise": "0.020001"}, "must lie in [0, 0.02]"),
    ({"boot_noise": "0.020001"}, "must lie in [0, 0.02]"),
    ({"window_noise": "-0.000001"}, "must lie in [0, 0.02]"),
    ({"window_noise": "0", "boot_noise": "0"}, "at least one of window_noise and boot_noise"),
    ({"required_gain": "-0.000001"}, "required_gain must be >= 0"),
    ({"windows": 5, "z": {"0": "2"}}, "z key '0' is not a window index 1..5"),
    ({"windows": 5, "z": {"6": "2"}}, "z key '6' is not a window index 1..5"),
    ({"windows": 5, "z": {"03": "2"}}, "z key '03' is not a window index 1..5"),
    ({"windows": 3, "z": {"4": "2"}}, "z names a window past `windows`"),
])
def test_the_policy_refuses_one_step_past_each_edge(
    changes: dict[str, Any], message: str,
) -> None:
    with pytest.raises(SchemaError, match=r"\$\.payload\.policy") as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, _policy_with(**changes))
    assert message in caught.value.message


def test_the_policy_defaults_are_domain_6s() -> None:
    """sla_blocks 500,000, reward margin 0.015, g = 0, audit band 0.03 and rate 0.01."""
    document = _commission()["policy"]
    for unset in ("sla_blocks", "reward_margin", "required_gain", "futility_margin"):
        document.pop(unset, None)
    sealed = Policy.model_validate(document)
    assert sealed.sla_blocks == 500_000 and sealed.reward_margin == "0.015"
    assert sealed.required_gain == "0" and sealed.futility_margin is None
    assert (sealed.audit.near_miss_band, sealed.audit.near_miss_rate_max) == ("0.03", "0.01")


def test_the_catalogue_page_states_each_bound() -> None:
    """docs/events.md is rendered from the models: a bound shows beside its field."""
    from cli.docs import render_events_md

    page = render_events_md()
    for row in (
        "| `policy.windows` | int in [2, 5] |",
        "| `model.name` | str, 1 to 256 characters |",
        "| `emission_share_ppm` | int in [0, 1,000,000] |",
        "| `fee_rao` | int in [0, 2^53 − 1] |",
        "| `note` | str, 0 to 512 characters |",
        "| `detail` | str, 0 to 2,048 characters |",
        "| `look_window` | int in [1, 5] or null |",
        "| `expected_reason` | str, 0 to 256 characters or null |",
        "| `credit_id` | str `^[a-z0-9._-]{1,64}$` |",
    ):
        assert row in page, row


@pytest.mark.parametrize(("field", "low"), [("stock_cost_ns", 1), ("stock_output_tokens", 0)])
def test_a_model_built_in_process_holds_the_integer_range_too(field: str, low: int) -> None:
    """The engine bridge builds models before any payload is encoded: the schema keeps
    integers within [low, 2**53 - 1] itself, not only the codec."""
    from pydantic import ValidationError

    from vocabulary.events import WindowMeasured

    document = _window()
    for value in (low, _INT_MAX):
        assert getattr(WindowMeasured.model_validate({**document, field: value}), field) == value
    for value in (low - 1, _INT_MAX + 1):
        with pytest.raises(ValidationError, match=field):
            WindowMeasured.model_validate({**document, field: value})
