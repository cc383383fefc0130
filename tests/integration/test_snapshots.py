"""Holds fold snapshots (``services.fold_cache``, ``ArenaLedger.snapshot_dir``) to being a cache.

A process restored from a snapshot must answer, decide and settle exactly as one that folded
the ledger from nothing; a snapshot that does not fit the ledger, the code, or the user's own
files is ignored (the fold starts over) and says why. The ledger is bench/fold.py's generated
one (arenas, payments, credits, holds, requeues, expiries), on both backends.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ledger import migrate
from ledger.records import EventDraft
from ledger.store import EventStore
from machines.settlement_rules import settlement_payload
from services import fold_cache as snapshot
from services.arena_ledger import ArenaLedger
from services.fold_cache import SNAPSHOT_MAGIC, SnapshotCache, code_fingerprint, store_key
from vocabulary.errors import Refused

_ROOT = Path(__file__).resolve().parents[2]
#: Events generated; the first CUT are written before the snapshot, the rest after it.
EVENTS, CUT = 2_400, 2_000
#: The threshold the tests write snapshots at (the default, 10,000, is past these ledgers).
EVERY = 300


def _generated(seed: int = 5, events: int = EVENTS) -> list[tuple[str, Any]]:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    generate = importlib.import_module("bench.fold").generate
    return [(stream, event) for _, stream, _, event in generate(events, seed, 32, 150_000)]


def _write(url: str, events: list[tuple[str, Any]]) -> None:
    """Appends ``events`` without the domain guard (the benchmark's way), in batches."""
    with EventStore(url) as store:
        for start in range(0, len(events), 1_000):
            chunk = events[start : start + 1_000]
            store.append([EventDraft.of(stream, event) for stream, event in chunk], actor="t")


def _answers(ledger: ArenaLedger) -> dict[str, Any]:
    """Everything a fold answers with: its projections, the policy, and some queries."""
    fold = ledger.fold
    return {
        "snapshot": fold.snapshot(),
        "policy": ledger.guard.emission_policy,
        "submissions": ledger.submissions(),
        "fees": ledger.fees(),
        "rewards": ledger.rewards(),
        "settlement": (
            settlement_payload(ledger.weights(1_000_000)) if ledger.guard.emission_policy else None
        ),
    }


def _fresh(url: str, as_of: int | None = None) -> dict[str, Any]:
    with ArenaLedger(url, as_of=as_of) as ledger:
        return _answers(ledger)


@pytest.fixture
def events() -> list[tuple[str, Any]]:
    return _generated()


@pytest.fixture
def url(store_url: str, events: list[tuple[str, Any]]) -> str:
    """A migrated store holding the first CUT generated events."""
    migrate.upgrade(store_url)
    _write(store_url, events[:CUT])
    return store_url


@pytest.fixture
def every(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(snapshot, "snapshot_events_min", EVERY)
    return EVERY


@pytest.fixture
def snapshot_dir(tmp_path: Path) -> Path:
    return tmp_path / "snapshots"


def _take(url: str, directory: Path) -> SnapshotCache:
    """Folds the ledger with snapshots on, so that closing writes one; returns its cache."""
    with ArenaLedger(url, snapshot_dir=directory) as ledger:
        ledger.fold  # noqa: B018 - the catch-up is the point
        cache = ledger.guard.snapshots
    assert cache is not None and cache.outcome == f"written at position {CUT}", cache.outcome
    assert cache.path is not None and cache.path.is_file()
    return cache


def _restored(url: str, directory: Path, as_of: int | None = None) -> Iterator[Any]:
    """Yields (answers, restored position, cache outcome) of a ledger opened on ``directory``."""
    with ArenaLedger(url, snapshot_dir=directory, as_of=as_of) as ledger:
        answers = _answers(ledger)
        cache = ledger.guard.snapshots
        assert cache is not None
        yield answers, ledger.guard.snapshot_position, cache.outcome


def test_a_restored_fold_answers_as_a_fold_from_nothing_after_more_events(
    url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int
) -> None:
    _take(url, snapshot_dir)
    _write(url, events[CUT:])
    [(answers, position, outcome)] = _restored(url, snapshot_dir)
    assert (position, outcome) == (CUT, f"restored at position {CUT}")
    assert answers["snapshot"]["position"] == EVENTS
    assert answers == _fresh(url)


def test_a_restored_guard_decides_the_next_batches_as_a_fresh_one(
    url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int
) -> None:
    """The events after the cut go through the restored guard: every one accepted, and a
    repeat of one refused, exactly as a guard that folded from nothing refuses it."""
    _take(url, snapshot_dir)
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        for stream, event in events[CUT:]:
            ledger.append([(stream, event)])
        assert ledger.guard.snapshot_position == CUT
        arrival = next((s, e) for s, e in events[CUT:] if e.event_type == "SubmissionArrived")
        with pytest.raises(Refused) as restored_refusal:
            ledger.append([arrival])
    with ArenaLedger(url) as plain, pytest.raises(Refused) as fresh_refusal:
        plain.append([arrival])
    assert restored_refusal.value.to_dict() == fresh_refusal.value.to_dict()
    assert [answers for answers, _, _ in _restored(url, snapshot_dir)] == [_fresh(url)]


def test_closing_writes_the_head_once_enough_events_were_folded_past_the_snapshot(
    url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int
) -> None:
    cache = _take(url, snapshot_dir)
    _write(url, events[CUT : CUT + every - 1])
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018
    assert ledger.guard.snapshot_position == CUT  # one event short: not written again
    assert _header(cache.path)["position"] == CUT
    _write(url, events[CUT + every - 1 : CUT + every])
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018
    assert ledger.guard.snapshot_position == CUT + every
    assert _header(cache.path)["position"] == CUT + every
    assert oct(cache.path.stat().st_mode & 0o777) == oct(0o600)
    assert oct(cache.path.parent.stat().st_mode & 0o777) == oct(0o700)


def test_a_fold_an_interrupt_left_mid_catch_up_is_not_written(
    url: str, snapshot_dir: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a fault) between two events, or inside one: the fold may be half an event
    ahead of its position, and closing must not keep it."""
    from machines.projection import LedgerFold

    apply = LedgerFold.apply

    def interrupted(self: LedgerFold, position: int, *args: Any) -> Any:
        if position == CUT - 100:
            raise KeyboardInterrupt
        return apply(self, position, *args)

    monkeypatch.setattr(LedgerFold, "apply", interrupted)
    with pytest.raises(KeyboardInterrupt), ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018
    assert ledger.guard.fold.position == CUT - 101 >= every
    assert ledger.guard.snapshot_position == 0
    assert not snapshot_dir.exists()


def test_no_snapshot_is_written_below_the_threshold_by_default(
    url: str, snapshot_dir: Path
) -> None:
    assert snapshot.snapshot_events_min > CUT
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018
    assert ledger.guard.snapshot_position == 0
    assert not snapshot_dir.exists()


def _header(path: Path | None) -> dict[str, Any]:
    assert path is not None
    import orjson

    data = path.read_bytes()
    assert data.startswith(SNAPSHOT_MAGIC)
    return dict(orjson.loads(data[len(SNAPSHOT_MAGIC) : data.index(b"\n", len(SNAPSHOT_MAGIC))]))


def _rewrite_body(path: Path, body: bytes, **header: Any) -> None:
    """Writes a file with a consistent header (digest and size of ``body``) over ``path``."""
    import hashlib

    import orjson

    fields = {**_header(path), "body_sha256": hashlib.sha256(body).hexdigest(),
              "body_bytes": len(body), **header}
    path.write_bytes(SNAPSHOT_MAGIC + orjson.dumps(fields) + b"\n" + body)


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


def _other_code(path: Path) -> None:
    _rewrite_body(path, path.read_bytes().split(b"\n", 2)[2], fingerprint="0" * 64)


def _not_a_fold(path: Path) -> None:
    _rewrite_body(path, pickle.dumps(({"position": CUT}, None)))


def _fold_elsewhere(path: Path) -> None:
    from machines.projection import LedgerFold

    _rewrite_body(path, pickle.dumps((LedgerFold(), None)))


def _garbage(path: Path) -> None:
    path.write_bytes(b"not a snapshot at all\n")


def _group_writable(path: Path) -> None:
    path.chmod(0o660)


def _open_directory(path: Path) -> None:
    path.parent.chmod(0o777)


def _symlink(path: Path) -> None:
    target = path.with_name("elsewhere")
    path.rename(target)
    path.symlink_to(target)


class _Recorded:
    """Stands in for the snapshot module's logger: keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event, fields))


@pytest.mark.parametrize(
    ("spoil", "reason", "level"),
    [
        (_corrupt, "body does not match its SHA-256", "warning"),
        (_other_code, "written by other code", "info"),
        (_not_a_fold, f"does not hold a fold at position {CUT}", "warning"),
        (_fold_elsewhere, f"does not hold a fold at position {CUT}", "warning"),
        (_garbage, "not an arena-ledger fold snapshot v1", "warning"),
        (_group_writable, "is writable by others (mode 660)", "warning"),
        (_open_directory, "is writable by others (mode 777)", "warning"),
        (_symlink, "Errno", "warning"),
    ],
)
def test_a_snapshot_that_does_not_fit_is_ignored_and_says_why(
    url: str, snapshot_dir: Path, every: int, spoil: Any, reason: str, level: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _take(url, snapshot_dir)
    assert cache.path is not None
    spoil(cache.path)
    recorded = _Recorded()
    monkeypatch.setattr(snapshot, "log", recorded)
    [(answers, position, outcome)] = _restored(url, snapshot_dir)
    assert position == 0
    assert outcome.startswith("ignored: ") and reason in outcome, outcome
    assert recorded.lines[0] == (
        level, "snapshot_ignored", {"path": str(cache.path), "reason": outcome[9:]}
    )
    assert answers == _fresh(url)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root"
)
def test_a_snapshot_owned_by_another_user_is_ignored(
    url: str, snapshot_dir: Path, every: int
) -> None:
    cache = _take(url, snapshot_dir)
    assert cache.path is not None
    os.chown(cache.path, 4_321, -1)
    [(_, position, outcome)] = _restored(url, snapshot_dir)
    assert position == 0
    assert outcome == f"ignored: file {cache.path} belongs to another user (uid 4321)"
    os.chown(cache.path, os.getuid(), -1)
    os.chown(snapshot_dir, 4_321, -1)
    [(_, position, outcome)] = _restored(url, snapshot_dir)
    assert position == 0
    assert outcome == f"ignored: directory {snapshot_dir} belongs to another user (uid 4321)"


def test_a_snapshot_of_another_ledger_at_the_same_url_is_ignored(
    store_url: str, backend: str, snapshot_dir: Path, every: int, tmp_path: Path
) -> None:
    """The store was recreated with other events: its entry hash at the snapshot's position
    differs, though the position exists (and past a shorter ledger's head, it does not)."""
    migrate.upgrade(store_url)
    _write(store_url, _generated(seed=5)[:CUT])
    _take(store_url, snapshot_dir)
    _recreate(store_url, backend)
    _write(store_url, _generated(seed=6)[:CUT])
    [(answers, position, outcome)] = _restored(store_url, snapshot_dir)
    assert position == 0
    assert f"the ledger's entry hash at position {CUT} is " in outcome, outcome
    assert answers == _fresh(store_url)
    _recreate(store_url, backend)
    _write(store_url, _generated(seed=5)[: CUT - 1])
    [(answers, position, outcome)] = _restored(store_url, snapshot_dir)
    assert position == 0
    assert outcome == f"ignored: taken at position {CUT}, past the head or view ({CUT - 1})"
    assert answers == _fresh(store_url)


def _recreate(url: str, backend: str) -> None:
    if backend == "sqlite":
        Path(url.removeprefix("sqlite:///")).unlink()
    else:
        from sqlalchemy import create_engine, text

        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()
    migrate.upgrade(url)


def test_a_view_as_of_a_position_restores_only_a_snapshot_at_or_before_it_and_writes_none(
    url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int
) -> None:
    cache = _take(url, snapshot_dir)
    _write(url, events[CUT:])
    [(answers, position, outcome)] = _restored(url, snapshot_dir, as_of=CUT - 1)
    assert position == 0 and "past the head or view" in outcome
    assert answers == _fresh(url, as_of=CUT - 1)
    [(answers, position, _)] = _restored(url, snapshot_dir, as_of=CUT + 300)
    assert position == CUT
    assert answers == _fresh(url, as_of=CUT + 300)
    assert _header(cache.path)["position"] == CUT  # a view writes nothing


def test_an_archiving_ledger_neither_restores_nor_writes(
    url: str, snapshot_dir: Path, every: int
) -> None:
    cache = _take(url, snapshot_dir)
    written = cache.path.read_bytes() if cache.path else b""
    with ArenaLedger(url, snapshot_dir=snapshot_dir, archive_finished=True) as ledger:
        archived = ledger.fold.snapshot()
        assert ledger.guard.snapshots is None and ledger.guard.snapshot_position == 0
    assert archived == _fresh(url)["snapshot"]
    assert cache.path is not None and cache.path.read_bytes() == written


def test_a_snapshot_that_cannot_be_written_leaves_the_command_as_it_was(
    url: str, tmp_path: Path, every: int
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way")
    with ArenaLedger(url, snapshot_dir=blocked) as ledger:
        expected = ledger.fold.position
    cache = ledger.guard.snapshots
    assert cache is not None and cache.outcome is not None
    assert cache.outcome.startswith("not written: "), cache.outcome
    assert expected == CUT and ledger.guard.snapshot_position == 0
    assert blocked.read_text() == "in the way"


def test_the_store_key_names_one_database_whatever_the_spelling_and_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_key("sqlite:///ledger.db") == store_key(f"sqlite:///{tmp_path}/ledger.db")
    assert store_key("sqlite:///ledger.db") != store_key("sqlite:///other.db")
    pg = "postgresql+psycopg://u:{}@127.0.0.1:5432/test"
    assert store_key(pg.format("secret")) == store_key(pg.format("other"))
    assert store_key(pg.format("x")) != store_key(pg.format("x").replace("/test", "/prod"))
    assert store_key("sqlite://") == store_key("sqlite:///:memory:") == ""
    assert SnapshotCache(tmp_path, "sqlite://").path is None


def test_the_default_directory_is_the_users_cache_and_none_without_a_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert snapshot.default_directory() == tmp_path / "xdg" / "arena-ledger" / "snapshots"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert snapshot.default_directory() == (
        tmp_path / "home" / ".cache" / "arena-ledger" / "snapshots"
    )

    def homeless() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(homeless))
    assert snapshot.default_directory() is None


def test_the_code_fingerprint_covers_the_sources_it_names() -> None:
    import hashlib

    import ledger
    import machines
    import services
    import vocabulary

    fingerprint = code_fingerprint()
    assert len(fingerprint) == 64 and fingerprint == code_fingerprint()
    digest = hashlib.sha256()
    sources = [
        (package.__name__, path)
        for package in (vocabulary, ledger, machines, services)
        for path in sorted(
            found for pattern in ("*.py", "*.so", "*.pyd")
            for found in Path(package.__file__ or "").parent.glob(pattern)
        )
    ]
    assert any(path.name == "projection.py" for _, path in sources)
    import pydantic
    import pydantic_core

    digest.update(f"{sys.implementation.name} {sys.version}\n".encode())
    digest.update(f"pydantic {pydantic.VERSION} {pydantic_core.__version__}\n".encode())
    for name, path in sources:
        digest.update(f"{name}/{path.name}\n".encode() + path.read_bytes())
    assert digest.hexdigest() == fingerprint


def test_the_cli_restores_from_its_snapshot_directory_and_no_snapshots_turns_it_off(
    url: str, snapshot_dir: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.app import app

    runner = CliRunner()

    def listed(*options: str) -> str:
        result = runner.invoke(app, ["--db", url, *options, "submissions", "--json"])
        assert result.exit_code == 0, result.output
        return result.output

    monkeypatch.setenv("ARENA_LEDGER_SNAPSHOT_DIR", str(snapshot_dir / "from-env"))
    plain = listed("--no-snapshots")
    monkeypatch.setenv("ARENA_LEDGER_NO_SNAPSHOTS", "1")
    assert listed() == plain
    assert not snapshot_dir.exists()
    monkeypatch.delenv("ARENA_LEDGER_NO_SNAPSHOTS")
    assert listed() == plain
    key = store_key(url)
    written = snapshot_dir / "from-env" / f"{key}.snapshot"
    assert _header(written)["position"] == CUT
    assert listed("--snapshot-dir", str(snapshot_dir)) == plain
    assert _header(snapshot_dir / f"{key}.snapshot")["position"] == CUT
    os.utime(written, (1, 1))
    assert listed() == plain  # restored: not written again
    assert written.stat().st_mtime == 1
