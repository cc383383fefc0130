"""Writes and reads the read model tables (``ledger.tables``, revision 0005) as plain rows.

The rows come from ``services.projections``, which derives them from the machines' state;
this module only knows tables and SQL. Writes are upserts that keep a row's
``first_position``, run on the caller's connection (inside the append transaction, or a
rebuild's), and read back as dicts keyed by column name.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Connection,
    String,
    Table,
    Text,
    and_,
    bindparam,
    create_engine,
    delete,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.pool import NullPool

from ledger.store import EventStore
from ledger.tables import events as events_table
from ledger.tables import (
    metadata,
    read_model_tables,
    rm_arenas,
    rm_attempts,
    rm_claims,
    rm_controls,
    rm_counters,
    rm_credits,
    rm_event_types,
    rm_owed,
    rm_payments,
    rm_qualifications,
    rm_reward_frontiers,
    rm_settlements,
    rm_state,
    rm_submissions,
    rm_weights,
    rm_windows,
)

__all__ = [
    "REWARD_STATUSES",
    "UPSERTED",
    "ArrivalOrder",
    "Reader",
    "RewardRows",
    "add_event_types",
    "clear",
    "delete_owed",
    "exists",
    "first_difference",
    "head_position",
    "position",
    "reader",
    "recorded_rows",
    "replace_controls",
    "scratch_copy",
    "set_position",
    "upsert",
]

Row = dict[str, Any]

#: The tables written by ``upsert``: a changed entity's row replaces the stored one,
#: except ``first_position``, which stays what the first event gave it.
UPSERTED: dict[str, Table] = {
    table.name: table
    for table in (
        rm_arenas, rm_submissions, rm_attempts, rm_payments, rm_credits, rm_counters,
        rm_windows, rm_qualifications, rm_settlements, rm_owed, rm_claims, rm_weights,
        rm_reward_frontiers,
    )
}

_statements: dict[tuple[str, str], Any] = {}


def _upsert_statement(dialect: str, table: Table) -> Any:
    """Returns (and keeps) the INSERT … ON CONFLICT DO UPDATE for ``table`` on ``dialect``."""
    found = _statements.get((dialect, table.name))
    if found is not None:
        return found
    builder = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = builder(table)
    keys = [c.name for c in table.primary_key.columns]
    kept = {*keys, "first_position"}
    changed = {c.name: statement.excluded[c.name] for c in table.columns if c.name not in kept}
    if changed:
        statement = statement.on_conflict_do_update(index_elements=keys, set_=changed)
    else:
        statement = statement.on_conflict_do_nothing(index_elements=keys)
    _statements[(dialect, table.name)] = statement
    return statement


def upsert(conn: Connection, table: str, rows: Sequence[Row]) -> None:
    """Inserts ``rows`` into the read model ``table``, replacing rows with the same key."""
    if rows:
        conn.execute(_upsert_statement(conn.dialect.name, UPSERTED[table]), list(rows))


def delete_owed(conn: Connection, keys: Sequence[tuple[str, str]]) -> None:
    """Deletes the ``rm_owed`` rows of these (kind, ref): their fee event has come."""
    for kind, ref in keys:
        conn.execute(delete(rm_owed).where(rm_owed.c.kind == kind, rm_owed.c.ref == ref))


def replace_controls(conn: Connection, arena_id: str, rows: Sequence[Row]) -> None:
    """Replaces the arena's control rows (its controls, in registration order)."""
    conn.execute(delete(rm_controls).where(rm_controls.c.arena_id == arena_id))
    if rows:
        conn.execute(insert(rm_controls), list(rows))


def add_event_types(conn: Connection, counts: Mapping[str, int]) -> None:
    """Adds ``counts`` (events per type) to ``rm_event_types``."""
    if not counts:
        return
    builder = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    statement = builder(rm_event_types)
    added = rm_event_types.c.events + statement.excluded.events
    statement = statement.on_conflict_do_update(index_elements=["type"], set_={"events": added})
    conn.execute(statement, [{"type": t, "events": n} for t, n in sorted(counts.items())])


def exists(conn: Connection) -> bool:
    """Tells whether the ledger has the read model tables this release reads (revision 0007
    or later: an older ledger's have no reward status, and its queries fold instead)."""
    return inspect(conn).has_table("rm_reward_frontiers")


def position(conn: Connection) -> int | None:
    """Returns the position the read models reflect, or None when the ledger has none."""
    found = conn.execute(select(rm_state.c.position).where(rm_state.c.id == 1)).scalar()
    return None if found is None else int(found)


def set_position(conn: Connection, value: int) -> None:
    """Records that the read models reflect the ledger up to ``value``."""
    done = conn.execute(update(rm_state).where(rm_state.c.id == 1).values(position=value))
    if done.rowcount == 0:
        conn.execute(insert(rm_state).values(id=1, position=value))


def clear(conn: Connection) -> None:
    """Empties every read model table (a rebuild's first step)."""
    for table in reversed(read_model_tables):
        conn.execute(delete(table))


def _fetch(conn: Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Returns the rows of ``sql`` (parameters spelled ``?``) as the driver's tuples, on
    the driver's cursor in ``conn``'s transaction (``Reader._fetch``)."""
    if conn.dialect.name == "postgresql":
        sql = sql.replace("?", "%s")  # psycopg's placeholder; no literal ? is written
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, list(params))
        return list(cursor.fetchall())
    finally:
        cursor.close()


#: A submission's place in its arena's arrival order, as settlement sorts it: (block, event
#: index, subindex, hotkey, content hash, submission id).
ArrivalOrder = tuple[int, int, int, str, str, str]

_ORDER_COLUMNS = ("arrival_block, arrival_event_index, arrival_event_subindex, hotkey, "
                  "content_hash, submission_id")
#: The values of ``rm_submissions.reward_status`` (a PASS's; any other row's is NULL).
REWARD_STATUSES = ("lost_potential", "pending", "rewarded")
_ORDER_OF_S = ", ".join("s." + c for c in _ORDER_COLUMNS.split(", "))


class RewardRows:
    """Reads and writes what keeps the reward statuses (``rm_submissions.reward_status``,
    ``rm_reward_frontiers``) through the append transaction's connection:
    ``services.projections`` walks each changed arena from what these return."""

    def __init__(self, conn: Connection, excluded_hotkey: str) -> None:
        self.conn = conn
        #: The hotkey whose submissions are never rewarded and never block (control runs).
        self.excluded = excluded_hotkey

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return _fetch(self.conn, sql, params)

    def frontier(self, arena_id: str) -> tuple[str | None, str, str] | None:
        """Returns the arena's frontier (submission, reward margin, incumbent), or None."""
        found = self._fetch(
            "SELECT submission_id, reward_margin, incumbent_digest FROM rm_reward_frontiers "
            "WHERE arena_id = ?", [arena_id])
        return None if not found else (found[0][0], str(found[0][1]), str(found[0][2]))

    def put_frontier(
        self, arena_id: str, submission_id: str | None, margin: str, incumbent: str
    ) -> None:
        """Stores the arena's frontier."""
        upsert(self.conn, "rm_reward_frontiers", [{
            "arena_id": arena_id, "submission_id": submission_id, "reward_margin": margin,
            "incumbent_digest": incumbent,
        }])

    def order_of(self, submission_id: str) -> ArrivalOrder | None:
        """Returns a submission's arrival order (one seek of the key), or None."""
        found = self._fetch(
            f"SELECT {_ORDER_COLUMNS} FROM rm_submissions WHERE submission_id = ?",
            [submission_id])
        return None if not found else _order(found[0])

    def first_blocking(self, arena_id: str, statuses: Sequence[str]) -> ArrivalOrder | None:
        """Returns the arrival order of the arena's earliest submission in ``statuses`` (but
        the excluded hotkey's), or None: a range of the (status, arena) index per status,
        the live submissions only."""
        found = self._fetch(
            f"SELECT {_ORDER_COLUMNS} FROM rm_submissions "
            f"WHERE status IN ({', '.join('?' * len(statuses))}) AND arena_id = ? "
            "AND hotkey <> ?", [*statuses, arena_id, self.excluded])
        return min((_order(row) for row in found), default=None)

    def passes(
        self, arena_id: str, low_block: int | None, high_block: int | None
    ) -> list[tuple[ArrivalOrder, str | None, str | None, str | None]]:
        """Returns (arrival order, reward group, speedup of the latest attempt, stored
        reward status) of the arena's PASSes that arrived from ``low_block`` to
        ``high_block`` (open where None), in arrival order: one range of the reward index
        per status. Every PASS but the excluded hotkey's has a status (``pending`` until
        judged), so these are all of them."""
        sql = (
            f"SELECT {_ORDER_OF_S}, s.reward_group, a.speedup, s.reward_status "
            "FROM rm_submissions s LEFT JOIN rm_attempts a ON a.attempt_id = s.attempt_id "
            "WHERE s.reward_status IN (?, ?, ?) AND s.arena_id = ?"
        )
        params: list[Any] = [*REWARD_STATUSES, arena_id]
        if low_block is not None:
            sql += " AND s.arrival_block >= ?"
            params.append(low_block)
        if high_block is not None:
            sql += " AND s.arrival_block <= ?"
            params.append(high_block)
        found = [(_order(row[:6]), row[6], row[7], row[8]) for row in self._fetch(sql, params)]
        found.sort()
        return found

    def rewarded(self, arena_id: str) -> list[tuple[ArrivalOrder, str | None, str]]:
        """Returns (arrival order, reward group, speedup) of the arena's rewarded PASSes in
        arrival order (the reward index)."""
        found = self._fetch(
            f"SELECT {_ORDER_OF_S}, s.reward_group, a.speedup FROM rm_submissions s "
            "LEFT JOIN rm_attempts a ON a.attempt_id = s.attempt_id "
            "WHERE s.reward_status = 'rewarded' AND s.arena_id = ?", [arena_id])
        return sorted((_order(row[:6]), row[6], str(row[7])) for row in found)

    def has_ungrouped_pass(self, arena_id: str) -> bool:
        """Tells whether one of the arena's PASSes (but the excluded hotkey's) has no
        recorded reward group (it ranks under the arena's incumbent of the moment)."""
        return bool(self._fetch(
            "SELECT 1 FROM rm_submissions WHERE status = 'QUALIFIED' AND arena_id = ? "
            "AND hotkey <> ? AND reward_group IS NULL LIMIT 1", [arena_id, self.excluded]))

    def set_statuses(self, changes: Sequence[tuple[str, str]]) -> None:
        """Stores (submission, reward status) for each of ``changes``."""
        if changes:
            self.conn.execute(
                update(rm_submissions)
                .where(rm_submissions.c.submission_id == bindparam("sid"))
                .values(reward_status=bindparam("judged")),
                [{"sid": sid, "judged": status} for sid, status in changes],
            )


def _order(row: Sequence[Any]) -> ArrivalOrder:
    block, index, subindex, hotkey, content, sid = row
    return (int(block), int(index), int(subindex), str(hotkey), str(content), str(sid))


def head_position(conn: Connection) -> int:
    """Returns the ledger's head position (0 for a ledger without events)."""
    found = conn.exec_driver_sql("SELECT position FROM ledger_head WHERE id = 1").scalar()
    return 0 if found is None else int(found)


def recorded_rows(conn: Connection, last: int) -> Iterator[tuple[int, str, str, int, bytes]]:
    """Yields (position, stream, type, schema version, payload) for positions 1 to ``last``,
    in order, a page at a time."""
    columns = events_table.c
    # Options on the statement: Connection.execution_options changes the connection itself,
    # and every later statement would then open a server-side cursor too.
    result = conn.execute(
        select(columns.position, columns.stream, columns.type, columns.schema_version,
               columns.payload)
        .where(columns.position <= last)
        .order_by(columns.position)
        .execution_options(stream_results=True, yield_per=2_000)
    )
    for position, stream, kind, version, data in result:
        yield int(position), str(stream), str(kind), int(version), bytes(data)


@contextmanager
def scratch_copy() -> Iterator[Connection]:
    """Yields a connection to empty read model tables in a temporary SQLite file, inside a
    transaction (what ``projections check`` rebuilds into); the file is gone afterwards."""
    with tempfile.TemporaryDirectory(prefix="arena-ledger-projections-") as scratch:
        engine = create_engine(
            f"sqlite:///{os.path.join(scratch, 'rebuilt.db')}", poolclass=NullPool
        )
        try:
            with engine.begin() as conn:
                metadata.create_all(conn, tables=list(read_model_tables))
                yield conn
        finally:
            engine.dispose()


def _byte_ordered(conn: Connection, table: Table) -> list[Any]:
    """Returns ``table``'s key columns to ORDER BY in byte order (COLLATE "C" on
    PostgreSQL, whose default collation may order text otherwise; SQLite's is bytes)."""
    return [
        column.collate("C")
        if conn.dialect.name == "postgresql" and isinstance(column.type, (String, Text))
        else column
        for column in table.primary_key.columns
    ]


def first_difference(
    stored: Connection, rebuilt: Connection
) -> tuple[str, tuple[Any, ...], Row | None, Row | None] | None:
    """Walks every read model table of ``stored`` and ``rebuilt`` in key order together and
    returns the first row that differs: (table, key, stored row, rebuilt row), a side None
    where it has no such row; None when they are equal."""
    for table in read_model_tables:
        names = [c.name for c in table.primary_key.columns]
        left, right = _rows(stored, table), _rows(rebuilt, table)
        a, b = next(left, None), next(right, None)
        while a is not None or b is not None:
            key_a = None if a is None else tuple(a[k] for k in names)
            key_b = None if b is None else tuple(b[k] for k in names)
            if key_a is not None and key_a == key_b:
                if a != b:
                    return table.name, key_a, a, b
                a, b = next(left, None), next(right, None)
            elif key_a is not None and (key_b is None or key_a < key_b):
                return table.name, key_a, a, None
            else:
                assert key_b is not None
                return table.name, key_b, None, b
    return None


def _rows(conn: Connection, table: Table) -> Iterator[Row]:
    result = conn.execute(
        select(table)
        .order_by(*_byte_ordered(conn, table))
        .execution_options(stream_results=True, yield_per=5_000)
    )
    for row in result:
        yield dict(row._mapping)


@contextmanager
def reader(store: EventStore) -> Iterator[Reader | None]:
    """Yields a Reader over one snapshot of ``store`` when its read models reflect its
    head, else None (none yet, an older revision, or events appended past them)."""
    with store.reading() as conn:
        if not exists(conn):
            yield None
            return
        at = position(conn)
        head = head_position(conn)
        yield Reader(conn, head) if at == head else None


class Reader:
    """Answers queries from the read models through one connection (one snapshot) of a
    ledger whose read models reflect its head, ``position``; rows come back as dicts."""

    def __init__(self, conn: Connection, position: int) -> None:
        self.conn = conn
        self.position = position

    def arena_ids(self) -> list[str]:
        """Returns every commissioned arena's id, sorted."""
        return sorted(str(a) for a in self.conn.execute(select(rm_arenas.c.arena_id)).scalars())

    def has_arena(self, arena_id: str) -> bool:
        """Tells whether ``arena_id`` was ever commissioned."""
        found = self.conn.execute(
            select(rm_arenas.c.arena_id).where(rm_arenas.c.arena_id == arena_id)
        ).first()
        return found is not None

    def submission(self, sid: str) -> Row | None:
        """Returns a submission's row, or None."""
        found = self._raw(rm_submissions, "submission_id = ?", [sid], "submission_id")
        return found[0] if found else None

    def ids_starting_with(self, prefix: str, limit: int = 2) -> list[str]:
        """Returns up to ``limit`` submission ids that start with ``prefix`` (lower-case hex),
        by a range over the primary key."""
        column = _byte_ordered(self.conn, rm_submissions)[0]
        found = self.conn.execute(
            select(rm_submissions.c.submission_id)
            .where(and_(column >= prefix, column < prefix + "g"))  # "g" follows every hex digit
            .order_by(column)
            .limit(limit)
        ).scalars()
        return [str(s) for s in found]

    def count_starting_with(self, prefix: str) -> int:
        """Returns how many submission ids start with ``prefix`` (lower-case hex)."""
        column = _byte_ordered(self.conn, rm_submissions)[0]
        return int(
            self.conn.execute(
                select(func.count()).where(and_(column >= prefix, column < prefix + "g"))
            ).scalar() or 0
        )

    def submissions(
        self,
        arena_id: str | None = None,
        hotkey: str | None = None,
        status: str | None = None,
        delta_digests: Sequence[str] | None = None,
    ) -> list[Row]:
        """Returns the rows of the submissions the filters select (in no set order)."""
        where, params = ["1 = 1"], []
        for column, value in (("arena_id", arena_id), ("hotkey", hotkey), ("status", status)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if delta_digests is not None:
            where.append(f"delta_digest IN ({', '.join('?' * len(delta_digests))})")
            params += list(delta_digests)
        return self._raw(rm_submissions, " AND ".join(where), params, "first_position")

    def settlement_rows(
        self, statuses: Sequence[str], excluded_hotkey: str, arena_id: str | None = None
    ) -> list[tuple[Row, str | None]]:
        """Returns the rows of the submissions in ``statuses`` (but ``excluded_hotkey``'s;
        of one arena, when ``arena_id`` is given) with the speedup their latest attempt
        recorded: what a settlement reads."""
        names = [c.name for c in rm_submissions.columns]
        sql = (
            f"SELECT {', '.join('s.' + n for n in names)}, a.speedup FROM rm_submissions s "
            "LEFT JOIN rm_attempts a ON a.attempt_id = s.attempt_id "
            f"WHERE s.status IN ({', '.join('?' * len(statuses))}) AND s.hotkey <> ?"
        )
        params: list[Any] = [*statuses, excluded_hotkey]
        if arena_id is not None:  # one range of the (status, arena) index per status
            sql += " AND s.arena_id = ?"
            params.append(arena_id)
        found = self._fetch(sql, params)
        return [(dict(zip(names, values[:-1], strict=True)), values[-1]) for values in found]

    def rewarded_keys(self, excluded_hotkey: str) -> list[tuple[Any, ...]]:
        """Returns what a settlement's arithmetic reads of the rewarded PASSes (but
        ``excluded_hotkey``'s), as the driver's tuples: (arrival_block,
        arrival_event_index, arrival_event_subindex, hotkey, content_hash, submission_id,
        arena_id, status, verdict, reward_group, the latest attempt's speedup).

        The rewarded ones alone (the reward index): a settlement's claims come from them
        only, every other PASS being lost_potential or pending; on a long ledger reading
        every PASS with its attempt was most of a preview."""
        sql = (
            "SELECT s.arrival_block, s.arrival_event_index, s.arrival_event_subindex, "
            "s.hotkey, s.content_hash, s.submission_id, s.arena_id, s.status, s.verdict, "
            "s.reward_group, a.speedup FROM rm_submissions s "
            "LEFT JOIN rm_attempts a ON a.attempt_id = s.attempt_id "
            "WHERE s.reward_status = 'rewarded' AND s.hotkey <> ?"
        )
        return self._fetch(sql, [excluded_hotkey])

    def frontier_statuses(self) -> dict[str, str | None]:
        """Returns each arena's reward frontier as the status of its submission (None where
        every PASS is assessed): a QUALIFIED one is a PASS whose speedup the rules refuse."""
        found = self._fetch(
            "SELECT f.arena_id, s.status FROM rm_reward_frontiers f LEFT JOIN rm_submissions s "
            "ON s.submission_id = f.submission_id", [])
        return {str(arena): None if status is None else str(status) for arena, status in found}

    def qualifications_of(self, hotkey: str) -> list[tuple[str, str]]:
        """Returns (submission, attempt) of every QualificationStarted of the hotkey's
        submissions, in position order."""
        sql = ("SELECT q.submission_id, q.attempt_id FROM rm_qualifications q JOIN "
               "rm_submissions s ON s.submission_id = q.submission_id WHERE s.hotkey = ? "
               "ORDER BY q.position")
        return [(str(sid), str(aid)) for sid, aid in self._fetch(sql, [hotkey])]

    def controls(self, arena_id: str) -> list[Row]:
        """Returns the arena's registered controls in registration order."""
        return [
            dict(row._mapping)
            for row in self.conn.execute(
                select(rm_controls).where(rm_controls.c.arena_id == arena_id)
                .order_by(rm_controls.c.seq)
            )
        ]

    def fee_sums(self, arena_id: str | None = None) -> dict[str, list[int]]:
        """Returns per arena [payments consumed, of them released, credits spent] in rao."""
        sums: dict[str, list[int]] = {}
        p = rm_payments.c
        consumed = (
            select(p.arena_id, p.status, func.sum(p.amount_rao)).group_by(p.arena_id, p.status)
        )
        if arena_id is not None:
            consumed = consumed.where(p.arena_id == arena_id)
        for arena, status, total in self.conn.execute(consumed):
            row = sums.setdefault(str(arena), [0, 0, 0])
            row[0] += int(total)
            if status == "RELEASED":
                row[1] += int(total)
        s = rm_submissions.c
        # Grouped by an expression, not the column: by the column SQLite walks every
        # submission in the arena index to skip a sort, where a credit's submission is a
        # seek (80 ms against 14 on the 1M benchmark ledger).
        arena_key = s.arena_id.concat("")
        spent = (
            select(arena_key, func.sum(s.fee_amount_rao))
            .select_from(
                rm_credits.join(rm_submissions, s.submission_id == rm_credits.c.submission_id)
            )
            .where(s.fee_kind.is_not(None))
            .group_by(arena_key)
        )
        if arena_id is not None:
            spent = spent.where(s.arena_id == arena_id)
        for arena, total in self.conn.execute(spent):
            sums.setdefault(str(arena), [0, 0, 0])[2] += int(total)
        return sums

    def counters(self) -> list[tuple[str, str, int]]:
        """Returns (counter, key, value) for every counter kept."""
        c = rm_counters.c
        found = self.conn.execute(select(c.counter, c.key, c.value))
        return [(str(name), str(key), int(value)) for name, key, value in found]

    def status_counts(self) -> list[tuple[str, str, int]]:
        """Returns (arena, status, submissions) for every arena and status that has any."""
        s = rm_submissions.c
        found = self.conn.execute(
            select(s.arena_id, s.status, func.count()).group_by(s.arena_id, s.status)
        )
        return [(str(a), str(status), int(n)) for a, status, n in found]

    def arena_status_counts(self, arena_id: str, statuses: Sequence[str]) -> dict[str, int]:
        """Returns how many of the arena's submissions are in each of ``statuses`` (those with
        any): one range of the (status, arena) index per status, none of another arena's."""
        s = rm_submissions.c
        found = self.conn.execute(
            select(s.status, func.count())
            .where(s.status.in_(list(statuses)), s.arena_id == arena_id)
            .group_by(s.status)
        )
        return {str(status): int(n) for status, n in found}

    def held_reasons(self) -> dict[str, int]:
        """Returns how many submissions are HELD now, per hold reason."""
        s = rm_submissions.c
        found = self.conn.execute(
            select(s.hold_reason, func.count()).where(s.status == "HELD").group_by(s.hold_reason)
        )
        return {str(reason): int(n) for reason, n in found}

    def event_types(self) -> dict[str, int]:
        """Returns events per type, by type name in code-point order (sorted here, not by
        the database, whose collation may order otherwise)."""
        found = self.conn.execute(select(rm_event_types.c.type, rm_event_types.c.events))
        return {str(t): int(n) for t, n in sorted(found, key=lambda r: str(r[0]))}

    # -- one hotkey's weights, claims, payments and credits (the dashboard's hotkey page) ----

    def settlements_of(self, hotkey: str) -> list[Row]:
        """Returns every recorded settlement (position, block, as_of_position) with the
        hotkey's weight in it, 0 where it had none, in position order (the settlements by
        their key, each weight by its (position, hotkey) key)."""
        sql = ("SELECT s.position, s.block, s.as_of_position, COALESCE(w.weight_ppm, 0) "
               "FROM rm_settlements s LEFT JOIN rm_weights w "
               "ON w.position = s.position AND w.hotkey = ? ORDER BY s.position")
        names = ("position", "block", "as_of_position", "weight_ppm")
        return [dict(zip(names, row, strict=True)) for row in self._fetch(sql, [hotkey])]

    def claims_of(self, hotkey: str) -> list[Row]:
        """Returns the claims recorded settlements paid the hotkey, in position order."""
        return self._raw(rm_claims, "hotkey = ?", [hotkey], "position")

    def payments_of(self, hotkey: str) -> list[Row]:
        """Returns the payments of the hotkey's submissions, in the order they were consumed
        (the hotkey's submissions by their index, then each one's payments by theirs)."""
        names = [c.name for c in rm_payments.columns]
        sql = (f"SELECT {', '.join('p.' + n for n in names)} FROM rm_submissions s "
               "JOIN rm_payments p ON p.submission_id = s.submission_id "
               "WHERE s.hotkey = ? ORDER BY p.first_position")
        return [dict(zip(names, row, strict=True)) for row in self._fetch(sql, [hotkey])]

    def credits_of(self, hotkey: str) -> list[Row]:
        """Returns the credits granted to the hotkey, in grant order."""
        return self._raw(rm_credits, "hotkey = ?", [hotkey], "first_position")

    def credit_fees_of(self, hotkey: str) -> int:
        """Returns the fees, in rao, that credits paid for the hotkey's submissions (each
        at the fee its admission recorded, as ``fee_sums`` counts them)."""
        return int(self._scalar(
            "SELECT COALESCE(SUM(s.fee_amount_rao), 0) FROM rm_submissions s "
            "JOIN rm_credits c ON c.submission_id = s.submission_id "
            "WHERE s.hotkey = ? AND s.fee_kind IS NOT NULL", [hotkey],
        ) or 0)

    # -- what a fold seeded from the read models reads (services.seeded_fold) ---------------

    def submissions_in(self, statuses: Sequence[str], arena_id: str | None = None) -> list[Row]:
        """Returns the rows of the submissions in ``statuses`` (of one arena when given), in
        the order their first events were recorded."""
        where = f"status IN ({', '.join('?' * len(statuses))})"
        params: list[Any] = list(statuses)
        if arena_id is not None:
            where += " AND arena_id = ?"
            params.append(arena_id)
        return self._raw(rm_submissions, where, params, "first_position")

    def rows_by(self, table: str, column: str, values: Sequence[Any]) -> list[Row]:
        """Returns the rows of read model ``table`` whose ``column`` is one of ``values``, in
        the order their first events were recorded (``position`` where there is none)."""
        found: list[Row] = []
        chosen = UPSERTED[table]
        order = "first_position" if "first_position" in chosen.c else "position"
        for at in range(0, len(values), 500):  # bounded IN lists
            part = list(values[at:at + 500])
            where = f"{chosen.c[column].name} IN ({', '.join('?' * len(part))})"
            found += self._raw(chosen, where, part, order)
        if len(values) > 500:
            found.sort(key=lambda row: int(row[order]))
        return found

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Returns the rows of ``sql`` (parameters spelled ``?``) as the driver's tuples, read
        on its cursor in this connection's transaction: seeding a fold and the guard's
        read-throughs read thousands of rows or run per event, and SQLAlchemy's statements
        and result rows cost several times the driver's."""
        return _fetch(self.conn, sql, params)

    def _scalar(self, sql: str, params: Sequence[Any]) -> Any:
        """Returns the first column of the first row of ``sql``; None without a row."""
        found = self._fetch(sql, params)
        return found[0][0] if found else None

    def _raw(self, table: Table, where: str, params: Sequence[Any], order: str) -> list[Row]:
        """Returns ``SELECT * FROM table WHERE where ORDER BY order`` as dicts (``_fetch``)."""
        names = [c.name for c in table.columns]
        sql = f"SELECT {', '.join(names)} FROM {table.name} WHERE {where} ORDER BY {order}"
        return [dict(zip(names, values, strict=True)) for values in self._fetch(sql, params)]

    def row(self, table: str, **key: Any) -> Row | None:
        """Returns the row of read model ``table`` with this key, or None."""
        chosen = UPSERTED[table]
        where = " AND ".join(f"{chosen.c[name].name} = ?" for name in key)
        found = self._raw(chosen, where, list(key.values()), chosen.c[next(iter(key))].name)
        return found[0] if found else None

    def unspent_credits(self) -> list[Row]:
        """Returns the credits not yet spent, in grant order."""
        c = rm_credits.c
        statement = select(rm_credits).where(c.submission_id.is_(None)).order_by(c.first_position)
        return _rows_of(self.conn.execute(statement))

    def owed(self) -> list[tuple[str, str, str]]:
        """Returns (kind, ref, submission) of each fee an admission owes its event for."""
        c = rm_owed.c
        found = self.conn.execute(select(c.kind, c.ref, c.submission_id))
        return [(str(k), str(r), str(s)) for k, r, s in found]

    def admissions(self, hotkey: str, first_block: int, last_block: int) -> int:
        """Returns how many of the hotkey's submissions that arrived in blocks ``first_block``
        to ``last_block`` were admitted (an admission records their fee)."""
        return int(self._scalar(
            "SELECT COUNT(*) FROM rm_submissions WHERE hotkey = ? AND fee_kind IS NOT NULL "
            "AND arrival_block >= ? AND arrival_block <= ?", [hotkey, first_block, last_block],
        ) or 0)

    def failed_with(self, content_hash: str, commission_digest: str) -> list[Row]:
        """Returns the FAILED submissions of this content whose deciding attempt ran under
        this commission."""
        where = (
            "content_hash = ? AND status = 'FAILED' AND attempt_id IN (SELECT attempt_id FROM "
            "rm_attempts WHERE commission_digest = ? AND attempt_id = rm_submissions.attempt_id)"
        )
        return self._raw(rm_submissions, where, [content_hash, commission_digest],
                         "first_position")

    def stream_events(self, streams: Sequence[str]) -> list[tuple[int, str, str, int, bytes]]:
        """Returns (position, stream, type, schema version, payload) of every event of these
        streams, in position order (one index range per stream, a few queries in all)."""
        c = events_table.c
        found: list[tuple[int, str, str, int, bytes]] = []
        for at in range(0, len(streams), 500):
            part = list(streams[at:at + 500])
            rows = self.conn.execute(
                select(c.position, c.stream, c.type, c.schema_version, c.payload)
                .where(c.stream.in_(part))
            )
            found += [(int(p), str(s), str(t), int(v), bytes(d)) for p, s, t, v, d in rows]
        found.sort()
        return found

    def streams_of_type(self, event_type: str) -> list[str]:
        """Returns the streams holding an event of ``event_type`` (the (type, position)
        index), in the order of their first such event."""
        c = events_table.c
        rows = self.conn.execute(
            select(c.stream).where(c.type == event_type).order_by(c.position)
        )
        return list(dict.fromkeys(str(row[0]) for row in rows))

    def latest_of_type(self, event_type: str) -> tuple[int, bytes] | None:
        """Returns (schema version, payload) of the latest event of ``event_type``, or None
        (one seek on the (type, position) index)."""
        c = events_table.c
        found = self.conn.execute(
            select(c.schema_version, c.payload).where(c.type == event_type)
            .order_by(c.position.desc()).limit(1)
        ).first()
        return None if found is None else (int(found[0]), bytes(found[1]))

    # -- what the dashboard's settlement pages read (services.settlement_board) -------------

    def settlement_at(self, block: int, up_to: int) -> tuple[int, int, str] | None:
        """Returns (position, as_of_position, digest) of the latest settlement recorded at
        ``block`` at or before position ``up_to``, or None (the block index)."""
        found = self._fetch(
            "SELECT position, as_of_position, settlement_digest FROM rm_settlements "
            "WHERE block = ? AND position <= ? ORDER BY position DESC LIMIT 1", [block, up_to])
        return None if not found else (int(found[0][0]), int(found[0][1]), str(found[0][2]))

    def settlement_count(self) -> int:
        """Returns how many settlements are recorded."""
        return int(self._scalar("SELECT COUNT(*) FROM rm_settlements", []) or 0)

    def settlements_before(
        self, before: int | None, limit: int
    ) -> list[tuple[int, str, int, bytes]]:
        """Returns (position, recorded_at, schema version, payload) of up to ``limit``
        recorded settlements before position ``before`` (from the newest when None), newest
        first: a walk down ``rm_settlements``' key, each event found by its position."""
        where, params = ("WHERE s.position < ? ", [before]) if before is not None else ("", [])
        sql = ("SELECT e.position, e.recorded_at, e.schema_version, e.payload FROM "
               "rm_settlements s JOIN events e ON e.position = s.position "
               f"{where}ORDER BY s.position DESC LIMIT ?")
        found = self._fetch(sql, [*params, limit])
        return [(int(p), str(at), int(v), bytes(d)) for p, at, v, d in found]

    def passing_decisions(self, submission_ids: Sequence[str]) -> list[tuple[str, int, bytes]]:
        """Returns (submission, schema version, payload) of the AttemptDecided of each PASS
        attempt of these submissions (an index range per submission, one seek per attempt)."""
        found: list[tuple[str, int, bytes]] = []
        for at in range(0, len(submission_ids), 500):  # bounded IN lists
            part = list(submission_ids[at:at + 500])
            sql = ("SELECT a.submission_id, e.schema_version, e.payload FROM rm_attempts a "
                   "JOIN events e ON e.stream = 'attempt-' || a.attempt_id "
                   "AND e.type = 'AttemptDecided' "
                   f"WHERE a.submission_id IN ({', '.join('?' * len(part))}) "
                   "AND a.verdict = 'PASS'")
            found += [(str(s), int(v), bytes(d)) for s, v, d in self._fetch(sql, part)]
        return found

    def admitted_arrivals(self) -> list[tuple[str, int]]:
        """Returns (hotkey, arrival block) of every admitted submission."""
        c = rm_submissions.c
        found = self.conn.execute(select(c.hotkey, c.arrival_block).where(c.fee_kind.is_not(None)))
        return [(str(hotkey), int(block)) for hotkey, block in found]

    def failed_keys(self) -> list[tuple[str, str]]:
        """Returns (commission, content hash) of every FAILED submission's deciding attempt."""
        s, a = rm_submissions.c, rm_attempts.c
        found = self.conn.execute(
            select(a.commission_digest, s.content_hash)
            .select_from(rm_submissions.join(rm_attempts, a.attempt_id == s.attempt_id))
            .where(s.status == "FAILED")
        )
        return [(str(commission), str(content)) for commission, content in found]

    def submissions_arrived(
        self,
        statuses: Sequence[str],
        arena_id: str | None = None,
        arrived_by: int | None = None,
        limit: int | None = None,
    ) -> list[Row]:
        """Returns the rows of the submissions in ``statuses`` (of one arena, arrived at or
        before block ``arrived_by``, when given) in arrival-key order, the first ``limit``
        when given: a lazily seeded fold's queue, expiry and live submissions."""
        where = f"status IN ({', '.join('?' * len(statuses))})"
        params: list[Any] = list(statuses)
        if arena_id is not None:
            where += " AND arena_id = ?"
            params.append(arena_id)
        # "+arrival_block": not a term SQLite's planner can take from an index, so it seeks
        # (status, arena_id), the few live rows, rather than walk the arena's arrivals in
        # order (every submission it ever had) for the ORDER BY or the block range.
        if arrived_by is not None:
            where += " AND +arrival_block <= ?"
            params.append(arrived_by)
        # The fold's arrival key: its last two parts compare as Python strings do, which is
        # byte order (COLLATE "C" on PostgreSQL, whose default collation may differ).
        collate = ' COLLATE "C"' if self.conn.dialect.name == "postgresql" else ""
        order = (
            "+arrival_block, arrival_event_index, arrival_event_subindex, "
            f"hotkey{collate}, content_hash{collate}"
        )
        if limit is not None:
            order += " LIMIT ?"
            params.append(limit)
        return self._raw(rm_submissions, where, params, order)

    # -- one hotkey's history, settlements, payments and credits a page at a time -----------
    # (the dashboard's hotkey page: every list bounded by ``limit``, every total a count or
    # a sum in SQL)

    def _history_order(self) -> list[str]:
        """Returns the key ``ArenaLedger.history`` orders a hotkey's rows by: the arrival
        (block, event index, subindex), then the content hash and the arena, the texts in
        byte order (Python's for these ASCII texts; COLLATE "C" on PostgreSQL)."""
        collate = ' COLLATE "C"' if self.conn.dialect.name == "postgresql" else ""
        return ["arrival_block", "arrival_event_index", "arrival_event_subindex",
                f"content_hash{collate}", f"arena_id{collate}"]

    def history_count(self, hotkey: str, before: Sequence[Any] | None = None) -> tuple[int, int]:
        """Returns how many submissions the hotkey has (its index's range, no row read) and,
        given the history key ``before``, how many of them come before it (every row read:
        a window count on ``history_rows`` would cost more, keeping every row for the sort)."""
        if before is None:
            return int(self._scalar(
                "SELECT COUNT(*) FROM rm_submissions WHERE hotkey = ?", [hotkey]) or 0), 0
        key = ", ".join(self._history_order())
        found = self._fetch(
            f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN ({key}) < (?, ?, ?, ?, ?) THEN 1 ELSE 0 "
            "END), 0) FROM rm_submissions WHERE hotkey = ?", [*before, hotkey])
        return int(found[0][0]), int(found[0][1])

    def history_rows(
        self, hotkey: str, limit: int, after: Sequence[Any] | None = None,
        before: Sequence[Any] | None = None,
    ) -> list[Row]:
        """Returns the rows of the hotkey's first ``limit`` submissions in history order after
        the history key ``after`` (or, given ``before``, its last ``limit`` before that key,
        still in history order): the hotkey index's rows, sorted, the page's kept."""
        order = self._history_order()
        key = ", ".join(order)
        where, params = "hotkey = ?", [hotkey]
        if after is not None:
            where += f" AND ({key}) > (?, ?, ?, ?, ?)"
            params += list(after)
        if before is not None:
            where += f" AND ({key}) < (?, ?, ?, ?, ?)"
            params += list(before)
        direction = " DESC" if before is not None else ""
        found = self._raw(rm_submissions, where, [*params, limit],
                          ", ".join(o + direction for o in order) + " LIMIT ?")
        return found[::-1] if before is not None else found

    def qualifications_of_submissions(self, submission_ids: Sequence[str]) -> list[tuple[str, str]]:
        """Returns (submission, attempt) of every QualificationStarted of these submissions,
        in position order (their key's ranges)."""
        found: list[tuple[int, str, str]] = []
        for at in range(0, len(submission_ids), 500):  # bounded IN lists
            part = list(submission_ids[at:at + 500])
            sql = ("SELECT position, submission_id, attempt_id FROM rm_qualifications "
                   f"WHERE submission_id IN ({', '.join('?' * len(part))})")
            found += [(int(p), str(s), str(a)) for p, s, a in self._fetch(sql, part)]
        return [(sid, aid) for _, sid, aid in sorted(found)]

    def latest_settlements_of(self, hotkey: str, limit: int) -> list[Row]:
        """Returns the latest ``limit`` recorded settlements (position, block,
        as_of_position) with the hotkey's weight in each, 0 where it had none, newest first
        (a walk down the settlements' key, one seek per weight)."""
        sql = ("SELECT s.position, s.block, s.as_of_position, COALESCE(w.weight_ppm, 0) "
               "FROM rm_settlements s LEFT JOIN rm_weights w "
               "ON w.position = s.position AND w.hotkey = ? ORDER BY s.position DESC LIMIT ?")
        names = ("position", "block", "as_of_position", "weight_ppm")
        return [dict(zip(names, row, strict=True)) for row in self._fetch(sql, [hotkey, limit])]

    def claims_of_since(self, hotkey: str, first_position: int) -> list[Row]:
        """Returns the claims recorded settlements at or after ``first_position`` paid the
        hotkey, in position order."""
        return self._raw(rm_claims, "hotkey = ? AND position >= ?", [hotkey, first_position],
                         "position")

    def latest_payments_of(self, hotkey: str, limit: int) -> tuple[list[Row], int, int, int]:
        """Returns the payments of the hotkey's submissions, the latest ``limit`` consumed
        newest first, with how many there are, their rao and the rao of those refunded
        (RELEASED): one walk of the hotkey's submissions (window sums, over every row before
        the LIMIT), one seek per payment its arrival names. A submission's payment is the one
        its arrival names (the payment machine refuses any other), and only the submissions
        with one seek the payment key: a third faster than seeking every submission's id."""
        names = [c.name for c in rm_payments.columns]
        sql = (f"SELECT {', '.join('p.' + n for n in names)}, COUNT(*) OVER (), "
               "SUM(p.amount_rao) OVER (), SUM(CASE WHEN p.status = 'RELEASED' "
               "THEN p.amount_rao ELSE 0 END) OVER () FROM rm_submissions s "
               "JOIN rm_payments p ON p.payment_ref = s.payment_ref "
               "AND p.submission_id = s.submission_id "
               "WHERE s.hotkey = ? ORDER BY p.first_position DESC LIMIT ?")
        found = self._fetch(sql, [hotkey, limit])
        rows = [dict(zip(names, row[:len(names)], strict=True)) for row in found]
        totals = found[0][len(names):] if found else (0, 0, 0)
        return rows, int(totals[0]), int(totals[1]), int(totals[2])

    def latest_credits_of(self, hotkey: str, limit: int) -> list[Row]:
        """Returns the latest ``limit`` credits granted to the hotkey, newest first."""
        return self._raw(rm_credits, "hotkey = ?", [hotkey, limit],
                         "first_position DESC LIMIT ?")

    def credit_totals_of(self, hotkey: str) -> tuple[int, int, int]:
        """Returns how many credits were granted to the hotkey, their rao, and how many of
        them paid a submission's fee."""
        found = self._fetch(
            "SELECT COUNT(*), COALESCE(SUM(amount_rao), 0), COUNT(submission_id) "
            "FROM rm_credits WHERE hotkey = ?", [hotkey])
        return int(found[0][0]), int(found[0][1]), int(found[0][2])

    def group_rows(
        self, arena_id: str, group: str, blocking: Sequence[str], excluded_hotkey: str
    ) -> list[tuple[str, str, str, int, int, int, str, str | None]]:
        """Returns (submission, hotkey, content hash, arrival block, event index, subindex,
        status, speedup of the latest attempt) of the arena's PASSes (QUALIFIED) in reward
        ``group`` (or in none recorded) and of its submissions in ``blocking``, but
        ``excluded_hotkey``'s: all an assessment of that one group reads. One range of the
        (status, arena) index per status."""
        statuses = ["QUALIFIED", *blocking]
        sql = (
            "SELECT s.submission_id, s.hotkey, s.content_hash, s.arrival_block, "
            "s.arrival_event_index, s.arrival_event_subindex, s.status, a.speedup "
            "FROM rm_submissions s LEFT JOIN rm_attempts a ON a.attempt_id = s.attempt_id "
            f"WHERE s.status IN ({', '.join('?' * len(statuses))}) AND s.arena_id = ? "
            "AND s.hotkey <> ? AND (s.status <> 'QUALIFIED' OR s.reward_group IS NULL "
            "OR s.reward_group = ?)"
        )
        found = self._fetch(sql, [*statuses, arena_id, excluded_hotkey, group])
        return [
            (str(sid), str(hotkey), str(content), int(block), int(index), int(sub),
             str(status), None if speedup is None else str(speedup))
            for sid, hotkey, content, block, index, sub, status, speedup in found
        ]

    def pass_counts(self, excluded_hotkey: str) -> dict[str, int]:
        """Returns how many PASSes (QUALIFIED submissions, but ``excluded_hotkey``'s) each
        arena with any has: the rows ``settlement_rows`` gives a reward assessment."""
        s = rm_submissions.c
        # Two index-only counts: every PASS by the (status, arena) index, then the excluded
        # hotkey's by its own index (a hotkey test on every PASS would read each one's row).
        found = {
            str(arena): int(n)
            for arena, n in self.conn.execute(
                select(s.arena_id, func.count()).where(s.status == "QUALIFIED")
                .group_by(s.arena_id)
            )
        }
        excluded = self.conn.execute(
            select(s.arena_id, s.status, func.count()).where(s.hotkey == excluded_hotkey)
            .group_by(s.arena_id, s.status)
        )
        for arena, status, n in excluded:
            if status == "QUALIFIED":
                found[str(arena)] -= int(n)
        return {arena: n for arena, n in found.items() if n}


def _rows_of(result: Any) -> list[Row]:
    """Returns a result's rows as dicts, building each from the keys once (a Row's
    ``_mapping`` looks its keys up again for every row)."""
    keys = list(result.keys())
    return [dict(zip(keys, values, strict=True)) for values in result]
