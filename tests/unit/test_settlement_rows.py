"""Holds the settlement's lean assessment, and the reward statuses the read models keep,
to the whole assessment (hypothesis).

``assess_rewarded_rows`` reads plain rows and judges only the PASSes before an arena's first
blocking submission; it must give exactly the ``rewarded`` assessments ``assess_rewards``
gives for the same submissions (lost_potential PASSes, pending ones behind a blocker,
several reward groups, speedups on the margin's boundary), and refuse (None) every row
``SubmissionInput.folded`` would refuse.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from settlement_inputs import drawn_input

from machines import samples
from machines.settlement_rules import (
    BLOCKING_STATUSES,
    SUBMISSION_STATUSES,
    ArenaInput,
    SubmissionInput,
    SubmissionRow,
    assess_rewarded_rows,
    assess_rewards,
    judge_passes,
)

#: Around the 0.015 margin: 1.015000 is exactly 1.000000 × 1.015, the inclusive boundary.
SPEEDUPS = ("0.990000", "1.000000", "1.010000", "1.015000", "1.020000", "1.030225",
            "1.030226", "1.050000", "1.2")
GROUPS = (samples.hex64("group:1"), samples.hex64("group:2"), samples.hex64("group:3"))

submissions = st.lists(
    st.tuples(
        st.integers(0, 40),  # arrival block
        st.integers(0, 3),  # event index
        st.sampled_from(SUBMISSION_STATUSES),
        st.integers(0, len(GROUPS) - 1),
        st.integers(0, len(SPEEDUPS) - 1),
        st.sampled_from((None, "FAIL", "NO_DECISION", "PASS")),
    ),
    max_size=30,
)


def _inputs(drawn: list[tuple[int, int, str, int, int, str | None]]) -> list[SubmissionInput]:
    found = []
    for index, (block, order, status, group, speedup, verdict) in enumerate(drawn):
        found.append(drawn_input(index, block, order, status, GROUPS[group], SPEEDUPS[speedup],
                                 verdict, hotkeys=4))
    return found


def _row(sub: SubmissionInput) -> SubmissionRow:
    return (sub.block, sub.event_index, sub.event_subindex, sub.hotkey, sub.content_hash,
            sub.submission_id, sub.status, sub.incumbent_digest, sub.verdict, sub.speedup)


@given(submissions, st.sampled_from(("0.015", "0", "0.1")))
def test_rewarded_rows_are_the_whole_assessments_rewarded(
    drawn: list[tuple[int, int, str, int, int, str | None]], margin: str
) -> None:
    subs = _inputs(drawn)
    arena = ArenaInput("mlp", 500_000, margin, subs)
    whole = [a for a in assess_rewards([arena]) if a.status == "rewarded"]
    lean = assess_rewarded_rows(ArenaInput("mlp", 500_000, margin), [_row(s) for s in subs])
    assert lean == whole


def test_a_pass_behind_a_blocker_earns_nothing_even_when_it_beats_the_best() -> None:
    subs = _inputs([(1, 0, "QUALIFIED", 0, 1, None), (2, 0, "HELD", 0, 0, None),
                    (3, 0, "QUALIFIED", 0, 7, None)])
    lean = assess_rewarded_rows(ArenaInput("mlp", 1, "0.015"), [_row(s) for s in subs])
    assert lean is not None
    assert [a.submission_id for a in lean] == [subs[0].submission_id]


def test_a_row_the_inputs_refuse_is_refused() -> None:
    sub = _inputs([(1, 0, "QUALIFIED", 0, 1, None)])[0]
    header = ArenaInput("mlp", 1, "0.015")
    good = _row(sub)
    for bad in (
        (*good[:9], "1.5e0"),  # not a canonical decimal
        (*good[:9], None),  # a PASS without its speedup
        (*good[:8], "FAIL", good[9]),  # QUALIFIED without a PASS
        (*good[:6], "RUNNING", *good[7:]),  # no such status
    ):
        assert assess_rewarded_rows(header, [bad]) is None
    # A refused row anywhere refuses the arena, even behind a blocker.
    blocker = (0, 0, 0, "5Hz", good[4], samples.hex64("blocker"), "QUEUED", good[7], None,
               None)
    assert assess_rewarded_rows(header, [blocker, (*good[:9], "x")]) is None


@given(submissions, st.sampled_from(("0.015", "0", "0.1")), st.integers(0, 30))
def test_judged_statuses_are_the_whole_assessments_and_the_rewarded_alone_assess_alike(
    drawn: list[tuple[int, int, str, int, int, str | None]], margin: str, split: int
) -> None:
    # What the read models keep (services.projections.walk_rewards): the statuses of the
    # PASSes before the first blocking submission, judged in two walks that carry each
    # group's best; and what a settlement then reads: the rewarded PASSes alone.
    subs = _inputs(drawn)
    whole = assess_rewards([ArenaInput("mlp", 500_000, margin, subs)])
    ordered = sorted(subs, key=lambda s: (s.arrival_key, s.submission_id))
    first = next((i for i, s in enumerate(ordered) if s.status in BLOCKING_STATUSES),
                 len(ordered))
    passes = [(s.incumbent_digest, s.speedup) for s in ordered[:first] if s.is_pass]
    best: dict[str, str] = {}
    judged = judge_passes(margin, best, passes[:split]) + judge_passes(
        margin, best, passes[split:])
    assert judged == [a.status for a in whole][:len(passes)]
    assert all(a.status == "pending" for a in whole[len(passes):])
    rewarded = [s for s in subs if any(
        a.submission_id == s.submission_id and a.status == "rewarded" for a in whole)]
    lean = assess_rewarded_rows(ArenaInput("mlp", 500_000, margin), map(_row, rewarded))
    assert lean == [a for a in whole if a.status == "rewarded"]


def test_a_speedup_the_rules_refuse_ends_the_judged_statuses() -> None:
    group = GROUPS[0]
    best: dict[str, str] = {}
    assert judge_passes("0.015", best, [(group, "1.020000"), (group, "1.5e0"),
                                        (group, "1.200000")]) == ["rewarded"]
    assert best == {group: "1.020000"}
