"""Holds fold snapshots (``services.fold_cache``, ``ArenaLedger.snapshot_dir``) to being a cache.

A process restored from a snapshot must answer, decide and settle exactly as one that folded
the ledger from nothing; a snapshot that does not fit the ledger, the code, or the user's own
files is ignored (the fold starts over) and says why. The ledger is bench/fold.py's generated
one (arenas, payments, credits, holds, requeues, expiries), on both backends.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from snapshot_ledger import (
    CUT,
    EVENTS,
    generated_events,
    write_events,
)
from typer.testing import CliRunner

from ledger import migrate
from ledger.store import EventStore
from machines.projection import LedgerFold
from machines.settlement_rules import settlement_payload
from services import fold_cache as snapshot
from services.arena_ledger import ArenaLedger, DomainGuard
from services.fold_cache import SNAPSHOT_MAGIC, SnapshotCache, code_fingerprint, store_key
from vocabulary.errors import Refused, StoreUnavailable

#: The threshold the tests write snapshots at (the default, 10,000, is past these ledgers).
EVERY = 300


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


#: compiled_check.py also runs this suite on the optional mypyc build, whose fold allows no
#: function or method to be replaced: the tests that interrupt the fold that way skip there.
FOLD_COMPILED = hasattr(LedgerFold, "__mypyc_attrs__")


@pytest.fixture
def events() -> list[tuple[str, Any]]:
    return generated_events()


@pytest.fixture
def url(store_url: str, events: list[tuple[str, Any]]) -> str:
    """A migrated store holding the first CUT generated events."""
    migrate.upgrade(store_url)
    write_events(store_url, events[:CUT])
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
    write_events(url, events[CUT:])
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
    write_events(url, events[CUT : CUT + every - 1])
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018
    assert ledger.guard.snapshot_position == CUT  # one event short: not written again
    assert _header(cache.path)["position"] == CUT
    write_events(url, events[CUT + every - 1 : CUT + every])
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
    write_events(store_url, generated_events(seed=5)[:CUT])
    _take(store_url, snapshot_dir)
    _recreate(store_url, backend)
    write_events(store_url, generated_events(seed=6)[:CUT])
    [(answers, position, outcome)] = _restored(store_url, snapshot_dir)
    assert position == 0
    assert f"the ledger's entry hash at position {CUT} is " in outcome, outcome
    assert answers == _fresh(store_url)
    _recreate(store_url, backend)
    write_events(store_url, generated_events(seed=5)[: CUT - 1])
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
    write_events(url, events[CUT:])
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


# What makes a snapshot usable: the user's own regular file in the user's own directory, writable
# by nobody else, that reads as a snapshot (magic, header, body of the stated size and SHA-256, a
# non-archiving fold and a policy) and fits the ledger; anything else is ignored, logged as a
# warning or as info, and the command folds from nothing. Writing replaces the file atomically,
# never through a link, and a failed write changes nothing else. The file format does not depend
# on the backend, so most of these run on SQLite only.


@pytest.fixture
def file_url(tmp_path: Path, events: list[tuple[str, Any]]) -> str:
    """A migrated SQLite file holding the first CUT generated events (format checks need no
    second backend)."""
    migrated = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate.upgrade(migrated)
    write_events(migrated, events[:CUT])
    return migrated


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> _Recorded:
    """The snapshot module's log lines, kept instead of written."""
    lines = _Recorded()
    monkeypatch.setattr(snapshot, "log", lines)
    return lines


def _body(path: Path) -> bytes:
    return path.read_bytes().split(b"\n", 2)[2]


def _with_header(path: Path, header: bytes) -> None:
    """Writes ``header`` as the header line, keeping the body."""
    path.write_bytes(SNAPSHOT_MAGIC + header + b"\n" + _body(path))


def _position_a_string(path: Path) -> None:
    _rewrite_body(path, _body(path), position=str(CUT))


def _entry_hash_missing(path: Path) -> None:
    _rewrite_body(path, _body(path), entry_hash=None)


def _header_a_list(path: Path) -> None:
    _with_header(path, orjson.dumps([CUT, "entry_hash"]))


def _header_not_json(path: Path) -> None:
    _with_header(path, b'{"position": ' + str(CUT).encode() + b", oops")


def _torn_in_the_header(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(SNAPSHOT_MAGIC) + 40])


def _header_too_long(path: Path) -> None:
    """A consistent header, but longer than any header written (~400 bytes; 4 KiB read)."""
    _rewrite_body(path, _body(path), padding="x" * 5_000)


def _body_size_misstated(path: Path) -> None:
    """The digest is right, the size is not: the header is not the body's."""
    header = _header(path)
    _rewrite_body(path, _body(path), body_bytes=header["body_bytes"] + 1)


def _archiving_fold(path: Path) -> None:
    """A fold at the right position whose finished submissions would live in an archive."""
    fold, policy = pickle.loads(_body(path))
    fold.archive = {"not": "restorable"}
    _rewrite_body(path, pickle.dumps((fold, policy)))


def _policy_not_a_policy(path: Path) -> None:
    fold, _ = pickle.loads(_body(path))
    _rewrite_body(path, pickle.dumps((fold, {"half_life_blocks": 1})))


def _not_a_pickle(path: Path) -> None:
    _rewrite_body(path, b"\x80\x05 this is no pickle")


def _a_directory(path: Path) -> None:
    path.unlink()
    path.mkdir(mode=0o700)


def _a_device(path: Path) -> None:
    """A character device (the null device's numbers) of the user's own: opens, reads empty."""
    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root (CAP_MKNOD)")


def _directory_a_file(path: Path) -> None:
    shutil.rmtree(path.parent)
    path.parent.write_bytes(b"in the way")


def _world_writable(path: Path) -> None:
    path.chmod(0o602)


def _directory_world_writable(path: Path) -> None:
    path.parent.chmod(0o703)


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (_position_a_string, "header lacks position or entry_hash"),
        (_entry_hash_missing, "header lacks position or entry_hash"),
        (_header_a_list, "header lacks position or entry_hash"),
        (_header_not_json, "header is not JSON"),
        (_torn_in_the_header, "no header line"),
        (_header_too_long, "no header line"),
        (_body_size_misstated, "body does not match its SHA-256"),
        (_archiving_fold, f"does not hold a fold at position {CUT}"),
        (_policy_not_a_policy, f"does not hold a fold at position {CUT}"),
        (_not_a_pickle, "does not unpickle"),
        (_a_directory, "is not a regular file"),
        (_a_device, "is not a regular file"),
        (_directory_a_file, "is not a directory"),
        (_world_writable, "is writable by others (mode 602)"),
        (_directory_world_writable, "is writable by others (mode 703)"),
    ],
)
def test_a_file_that_is_not_a_sound_snapshot_of_the_users_own_is_ignored_with_a_warning(
    file_url: str, snapshot_dir: Path, every: int, recorded: _Recorded,
    spoil: Callable[[Path], None], reason: str,
) -> None:
    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    spoil(cache.path)
    recorded.lines.clear()
    [(answers, position, outcome)] = _restored(file_url, snapshot_dir)
    assert position == 0
    assert outcome.startswith("ignored: ") and reason in outcome, outcome
    assert recorded.lines[0] == (
        "warning", "snapshot_ignored", {"path": str(cache.path), "reason": outcome[9:]}
    )
    assert answers == _fresh(file_url)


def test_a_directory_at_the_snapshot_path_leaks_no_file_descriptor(
    file_url: str, snapshot_dir: Path, every: int
) -> None:
    """It opens (O_RDONLY works on a directory); its descriptor is closed again."""
    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    _a_directory(cache.path)
    descriptors = Path("/proc/self/fd")
    if not descriptors.is_dir():
        pytest.skip("counting open descriptors needs /proc")
    before = len(list(descriptors.iterdir()))
    for _ in range(20):
        assert SnapshotCache(snapshot_dir, file_url).load(CUT, lambda position: None) is None
    assert len(list(descriptors.iterdir())) == before


def test_a_fifo_at_the_snapshot_path_is_ignored_not_waited_on(
    file_url: str, snapshot_dir: Path, every: int
) -> None:
    """Opening a FIFO for reading waits for a writer; the load must not."""
    import threading

    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    cache.path.unlink()
    os.mkfifo(cache.path, 0o600)
    loader = SnapshotCache(snapshot_dir, file_url)
    done = threading.Thread(target=loader.load, args=(CUT, lambda position: None), daemon=True)
    done.start()
    done.join(10)
    hung = done.is_alive()
    if hung:  # let the reader go: a writer opens and closes the FIFO
        os.close(os.open(cache.path, os.O_WRONLY | os.O_NONBLOCK))
        done.join(10)
    assert not hung, "load() blocked opening a FIFO at the snapshot path"
    assert loader.outcome == f"ignored: file {cache.path} is not a regular file"


@pytest.mark.skipif(FOLD_COMPILED, reason="the compiled fold's functions cannot be replaced")
def test_a_decision_cut_short_while_it_undid_its_writes_is_never_written(
    file_url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C inside ``decide_batch``'s rollback (here: while it puts a submission that
    started qualifying back in its queue) leaves the fold half undone; it says so, and
    closing keeps nothing."""
    from machines import projection

    reinsert = projection._reinsert
    calls: list[object] = []

    def interrupted(*args: Any) -> None:
        calls.append(args)
        raise KeyboardInterrupt

    with ArenaLedger(file_url, snapshot_dir=snapshot_dir) as ledger:
        fold = ledger.fold
        batch = [(stream, event, None) for stream, event in events[CUT : CUT + every]]
        monkeypatch.setattr(projection, "_reinsert", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fold.decide_batch(batch)
        assert calls, "no event of the batch took a submission out of its queue"
        assert fold.deciding
        monkeypatch.setattr(projection, "_reinsert", reinsert)
    assert ledger.guard.snapshot_position == 0
    assert not snapshot_dir.exists()


def test_a_snapshot_of_another_history_or_past_the_view_is_ignored_as_information(
    url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int,
    recorded: _Recorded,
) -> None:
    """Expected after a restore or with ``--as-of``: logged as info, not as a warning."""
    cache = _take(url, snapshot_dir)
    assert cache.path is not None
    write_events(url, events[CUT:])
    recorded.lines.clear()
    [(answers, position, outcome)] = _restored(url, snapshot_dir, as_of=CUT - 1)
    assert position == 0 and "past the head or view" in outcome, outcome
    assert recorded.lines[0] == (
        "info", "snapshot_ignored", {"path": str(cache.path), "reason": outcome[9:]}
    )
    assert answers == _fresh(url, as_of=CUT - 1)
    _rewrite_body(cache.path, _body(cache.path), entry_hash="0" * 64)
    recorded.lines.clear()
    [(answers, position, outcome)] = _restored(url, snapshot_dir)
    assert position == 0 and f"the ledger's entry hash at position {CUT} is " in outcome
    assert recorded.lines[0] == (
        "info", "snapshot_ignored", {"path": str(cache.path), "reason": outcome[9:]}
    )
    assert answers == _fresh(url)


def test_a_read_error_inside_the_snapshot_is_ignored_with_a_warning(
    file_url: str, snapshot_dir: Path, every: int, recorded: _Recorded,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _take(file_url, snapshot_dir)

    def failing(source: Any) -> dict[str, Any]:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(snapshot, "_checked_header", failing)
    recorded.lines.clear()
    [(answers, position, outcome)] = _restored(file_url, snapshot_dir)
    assert position == 0 and "Input/output error" in outcome, outcome
    assert recorded.lines[0] == (
        "warning", "snapshot_ignored", {"path": str(cache.path), "reason": outcome[9:]}
    )
    assert answers == _fresh(file_url)


@pytest.mark.parametrize("directory_made", [False, True])
def test_a_first_command_finds_no_snapshot_and_warns_of_nothing(
    file_url: str, snapshot_dir: Path, recorded: _Recorded, directory_made: bool
) -> None:
    if directory_made:
        snapshot_dir.mkdir(mode=0o700)
    [(answers, position, outcome)] = _restored(file_url, snapshot_dir)
    assert (position, outcome) == (0, "none")
    assert [line for line in recorded.lines if line[0] != "info"] == []
    assert answers == _fresh(file_url)


def test_an_in_memory_database_has_no_snapshot_and_that_is_no_warning(
    tmp_path: Path, recorded: _Recorded
) -> None:
    cache = SnapshotCache(tmp_path / "snapshots", "sqlite://")
    looked_up: list[int] = []
    assert cache.load(CUT, lambda position: looked_up.append(position) or None) is None
    assert cache.outcome == "ignored: no snapshot for an in-memory database"
    assert looked_up == []
    assert [level for level, _, _ in recorded.lines] == ["info"]
    assert cache.save(LedgerFold(), None, "0" * 64) is False
    assert not (tmp_path / "snapshots").exists()


def test_the_cache_writes_no_archiving_fold_even_when_asked_directly(
    file_url: str, snapshot_dir: Path
) -> None:
    fold = LedgerFold()
    fold.archive = {"a picklable": "stand-in"}  # type: ignore[assignment]
    cache = SnapshotCache(snapshot_dir, file_url)
    assert cache.save(fold, None, "0" * 64) is False
    assert cache.outcome is not None and cache.outcome.startswith("not written: ")
    assert not snapshot_dir.exists()


def test_a_fold_that_does_not_pickle_is_not_written_and_raises_nothing(
    file_url: str, snapshot_dir: Path, recorded: _Recorded
) -> None:
    cache = SnapshotCache(snapshot_dir, file_url)
    unpicklable: Any = lambda: "no pickle of me"  # noqa: E731
    assert cache.save(LedgerFold(), unpicklable, "0" * 64) is False
    assert cache.outcome is not None and cache.outcome.startswith("not written: ")
    assert [(level, event) for level, event, _ in recorded.lines] == [
        ("warning", "snapshot_not_written")
    ]
    assert not snapshot_dir.exists()


def test_a_failed_write_removes_the_directories_it_made_and_no_other(
    file_url: str, tmp_path: Path
) -> None:
    unpicklable: Any = lambda: "no pickle of me"  # noqa: E731
    nested = tmp_path / "made" / "for" / "snapshots"
    assert SnapshotCache(nested, file_url).save(LedgerFold(), unpicklable, "0" * 64) is False
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ledger.db"]
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "kept").write_text("someone else's")
    assert SnapshotCache(nested, file_url).save(LedgerFold(), unpicklable, "0" * 64) is False
    assert sorted(path.name for path in (tmp_path / "made").iterdir()) == ["kept"]


def test_the_header_line_is_written_at_its_fixed_width_before_the_body(
    file_url: str, snapshot_dir: Path, every: int
) -> None:
    """The body is pickled into the file first and the header written over a blank line of
    fixed width: the line must be that width, and a reader must find the body after it."""
    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    data = cache.path.read_bytes()
    line = data[len(SNAPSHOT_MAGIC) : data.index(b"\n", len(SNAPSHOT_MAGIC)) + 1]
    assert len(line) == snapshot._HEADER_WIDTH
    header = orjson.loads(line)
    body = data[len(SNAPSHOT_MAGIC) + len(line) :]
    assert header["body_bytes"] == len(body)
    fold, _ = pickle.loads(body)
    assert fold.position == header["position"] == CUT


def test_writing_replaces_a_link_at_the_snapshot_path_and_never_writes_through_it(
    file_url: str, snapshot_dir: Path, every: int
) -> None:
    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    target = cache.path.with_name("elsewhere")
    target.write_bytes(b"the link's target, not a snapshot")
    cache.path.unlink()
    cache.path.symlink_to(target)
    with ArenaLedger(file_url, snapshot_dir=snapshot_dir) as ledger:
        ledger.fold  # noqa: B018 - folds from nothing (the link is not loaded), then writes
    assert ledger.guard.snapshot_position == CUT
    assert not cache.path.is_symlink() and _header(cache.path)["position"] == CUT
    assert target.read_bytes() == b"the link's target, not a snapshot"


def test_a_failed_rename_keeps_the_old_snapshot_and_leaves_no_temporary_file(
    file_url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int,
    recorded: _Recorded, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _take(file_url, snapshot_dir)
    assert cache.path is not None
    written = cache.path.read_bytes()
    write_events(file_url, events[CUT : CUT + every])

    def no_room(source: Any, destination: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with ArenaLedger(file_url, snapshot_dir=snapshot_dir) as ledger:
        expected = _fresh(file_url)["snapshot"]
        assert ledger.fold.snapshot() == expected
        monkeypatch.setattr(snapshot.os, "replace", no_room)
    monkeypatch.undo()
    assert ledger.guard.snapshot_position == CUT
    outcome = ledger.guard.snapshots.outcome if ledger.guard.snapshots else None
    assert outcome is not None and "No space left on device" in outcome, outcome
    assert recorded.lines[-1][:2] == ("warning", "snapshot_not_written")
    assert cache.path.read_bytes() == written
    assert sorted(path.name for path in snapshot_dir.iterdir()) == [cache.path.name]


@pytest.mark.skipif(FOLD_COMPILED, reason="the compiled fold's functions cannot be replaced")
def test_closing_after_an_interrupted_later_catch_up_writes_nothing(
    file_url: str, events: list[tuple[str, Any]], snapshot_dir: Path, every: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first catch-up ran to its end; a later one, after another writer's events, was
    interrupted: the fold stands between two positions the ledger agreed on only by chance,
    and closing must not keep it (the first catch-up's success does not count)."""
    apply = LedgerFold.apply

    def interrupted(self: LedgerFold, position: int, *args: Any) -> Any:
        if position == CUT + every + 50:
            raise KeyboardInterrupt
        return apply(self, position, *args)

    with pytest.raises(KeyboardInterrupt), ArenaLedger(
        file_url, snapshot_dir=snapshot_dir
    ) as ledger:
        assert ledger.fold.position == CUT
        write_events(file_url, events[CUT:])
        monkeypatch.setattr(LedgerFold, "apply", interrupted)
        ledger.fold  # noqa: B018
    assert ledger.guard.fold.position == CUT + every + 49
    assert ledger.guard.snapshot_position == 0
    assert not snapshot_dir.exists()


def _store_gone(self: EventStore, position: int, conn: Any = None) -> str | None:
    raise StoreUnavailable("the database went away")


def _row_gone(self: EventStore, position: int, conn: Any = None) -> str | None:
    return None


@pytest.mark.parametrize(
    ("entry_hash", "logged"),
    [(_store_gone, [("warning", "snapshot_not_written")]), (_row_gone, [])],
)
def test_no_snapshot_is_written_when_the_entry_hash_at_the_fold_cannot_be_read_on_close(
    url: str, snapshot_dir: Path, every: int, recorded: _Recorded,
    monkeypatch: pytest.MonkeyPatch, entry_hash: Callable[..., str | None],
    logged: list[tuple[str, str]],
) -> None:
    """The store failing, or the row gone (the ledger recreated meanwhile), as the command
    closes: its result stands, nothing is raised and no snapshot is written."""
    with ArenaLedger(url, snapshot_dir=snapshot_dir) as ledger:
        assert ledger.fold.position == CUT
        monkeypatch.setattr(EventStore, "stored_entry_hash", entry_hash)
        recorded.lines.clear()
    assert [(level, event) for level, event, _ in recorded.lines] == logged
    assert ledger.guard.snapshot_position == 0
    assert not snapshot_dir.exists()


def test_closing_releases_the_store_even_when_writing_the_snapshot_fails_unexpectedly(
    file_url: str, snapshot_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[EventStore] = []
    close = EventStore.close

    def recording_close(self: EventStore) -> None:
        closed.append(self)
        close(self)

    def broken(self: DomainGuard, store: EventStore) -> bool:
        raise RuntimeError("a fault while writing")

    monkeypatch.setattr(EventStore, "close", recording_close)
    monkeypatch.setattr(DomainGuard, "save_snapshot", broken)
    ledger = ArenaLedger(file_url, snapshot_dir=snapshot_dir)
    with pytest.raises(RuntimeError, match="a fault while writing"):
        ledger.close()
    assert closed == [ledger.store]


def test_the_cli_keeps_its_snapshots_in_the_default_directory_without_an_option(
    file_url: str, tmp_path: Path, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.app import app

    monkeypatch.delenv("ARENA_LEDGER_SNAPSHOT_DIR", raising=False)
    monkeypatch.delenv("ARENA_LEDGER_NO_SNAPSHOTS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # nothing lands in the real cache
    result = CliRunner().invoke(app, ["--db", file_url, "submissions", "--json"])
    assert result.exit_code == 0, result.output
    written = tmp_path / "xdg" / "arena-ledger" / "snapshots" / f"{store_key(file_url)}.snapshot"
    assert _header(written)["position"] == CUT


def test_the_store_key_tells_apart_every_part_that_names_a_database() -> None:
    """Host, port, user and database each name another database; the password does not."""
    base = "postgresql+psycopg://alice:pw@127.0.0.1:5432/ledger"
    others = [
        base.replace("127.0.0.1", "10.0.0.2"),
        base.replace(":5432", ":5433"),
        base.replace("alice", "bob"),
        base.replace("/ledger", "/ledger2"),
    ]
    keys = [store_key(spelt) for spelt in (base, *others)]
    assert len(set(keys)) == len(keys)
    assert store_key(base.replace(":pw@", ":other@")) == keys[0]
    assert store_key("sqlite:///file::memory:?cache=shared&uri=true") == ""
