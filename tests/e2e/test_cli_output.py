"""Checks what the settlement and arena commands print (cli/settlement_commands.py and
cli/arena_commands.py): each filter and --as-of is applied, counts and separators are kept,
and errors come in the documented order with the documented exit code.

The settled ledger of tests/integration/settled_ledger.py (92 events: two arenas,
seven submissions, three settlements; its docstring works every number out by hand) is
written once per module in-process; every read is then the installed ``arena-ledger``
script in a subprocess (``conftest.Cli``). Tests that write work on a copy of it.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

import pytest
from scenario_loader import settlement_scenario  # same directory

from cli.common import console
from cli.settlement_commands import _progress, _render_replay, _rewards_count
from machines import samples
from services.replay import ReplayReport

S = settlement_scenario()


@pytest.fixture(scope="module")
def settled(cli_factory: Callable[[str], Any]) -> tuple[Any, Any]:
    """Writes the settled ledger into a module-wide Cli's database; returns (cli, built)."""
    cli = cli_factory("settled")
    ledger = S.open_ledger(cli.db)
    try:
        built = S.build_settled(ledger)
    finally:
        ledger.close()
    return cli, built


def _copy(settled: tuple[Any, Any], cli_factory: Callable[[str], Any], name: str) -> Any:
    """Returns a Cli on a copy of the settled ledger (for tests that write)."""
    source, target = settled[0], cli_factory(name)
    with sqlite3.connect(source.root / "l.db") as src, \
            sqlite3.connect(target.root / "l.db") as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return target


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("│").split("│")]


def _rows(text: str) -> list[list[str]]:
    """Returns the body rows of a rich table (box-drawing lines and the header left out)."""
    return [_cells(line) for line in text.splitlines() if line.startswith("│")]


def _money(sums: dict[str, int]) -> list[str]:
    return [f"{sums[k]:,}" for k in ("consumed_rao", "released_rao", "net_rao",
                                      "credits_spent_rao")]


# --- cli/settlement_commands.py ------------------------------------------------------------------


def test_fees_for_one_arena_show_that_arena_and_its_own_total(settled: tuple[Any, Any]) -> None:
    cli, _ = settled
    text, document = cli.many([(("fees", "--arena", S.ARENA_B), 0),
                               (("fees", "--arena", S.ARENA_B, "--json"), 0)])
    assert json.loads(document.stdout) == {"arenas": {S.ARENA_B: S.FEES_B}, "total": S.FEES_B}
    assert _rows(text.stdout) == [[S.ARENA_B, *_money(S.FEES_B)], ["TOTAL", *_money(S.FEES_B)]]


def test_fees_as_of_a_position_before_the_refund(settled: tuple[Any, Any]) -> None:
    cli, _ = settled
    (refund,) = cli.jsonl("events", "--type", "PaymentReleased")  # a2's, in mlp-a
    before = refund["position"] - 1
    text, document = cli.many([(("fees", "--as-of", str(before)), 0),
                               (("fees", "--as-of", str(before), "--json"), 0)])
    unrefunded = {**S.FEES_A, "released_rao": 0, "net_rao": S.FEES_A["consumed_rao"]}
    total = {k: unrefunded[k] + S.FEES_B[k] for k in unrefunded}
    assert json.loads(document.stdout) == {
        "arenas": {S.ARENA_A: unrefunded, S.ARENA_B: S.FEES_B}, "total": total}
    lines = text.stdout.splitlines()
    assert lines[0] == f"as of position {before}"
    assert _rows(text.stdout) == [[S.ARENA_A, *_money(unrefunded)],
                                  [S.ARENA_B, *_money(S.FEES_B)], ["TOTAL", *_money(total)]]


def test_the_rewards_count_groups_thousands_in_every_number() -> None:
    rows = [{"status": "rewarded"}] * 1_000 + [{"status": "pending"}] * 1_200
    assert _rewards_count(rows, "mlp-a") == (
        "2,200 PASS verdicts in arena mlp-a: 1,200 pending, 1,000 rewarded")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("replay", "--expect", "deadbeef"),
         "error[invalid_input] [path --expect]: the expected settlement digest must be 64 hex "
         "characters (a SHA-256, as settle prints it); got 'deadbeef'"),
        (("explain", "settlement", "att-a1"),
         "error[invalid_input] [path settlement]: explain takes 'submission' or 'attempt', "
         "not 'settlement'"),
    ],
    ids=["replay-expect", "explain-kind"],
)
def test_a_bad_argument_is_refused_before_the_store_is_opened(
    cli: Any, args: tuple[str, ...], error: str
) -> None:
    # Checked before anything is read: on a database with no ledger the error is the
    # argument's (exit 1), not the store's (exit 5), and no file is created.
    done = cli(*args, expect=1)
    assert done.stdout == ""
    assert cli.error_line(done.stderr, "invalid_input") == error
    assert not (cli.root / "l.db").exists()


def test_a_zero_half_life_is_a_usage_error_and_writes_nothing(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    cli = _copy(settled, cli_factory, "half-life")
    head = cli.head()
    done = cli("emission-policy", "--half-life-blocks", "0", "--burn-hotkey", "5Burn",
               "--validator-hotkey", "5Validator", expect=2)
    assert done.stdout == "" and "--half-life-blocks" in done.stderr
    assert cli.head() == head


def test_the_replay_rate_groups_thousands() -> None:
    timing = {"seconds": 0.5, "cpu_seconds": 0.25, "events_per_second": 123_456,
              "build": "pure Python"}
    with console.capture() as captured:
        _render_replay(ReplayReport(events=61_728, last_position=61_728), timing)
    assert captured.get().splitlines()[1] == (
        "took 0.50 s, 123,456 events/s (0.25 s of CPU; pure Python build)")


def test_the_progress_bar_ends_on_the_last_position_whatever_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = _progress(1_001, quiet=False)  # a step of 5: 1,001 is not a multiple of it
    with bar as advance:
        (task,) = bar.bar.tasks
        advance(1_000)
        advance(1_001)
        assert task.completed == 1_001


def test_a_signed_bundle_is_named_as_typed_like_an_unsigned_one(
    settled: tuple[Any, Any],
) -> None:
    cli, _ = settled
    cli("key", "generate", "--name", "validator.example", "--out", "v.key")
    cli("export", "bundle", "--key", "v.key")
    typed = "./bundle/"
    signed, unsigned = cli.many([
        (("replay", "--from-bundle", typed, "--key", "v.key.pub", "--json"), 0),
        (("replay", "--from-bundle", typed, "--json"), 0)])
    assert json.loads(signed.stdout)["bundle"]["path"] == typed
    assert json.loads(unsigned.stdout)["bundle"]["path"] == typed


# --- cli/arena_commands.py ----------------------------------------------------------------------


def _table(text: str) -> list[list[str]]:
    """Returns a rich table's rows, a row folded over several lines joined back cell by cell."""
    rows: list[list[str]] = []
    for cells in _rows(text):
        if rows and cells[0] == "":
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


def _arrival(content: str, *, block: int, index: int = 0) -> tuple[str, dict[str, Any]]:
    """Returns (submission id, the intake document) of a new paid mlp-a arrival."""
    event = samples.arrived(S.ARENA_A, hotkey="5Dave", content=content, block=block,
                            index=index, payment_ref=f"pay-{content}")
    document = event.model_dump(mode="json", exclude_unset=True)
    del document["submission_id"]
    return event.submission_id, document


def test_a_recorded_commission_read_from_stdin_says_nothing_was_written(
    settled: tuple[Any, Any],
) -> None:
    cli, _ = settled
    head = cli.head()
    payload = samples.commissioned(S.ARENA_A, fee_rao=S.FEE_A, emission_share_ppm=S.SHARE_A)
    done = cli("commission", "-", stdin=json.dumps(payload.model_dump(
        mode="json", exclude_unset=True)))
    digest = cli.json("explain", "attempt", "att-a1")["commission_digest"]
    assert done.stdout == (f"commissioned {S.ARENA_A} at position 1; commission_digest {digest} "
                           "(already recorded: nothing was written)\n")
    assert cli.head() == head


def test_a_commission_that_is_not_an_object_is_one_error_line(settled: tuple[Any, Any]) -> None:
    cli, _ = settled
    head = cli.head()
    (cli.root / "list.json").write_text(json.dumps([{"arena_id": S.ARENA_A}]))
    done = cli("commission", "list.json", expect=1)
    assert done.stdout == ""
    assert cli.error_line(done.stderr, "invalid_input") == (
        "error[invalid_input] [path $]: the commission must be a JSON object")
    assert cli.head() == head


def test_an_intake_from_stdin_records_the_intake_block_given(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    cli = _copy(settled, cli_factory, "intake")
    sid, document = _arrival("d1", block=2_000)
    done = cli("intake", "-", "--paid-rao", str(S.FEE_A), "--block", "2005",
               stdin=json.dumps(document))
    assert done.stdout == f"submission {sid} admitted at positions 93..95\n"
    events = cli.jsonl("events", "--stream", f"submission-{sid}")
    assert [(e["type"], e["payload"].get("block")) for e in events] == [
        ("SubmissionArrived", None), ("SubmissionAdmitted", 2005)]


def test_a_calibration_plan_for_an_unlisted_delta_is_refused(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    cli = _copy(settled, cli_factory, "plan")
    sid, document = _arrival("d2", block=2_000)
    cli("intake", cli.write("d2.json", document), "--paid-rao", str(S.FEE_A))
    head = cli.head()
    done = cli("claim", "--submission", sid, "--attempt", "att-d2", "--validator", "5V",
               "--block", "2010", "--plan", "calibration_observation", expect=1)
    assert done.stdout == ""
    assert "calibration_observation_not_listed" in cli.error_line(done.stderr, "refused")
    assert cli.head() == head


def test_expire_with_a_submission_expires_that_one_only(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    cli = _copy(settled, cli_factory, "expire")
    (first, one), (second, other) = (_arrival("d3", block=2_000),
                                     _arrival("d4", block=2_000, index=1))
    cli("intake", cli.write("d3.json", one), "--paid-rao", str(S.FEE_A))
    cli("intake", cli.write("d4.json", other), "--paid-rao", str(S.FEE_A))
    done = cli("expire", "--block", "600000", "--submission", first)
    assert done.stdout == f"expired 1 submission\n  {first}\n"
    statuses = {r["submission_id"]: r["status"] for r in cli.jsonl("submissions")}
    assert (statuses[first], statuses[second]) == ("EXPIRED", "QUEUED")


def test_explain_refuses_a_kind_it_does_not_know(settled: tuple[Any, Any]) -> None:
    cli, _ = settled
    done = cli("explain", "settlement", "att-a1", expect=1)
    assert done.stdout == ""
    assert cli.error_line(done.stderr, "invalid_input") == (
        "error[invalid_input] [path settlement]: explain takes 'submission' or 'attempt', "
        "not 'settlement'")


def test_explain_as_of_a_position_says_so_first(settled: tuple[Any, Any]) -> None:
    cli, built = settled
    a1 = built.sids["a1"]
    done = cli("explain", "submission", a1[:16], "--as-of", "30")
    lines = done.stdout.splitlines()
    assert lines[:2] == ["as of position 30", f"submission {a1}"]
    assert "  status QUALIFYING  reason -" in lines


def test_submissions_of_one_arena_list_that_arena_only(settled: tuple[Any, Any]) -> None:
    cli, built = settled
    rows = cli.jsonl("submissions", "--arena", S.ARENA_B)
    assert [(r["submission_id"], r["arena_id"]) for r in rows] == [
        (built.sids["b1"], S.ARENA_B), (built.sids["b2"], S.ARENA_B)]


def test_the_submissions_table_shows_reason_cause_and_next_step_each_in_its_column(
    settled: tuple[Any, Any],
) -> None:
    cli, _ = settled
    text, document = cli.many([(("submissions", "--arena", S.ARENA_B), 0),
                               (("submissions", "--arena", S.ARENA_B, "--json"), 0)])
    expected = [[r["submission_id"][:16], r["arena_id"], r["hotkey"], r["status"], r["reason"],
                 r["cause"], r["next_step"]] for r in cli.lines(document.stdout)]
    assert _table(text.stdout) == expected
    assert len({row[4] for row in expected}) == len({row[5] for row in expected}) == 2


def test_controls_as_of_a_position_and_a_pending_control(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    cli = _copy(settled, cli_factory, "controls")
    unseen = "0" * 64  # no submission has this delta digest: the control stays pending
    cli("register-control", S.ARENA_A, "--id", "ctl-none", "--kind", "honest",
        "--delta-digest", unseen, "--expect", "PASS")
    now, before = cli.many([(("controls", S.ARENA_A), 0),
                            (("controls", S.ARENA_A, "--as-of", "92"), 0)])
    # No run yet: no block, no attempt (the kind is in --json).
    assert _table(now.stdout) == [["ctl-none", "-", "-", "PASS", "-", "pending"]]
    assert before.stdout.splitlines()[0] == "as of position 92"
    assert _table(before.stdout) == []


def test_granting_a_recorded_credit_again_says_nothing_was_written(
    settled: tuple[Any, Any],
) -> None:
    cli, _ = settled
    head = cli.head()
    done = cli("grant-credit", "--id", "cr-alice", "--hotkey", S.ALICE, "--amount-rao",
               str(3 * S.FEE_A), "--note", "operator credit")
    assert done.stdout == (
        f"credit cr-alice granted at position {_position_of(cli, 'credit-cr-alice')} "
        "(already recorded: nothing was written)\n")
    assert cli.head() == head


def _position_of(cli: Any, stream: str) -> int:
    (event,) = cli.jsonl("events", "--stream", stream, "--type", "CreditGranted")
    return int(event["position"])


# --- tables at 80 columns and piped (cli/tables.py) -----------------------------------------------

#: Every command that prints a table, with its arguments.
TABLE_COMMANDS = [
    ("submissions",), ("history", "--hotkey", S.ALICE), ("rewards",), ("fees",),
    ("controls", S.ARENA_A), ("checkpoints",), ("stats",), ("events",),
    ("explain", "attempt", "att-a1"),
]
#: rich's border characters: not words.
_BORDERS = "".join(chr(c) for c in range(0x2500, 0x2580))


def _words(text: str) -> list[str]:
    return text.translate({ord(c): " " for c in _BORDERS}).split()


@pytest.mark.parametrize("args", TABLE_COMMANDS, ids=lambda args: args[0])
def test_at_80_columns_a_table_fits_and_no_word_is_split(
    settled: tuple[Any, Any], args: tuple[str, ...],
) -> None:
    # At 80 columns rich split words anywhere (referenc|e, NO_DECISI|ON, orientatio|n).
    # Piped, every cell is whole on one line: its words are the words a table may show,
    # whole or cut with "…", never in pieces.
    cli, _ = settled
    narrow = cli(*args, columns=80).stdout
    piped = cli(*args, columns=None).stdout
    whole = set(_words(piped))
    pieces = [word for word in _words(narrow) if word not in whole and not (
        word.endswith("…") and any(w.startswith(word[:-1]) for w in whole))]
    assert pieces == [], narrow
    # stats and explain print lines of text too (a head hash, a quality): those are printed
    # the same piped. A table's line is laid out at the width, and fits it.
    text_lines = set(piped.splitlines()) if args[0] in ("stats", "explain") else set()
    assert [line for line in narrow.splitlines()
            if len(line) > 80 and line not in text_lines] == []


@pytest.mark.parametrize("args", TABLE_COMMANDS, ids=lambda args: args[0])
def test_piped_a_table_has_no_borders_and_no_line_ends_in_padding(
    settled: tuple[Any, Any], args: tuple[str, ...],
) -> None:
    # Piped, submissions wrote lines of some 300 characters, mostly spaces.
    cli, _ = settled
    piped = cli(*args, columns=None).stdout
    assert [line for line in piped.splitlines() if line != line.rstrip()] == []
    assert not set(piped) & set(_BORDERS)


def test_piped_each_submission_is_one_line_with_its_cause_and_next_step_whole(
    settled: tuple[Any, Any],
) -> None:
    cli, _ = settled
    lines = cli("submissions", columns=None).stdout.splitlines()
    rows = cli.jsonl("submissions")
    assert len(lines) == 1 + len(rows)
    for line, row in zip(lines[1:], rows, strict=True):
        assert line.startswith(row["submission_id"][:16])
        assert line.endswith(row["next_step"]) and row["cause"] in line


# --- --json of a list is JSON Lines (docs/cli.md) -------------------------------------------------


def test_every_list_command_prints_json_lines_one_object_a_line(
    settled: tuple[Any, Any], cli_factory: Callable[[str], Any],
) -> None:
    # docs/cli.md: "lists print JSON Lines"; checkpoints --json printed one indented array.
    cli = _copy(settled, cli_factory, "lists")
    cli("key", "generate", "--name", "ops.example", "--out", "ops.key")
    cli("checkpoint", "--key", "ops.key")
    cli("register-control", S.ARENA_A, "--id", "ctl-none", "--kind", "honest",
        "--delta-digest", "0" * 64, "--expect", "PASS")
    lists = [("events", "--limit", "3"), ("submissions",), ("controls", S.ARENA_A),
             ("rewards",), ("history", "--hotkey", S.ALICE), ("checkpoints",),
             ("db", "history")]
    for args, done in zip(lists, cli.many([((*args, "--json"), 0) for args in lists]),
                          strict=True):
        lines = done.stdout.splitlines()
        assert done.stdout.endswith("\n"), args
        rows = [json.loads(line) for line in lines]
        assert rows and all(isinstance(row, dict) for row in rows), args
