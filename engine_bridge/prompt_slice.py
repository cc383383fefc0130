"""Loads the sealed replay slice: seeded prompts, batch shape and decode length.

The slice ships as package data (``engine_bridge/data/replay_slice.json``); a test
regenerates it from its seed and checks the shipped bytes, so nobody can edit the
prompts without the digest changing. Every request has the same prompt length and
decodes exactly ``max_new_tokens`` greedy tokens (no end-of-sequence stop), so both arms
of a window always do the same work.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from engine_bridge.limits import (
    replay_max_new_tokens_max,
    replay_prompt_tokens_max,
    replay_requests_max,
)
from vocabulary.errors import LimitExceeded, SchemaError

__all__ = [
    "REPLAY_SLICE_FILE",
    "REPLAY_SLICE_FORMAT",
    "ReplaySlice",
    "generate_replay_slice",
    "load_replay_slice",
    "replay_slice_bytes",
]

REPLAY_SLICE_FILE = "replay_slice.json"
REPLAY_SLICE_FORMAT = "arena-ledger.replay-slice.v1"
_FIELDS = {"format", "seed", "vocab_size", "batch_size", "prompt_tokens", "max_new_tokens",
           "requests"}


@dataclass(frozen=True)
class ReplaySlice:
    """Holds the requests of one window and the shape they are served in."""

    seed: int
    vocab_size: int
    batch_size: int
    prompt_tokens: int
    max_new_tokens: int
    requests: tuple[tuple[int, ...], ...]

    @property
    def output_tokens(self) -> int:
        """Returns the number of tokens one arm generates per window."""
        return len(self.requests) * self.max_new_tokens

    def batches(self) -> list[range]:
        """Returns the request index ranges served together, in order."""
        n = len(self.requests)
        return [range(i, min(i + self.batch_size, n)) for i in range(0, n, self.batch_size)]

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON-ready form (also what the shipped file holds)."""
        return {"format": REPLAY_SLICE_FORMAT, "seed": self.seed,
                "vocab_size": self.vocab_size, "batch_size": self.batch_size,
                "prompt_tokens": self.prompt_tokens, "max_new_tokens": self.max_new_tokens,
                "requests": [list(r) for r in self.requests]}

    @property
    def digest(self) -> str:
        """Returns the sha256 hex of the slice's canonical JSON bytes."""
        return hashlib.sha256(_encode(self.to_dict())).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplaySlice:
        """Validates and builds a slice; refuses unknown fields and out-of-bound shapes."""
        if set(data) != _FIELDS or data["format"] != REPLAY_SLICE_FORMAT:
            raise SchemaError(f"replay slice must have exactly {sorted(_FIELDS)} and format "
                              f"{REPLAY_SLICE_FORMAT}", fields=sorted(data))
        requests = tuple(tuple(int(t) for t in r) for r in data["requests"])
        replay = cls(int(data["seed"]), int(data["vocab_size"]), int(data["batch_size"]),
                     int(data["prompt_tokens"]), int(data["max_new_tokens"]), requests)
        replay.check()
        return replay

    def check(self) -> None:
        """Raises when a bound is exceeded or a request is malformed."""
        if not 1 <= len(self.requests) <= replay_requests_max:
            raise LimitExceeded(f"replay requests must be 1..{replay_requests_max}")
        if not 1 <= self.prompt_tokens <= replay_prompt_tokens_max:
            raise LimitExceeded(f"prompt_tokens must be 1..{replay_prompt_tokens_max}")
        if not 1 <= self.max_new_tokens <= replay_max_new_tokens_max:
            raise LimitExceeded(f"max_new_tokens must be 1..{replay_max_new_tokens_max}")
        if self.batch_size < 1:
            raise SchemaError("batch_size must be at least 1")
        for index, request in enumerate(self.requests):
            if len(request) != self.prompt_tokens or not all(
                    0 <= t < self.vocab_size for t in request):
                raise SchemaError(f"request {index} must have {self.prompt_tokens} token ids "
                                  f"in [0, {self.vocab_size})", request=index)


def _encode(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def generate_replay_slice(seed: int = 7, *, vocab_size: int = 512, requests: int = 8,
                          batch_size: int = 4, prompt_tokens: int = 16,
                          max_new_tokens: int = 16) -> ReplaySlice:
    """Draws prompt token ids from SplitMix64 at ``seed`` (the sealed slice uses the defaults)."""
    from engine_bridge.reference_model import splitmix_uniform

    uniform = splitmix_uniform(seed, requests * prompt_tokens)
    ids = ((uniform + 1.0) / 2.0 * vocab_size).astype(int).clip(0, vocab_size - 1).tolist()
    rows = tuple(tuple(ids[i * prompt_tokens:(i + 1) * prompt_tokens]) for i in range(requests))
    replay = ReplaySlice(seed, vocab_size, batch_size, prompt_tokens, max_new_tokens, rows)
    replay.check()
    return replay


def replay_slice_bytes(replay: ReplaySlice) -> bytes:
    """Returns the exact bytes the shipped slice file holds for ``replay``."""
    return _encode(replay.to_dict())


def load_replay_slice() -> ReplaySlice:
    """Loads the sealed slice shipped with the package."""
    text = resources.files("engine_bridge").joinpath("data", REPLAY_SLICE_FILE).read_text()
    return ReplaySlice.from_dict(json.loads(text))
