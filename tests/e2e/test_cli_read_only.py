"""Drives a ledger the user may read but not write: read-only commands work, writes say why.

The ledger is a WAL-mode SQLite file in a directory the user may not write either, so
SQLite can create neither its -wal nor its -shm file there (the case that failed with
"attempt to write a readonly database" even for ``verify``).

How the file is made unwritable. Not as root: ``chmod a-w`` on the file and its directory.
As root, permission bits do not stop writes (root bypasses them; no read-only bind mount is
at hand), so the ledger is built by root in a directory that others may read but not write,
and the commands run as the unprivileged user ``nobody`` (through ``setpriv``). Where that
user or setpriv is missing, or nobody cannot run this interpreter (a checkout only root may
read), the test skips and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(sys.executable).with_name("arena-ledger")
EVENTS = 3


def credit(n: int) -> dict[str, Any]:
    return {"stream": f"credit-ro{n}", "type": "CreditGranted",
            "payload": {"credit_id": f"ro{n}", "hotkey": "5Miner", "amount_rao": n, "note": ""}}


@dataclass
class ReadOnlyLedger:
    """A ledger file the commands run by ``run`` may not write, and how to run them."""

    directory: Path
    file: Path
    #: What runs a command as the user who may not write (root: setpriv ... as nobody);
    #: empty when that is this process's own user.
    prefix: list[str]
    uid: int

    def run(self, *args: str | Path, expect: int, as_owner: bool = False
            ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_LEDGER_")}
        env.update({"ARENA_LEDGER_DB": f"sqlite:///{self.file}", "COLUMNS": "200",
                    "NO_COLOR": "1"})
        argv = [*([] if as_owner else self.prefix), str(SCRIPT), *map(str, args)]
        done = subprocess.run(argv, cwd=self.directory, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _as_nobody() -> tuple[list[str], int]:
    """Returns the command prefix that runs a command as ``nobody``, and its uid, or skips.

    setpriv (util-linux) rather than ``subprocess.run(user=...)``: in some sandboxes a
    child that drops its ids itself may not then execute this interpreter, while setpriv's
    can."""
    why = "as root, chmod does not stop writes, so the commands run as 'nobody'"
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip(f"{why}, and there is no such user")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip(f"{why}, with setpriv, which is not installed")
    prefix = [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
              "--clear-groups"]
    probe = subprocess.run([*prefix, str(SCRIPT), "--help"], capture_output=True, text=True,
                           check=False, timeout=120, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"{why}, who cannot run this checkout's interpreter: "
                    f"{probe.stderr.strip()[-200:]}")
    return prefix, nobody.pw_uid


def _lock(ledger: ReadOnlyLedger) -> None:
    """Makes the file and its directory unwritable to the commands ``ledger.run`` runs."""
    if ledger.prefix:  # root: they run as nobody; the owner keeps root's rights
        ledger.directory.chmod(0o755)
        ledger.file.chmod(0o644)
    else:
        ledger.file.chmod(0o444)
        ledger.directory.chmod(0o555)


def _unlock(ledger: ReadOnlyLedger) -> None:
    ledger.directory.chmod(0o755)
    ledger.file.chmod(0o644)


@pytest.fixture
def read_only(script: Path) -> Iterator[ReadOnlyLedger]:
    prefix, uid = _as_nobody() if os.geteuid() == 0 else ([], os.geteuid())
    # A directory of its own under the system's temporary one: as root, pytest's tmp_path
    # sits under a directory only root may enter.
    directory = Path(tempfile.mkdtemp(prefix="arena-ledger-ro-"))
    ledger = ReadOnlyLedger(directory, directory / "ledger.db", prefix, uid)
    try:
        directory.chmod(0o755)
        ledger.run("init", expect=0, as_owner=True)
        (directory / "first.jsonl").write_text(
            "".join(json.dumps(credit(n)) + "\n" for n in range(1, EVENTS + 1)))
        (directory / "more.jsonl").write_text(json.dumps(credit(EVENTS + 1)) + "\n")
        ledger.run("append", "first.jsonl", expect=0, as_owner=True)
        assert ledger.file.read_bytes()[18:20] == b"\x02\x02"  # a live WAL ledger
        assert not Path(f"{ledger.file}-wal").exists()  # closed cleanly: all in the file
        _lock(ledger)
        yield ledger
    finally:
        _unlock(ledger)
        shutil.rmtree(directory, ignore_errors=True)


def test_a_read_only_ledger_verifies_and_reads_and_an_append_names_the_file(
    read_only: ReadOnlyLedger,
) -> None:
    before = _digest(read_only.file)
    done = read_only.run("verify", expect=0)
    assert done.stdout.startswith(f"ok: {EVENTS} events verified (1..{EVENTS})")
    listed = [json.loads(line) for line in
              read_only.run("events", "--json", expect=0).stdout.splitlines()]
    assert [e["stream"] for e in listed] == [f"credit-ro{n}" for n in range(1, EVENTS + 1)]
    assert json.loads(read_only.run("head", "--json", expect=0).stdout)["position"] == EVENTS

    done = read_only.run("append", "more.jsonl", expect=5)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    info = read_only.file.stat()
    assert lines[0] == (
        f"error[store_unavailable]: the database file {read_only.file} is read-only for this "
        f"user (uid {read_only.uid}): its mode is {stat.filemode(info.st_mode)}, owner uid "
        f"{info.st_uid}, group gid {info.st_gid}; writing needs write permission on it")
    # A backup reads the file the URL names, though it opens through a read-only URI.
    backup = Path(tempfile.gettempdir()) / f"arena-ledger-ro-backup-{os.getpid()}.db"
    try:
        done = read_only.run("db", "backup", backup, expect=0)
        assert f"verified: {EVENTS} events" in done.stdout
    finally:
        backup.unlink(missing_ok=True)
    # Nothing was written, and reading created no -wal or -shm file (it could not).
    assert _digest(read_only.file) == before
    assert sorted(p.name for p in read_only.directory.iterdir()) == [
        "first.jsonl", "ledger.db", "more.jsonl"]


def test_a_reader_sees_what_a_writer_holding_the_ledger_open_committed(
    read_only: ReadOnlyLedger,
) -> None:
    # While the owner's connection holds the ledger open, a commit stays in the -wal file;
    # the read-only user reads it through the -shm the writer keeps (a read that skipped
    # the -wal, as an immutable open does, would miss the last event).
    _unlock(read_only)
    holder = sqlite3.connect(read_only.file)
    try:
        holder.execute("PRAGMA wal_autocheckpoint = 0")
        assert holder.execute("SELECT count(*) FROM events").fetchone() == (EVENTS,)
        read_only.run("append", "more.jsonl", expect=0, as_owner=True)
        assert Path(f"{read_only.file}-wal").stat().st_size > 0
        assert Path(f"{read_only.file}-shm").exists()
        _lock(read_only)
        done = read_only.run("verify", expect=0)
        assert done.stdout.startswith(f"ok: {EVENTS + 1} events verified (1..{EVENTS + 1})")
    finally:
        holder.close()
