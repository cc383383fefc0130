"""Runs Alembic migrations for both backends (batch mode on SQLite, naming convention)."""

from __future__ import annotations

from alembic import context

from ledger.tables import metadata

config = context.config
target_metadata = metadata


def run_migrations_offline() -> None:
    """Emits SQL for the configured URL without connecting (``--sql``)."""
    url = config.get_main_option("sqlalchemy.url")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=bool(url and url.startswith("sqlite")),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrates through the connection the caller handed in (``config.attributes``)."""
    connection = config.attributes.get("connection")
    if connection is None:
        from ledger.store import make_engine

        engine = make_engine(str(config.get_main_option("sqlalchemy.url")))
        with engine.connect() as conn:
            _run(conn)
        engine.dispose()
        return
    _run(connection)


def _run(connection: object) -> None:
    # transactional_ddl: SQLite's DDL is transactional too, but alembic assumes not and
    # commits after each revision. One transaction for the whole upgrade (BEGIN IMMEDIATE,
    # ledger.migrate) means an interrupted upgrade leaves the previous revision, and two
    # upgrades at once take turns instead of one acting on a version the other moved past.
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
        compare_type=True,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
