"""Fixtures the unit tests of one module share: the Go signed-note vectors' verifiers."""

from __future__ import annotations

import pytest
from note_vectors import ENOCH_VERIFIER_KEY, PETER_VERIFIER_KEY  # same directory

from ledger.note import Verifier


@pytest.fixture(scope="module")
def peter() -> Verifier:
    """The verifier of Go's sumdb/note test key "PeterNeumann"."""
    return Verifier.parse(PETER_VERIFIER_KEY)


@pytest.fixture(scope="module")
def enoch() -> Verifier:
    """The verifier of Go's sumdb/note test key "EnochRoot"."""
    return Verifier.parse(ENOCH_VERIFIER_KEY)
