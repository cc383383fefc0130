"""Shares the fixtures every test layer may use: hypothesis profiles and the store backends.

``store_url`` yields an *empty, un-migrated* database for each backend: a SQLite file under
``tmp_path``, and on PostgreSQL the session's own database ``al_test_<uuid8>`` (created with
CREATE DATABASE, dropped ``WITH (FORCE)`` at the end; emptied before every test), so
concurrent runs never collide. ``ARENA_LEDGER_PG_DB_PER_TEST=1`` creates and drops one
database per test instead (slower: every DROP DATABASE forces a checkpoint). ``store`` runs the
Alembic revisions on it and yields an ``EventStore``; ``spare_store`` yields a second one, on
another database of the same backend.

PostgreSQL is a real server (never a mock). When it cannot be reached the postgres-param
tests *fail* with a message saying so, unless ``ARENA_LEDGER_SKIP_POSTGRES=1`` is set, in
which case they are skipped. ``ARENA_LEDGER_PG_ADMIN_URL`` overrides the maintenance
connection (default ``postgresql://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from slow_files import SLOW_FIRST  # beside this file (rootdir on sys.path)

# Modest by default so the whole suite stays fast; HYPOTHESIS_PROFILE=thorough digs deeper.
settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=2_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

PG_ADMIN_URL = os.environ.get(
    "ARENA_LEDGER_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PG_FALLBACK_DB = "test"
SKIP_POSTGRES = os.environ.get("ARENA_LEDGER_SKIP_POSTGRES") == "1"
PG_DB_PER_TEST = os.environ.get("ARENA_LEDGER_PG_DB_PER_TEST") == "1"


_ROOT = Path(__file__).resolve().parents[1]


def _compiled_extensions() -> list[tuple[Path, Path]]:
    """Returns (extension, its source) for every mypyc-built module beside the sources."""
    found = []
    for package in ("vocabulary", "ledger", "machines", "services"):
        for extension in sorted((_ROOT / package).glob("*.so")):
            if "__mypyc" in extension.name:
                continue  # the runtime the compiled modules share, not a module of ours
            source = extension.with_name(extension.name.split(".", 1)[0] + ".py")
            found.append((extension, source))
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Puts the slowest files first (``tests/slow_files.py``), every file's tests together
    and in their order, so the two workers finish at about the same time."""
    rank = {path: index for index, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_report_header() -> str:
    """Says whether the run tests compiled modules (``setup.py``'s optional mypyc build)."""
    compiled = [extension.name.split(".", 1)[0] for extension, _ in _compiled_extensions()]
    return "compiled modules (mypyc): " + (", ".join(compiled) if compiled else "none")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuses to test a compiled module older than its source: it would shadow the edit."""
    stale = [
        f"{extension.relative_to(_ROOT)} is older than {source.name}"
        for extension, source in _compiled_extensions()
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime
    ]
    if stale:
        pytest.exit(
            "stale compiled modules: " + "; ".join(stale) + ". Build them again "
            "(ARENA_LEDGER_COMPILE=1 python setup.py build_ext --inplace --force) or delete the "
            "*.so files",
            returncode=4,
        )


def _pg_unavailable(reason: str) -> None:
    message = (
        f"PostgreSQL is not reachable at {PG_ADMIN_URL} ({reason}); start it, or set "
        "ARENA_LEDGER_SKIP_POSTGRES=1 to skip the postgres-backend tests"
    )
    if SKIP_POSTGRES:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def _connect(dbnames: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """Opens an autocommit connection to the first of ``dbnames`` that answers."""
    try:
        import psycopg
    except ImportError as exc:  # the dev extra pins psycopg; say so rather than skip quietly
        _pg_unavailable(f"psycopg is not installed: {exc}")
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    last: Exception | None = None
    params = conninfo_to_dict(PG_ADMIN_URL)
    for dbname in dbnames:
        try:
            return psycopg.connect(
                make_conninfo(**{**params, "dbname": dbname}), autocommit=True, connect_timeout=5
            )
        except psycopg.OperationalError as exc:
            last = exc
    _pg_unavailable(str(last).strip().splitlines()[0] if last else "unknown error")
    raise AssertionError("unreachable")


def _admin_connect():  # type: ignore[no-untyped-def]
    """Opens the maintenance connection (the admin URL's database, else `test`)."""
    from psycopg.conninfo import conninfo_to_dict

    return _connect((str(conninfo_to_dict(PG_ADMIN_URL).get("dbname", "postgres")),
                     PG_FALLBACK_DB))


@pytest.fixture(scope="session")
def _pg_admin_params() -> dict[str, str]:
    """Checks once per session that PostgreSQL answers and returns its connection params."""
    from psycopg.conninfo import conninfo_to_dict

    with _admin_connect() as conn:
        conn.execute("SELECT 1")
        info = conn.info
        return {
            "host": str(conninfo_to_dict(PG_ADMIN_URL).get("host", info.host)),
            "port": str(info.port),
            "user": info.user,
        }


class _PgDatabases:
    """Hands every test an empty PostgreSQL database that no other run can see.

    The session creates its own ``al_test_<uuid8>`` databases (one, and one more for each
    further database a test holds at once: ``spare_store``) and drops them ``WITH (FORCE)``
    at the end. Before each use a database is emptied (other sessions to it terminated, the
    ``public`` schema dropped and recreated), which leaves it exactly as a fresh database for
    the ledger: no tables, no functions, no ``alembic_version``. Why not one CREATE/DROP per
    test: PostgreSQL 15 forces a checkpoint on every ``DROP DATABASE``, slow on a busy host,
    which alone would take the suite far past its time budget.
    ``ARENA_LEDGER_PG_DB_PER_TEST=1`` restores one database per test for a paranoid run.
    """

    def __init__(self, params: dict[str, str]) -> None:
        self._params = params
        #: Every database the session created, and those no test holds now.
        self._created: list[str] = []
        self._free: list[str] = []

    def _create(self) -> str:
        name = f"al_test_{uuid.uuid4().hex[:8]}"
        with _admin_connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    @staticmethod
    def _drop(name: str) -> None:
        with _admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @staticmethod
    def _empty(name: str) -> None:
        with _connect((name,)) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
            conn.execute("CREATE SCHEMA public")

    def take(self) -> str:
        """Returns an empty database: one given back before (emptied now), else a new one."""
        if PG_DB_PER_TEST:
            return self._create()
        if self._free:
            name = self._free.pop()
            self._empty(name)
            return name
        name = self._create()
        self._created.append(name)
        return name

    def url(self, name: str) -> str:
        p = self._params
        return f"postgresql+psycopg://{p['user']}@{p['host']}:{p['port']}/{name}"

    def give_back(self, name: str) -> None:
        if PG_DB_PER_TEST:
            self._drop(name)
        else:
            self._free.append(name)

    def close(self) -> None:
        for name in self._created:
            self._drop(name)


@pytest.fixture(scope="session")
def _pg_databases(_pg_admin_params: dict[str, str]) -> Iterator[_PgDatabases]:
    pool = _PgDatabases(_pg_admin_params)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """Yields the URL of an empty PostgreSQL database no other run can see (_PgDatabases)."""
    pool: _PgDatabases = request.getfixturevalue("_pg_databases")
    name = pool.take()
    try:
        yield pool.url(name)
    finally:
        pool.give_back(name)


@pytest.fixture
def punctuation_blind_pg_database(_pg_databases: _PgDatabases) -> Iterator[str]:
    """Yields the URL of a new, empty PostgreSQL database whose default collation ignores
    punctuation (ICU ``en-US-u-ka-shifted``), as glibc's en_US.UTF-8 does on many servers:
    there ``'payment-a.b' < 'payment-a-c'`` is decided by the letters alone. Dropped after
    the test; skipped when the server was built without ICU."""
    import psycopg

    name = f"al_test_{uuid.uuid4().hex[:8]}"
    with _admin_connect() as conn:
        try:
            conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
                "ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C.UTF-8'"
            )
        except psycopg.Error as exc:
            pytest.skip(f"this PostgreSQL cannot create an ICU database: {exc}")
    try:
        yield _pg_databases.url(name)
    finally:
        _PgDatabases._drop(name)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    """Names the backend a store test runs against; every store test runs on both."""
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Yields the URL of an empty, un-migrated database on ``backend``."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_database"))


@pytest.fixture
def spare_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[object]:
    """Yields a second ``EventStore``, migrated and empty, on the same backend as ``store``
    (an import target, a copy to compare with); closed afterwards."""
    from ledger import migrate
    from ledger.store import EventStore

    if backend == "sqlite":
        url, name, pool = f"sqlite:///{tmp_path / 'spare.db'}", None, None
    else:
        pool = request.getfixturevalue("_pg_databases")
        name = pool.take()
        url = pool.url(name)
    try:
        migrate.upgrade(url)
        with EventStore(url) as spare:
            yield spare
    finally:
        if pool is not None:
            pool.give_back(name)


@pytest.fixture
def store(store_url: str) -> Iterator[object]:
    """Yields an ``EventStore`` on a freshly migrated database, closed afterwards."""
    from ledger import migrate
    from ledger.store import EventStore

    migrate.upgrade(store_url)
    event_store = EventStore(store_url)
    try:
        yield event_store
    finally:
        event_store.close()
