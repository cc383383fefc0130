"""Tests the sealed replay slice shipped as package data."""

from __future__ import annotations

from importlib import resources

import pytest

from engine_bridge.limits import (
    replay_max_new_tokens_max,
    replay_prompt_tokens_max,
    replay_requests_max,
)
from engine_bridge.prompt_slice import (
    ReplaySlice,
    generate_replay_slice,
    load_replay_slice,
    replay_slice_bytes,
)
from vocabulary.errors import LimitExceeded, SchemaError

SEALED_DIGEST = "634408f52edcca280c7ae233e7eb00e15e87a1bf2782cf21bda3676074f49913"


def test_shipped_slice_is_the_seeded_one_byte_for_byte() -> None:
    shipped = resources.files("engine_bridge").joinpath("data", "replay_slice.json").read_bytes()
    assert shipped == replay_slice_bytes(generate_replay_slice())
    assert load_replay_slice().digest == SEALED_DIGEST


def test_slice_shape() -> None:
    replay = load_replay_slice()
    assert (len(replay.requests), replay.batch_size, replay.prompt_tokens,
            replay.max_new_tokens) == (8, 4, 16, 16)
    assert [list(b) for b in replay.batches()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert replay.output_tokens == 128


def test_bad_slices_are_refused() -> None:
    data = load_replay_slice().to_dict()
    with pytest.raises(SchemaError):
        ReplaySlice.from_dict({**data, "extra": 1})
    with pytest.raises(SchemaError):
        ReplaySlice.from_dict({**data, "requests": [[1, 2]]})
    with pytest.raises(SchemaError):
        ReplaySlice.from_dict({**data, "requests": [[10_000] * 16]})
    with pytest.raises(LimitExceeded):
        ReplaySlice.from_dict({**data, "max_new_tokens": 100_000})


def _slice(requests: int = 1, prompt_tokens: int = 1, max_new_tokens: int = 1,
           batch_size: int = 1) -> ReplaySlice:
    rows = tuple((0,) * prompt_tokens for _ in range(requests))
    return ReplaySlice(7, 2, batch_size, prompt_tokens, max_new_tokens, rows)


@pytest.mark.parametrize("field", ["requests", "prompt_tokens", "max_new_tokens"])
def test_every_bound_of_the_slice_is_inclusive(field: str) -> None:
    limit = {"requests": replay_requests_max, "prompt_tokens": replay_prompt_tokens_max,
             "max_new_tokens": replay_max_new_tokens_max}[field]
    _slice(**{field: 1}).check()
    _slice(**{field: limit}).check()
    for outside in (0, limit + 1):
        with pytest.raises(LimitExceeded, match=f"{field} must be 1..{limit}"):
            _slice(**{field: outside}).check()


def test_a_batch_of_one_serves_requests_one_at_a_time_and_none_is_refused() -> None:
    one = _slice(requests=3, batch_size=1)
    one.check()
    assert [list(b) for b in one.batches()] == [[0], [1], [2]]
    with pytest.raises(SchemaError, match="batch_size must be at least 1"):
        _slice(batch_size=0).check()


def test_the_vocabulary_bound_is_exclusive() -> None:
    top = ReplaySlice(7, 2, 1, 1, 1, ((1,),))
    top.check()
    for token in (2, -1):
        with pytest.raises(SchemaError, match=r"in \[0, 2\)"):
            ReplaySlice(7, 2, 1, 1, 1, ((token,),)).check()
