"""Drives the reliability proofs: crashes, concurrent writers, a tailing reader, ledger audits.

The tests in this directory run these campaigns at a size CI can afford; ``bench/reliability.py``
runs the same code at full size and prints the figures of docs/reliability.md. Run as a script,
this module is the *child process* of a campaign (never a fork of pytest)::

    python reliability_harness.py crash-writer URL TAG          (reads FIRST_BATCH on stdin)
    python reliability_harness.py concurrent-writer URL TAG WRITER SECONDS STREAMS ACKS
    python reliability_harness.py tailer URL OUT STOP
    python reliability_harness.py disk-full-rlimit URL   (a full disk without root)
    python reliability_harness.py append-and-die URL     (leaves -wal and -shm behind)

Every event a campaign appends is a ``SubmissionHeld`` whose ``reason`` carries a *mark*,
``<batch key>|<index>/<size>``, so an audit can tell from the ledger alone which batch each
event belongs to and whether any batch is partial.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from ledger.log import configure_logging
from ledger.records import ANY, NO_STREAM, EventDraft, ExpectedVersion
from ledger.store import EventStore
from vocabulary.errors import ConcurrencyConflict, LedgerError

__all__ = [
    "Audit",
    "ConcurrencyReport",
    "CrashReport",
    "audit_ledger",
    "concurrency_campaign",
    "crash_batch",
    "crash_campaign",
    "hex64",
    "mark",
    "tmpfs",
]

#: This file, run as the child process of a campaign.
CHILD = Path(__file__).resolve()
#: Seconds a child may take to import the library and connect before the campaign fails.
child_ready_s_max = 60.0
#: Seconds a campaign waits for a child to finish after it was told to stop.
child_exit_s_max = 120.0
#: Padding of every mark, in characters: events of a realistic size (Reason allows 256).
mark_pad_chars = 160
#: Kills of the crash writer per backend in CI (bench/reliability.py: 50 or more).
ci_crash_kills = int(os.environ.get("RELIABILITY_CRASH_KILLS", "10"))
#: Seconds the concurrent writers run per backend in CI (bench/reliability.py: 60).
ci_concurrency_s = float(os.environ.get("RELIABILITY_CONCURRENCY_S", "5"))
#: The seed of every random choice a campaign makes; a failure can be replayed with it.
seed = int(os.environ.get("RELIABILITY_SEED", "20240601"))
#: Shared streams the crash writer spreads its batches over (besides each batch's own stream).
crash_shared_streams = 4


def hex64(seed: object) -> str:
    """Returns a deterministic 64-hex digest for ``seed`` (stream ids of the campaigns)."""
    return hashlib.sha256(repr(seed).encode()).hexdigest()


def mark(key: str, index: int, size: int) -> str:
    """Returns the reason text that ties an event to its batch: ``key|index/size`` padded."""
    return f"{key}|{index}/{size}|".ljust(mark_pad_chars, ".")


def _unmark(reason: str) -> tuple[str, int, int] | None:
    parts = reason.split("|")
    if len(parts) < 3 or "/" not in parts[1]:
        return None
    index, size = parts[1].split("/", 1)
    return parts[0], int(index), int(size)


def held(stream: str, key: str, index: int, size: int, block: int,
         expected: ExpectedVersion = ANY) -> EventDraft:
    """Builds one marked event of a campaign batch."""
    return EventDraft(stream, "SubmissionHeld", {"reason": mark(key, index, size),
                                                 "block": block}, expected_version=expected)


# ------------------------------------------------------------------------------- audit


@dataclass
class Audit:
    """Is what the ledger holds after a fault: head, count, chain check and batches by key."""

    head: int
    count: int
    verified: bool
    problem: str | None
    #: batch key -> [(position, index, size)] in position order
    batches: dict[str, list[tuple[int, int, int]]]

    def positions(self, key: str) -> tuple[int, ...]:
        """Returns the positions the batch ``key`` occupies (empty when absent)."""
        return tuple(p for p, _, _ in self.batches.get(key, ()))


def audit_ledger(store: EventStore, prefix: str = "") -> Audit:
    """Reads the whole ledger and checks the invariants every fault must leave intact.

    Asserts: the chain verifies; positions are gapless (head == count == max position, min
    1); every marked batch whose key starts with ``prefix`` is whole (each index 0..size-1
    exactly once) and occupies consecutive positions (it was one atomic append).
    """
    report = store.verify()
    head = store.head().position
    with store.engine.connect() as conn:
        count, low, high = conn.execute(
            text("SELECT COUNT(*), MIN(position), MAX(position) FROM events")
        ).one()
    assert report.ok, f"verify failed at {report.first_bad_position}: {report.problem}"
    assert head == int(count) == int(high or 0), f"head {head}, count {count}, max {high}"
    assert count == 0 or low == 1, f"positions start at {low}"
    batches: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for recorded in store.read_all(types=["SubmissionHeld"]):
        found = _unmark(str(recorded.payload.get("reason", "")))
        if found is not None and found[0].startswith(prefix):
            batches[found[0]].append((recorded.position, found[1], found[2]))
    for key, members in batches.items():
        sizes = {size for _, _, size in members}
        assert len(sizes) == 1, f"batch {key} carries sizes {sizes}"
        size = sizes.pop()
        assert sorted(i for _, i, _ in members) == list(range(size)), (
            f"batch {key} is partial or duplicated: indexes {sorted(i for _, i, _ in members)}"
            f" of {size}"
        )
        first = members[0][0]
        assert [p for p, _, _ in members] == list(range(first, first + size)), (
            f"batch {key} is not contiguous: {[p for p, _, _ in members]}"
        )
    return Audit(head, int(count), report.ok, report.problem, dict(batches))


def stream_versions_are_contiguous(store: EventStore) -> None:
    """Asserts that every stream's versions run 1, 2, 3… in position order."""
    running: dict[str, int] = {}
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT stream, version FROM events ORDER BY position"))
        for stream, version in rows:
            expected = running.get(stream, 0) + 1
            assert version == expected, f"{stream} jumps to version {version}, not {expected}"
            running[stream] = version


# ------------------------------------------------------------------------------ children


def _spawn(*args: str, stdin: bool = False) -> subprocess.Popen[bytes]:
    # The child imports the very `ledger` this process imported (a checkout on the path
    # wins over an installed copy), so parent and child test the same code.
    import ledger

    tree = str(Path(ledger.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    return subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )


class _LineReader:
    """Reads whole lines from a child's stdout with a deadline (partial lines stay pending)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.pending = b""
        self.closed = False
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def _fill(self, timeout: float) -> None:
        if self.closed or not self.selector.select(timeout):
            return
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        if chunk:
            self.pending += chunk
        else:
            self.closed = True

    def lines_until(self, count: int, deadline: float) -> list[str]:
        """Returns complete lines once ``count`` are available, EOF, or the deadline."""
        while self.pending.count(b"\n") < count and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._fill(min(left, 0.05))
        return self.take()

    def drain(self) -> list[str]:
        """Reads to EOF (the child is dead) and returns every complete line."""
        while not self.closed:
            self._fill(1.0)
        return self.take()

    def take(self) -> list[str]:
        """Returns and consumes the complete lines read so far; a torn tail is dropped at EOF."""
        *complete, self.pending = self.pending.split(b"\n")
        if self.closed:
            self.pending = b""  # a line torn by SIGKILL was never acknowledged
        return [line.decode() for line in complete]


def _stderr_tail(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stderr is not None
    return proc.stderr.read().decode(errors="replace")[-2000:]


# ------------------------------------------------------------------------------- crashes


def crash_batch(tag: str, index: int) -> tuple[str, list[EventDraft]]:
    """Returns batch ``index`` of a crash run: its idempotency key and drafts (deterministic).

    Sizes vary from one event to a few hundred (on PostgreSQL 64 or more go through COPY);
    the first event opens the batch's own stream with NO_STREAM, so a second write of the
    batch could never slip past the version check either.
    """
    rng = random.Random(f"{tag}:{index}")
    roll = rng.random()
    size = rng.randint(1, 8) if roll < 0.7 else rng.randint(9, 63) if roll < 0.9 else (
        rng.randint(64, 300))
    key = f"{tag}-b{index}"
    own = f"submission-{hex64(key)}"
    shared = [f"submission-{hex64((tag, 'shared', j))}" for j in range(crash_shared_streams)]
    drafts = [held(own, key, 0, size, index, NO_STREAM)]
    for i in range(1, size):
        stream = own if rng.random() < 0.3 else rng.choice(shared)
        drafts.append(held(stream, key, i, size, index))
    return key, drafts


@dataclass
class CrashReport:
    """Counts what a crash campaign did to one backend and what survived."""

    backend: str
    kills: int = 0
    acknowledged_batches: int = 0
    acknowledged_events: int = 0
    #: kills that landed after the in-flight batch committed but before it was acknowledged
    committed_unacknowledged: int = 0
    #: kills that landed before the in-flight batch committed (the retry then wrote it)
    rolled_back: int = 0
    events_lost: int = 0
    retries_recorded_once: int = 0
    final_head: int = 0
    seconds: float = 0.0


def crash_campaign(url: str, kills: int, seed: int, tag: str = "crash",
                   max_delay_s: float = 0.05) -> CrashReport:
    """SIGKILLs a writer child ``kills`` times at seeded random points; audits after each.

    The child appends ``crash_batch`` batches in order with their idempotency keys and
    prints ``ack INDEX FIRST LAST`` after each commit. After every kill: the ledger verifies,
    positions are gapless, no batch is partial, every acknowledged batch is at the positions
    it was acknowledged at, nothing beyond the one in-flight batch is present, and retrying
    the in-flight batch with its key records it exactly once (``already_recorded`` exactly
    when it had committed). The next child starts at the batch after it.
    """
    rng = random.Random(seed)
    report = CrashReport(backend=url.split(":", 1)[0].split("+", 1)[0])
    started = time.monotonic()
    acknowledged: dict[str, tuple[int, int]] = {}
    next_index = 0
    writer = _Writer(url, tag)
    for kill in range(kills):
        # The next child imports and connects while this one runs: a kill costs the audit,
        # not an interpreter start.
        spare = _Writer(url, tag) if kill + 1 < kills else None
        try:
            acks = _run_until_killed(writer, next_index, rng, max_delay_s)
        except BaseException:
            if spare is not None:
                spare.kill()
            raise
        report.kills += 1
        for index, first, last in acks:
            key, drafts = crash_batch(tag, index)
            acknowledged[key] = (first, last)
            report.acknowledged_batches += 1
            report.acknowledged_events += len(drafts)
        in_flight = next_index + len(acks)
        with EventStore(url) as store:  # reopen, as a restarted validator would
            _wait_for_orphaned_transactions(store)
            _check_after_kill(store, tag, acknowledged, in_flight, report)
            report.final_head = store.head().position
        next_index = in_flight + 1
        if spare is not None:
            writer = spare
    report.seconds = time.monotonic() - started
    return report


#: Longest wait for the server to finish the transaction of a killed PostgreSQL client.
orphan_wait_s_max = 30.0


def _wait_for_orphaned_transactions(store: EventStore) -> None:
    """Waits until no other session of the database is inside a transaction.

    A PostgreSQL client killed just after sending COMMIT leaves the server to finish that
    commit on its own time: read before it lands, the audit would see the head move under
    it, and the retry would find the key recorded that the audit had not. A restarted
    validator faces the same; the harness waits so that it checks the state the kill left.
    (SQLite has no server: a killed writer's transaction is gone with its process.)
    """
    if store.backend != "postgresql":
        return
    deadline = time.monotonic() + orphan_wait_s_max
    sql = text(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
    )
    while True:
        with store.engine.connect() as conn:
            open_transactions = int(conn.execute(sql).scalar_one())
        if open_transactions == 0:
            return
        assert time.monotonic() < deadline, (
            f"{open_transactions} transaction(s) still open {orphan_wait_s_max} s after a kill"
        )
        time.sleep(0.01)


class _Writer:
    """Is a crash writer child that has imported the library, connected, and waits for work."""

    def __init__(self, url: str, tag: str) -> None:
        self.proc = _spawn("crash-writer", url, tag, stdin=True)
        self.reader = _LineReader(self.proc)

    def start(self, first: int) -> None:
        """Waits until the child is ready, then tells it the first batch to append."""
        proc = self.proc
        ready = self.reader.lines_until(1, time.monotonic() + child_ready_s_max)
        assert ready == ["ready"], f"writer did not start: {ready} {_stderr_tail(proc)}"
        assert proc.stdin is not None
        proc.stdin.write(f"{first}\n".encode())
        proc.stdin.close()

    def kill(self) -> None:
        """Kills the child if it still runs and reaps it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def _run_until_killed(writer: _Writer, first: int, rng: random.Random,
                      max_delay_s: float) -> list[tuple[int, int, int]]:
    proc, reader = writer.proc, writer.reader
    try:
        writer.start(first)
        lines: list[str] = []
        wanted = rng.choice((0, 0, 1, 1, 2, 3, 5))
        if wanted:
            lines += reader.lines_until(wanted, time.monotonic() + child_ready_s_max)
        time.sleep(rng.uniform(0, max_delay_s))
        assert proc.poll() is None, f"writer died on its own: {_stderr_tail(proc)}"
    finally:
        writer.kill()
    lines += reader.drain()
    acks = []
    for expected_index, line in enumerate(lines, start=first):
        word, index, first_pos, last_pos = line.split()
        assert word == "ack" and int(index) == expected_index, line
        acks.append((int(index), int(first_pos), int(last_pos)))
    return acks


def _check_after_kill(store: EventStore, tag: str, acknowledged: dict[str, tuple[int, int]],
                      in_flight: int, report: CrashReport) -> None:
    audit = audit_ledger(store, f"{tag}-")
    for key, (first, last) in acknowledged.items():
        found = audit.positions(key)
        if found != tuple(range(first, last + 1)):
            report.events_lost += last - first + 1 - len(found)
        assert found == tuple(range(first, last + 1)), (
            f"acknowledged batch {key} at {first}..{last} holds positions {found}"
        )
    key, drafts = crash_batch(tag, in_flight)
    stray = set(audit.batches) - set(acknowledged) - {key}
    assert not stray, f"batches present that were never sent: {sorted(stray)[:5]}"
    committed = key in audit.batches
    result = store.append(drafts, idempotency_key=key, actor="crash-retry")
    assert result.already_recorded is committed, (
        f"retry of {key}: already_recorded={result.already_recorded}, committed={committed}"
    )
    if committed:
        assert result.positions == audit.positions(key)
        report.committed_unacknowledged += 1
    else:
        report.rolled_back += 1
    after = audit_ledger(store, f"{tag}-")
    assert len(after.positions(key)) == len(drafts), f"retry of {key} is not recorded once"
    assert after.positions(key) == result.positions
    report.retries_recorded_once += 1
    acknowledged[key] = (result.first, result.last)
    report.acknowledged_batches += 1
    report.acknowledged_events += len(drafts)


def _crash_writer(url: str, tag: str) -> None:
    with EventStore(url) as store:
        store.head()  # connect (and open the pool) before saying ready
        print("ready", flush=True)
        first = int(sys.stdin.readline())
        for index in itertools.count(first):
            key, drafts = crash_batch(tag, index)
            result = store.append(drafts, idempotency_key=key, actor="crash-writer")
            if result.already_recorded:
                raise SystemExit(f"batch {key} was already recorded before it was sent")
            sys.stdout.write(f"ack {index} {result.first} {result.last}\n")
            sys.stdout.flush()


# --------------------------------------------------------------------------- concurrency


@dataclass
class ConcurrencyReport:
    """Counts what concurrent writers and one tailing reader did to one backend."""

    backend: str
    writers: int
    seconds: float
    appends: int = 0
    events: int = 0
    conflicts: int = 0
    idempotent_repeats: int = 0
    other_errors: list[str] = field(default_factory=list)
    tailed_events: int = 0
    events_lost: int = 0
    final_head: int = 0


def concurrency_campaign(url: str, workdir: Path, *, writers: int = 4, seconds: float = 5.0,
                         streams: int = 5, tag: str = "conc") -> ConcurrencyReport:
    """Runs ``writers`` writer processes on shared streams and one tailing reader, then audits.

    Each writer reads the exact versions of the streams it is about to write, then appends
    with those expected versions, so writers collide; a collision must surface as
    ConcurrencyConflict and write nothing. Checks afterwards: every acknowledged event is
    present exactly once at its acknowledged positions, nothing unacknowledged is present,
    positions are gapless, the chain verifies, stream versions are contiguous, and the
    reader (started before the writers, polling ``read_all`` from its last position) saw
    exactly the final ledger, in order, none skipped.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    report = ConcurrencyReport(url.split(":", 1)[0].split("+", 1)[0], writers, seconds)
    tail_out, stop = workdir / "tail.txt", workdir / "stop.txt"
    tailer = _spawn("tailer", url, str(tail_out), str(stop))
    procs = [
        _spawn("concurrent-writer", url, tag, str(w), str(seconds), str(streams),
               str(workdir / f"acks-{w}.txt"), stdin=True)
        for w in range(writers)
    ]
    try:
        readers = [_LineReader(p) for p in procs]
        for proc, reader in zip(procs, readers, strict=True):
            ready = reader.lines_until(1, time.monotonic() + child_ready_s_max)
            assert ready == ["ready"], f"writer did not start: {ready} {_stderr_tail(proc)}"
        for proc in procs:  # start together, so they collide from the first append
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        summaries = []
        for proc, reader in zip(procs, readers, strict=True):
            proc.wait(timeout=seconds + child_exit_s_max)
            lines = reader.drain()
            assert proc.returncode == 0, f"writer failed: {lines} {_stderr_tail(proc)}"
            summaries.append(json.loads(lines[-1]))
        with EventStore(url) as store:
            head = store.head().position
        partial = stop.with_suffix(".partial")
        partial.write_text(str(head))
        partial.replace(stop)  # atomically: the tailer must never read half a number
        tailer.wait(timeout=child_exit_s_max)
        assert tailer.returncode == 0, f"tailer failed: {_stderr_tail(tailer)}"
    finally:
        for proc in (*procs, tailer):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for summary in summaries:
        report.appends += summary["appends"]
        report.conflicts += summary["conflicts"]
        report.idempotent_repeats += summary["repeats"]
        report.other_errors += summary["errors"]
    _check_concurrency(url, workdir, tag, writers, tail_out, report)
    return report


def _check_concurrency(url: str, workdir: Path, tag: str, writers: int, tail_out: Path,
                       report: ConcurrencyReport) -> None:
    acknowledged: dict[str, tuple[int, int]] = {}
    for w in range(writers):
        for line in (workdir / f"acks-{w}.txt").read_text().splitlines():
            key, low, high = line.split()
            acknowledged[key] = (int(low), int(high))
    with EventStore(url) as store:
        audit = audit_ledger(store, f"{tag}-")
        stream_versions_are_contiguous(store)
        ledger = [(r.position, r.entry_hash) for r in store.read_all()]
    report.final_head = audit.head
    report.events = sum(last - first + 1 for first, last in acknowledged.values())
    for key, (first, last) in acknowledged.items():
        found = audit.positions(key)
        if found != tuple(range(first, last + 1)):
            report.events_lost += last - first + 1 - len(found)
    assert report.events_lost == 0, f"{report.events_lost} acknowledged events are missing"
    unacknowledged = set(audit.batches) - set(acknowledged)
    assert not unacknowledged, f"unacknowledged batches present: {sorted(unacknowledged)[:5]}"
    tailed = [_tail_entry(line) for line in tail_out.read_text().splitlines()]
    report.tailed_events = len(tailed)
    assert tailed == ledger, _first_difference(tailed, ledger)


def _tail_entry(line: str) -> tuple[int, str]:
    position, entry_hash = line.split()
    return int(position), entry_hash


def _first_difference(seen: Sequence[Any], ledger: Sequence[Any]) -> str:
    for index, (a, b) in enumerate(zip(seen, ledger, strict=False)):
        if a != b:
            return f"the tailing reader saw {a} where the ledger holds {b} (item {index})"
    return f"the tailing reader saw {len(seen)} events; the ledger holds {len(ledger)}"


def _concurrent_writer(url: str, tag: str, writer: int, seconds: float, stream_count: int,
                       acks_path: str) -> None:
    rng = random.Random(f"{tag}:{writer}")
    streams = [f"submission-{hex64((tag, 'c', j))}" for j in range(stream_count)]
    summary: dict[str, Any] = {"appends": 0, "conflicts": 0, "repeats": 0, "errors": []}
    with EventStore(url) as store, open(acks_path, "w", buffering=1) as acks:
        store.head()
        print("ready", flush=True)
        sys.stdin.readline()  # "go": every writer starts at once
        deadline = time.monotonic() + seconds
        for seq in itertools.count(1):
            if time.monotonic() >= deadline:
                break
            key = f"{tag}-w{writer}-s{seq}"
            chosen = rng.sample(streams, rng.randint(1, 2))
            versions = {s: store.stream_version(s) for s in chosen}
            time.sleep(rng.random() * 0.001)  # widen the read-then-append window a little
            plan = [(s, versions[s] + j) for s in chosen for j in range(rng.randint(1, 2))]
            drafts = [held(s, key, i, len(plan), seq, expected)
                      for i, (s, expected) in enumerate(plan)]
            idempotency_key = key if rng.random() < 0.5 else None
            try:
                result = store.append(drafts, idempotency_key=idempotency_key,
                                      actor=f"writer-{writer}")
            except ConcurrencyConflict:
                summary["conflicts"] += 1
                continue
            except LedgerError as exc:
                summary["errors"].append(f"{exc.code}: {exc.message}")
                continue
            acks.write(f"{key} {result.first} {result.last}\n")
            summary["appends"] += 1
            if idempotency_key is not None and rng.random() < 0.2:
                again = store.append(drafts, idempotency_key=idempotency_key,
                                     actor=f"writer-{writer}")
                if not again.already_recorded or again.positions != result.positions:
                    summary["errors"].append(f"repeat of {key} was recorded again: {again}")
                summary["repeats"] += 1
    print(json.dumps(summary), flush=True)


def _tailer(url: str, out_path: str, stop_path: str) -> None:
    """Polls read_all from the last position seen until the parent names the final head."""
    stop = Path(stop_path)
    last = 0
    with EventStore(url) as store, open(out_path, "w") as out:
        while True:
            progressed = False
            for recorded in store.read_all(last + 1):
                out.write(f"{recorded.position} {recorded.entry_hash}\n")
                last = recorded.position
                progressed = True
            if not progressed:
                if stop.exists() and last >= int(stop.read_text()):
                    return
                time.sleep(0.002)


# ------------------------------------------------------------------------------- storage


def mount_available() -> str | None:
    """Returns None when this process may mount a tmpfs, else the reason it cannot."""
    if sys.platform != "linux":
        return f"mounting a tmpfs needs Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (run as root, or in a container with CAP_SYS_ADMIN)"
    return None


@contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """Mounts a size-limited tmpfs at ``path`` and always unmounts it (lazily if busy)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0777",
                           "tmpfs", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"mount -t tmpfs failed: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, mode: str) -> None:
    """Remounts the tmpfs at ``path`` read-only (``ro``) or read-write (``rw``)."""
    done = subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"remount,{mode} failed: {done.stderr.strip()}")


def fill_disk(directory: Path, leave_bytes: int = 0) -> Path:
    """Writes a filler file until the filesystem has at most ``leave_bytes`` free."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as file:
        while (free := _free_bytes(directory)) > leave_bytes:
            try:
                file.write(b"\0" * max(4096, min(65536, free - leave_bytes)))
            except OSError:  # ENOSPC: full
                break
    return filler


def _free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


@dataclass
class DiskFullReport:
    """Tells what a full disk did: appends accepted, the refusal, and the recovery."""

    method: str
    accepted_while_filling: int = 0
    accepted_events: int = 0
    refused: int = 0
    refusal: str = ""
    events_lost: int = 0
    recovered_head: int = 0
    integrity_check: str = ""


def disk_full_scenario(url: str, method: str, make_full: Any, make_room: Any,
                       refusals: int = 3) -> DiskFullReport:
    """Appends until the disk refuses, checks nothing broke, frees space, checks recovery.

    ``make_full()`` leaves little or no room; ``make_room()`` frees it. While full: each
    refused append raises StoreUnavailable, writes nothing, and the ledger still reads and
    verifies. After room is made: the ledger reopens, verifies, passes SQLite's own
    integrity_check, and the refused batch, retried with its key, is recorded exactly once.
    """
    from ledger import migrate
    from vocabulary.errors import StoreUnavailable

    report = DiskFullReport(method)
    migrate.upgrade(url)
    acknowledged: dict[str, tuple[int, int]] = {}
    with EventStore(url) as store:
        make_full()
        index = 0
        refused: list[tuple[str, list[EventDraft]]] = []
        while len(refused) < refusals and index < 10_000:
            key, drafts = crash_batch("full", index)
            index += 1
            before = store.head()
            try:
                result = store.append(drafts, idempotency_key=key)
            except StoreUnavailable as exc:
                report.refusal = exc.message
                refused.append((key, drafts))
                assert store.head() == before, "a refused append moved the head"
                continue
            acknowledged[key] = (result.first, result.last)
            report.accepted_while_filling += 1
            report.accepted_events += len(drafts)
        assert refused, "the disk never filled up"
        report.refused = len(refused)
        audit = audit_ledger(store, "full-")  # reads and verify work while full
        for key, _ in refused:
            assert key not in audit.batches, f"refused batch {key} is (partly) present"
        make_room()
    with EventStore(url) as store:
        audit = audit_ledger(store, "full-")
        for key, (first, last) in acknowledged.items():
            if audit.positions(key) != tuple(range(first, last + 1)):
                report.events_lost += last - first + 1
        assert report.events_lost == 0
        for key, drafts in refused:
            result = store.append(drafts, idempotency_key=key)
            assert not result.already_recorded, f"refused batch {key} had been recorded"
        audit = audit_ledger(store, "full-")
        report.recovered_head = audit.head
        with store.engine.connect() as conn:
            report.integrity_check = str(conn.exec_driver_sql("PRAGMA integrity_check").scalar())
    assert report.integrity_check == "ok", report.integrity_check
    return report


def disk_full_on_tmpfs(disk: Path, leave_bytes: int) -> DiskFullReport:
    """Runs disk_full_scenario on a ledger in ``disk`` (a small tmpfs) filled to a margin."""
    filler = disk / "filler"
    return disk_full_scenario(f"sqlite:///{disk / 'ledger.db'}", "tmpfs",
                              lambda: fill_disk(disk, leave_bytes), filler.unlink)


def _disk_full_by_rlimit(url: str) -> None:
    """Runs disk_full_scenario with RLIMIT_FSIZE standing in for a full disk (no root needed)."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    database = Path(url.removeprefix("sqlite:///"))
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def make_full() -> None:
        largest = max((p.stat().st_size for p in database.parent.glob(database.name + "*")),
                      default=0)
        resource.setrlimit(resource.RLIMIT_FSIZE, (largest + 256 * 1024, hard))

    def make_room() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))

    report = disk_full_scenario(url, "RLIMIT_FSIZE", make_full, make_room)
    print(json.dumps(report.__dict__), flush=True)


def disk_full_by_rlimit(url: str) -> DiskFullReport:
    """Runs the RLIMIT_FSIZE variant in a child process (the limit must not hit pytest)."""
    proc = _spawn("disk-full-rlimit", url)
    out, err = proc.communicate(timeout=child_exit_s_max)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    return DiskFullReport(**json.loads(out.decode().splitlines()[-1]))


def _append_and_die(url: str) -> None:
    """Appends one event and dies by SIGKILL, leaving SQLite's -wal and -shm files behind."""
    with EventStore(url) as store:
        store.append([held(f"submission-{hex64('die')}", "die", 0, 1, 0)])
        os.kill(os.getpid(), signal.SIGKILL)


def append_and_die(url: str) -> None:
    """Runs ``_append_and_die`` in a child and waits for its death."""
    proc = _spawn("append-and-die", url)
    _, err = proc.communicate(timeout=child_exit_s_max)
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")[-3000:]


# ------------------------------------------------------------------------------ the child


def main(argv: Sequence[str]) -> None:
    """Runs one child role of a campaign (see the module docstring)."""
    configure_logging("ERROR")
    role, *args = argv
    if role == "crash-writer":
        _crash_writer(args[0], args[1])
    elif role == "concurrent-writer":
        _concurrent_writer(args[0], args[1], int(args[2]), float(args[3]), int(args[4]),
                           args[5])
    elif role == "tailer":
        _tailer(args[0], args[1], args[2])
    elif role == "disk-full-rlimit":
        _disk_full_by_rlimit(args[0])
    elif role == "append-and-die":
        _append_and_die(args[0])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
