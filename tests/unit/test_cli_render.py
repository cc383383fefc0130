"""Unit tests of the CLI's human forms: ``explain`` (``cli.render``), ``evaluate``'s stages
(``cli.evaluate``), ``replay``'s report and progress bar (``cli.settlement_commands``) and how a
table fits a narrow terminal (``cli.common.new_table``).

The explain documents are the real ones (``machines.attempt.explain`` of folded attempts and
``services.arena_ledger.submission_row``), so a renamed key fails here, not in front of a user.
"""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli import common
from cli.common import (
    as_of_option,
    console,
    decision_text,
    emit_json,
    emit_jsonl,
    err_console,
    handle_errors,
    new_table,
    output_width,
    print_as_of,
    shown,
)
from cli.demo import _narrate
from cli.evaluate import _printer
from cli.render import _d, render_explain
from cli.settlement_commands import _progress, _render_replay
from machines import samples
from machines.arithmetic import Decision
from machines.attempt import AttemptState, explain
from machines.projection import LedgerFold
from machines.reasons import describe
from machines.scenario import Scenario
from services.arena_ledger import submission_row
from services.replay import Divergence, ReplayReport
from vocabulary.events import InfrastructureFault


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gives the tables room, as a terminal would, so no cell is cut to fit, and borders
    (under pytest stdout is captured, so the console was made for a pipe)."""
    monkeypatch.setattr(console, "width", 200)
    monkeypatch.setattr(console, "plain", False)


def _rendered(kind: str, document: dict[str, Any]) -> str:
    with console.capture() as captured:
        render_explain(kind, document)
    return captured.get()


def _cells(row: str) -> list[str]:
    """Returns the cells of one table row, stripped."""
    return [cell.strip() for cell in row.strip("│").split("│")]


def _attempt(scenario: Scenario, attempt_id: str) -> dict[str, Any]:
    state = scenario.fold.attempt(attempt_id)
    assert isinstance(state, AttemptState)
    return explain(state)


def _passed() -> tuple[Scenario, str]:
    scenario = Scenario(LedgerFold(detail=True))
    scenario.commission()
    sid = scenario.arrive(payment_ref="pay-1", paid_rao=1_000_000_000)
    scenario.evaluate(
        sid, "att-1", samples.WORKED_EXAMPLE_COSTS, samples.audit(), samples.quality()
    )
    return scenario, sid


def test_a_v2_attempt_shows_its_rules_and_every_noise_check() -> None:
    scenario = Scenario(LedgerFold(detail=True))
    scenario.commission(sealed=samples.policy_v2(futility_margin="0.05"))
    sid = scenario.arrive(payment_ref="pay-1", paid_rao=1_000_000_000)
    scenario.evaluate(sid, "att-1", ((1_000_000_000, 990_000_000), (1_000_000_000, 940_000_000)))
    doc = _attempt(scenario, "att-1")
    lines = _rendered("attempt", doc).splitlines()
    assert lines[0].endswith("  rules paired-windows.v2")
    (check,) = doc["noise_guard"]["checks"]
    row = next(line for line in lines if line.startswith("│ 2 ") and "yes" in line)
    assert _cells(row) == ["2", "1", _d(check["statistic"]), _d(check["critical"]), "yes"]
    assert any("noise guard (α 0.001, σw 0.01)" in line for line in lines)
    v1 = _rendered("attempt", _attempt(_passed()[0], "att-1"))
    assert "noise guard" not in v1


def test_an_attempt_shows_every_window_look_audit_node_and_the_verdict() -> None:
    scenario, _ = _passed()
    doc = _attempt(scenario, "att-1")
    text = _rendered("attempt", doc)
    lines = text.splitlines()
    assert lines[0] == (
        f"attempt att-1 (normal) state {doc['state']}  commission {doc['commission_digest'][:16]}…"
        "  rules paired-windows.v1"
    )
    for w in doc["windows"]:
        row = next(line for line in lines if line.startswith(f"│ {w['window']} "))
        cells = _cells(row)
        assert cells == [
            str(w["window"]),
            str(w["orientation"]),
            f"{w['stock_cost_ns']:,}",
            f"{w['candidate_cost_ns']:,}",
            _d(w["ratio"]),
        ]
    (look,) = doc["looks"]
    assert look["speedup"].startswith("1.01912895")  # the table cuts it, not rounds
    look_row = next(line for line in lines if line.startswith(f"│ {look['window']}    │"))
    cells = _cells(look_row)
    assert cells == [
        "3",
        _d(look["r1"]),
        _d(look["r2"]),
        "1.0191289",
        _d(look["se"]),
        _d(look["z"]),
        _d(look["pass_line"]),
        "pass",
    ]
    (node,) = doc["audit"]
    audit_row = next(line for line in lines if line.startswith(f"│ {node} "))
    assert _cells(audit_row) == [
        node,
        "64",
        "0",
        "0",
        "0",
        "0.999995",
        "PASS",
    ]
    assert f"  quality: {doc['quality']}" in lines
    assert not any(line.startswith(("  futility:", "  fault:")) for line in lines)
    assert lines[-1] == (
        "  verdict PASS reason - disposition COMPLETE speedup 1.019129 pass line 0.018884 look 3"
    )


def test_a_submission_heads_its_attempts_with_status_cause_and_next_step() -> None:
    scenario, sid = _passed()
    sub = scenario.fold.submission(sid)
    assert sub is not None
    row = submission_row(sub, describe)
    row["attempts"] = [_attempt(scenario, "att-1")]
    text = _rendered("submission", row)
    lines = text.splitlines()
    assert lines[:2] == [
        f"submission {sid}",
        f"  arena mlp-arena  hotkey {sub.hotkey}  arrival {tuple(row['arrival'])}",
    ]
    assert lines[2] == f"  status {row['status']}  reason {row['reason'] or '-'}"
    assert row["cause"] and f"  cause: {row['cause']}" in lines
    assert row["next_step"] and f"  next step: {row['next_step']}" in lines
    assert "" in lines and any(line.startswith("attempt att-1 (normal)") for line in lines)
    without = dict(row, cause="", next_step="", attempts=[])
    assert _rendered("submission", without).splitlines() == lines[:3]


def test_futility_and_a_fault_are_shown_and_an_undecided_attempt_shows_dashes() -> None:
    scenario = Scenario(LedgerFold(detail=True))
    scenario.commission(sealed=samples.policy(futility_margin="0.01"))
    sid = scenario.arrive(payment_ref="pay-1", paid_rao=1_000_000_000)
    scenario.claim(sid, "att-2")
    scenario.append(
        "attempt-att-2",
        samples.window(1, 1, 1_000_000_000, 990_000_000),
        InfrastructureFault(code="engine_killed", stage="speed", detail="SIGKILL on lane B"),
    )
    doc = _attempt(scenario, "att-2")
    lines = _rendered("attempt", doc).splitlines()
    assert (
        doc["futility_limit"]
        and f"  futility: R1 {_d(doc['r1'])} vs limit " + doc["futility_limit"] in lines
    )
    # A measured ratio has 34 digits; the human form cuts it (and R1) as the looks table does.
    long = "1.047529606831256978941364422449324"
    measured = dict(doc, r1=long, windows=[dict(doc["windows"][0], ratio=long)])
    shown_lines = _rendered("attempt", measured).splitlines()
    assert f"  futility: R1 1.0475296 vs limit {doc['futility_limit']}" in shown_lines
    assert any(_cells(line)[-1:] == ["1.0475296"] for line in shown_lines if line.startswith("│"))
    assert not any(long in line for line in shown_lines)
    assert f"  fault: {doc['fault']}" in lines
    assert not any(line.startswith("  quality:") for line in lines)
    # One window, no look and no audit: a line each says so, not headers over nothing.
    assert "looks: none taken" in lines and "audit: no node graded" in lines
    assert "speed windows" in lines  # a window: its table
    # Which way round a ratio is (a speedup is the other way), under the table it reads.
    assert any("ratio = candidate ÷ stock cost: above 1, the candidate was slower" in line
               for line in lines)
    assert not any("S-1 ≥ L?" in line or "near misses" in line for line in lines)
    empty = _rendered("attempt", dict(doc, windows=[], looks=[], audit={})).splitlines()
    assert [line for line in empty if line.endswith(("measured", "taken", "graded"))] == [
        "speed windows: none measured", "looks: none taken", "audit: no node graded"]
    undecided = dict(doc, decision=None)
    assert _rendered("attempt", undecided).splitlines()[-1] == (
        "  verdict - reason - disposition - speedup - pass line - look -"
    )


def test_control_characters_in_recorded_text_are_shown_not_obeyed() -> None:
    # Recorded free text is written by others: a hold reason by any operator of a shared
    # ledger, a fault detail by the candidate's code (an exception's text), and all of it by
    # another validator when an auditor imports their bundle. Printed raw, this text would
    # clear the screen, home the cursor and show a PASS; it is written out instead, in a
    # line, a Text and a table cell alike.
    hostile = "\x1b[2J\x1b[H  verdict PASS\rx\x9b1A\x07"
    shown = "\\x1b[2J\\x1b[H  verdict PASS\\x0dx\\x9b1A\\x07"
    scenario = Scenario(LedgerFold(detail=True))
    scenario.commission()
    sid = scenario.arrive(payment_ref="pay-1", paid_rao=1_000_000_000)
    scenario.claim(sid, "att-1")
    scenario.append(
        "attempt-att-1", InfrastructureFault(code="engine_killed", stage="speed", detail=hostile)
    )
    attempt = _rendered("attempt", _attempt(scenario, "att-1"))
    assert "'detail': '\\x1b[2J\\x1b[H  verdict PASS\\rx\\x9b1A\\x07'}" in attempt, attempt
    row = submission_row(scenario.fold.submission(sid), describe)  # type: ignore[arg-type]
    text = _rendered("submission", {**row, "reason": hostile, "attempts": []})
    assert f"  status QUALIFYING  reason {shown}\n" in text, text
    with console.capture() as captured:
        table = new_table("reason")
        table.add_row(hostile)
        console.print(table)
    assert shown in captured.get()
    for output in (attempt, text, captured.get()):
        assert not set(output) & {"\x1b", "\r", "\x07", "\x9b"}


def test_a_text_built_by_hand_is_written_out_and_riches_own_controls_are_kept() -> None:
    # A rich Text never passes through render_str; the console's render catches it. What
    # rich itself emits to move the cursor (a progress bar) are control segments: kept.
    from rich.control import Control
    from rich.segment import Segment
    from rich.text import Text

    with console.capture() as captured:
        console.print(Text.assemble(("bold", "bold"), " r\x1b[2Jx"))
    assert captured.get() == "bold r\\x1b[2Jx\n"
    moved = [s for s in console.render(Control.move_to(3, 2)) if isinstance(s, Segment)]
    assert moved and all(s.control for s in moved)
    assert "".join(s.text for s in moved) == "\x1b[3;4H"
    plain = list(console.render(Text("no controls here")))
    assert "".join(s.text for s in plain) == "no controls here\n"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "-"),
        ("12", "12"),
        ("1.2345678", "1.2345678"),  # seven places: as it is
        ("1.23456789", "1.2345678"),  # eight: cut to seven, not rounded
        ("-0.000000019", "-0.0000000"),
    ],
)
def test_decimals_are_cut_to_seven_places(value: str | None, shown: str) -> None:
    assert _d(value) == shown


_TIMING = {"seconds": 1.5, "cpu_seconds": 1.25, "events_per_second": 27, "build": "pure Python"}


def _replay_lines(report: ReplayReport) -> list[str]:
    with console.capture() as captured:
        _render_replay(report, _TIMING)
    return captured.get().splitlines()


def test_a_replay_of_one_of_each_says_so_in_the_singular() -> None:
    report = ReplayReport(events=1, last_position=1, verdicts_checked=1,
                          resolutions_checked=1, settlements_checked=1)
    assert _replay_lines(report)[0] == (
        "replay OK: 1 event to position 1, 1 verdict, 1 resolution, 1 settlement checked")


def test_a_replay_divergence_is_shown_with_its_place_field_and_both_values() -> None:
    forged = Divergence(
        41, "attempt-att-1", "AttemptDecided", "verdict", "PASS", "FAIL", "decision_mismatch"
    )
    report = ReplayReport(
        events=41,
        last_position=41,
        head_hash="ab" * 32,
        verdicts_checked=3,
        resolutions_checked=2,
        divergence=forged,
        expected_digest="cd" * 32,
    )
    assert _replay_lines(report) == [
        "replay DIVERGED: 41 events to position 41, 3 verdicts, 2 resolutions, 0 settlements "
        "checked",
        "took 1.50 s, 27 events/s (1.25 s of CPU; pure Python build)",
        f"head hash {'ab' * 32}",
        "settlement digest -",
        "first divergence at position 41 (attempt-att-1, AttemptDecided): decision_mismatch "
        "field verdict: recorded 'PASS', recomputed 'FAIL'",
    ]


def test_a_replay_that_reproduces_the_expected_digest_says_ok_and_nothing_more() -> None:
    report = ReplayReport(
        events=81,
        last_position=81,
        settlements_checked=1,
        settlement_digest="ef" * 32,
        expected_digest="ef" * 32,
    )
    lines = _replay_lines(report)
    assert lines[0].startswith("replay OK: 81 events to position 81, ")
    assert lines[2:] == [f"head hash {'0' * 64}", f"settlement digest {'ef' * 32}"]
    assert _replay_lines(ReplayReport(events=81, settlement_digest="ef" * 32))[2:] == lines[2:]


def test_a_replay_that_misses_the_expected_digest_says_which_it_expected() -> None:
    report = ReplayReport(
        events=81, last_position=81, settlement_digest="ef" * 32, expected_digest="0" * 64
    )
    lines = _replay_lines(report)
    assert lines[0].startswith("replay DIVERGED: 81 events to position 81, ")
    assert lines[2:] == [
        f"head hash {'0' * 64}", f"settlement digest {'ef' * 32}",
        f"expected digest {'0' * 64} differs",
    ]


def test_the_progress_bar_runs_only_on_a_terminal_and_never_with_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with _progress(1_000, quiet=False) as advance:
        assert advance is None
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with _progress(1_000, quiet=False) as advance:
        assert advance is None  # stdout piped: nobody watches the bar either
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    with _progress(1_000, quiet=True) as advance:
        assert advance is None
    bar = _progress(40_000, quiet=False)
    with bar as advance:
        (task,) = bar.bar.tasks
        shown = []
        for position in (199, 200, 201, 399, 400, 39_999, 40_000):  # every 1/200 and the last
            advance(position)
            shown.append(task.completed)
        assert shown == [0, 200, 200, 200, 400, 400, 40_000]
        assert bar.bar.live.is_started
    assert not bar.bar.live.is_started
    small = _progress(150, quiet=False)  # fewer than 200 positions: every one
    with small as advance:
        advance(1)
        assert small.bar.tasks[0].completed == 1


def test_a_narrow_terminal_cuts_a_word_too_wide_with_an_ellipsis_never_splits_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Folded, the hotkey ran on over three lines, split at any character: the issue asks
    # for cells cut with "…" or wrapped between words, never a word split across lines.
    monkeypatch.setattr(console, "width", 40)
    hotkey = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"  # 48 characters, as SS58
    table = new_table("hotkey", "status")
    table.add_row(hotkey, "rewarded")
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().splitlines()
    assert all(len(line) <= 40 for line in lines)
    (row,) = [line for line in lines if line.startswith("5Grw")]  # one line, not folded
    shown, status = row.split()
    assert shown.endswith("…") and hotkey.startswith(shown[:-1])
    assert status == "rewarded"


def _stages(show: Any) -> list[str]:
    """Feeds ``evaluate``'s printer each stage as the runner reports it (real payloads)."""
    with console.capture() as captured:
        show("window", samples.window(1, 1, 1_000_000_000, 990_000_000).model_dump(mode="json"))
        show("audit", {"nodes": 4})
        show("quality", samples.quality().model_dump(mode="json"))
        show("fault", {"code": "engine_killed", "stage": "speed"})
        show("control", {"control_id": "ctl-kill", "kind": "engine_kill"})
        show("decided", Decision("FAIL", "futility", "COMPLETE", None, None, 2)._asdict())
    return captured.get().splitlines()


def test_evaluate_prints_each_stage_and_the_verdict_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _printer(as_json=True) is None  # --json: one document at the end, nothing else
    stages = [
        "  window 1 (orientation 1): stock 1,000,000,000 ns, candidate 990,000,000 ns, "
        "ratio 0.9900 (candidate ÷ stock: above 1 is slower)",
        "  audit: 4 nodes graded",
        "  quality: agreement 0.998, regression False, envelope True",
        "  infrastructure fault engine_killed at speed",
        "control ctl-kill (engine_kill)",
    ]
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert _stages(_printer(as_json=False)) == stages  # the command prints the verdict last
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert _stages(_printer(as_json=False)) == [*stages, "  -> FAIL futility"]
    with console.capture() as captured:  # a PASS has no reason: none is printed
        _printer(as_json=False)("decided", Decision("PASS", None, "COMPLETE", "1.02", "0.01",
                                                    3)._asdict())
    assert captured.get() == "  -> PASS\n"


def test_a_decision_line_shows_none_as_a_dash_and_a_missing_reason_as_nothing() -> None:
    passed = Decision("PASS", None, "COMPLETE", "1.019129", "0.018884", 3)._asdict()
    killed = Decision("NO_DECISION", "engine_killed", "COMPLETE", None, None, 0)._asdict()
    assert decision_text(passed) == "PASS (COMPLETE) speedup 1.019129 pass line 0.018884"
    assert decision_text(killed) == (
        "NO_DECISION engine_killed (COMPLETE) speedup - pass line -")
    # The demo's progress (a reason, a speedup, nothing else) takes the same rules.
    assert decision_text({"verdict": "FAIL", "reason": "futility", "speedup": None}) == (
        "FAIL futility speedup -")
    assert (shown(None), shown(0), shown("")) == ("-", "0", "")
    with console.capture() as captured:
        _narrate("decided", {"verdict": "PASS", "reason": None, "speedup": "1.041883"})
        _narrate("decided", {"verdict": "FAIL", "reason": "futility", "speedup": None})
    assert captured.get().splitlines() == [
        "    -> PASS speedup 1.041883", "    -> FAIL futility speedup -"]


def test_no_help_text_holds_square_brackets_that_rich_would_take_for_markup() -> None:
    # typer renders --help through rich markup: "Control id ([a-z0-9._-], 1-64)." was shown
    # as "Control id (, 1-64)." Help texts spell character classes out instead.
    import typer.main

    from cli.app import app

    def texts(command: Any, path: str) -> Any:
        yield path, command.help or ""
        for param in command.params:
            yield f"{path} {param.name}", getattr(param, "help", None) or ""
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from texts(sub, f"{path} {name}")

    found = list(texts(typer.main.get_command(app), "arena-ledger"))
    assert len(found) > 150  # every command and option was walked
    assert [(where, text) for where, text in found if "[" in text] == []


def _recorded(position: int, stream: str, version: int = 1) -> Any:
    from ledger.records import RecordedEvent

    return RecordedEvent(position, stream, version, "CreditGranted", 1, b"{}",
                         "2026-12-02T07:00:00.000000Z", "cli", f"{position:064x}")


def test_the_events_listing_streams_in_chunks_aligned_to_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Printed a chunk at a time, so a large ledger's first line comes without building one
    # rich table of the whole ledger in memory. The header comes once, the
    # position column fits the last position, a longer stream later is shown whole.
    import cli.app

    monkeypatch.setattr(cli.app, "events_chunk_rows", 2)
    consumed: list[int] = []

    def rows() -> Any:
        for position, stream in [(1, "credit-a"), (2, "credit-b"), (3, "credit-c"),
                                 (4, "credit-much-longer-than-the-first-chunk"), (5, "credit-e")]:
            consumed.append(position)
            yield _recorded(position, stream)

    printed: list[tuple[list[int], str]] = []
    real_print = console.print

    def spy(*objects: Any, **options: Any) -> None:
        printed.append((list(consumed), str(objects[0])))
        real_print(*objects, **options)

    monkeypatch.setattr(console, "print", spy)
    with console.capture() as captured:
        cli.app._print_events(rows(), last_position=12345)
    lines = captured.get().splitlines()
    assert lines[0] == "pos    stream    ver  type              recorded_at                  hash"
    assert lines[1] == ("1      credit-a  1    CreditGranted v1  2026-12-02T07:00:00.000000Z  "
                        "0000000000000000")
    assert lines[4].startswith("4      credit-much-longer-than-the-first-chunk  1    Credit")
    assert lines[5].startswith("5      credit-e  1    CreditGranted v1  ")
    assert lines[6] == "5 events"
    assert sum(line.startswith("pos ") for line in lines) == 1
    # Each chunk was printed before the next rows were read.
    assert [seen for seen, _ in printed] == [[1, 2], [1, 2, 3, 4], [1, 2, 3, 4, 5],
                                             [1, 2, 3, 4, 5]]


def test_an_empty_events_listing_prints_its_header_and_zero() -> None:
    import cli.app

    with console.capture() as captured:
        cli.app._print_events(iter(()), last_position=0)
    assert captured.get() == "pos  stream  ver  type  recorded_at  hash\n0 events\n"


# Output rules of cli.common and cli.render (docs/cli.md): a reader that stops early ends a table
# with exit 0; a written-out control character keeps the style around it; off a terminal a table
# is wider than 80 columns so no row folds; data is never read as rich markup; --as-of takes 0 up
# to 2**53 - 1 and says position 0 like any other; JSON is one document indented by 2 in the
# document's key order, JSON Lines one object a line, streamed; the audit table shows each tally
# under its own header.


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: every write is refused, and counted."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


def test_a_table_to_a_reader_that_stopped_ends_with_exit_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipe = _ClosedPipe()
    piped = common._Console(file=pipe, soft_wrap=True, markup=False, width=80)
    monkeypatch.setattr(common.sys, "stderr", io.StringIO())  # handle_errors closes it

    @handle_errors
    def command() -> None:
        piped.print("a row")

    with pytest.raises(typer.Exit) as exited:
        command()
    assert exited.value.exit_code == 0
    assert pipe.writes >= 1  # the table did reach the pipe


def test_a_control_character_written_out_keeps_the_style_around_it() -> None:
    from rich.text import Text

    segments = list(console.render(Text.assemble(("r\x1b[2Jx", "bold"))))
    (shown,) = [s for s in segments if "\\x1b" in s.text]
    assert shown.text == "r\\x1b[2Jx"
    assert shown.style is not None and shown.style.bold


def test_off_a_terminal_a_table_keeps_each_row_on_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Pipe:
        def isatty(self) -> bool:
            return False

    width = output_width(Pipe(), {})
    assert width is not None
    monkeypatch.setattr(console, "width", width)
    hotkey = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"  # 48 characters, as SS58
    table = new_table("hotkey", "coldkey", "reason")
    table.add_row(hotkey, hotkey[::-1], "x" * 60)
    with console.capture() as captured:
        console.print(table)
    rows = [line for line in captured.get().splitlines() if line.startswith("│")]
    assert len(rows) == 1  # the one row, not folded over several lines
    assert hotkey in rows[0] and hotkey[::-1] in rows[0] and "x" * 60 in rows[0]


@pytest.mark.parametrize("printer", [console, err_console], ids=["stdout", "stderr"])
def test_square_brackets_in_data_are_printed_as_typed(printer: Any) -> None:
    with printer.capture() as captured:
        printer.print("5[b]Mal[/]ory [bold]x[/bold]")
    assert captured.get() == "5[b]Mal[/]ory [bold]x[/bold]\n"


def _as_of_app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def query(as_of: int | None = as_of_option()) -> None:
        print(f"as_of={as_of}")

    return app


@pytest.mark.parametrize(
    ("value", "exit_code"),
    [("0", 0), (str(2**53 - 1), 0), ("-1", 2), (str(2**53), 2)],
)
def test_as_of_takes_a_position_from_0_to_the_largest_json_integer(
    value: str, exit_code: int
) -> None:
    done = CliRunner().invoke(_as_of_app(), ["--as-of", value])
    assert done.exit_code == exit_code, done.output
    if exit_code == 0:
        assert done.output == f"as_of={value}\n"


def test_as_of_position_0_is_said_like_any_other() -> None:
    with console.capture() as captured:
        print_as_of(None, 7)  # not asked: nothing
        print_as_of(0, 0)
        print_as_of(5, 3)
    assert captured.get() == "as of position 0\nas of position 3\n"


def test_json_output_is_one_document_indented_by_two_in_the_documents_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit_json({"submission_id": "dd97", "admitted": False, "fee": None})
    assert capsys.readouterr().out == (
        '{\n  "submission_id": "dd97",\n  "admitted": false,\n  "fee": null\n}\n'
    )


def test_json_lines_are_one_object_a_line_in_order_ended_by_a_line_feed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = [
        {"stream": "credit-a", "position": 2, "payload": {"b": [1, 2], "a": None}},
        {"z": "last", "a": "first"},
    ]
    emit_jsonl(values)
    out = capsys.readouterr().out
    assert out.endswith("\n") and "\r" not in out
    lines = out.split("\n")[:-1]
    assert len(lines) == 2
    parsed = [json.loads(line) for line in lines]
    assert parsed == values
    assert [list(p) for p in parsed] == [["stream", "position", "payload"], ["z", "a"]]
    assert list(parsed[0]["payload"]) == ["b", "a"]


def test_json_lines_are_written_as_each_value_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(common.sys, "stdout", out)
    seen: list[str] = []

    def values() -> Any:
        yield {"position": 1}
        seen.append(out.getvalue())  # what was written before the second value was read
        yield {"position": 2}

    emit_jsonl(values())
    assert seen == ['{"position":1}\n']
    assert out.getvalue() == '{"position":1}\n{"position":2}\n'


def test_the_audit_table_shows_each_tally_under_its_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "width", 200)
    tally = {
        "calls": 64,
        "violations": 1,
        "near_misses": 2,
        "uncomparable": 3,
        "min_score": "0.97",
        "outcome": "FAIL",
    }
    with console.capture() as captured:
        render_explain("attempt", {"attempt_id": "att-1", "audit": {"lm_head": tally}})
    lines = captured.get().splitlines()
    start = lines.index("audit")

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.replace("┃", "│").strip("│").split("│")]

    header = next(line for line in lines[start:] if line.startswith("┃ node"))
    row = next(line for line in lines[start:] if line.startswith("│ lm_head"))
    assert dict(zip(cells(header), cells(row), strict=True)) == {
        "node": "lm_head",
        "calls": "64",
        "violations": "1",
        "near misses": "2",
        "uncomparable": "3",
        "min score": "0.97",
        "outcome": "FAIL",
    }
