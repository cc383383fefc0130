"""Holds docs/domain.md, the hand-written domain reference, to the code it describes.

The page restates tables the code owns (reason codes, states, transitions, events, fault
dispositions, policy defaults, constants, settlement refusals) so that a reader has the
contract on one page; each test here fails when the page and the code part.
"""

from __future__ import annotations

import ast
import importlib
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticUndefined

from machines import arena, attempt, payment, samples, submission
from machines.arithmetic import FAULT_DISPOSITIONS, compile_policy, fixed, ln, look, ratio
from machines.reasons import REASONS
from machines.refusal import Refusal
from machines.table import Table
from vocabulary.events import (
    ALL_EVENTS_V1,
    FAULT_CODES,
    AttemptClaimed,
    AuditPolicy,
    Policy,
    PolicyV2,
    WindowMeasured,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGE = DOCS / "domain.md"

MACHINES: dict[str, Table[Any, Any]] = {
    "submission": submission.TABLE,
    "attempt": attempt.TABLE,
    "arena": arena.TABLE,
    "payment": payment.PAYMENT_TABLE,
    "credit": payment.CREDIT_TABLE,
}
#: The page's transition tables by subsection, and the machines each one covers.
TRANSITION_SECTIONS = {
    "Submission": ("submission",),
    "Attempt": ("attempt",),
    "Arena": ("arena",),
    "Payment and credit": ("payment", "credit"),
}
NO_STATE = "—"


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """Returns the body under ``heading`` (a whole line) up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", text[start:], re.M)]
    return text[start:start + ends[0]] if ends else text[start:]


def _tables(body: str) -> list[list[list[str]]]:
    """Returns every Markdown table in ``body`` as rows of cells, header and rule dropped."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in body.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip()[1:-1].split("|")]
            if current is None:
                current = [cells]
                tables.append(current)
            else:
                current.append(cells)
        else:
            current = None
    return [t[2:] for t in tables]


def _table(body: str, header_start: str) -> list[list[str]]:
    """Returns the rows of the one table whose header line starts with ``header_start``."""
    found = [
        table for table, header in zip(_tables(body), _headers(body), strict=True)
        if header.startswith(header_start)
    ]
    assert len(found) == 1, f"expected one table headed {header_start!r}, found {len(found)}"
    return found[0]


def _headers(body: str) -> list[str]:
    lines = body.splitlines()
    return [
        line for i, line in enumerate(lines)
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
    ]


def _plain(cell: str) -> str:
    return cell.replace("`", "").strip()


def _names(cell: str) -> list[str]:
    return [_plain(name) for name in cell.split(",")]


def test_every_reason_code_is_listed_once_with_its_kind_and_a_cause() -> None:
    rows = _table(_section(_text(), "## Reason codes"), "| code | kind | cause |")
    codes = [_plain(code) for code, _, _ in rows]
    assert len(codes) == len(set(codes)), "a code is listed twice"
    listed = {_plain(code): kind for code, kind, _ in rows}
    assert listed == {code: entry.kind for code, entry in REASONS.items()}
    assert all(cause for _, _, cause in rows)


def test_every_machine_lists_its_states_initial_and_terminal_states() -> None:
    rows = _table(_section(_text(), "## States and transitions"), "| machine |")
    assert {row[0] for row in rows} == set(MACHINES)
    for name, _stream, states, initial, terminals in rows:
        table = MACHINES[name]
        assert _names(states) == list(table.states), name
        assert _plain(initial) == table.initial, name
        assert set(_names(terminals)) == set(table.terminals), name


@pytest.mark.parametrize(("heading", "machines"), TRANSITION_SECTIONS.items())
def test_each_transition_table_is_the_machines_own(heading: str, machines: tuple[str, ...]) -> None:
    body = _section(_section(_text(), "## States and transitions"), f"### {heading}")
    listed: set[tuple[str | None, str, str]] = set()
    for source, event_type, target, when in _table(body, "| from | event | to |"):
        assert when, f"{event_type} from {source} says nothing of when"
        for state in _names(source):
            if state == NO_STATE:
                listed.add((None, event_type, _plain(target)))
            else:
                listed.add((state, event_type, state if target == "same state" else _plain(target)))
    expected: set[tuple[str | None, str, str]] = set()
    for name in machines:
        table = MACHINES[name]
        expected.add((None, table.opening, table.initial))
        expected |= {(e.source, e.event_type, e.target) for e in table.edges()}
    assert listed == expected


def test_every_event_type_is_listed_in_its_own_stream() -> None:
    rows = _table(_section(_text(), "## Events and streams"), "| stream | event |")
    listed = {}
    for stream, event, records in rows:
        name = re.fullmatch(r"\[`(\w+)`\]\(events\.md#\w+-v1\)", event)
        assert name is not None, event
        assert records
        listed[name.group(1)] = _plain(stream).split("-<", 1)[0]
    assert listed == {model.event_type: model.category for model in ALL_EVENTS_V1}


def test_fault_codes_and_dispositions_are_the_codes() -> None:
    body = _section(_text(), "## Verdicts, NO_DECISION and dispositions")
    rows = _table(body, "| fault code | disposition |")
    assert [_plain(code) for code, _, _ in rows] == list(FAULT_CODES)
    assert {_plain(code): disposition for code, disposition, _ in rows} == dict(FAULT_DISPOSITIONS)


def _expected_default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "null"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, int):
        return f"{value:,}"
    assert value == [], value
    return "[]"


def test_policy_table_lists_every_sealed_field_with_its_default() -> None:
    body = _section(_text(), "## Decision arithmetic (`paired-windows.v1`)")
    rows = _table(body, "| field | symbol | bounds | default |")
    listed = {_plain(name): _plain(default) for name, _, _, default in rows}
    expected = {
        name: _expected_default(field)
        for name, field in Policy.model_fields.items() if name != "audit"
    }
    expected |= {
        f"audit.{name}": _expected_default(field)
        for name, field in AuditPolicy.model_fields.items()
    }
    assert listed == expected


def test_the_v2_policy_table_lists_what_v2_changes_and_the_rest_is_v1s() -> None:
    body = _section(_text(), "## Decision arithmetic (`paired-windows.v2`)")
    rows = _table(body, "| field | symbol | bounds | default |")
    listed = {_plain(name): _plain(default) for name, _, _, default in rows}
    assert listed == {name: "required" for name in (
        "policy_version", "windows", "window_noise", "boot_noise", "noise_guard_alpha")}
    assert all(PolicyV2.model_fields[name].is_required() for name in listed)
    for name, field in PolicyV2.model_fields.items():  # the rest: v1's fields and defaults
        if name not in listed:
            assert _expected_default(field) == _expected_default(Policy.model_fields[name])


def test_the_v2_worked_example_is_what_the_guard_computes() -> None:
    text = _section(_text(), "## Decision arithmetic (`paired-windows.v2`)").replace("\n", " ")
    seven = Decimal("0.0000001")
    params = compile_policy(samples.policy_v2())
    bound = params.noise_lines[3]
    assert bound is not None and bound.dof == 1
    for costs, shown in (((990, 985, 975), "≤"), ((990, 940, 975), ">")):
        state = attempt.claim(samples.claimed("a" * 64, "c" * 64), params)
        for index, cost in enumerate(costs, start=1):
            event = samples.window(index, params.orientation(index), 10**9, cost * 10**6)
            result = attempt.step(state, event)
            assert isinstance(result, attempt.AttemptState)
            state = result
        (check,) = state.noise_checks
        assert check.trips == (shown == ">")
        statistic, critical = check.statistic.quantize(seven), bound.critical.quantize(seven)
        assert f"T ≈ {statistic} {shown} χ²(0.999, 1) ≈ {critical}" in text
    assert f"S ≈ {state.looks[-1].speedup.quantize(seven)}" in text


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise AssertionError(f"{dotted} names nothing")


def test_constants_are_the_values_the_code_holds() -> None:
    rows = _table(_section(_text(), "## Bounds and constants"), "| what | value |")
    assert rows
    for what, value, where in rows:
        actual = _resolve(_plain(where))
        shown = _plain(value)
        assert shown == (f"{actual:,}" if isinstance(actual, int) else actual), what


def test_the_worked_example_is_what_the_arithmetic_computes() -> None:
    # The inputs the page states: sigma_w = sigma_b = 0.01, W = 4, z = {3: 2, 4: 1.5}.
    sealed = Policy.model_validate({
        "policy_version": "paired-windows.v1", "windows": 4, "z": {"3": "2", "4": "1.5"},
        "window_noise": "0.01", "boot_noise": "0.01", "audit": {"bar": "0.99999", "min_calls": 1},
    })
    params = compile_policy(sealed)
    r1 = ratio(990_000_000 + 985_000_000, 2_000_000_000)
    seen = look(params, 3, r1, ln(r1), ratio(975_000_000, 1_000_000_000))
    assert seen.outcome == "pass" and seen.pass_line is not None
    text = _section(_text(), "## Decision arithmetic (`paired-windows.v1`)")
    seven = Decimal("0.0000001")
    for name, value in (("S", seen.speedup), ("SE", seen.se), ("L", seen.pass_line)):
        assert f"{name} ≈ {value.quantize(seven)}" in text
    assert f"R₁ = 1,975,000,000 / 2,000,000,000 = {r1}" in text
    recorded = (
        f'speedup `"{fixed(seen.speedup)}"`, pass line `"{fixed(seen.pass_line)}"`, '
        f"look_window {seen.window}"
    )
    assert recorded in text.replace("\n", " ")


def test_the_worked_examples_fourth_window_is_refused_as_the_page_says() -> None:
    sealed = Policy.model_validate({
        "policy_version": "paired-windows.v1", "windows": 4, "z": {"3": "2", "4": "1.5"},
        "window_noise": "0.01", "boot_noise": "0.01", "audit": {"bar": "0.99999", "min_calls": 1},
    })
    state = attempt.claim(
        AttemptClaimed(
            attempt_id="a1", submission_id="a" * 64, arena_id="a", commission_digest="c" * 64,
            pair_id="p1", validator_hotkey="v", claimed_block=1, plan="normal",
        ),
        compile_policy(sealed),
    )
    for index, candidate in enumerate((990_000_000, 985_000_000, 975_000_000), start=1):
        state = attempt.apply(state, _window(index, 1 if index <= 2 else 2, candidate))
    refusal = attempt.step(state, _window(4, 2, 980_000_000))
    assert isinstance(refusal, Refusal) and refusal.code == "window_after_speed_decided"
    assert "refused `window_after_speed_decided`" in _text().replace("\n", " ")


def _window(index: int, orientation: int, candidate: int) -> WindowMeasured:
    return WindowMeasured(
        window=index, orientation=orientation, stock_cost_ns=1_000_000_000,
        candidate_cost_ns=candidate, stock_output_tokens=8, candidate_output_tokens=8,
    )


def _reasons_passed(path: Path, call: str) -> set[str]:
    """Returns the constant reasons ``path`` passes to ``call``: second argument or reason=."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != call:
            continue
        candidates = [k.value for k in node.keywords if k.arg == "reason"]
        if call == "_refuse" and len(node.args) > 1:
            candidates.append(node.args[1])
        found |= {
            c.value for c in candidates if isinstance(c, ast.Constant) and isinstance(c.value, str)
        }
    return found


def test_every_settlement_refusal_is_listed() -> None:
    rows = _table(_section(_text(), "## Settlement (`settlement-rules.v1`)"), "| code | cause |")
    listed = {_plain(code) for code, _ in rows}
    raised = _reasons_passed(ROOT / "machines" / "settlement_rules.py", "_refuse")
    raised |= _reasons_passed(ROOT / "services" / "settlements.py", "Refused")
    assert raised, "the scan found no refusal at all"
    assert listed == raised


def _slug(heading: str) -> str:
    """Returns the anchor GitHub gives a heading: lower case, punctuation dropped, '-' for ' '."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#+ (.*)", line)):
            slug = base = _slug(match.group(1))
            count = 0
            while slug in anchors:
                count += 1
                slug = f"{base}-{count}"
            anchors.add(slug)
    return anchors


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _broken(source: Path, target: str) -> str | None:
    path_part, _, anchor = target.partition("#")
    path = source if not path_part else (source.parent / path_part).resolve()
    if not path.exists():
        return f"{source.name}: {target}: no such file"
    if anchor and path.suffix == ".md" and anchor not in _anchors(path):
        return f"{source.name}: {target}: no such heading"
    return None


def test_the_pages_links_reach_a_file_and_heading() -> None:
    links = [t for t in LINK.findall(_text()) if "://" not in t]
    assert links
    assert [b for t in links if (b := _broken(PAGE, t)) is not None] == []


def test_links_into_the_page_reach_a_heading() -> None:
    sources = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    links = [
        (source, target) for source in sources for target in LINK.findall(source.read_text())
        if target.split("#")[0].endswith("domain.md")
    ]
    assert any(source.name == "index.md" for source, _ in links), "docs/index.md must link it"
    assert [b for s, t in links if (b := _broken(s, t)) is not None] == []
