"""Checks the machines' short cuts against the slow, obvious versions they replace."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from machines import samples, submission
from machines.arithmetic import fixed
from machines.submission import SubmissionState
from machines.table import build, evolve
from vocabulary.codec import digest, fixed6
from vocabulary.events import SubmissionArrived

hotkeys = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=64)
counts = st.integers(0, 2**53 - 1)


def _slow_id(event: SubmissionArrived) -> str:
    arrival = event.arrival
    return digest("arena-ledger.arrival", {
        "arena_id": event.arena_id, "block": arrival.block, "event_index": arrival.event_index,
        "event_subindex": arrival.event_subindex, "miner_hotkey": event.miner_hotkey,
        "content_hash": event.content_hash,
    })


@given(hotkeys, counts, counts, counts, st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True))
# Texts canonical JSON must escape, always tried (60 random examples seldom hold one).
@example('5"Miner', 1, 0, 0, "mlp-arena")
@example("5\\Miner", 1, 0, 0, "mlp-arena")
def test_arrival_digest_short_cut_equals_the_codec(
    hotkey: str, block: int, index: int, subindex: int, arena_id: str
) -> None:
    event = samples.arrived(arena_id, hotkey=hotkey, block=block, index=index, subindex=subindex)
    assert submission.submission_id_of(event) == _slow_id(event) == event.submission_id


def test_arrival_digest_falls_back_to_the_codec_outside_ascii() -> None:
    event = samples.arrived()
    odd = SubmissionArrived.model_construct(
        **{**dict(event), "miner_hotkey": "hötkey\u2028"}
    )
    assert submission.submission_id_of(odd) == _slow_id(odd)


def test_build_equals_init_and_checks_names() -> None:
    fields = dict(
        submission_id="s", arena_id="a", hotkey="h", content_hash="c", delta_digest="d",
        target="t", arrival_key=(1, 2, 3, "h", "c"), payment_ref=None,
    )
    assert build(SubmissionState, **fields) == SubmissionState(**fields)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs"):
        build(SubmissionState, submission_id="s")
    with pytest.raises(TypeError, match="needs"):
        build(SubmissionState, **fields, colour="red")


def test_evolve_copies_and_checks_names() -> None:
    state = submission.start(samples.arrived())
    moved = evolve(state, status="QUEUED")
    assert (state.status, moved.status) == ("ARRIVED", "QUEUED")
    assert moved == submission.SubmissionState(**{**state.__dict__, "status": "QUEUED"})
    with pytest.raises(TypeError, match="no field"):
        evolve(state, stauts="QUEUED")


@pytest.mark.parametrize("text", ["1.0191289532899897041510129742344", "0.0000005", "-0.0000004"])
def test_fixed_matches_fixed6_whatever_the_callers_context(text: str) -> None:
    value = Decimal(text)
    expected = fixed6(value)
    assert fixed(value) == expected
    with decimal.localcontext() as ctx:
        ctx.prec = 3
        ctx.traps[decimal.Inexact] = True
        assert fixed(value) == expected
