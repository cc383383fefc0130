"""Tests the sealed replay slice shipped as package data."""

from __future__ import annotations

from importlib import resources

import pytest

from engine_bridge.replay import (
    ReplaySlice,
    generate_replay_slice,
    load_replay_slice,
    replay_slice_bytes,
)
from ledger.errors import LimitExceeded, SchemaError

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
