"""Marks every test here ``reliability`` and sizes the hostile-input properties of a run.

The backends (``backend``, ``store_url``, ``store``, ``pg_database``: SQLite and a real
PostgreSQL) come from tests/conftest.py. The campaigns live in ``reliability_harness``, so
that bench/reliability.py runs the very same code at full size; the CI sizes live there too
(``ci_crash_kills``, ``ci_concurrency_s``, ``seed``) and can be raised from the environment
(RELIABILITY_CRASH_KILLS, RELIABILITY_CONCURRENCY_S, RELIABILITY_SEED; RELIABILITY_EXAMPLES
for the hypothesis properties, RELIABILITY_TALLY to write the inputs tried) for a deeper run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

_HERE = Path(__file__).resolve().parent
_MARKER = "reliability: fault injection and hostile input (tests/reliability; full size: " \
    "python bench/reliability.py)"


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too, so --strict-markers accepts it before pyproject.toml lists it.
    config.addinivalue_line("markers", _MARKER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.reliability)


def _load_examples_profile() -> None:
    # bench/reliability.py sets RELIABILITY_EXAMPLES to run the hostile-input properties at
    # full size; the decorators in test_hostile_input.py inherit max_examples from here.
    examples = os.environ.get("RELIABILITY_EXAMPLES")
    if examples:
        settings.register_profile("reliability-full", settings.get_profile("default"),
                                  max_examples=int(examples))
        settings.load_profile("reliability-full")


_load_examples_profile()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Writes the hostile-input tally where bench/reliability.py asked for it."""
    target = os.environ.get("RELIABILITY_TALLY")
    hostile = sys.modules.get("hostile_inputs")
    if target and hostile is not None:
        Path(target).write_text(json.dumps(dict(sorted(hostile.TALLY.items())), indent=1))
