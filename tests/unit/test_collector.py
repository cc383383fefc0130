"""``services.gc_pause.CollectorPaused``: the cyclic collector off for a fold, then as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from services.gc_pause import CollectorPaused


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """Leaves the interpreter's collector as each test found it, whatever the test did."""
    collecting = gc.isenabled()
    yield
    gc.unfreeze()
    if collecting:
        gc.enable()
    else:
        gc.disable()


class _Node:
    """A container object the collector tracks."""


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    gc.enable()
    with CollectorPaused() as paused:
        assert not gc.isenabled()
        keep = [_Node() for _ in range(100)]
        paused.tick()
        assert gc.get_freeze_count() >= 100  # what existed at the tick is frozen
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # and unfrozen at the end
    assert keep


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with CollectorPaused() as paused:
        paused.tick()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_what_the_caller_froze_stays_frozen() -> None:
    gc.enable()
    gc.freeze()  # e.g. before forking workers
    frozen = gc.get_freeze_count()
    assert frozen > 0
    with CollectorPaused() as paused:
        assert not gc.isenabled()
        keep = [_Node() for _ in range(100)]
        paused.tick()  # freezes nothing: unfreezing later would undo the caller's freeze
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()
    assert keep


def test_the_collector_is_restored_when_the_block_raises() -> None:
    gc.enable()
    with pytest.raises(RuntimeError, match="boom"), CollectorPaused() as paused:
        paused.tick()
        raise RuntimeError("boom")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_cycle_made_during_the_pause_is_reclaimed_afterwards() -> None:
    gc.enable()
    gc.collect()
    with CollectorPaused() as paused:
        node = _Node()
        node.self = node  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        paused.tick()  # frozen with everything else
        del node
    assert gc.collect() >= 1  # unfrozen at the end, so a collection finds it
