"""Runs the reliability proofs of tests/reliability at full size and prints what survived.

Per backend (SQLite and PostgreSQL): a writer SIGKILLed at seeded random points (``--kills``,
50 or more), concurrent writers on shared streams with a tailing reader (``--seconds``).
On SQLite: full disks (a tmpfs filled to a random margin, ``--disk-rounds`` times, and a
file-size limit standing in for one). Then the hostile-input and storage-fault test modules
under pytest at ``--examples`` hypothesis examples per property, with the inputs tallied by
kind. Every check is the tests' own code (``tests/reliability/reliability_harness.py``);
this script only sizes and tabulates. Nothing gates on time: a failed check is a failure.

    python bench/reliability.py [--kills 100] [--seconds 60] [--writers 4] [--examples 1000]
                                [--disk-rounds 10] [--backends sqlite,postgres] [--seed N]
                                [--only crash,concurrency,disk,hostile,storage]

docs/reliability.md quotes the table of a run and the commands to reproduce each row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
_TESTS = _ROOT / "tests" / "reliability"
for _path in (str(_TESTS), str(_ROOT)):
    if _path not in sys.path:
        sys.path.append(_path)  # appended, so an installed or overlaid `ledger` still wins

import psycopg  # noqa: E402  (after the path fix above)
from psycopg.conninfo import conninfo_to_dict  # noqa: E402
from reliability_harness import (  # noqa: E402
    concurrency_campaign,
    crash_campaign,
    disk_full_by_rlimit,
    disk_full_on_tmpfs,
    mount_available,
    tmpfs,
)

from bench._common import describe_machine, machine_markdown, render_markdown_table  # noqa: E402
from ledger import migrate  # noqa: E402
from ledger.log import configure_logging  # noqa: E402

#: Kills of the crash writer per backend unless --kills says otherwise (the issue asks ≥ 50).
kills_default = 100
#: Seconds the concurrent writers run per backend unless --seconds says otherwise.
concurrency_s_default = 60.0
#: Hypothesis examples per hostile-input property unless --examples says otherwise.
examples_default = 1_000
#: Full-disk rounds on a tmpfs (each filled to another random margin) unless --disk-rounds.
disk_rounds_default = 10
#: Size of the tmpfs of a full-disk round, in bytes.
disk_bytes = 2 * 1024 * 1024
PG_ADMIN_URL = os.environ.get(
    "ARENA_LEDGER_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@dataclass
class Row:
    """Is one line of the table: a fault on a backend, how often, and what it cost."""

    fault: str
    backend: str
    injected: int
    survived: int
    acknowledged: int
    lost: int
    seconds: float
    notes: str

    def cells(self) -> list[object]:
        return [self.fault, self.backend, f"{self.injected:,}", f"{self.survived:,}",
                f"{self.acknowledged:,}", f"{self.lost:,}", f"{self.seconds:.0f}", self.notes]


@contextmanager
def fresh_database(backend: str, workdir: Path, label: str) -> Iterator[str]:
    """Yields the URL of a new, migrated database; a PostgreSQL one is dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite:///{workdir / f'{label}-{secrets.token_hex(3)}.db'}"
        migrate.upgrade(url)
        yield url
        return
    name = f"al_bench_rel_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = conninfo_to_dict(PG_ADMIN_URL)
    url = (f"postgresql+psycopg://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}"
           f":{info.get('port', '5432')}/{name}")
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_crashes(backend: str, workdir: Path, kills: int, seed: int) -> Row:
    with fresh_database(backend, workdir, "crash") as url:
        report = crash_campaign(url, kills, seed)
    notes = (f"{report.committed_unacknowledged} kills after commit before the ack, "
             f"{report.rolled_back} before commit; every retry recorded once")
    return Row("SIGKILL of a writer mid-append", backend, report.kills, report.kills,
               report.acknowledged_events, report.events_lost, report.seconds, notes)


def run_concurrency(backend: str, workdir: Path, writers: int, seconds: float) -> Row:
    with fresh_database(backend, workdir, "conc") as url:
        started = time.monotonic()
        report = concurrency_campaign(url, workdir / f"conc-{backend}", writers=writers,
                                      seconds=seconds)
        elapsed = time.monotonic() - started
    assert not report.other_errors, report.other_errors
    notes = (f"{writers} writers, {report.appends:,} appends, {report.conflicts:,} conflicts "
             f"(ConcurrencyConflict, nothing written), {report.idempotent_repeats:,} keyed "
             f"repeats; tailer saw {report.tailed_events:,}/{report.final_head:,} in order")
    return Row("concurrent writers + tailing reader", backend, report.appends + report.conflicts,
               report.appends + report.conflicts, report.events, report.events_lost, elapsed,
               notes)


def run_full_disks(workdir: Path, rounds: int, seed: int) -> list[Row]:
    rows = []
    rng = random.Random(seed)
    reason = mount_available()
    if reason is None and rounds:
        started, refused, accepted = time.monotonic(), 0, 0
        for index in range(rounds):
            with tmpfs(workdir / f"disk-{index}", disk_bytes) as disk:
                report = disk_full_on_tmpfs(disk, rng.randrange(0, 512 * 1024))
                refused += report.refused
                accepted += report.accepted_events
        rows.append(Row("full disk (2 MiB tmpfs)", "sqlite", refused, refused, accepted, 0,
                        time.monotonic() - started,
                        f"{rounds} rounds, random free margin; StoreUnavailable each time, "
                        "integrity_check ok, refused batch retried once"))
    started = time.monotonic()
    limited = [disk_full_by_rlimit(f"sqlite:///{workdir / f'fsize-{i}.db'}")
               for i in range(max(1, rounds // 2))]
    rows.append(Row("file-size limit (RLIMIT_FSIZE)", "sqlite",
                    sum(r.refused for r in limited), sum(r.refused for r in limited),
                    sum(r.accepted_events for r in limited), 0,
                    time.monotonic() - started, "the no-root stand-in for a full disk"
                    + ("" if reason is None else f"; tmpfs skipped: {reason}")))
    return rows


def run_pytest(module: str, examples: int, workdir: Path) -> dict[str, Any]:
    """Runs one tests/reliability module under pytest; returns its outcome and tally."""
    tally = workdir / f"tally-{module}.json"
    env = {**os.environ, "RELIABILITY_EXAMPLES": str(examples), "RELIABILITY_TALLY": str(tally)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(_TESTS / module), "-q", "-p", "no:cacheprovider",
         "-rf", "--no-header", "--tb=line"],
        cwd=_ROOT, env=env, capture_output=True, text=True, check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    failed = [line.removeprefix("FAILED ")[:240]
              for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    return {
        "module": module, "summary": summary, "failed": failed,
        "tally": json.loads(tally.read_text()) if tally.exists() else {},
        "seconds": time.monotonic() - started,
    }


def print_hostile(result: dict[str, Any]) -> None:
    rows: dict[str, int] = {}
    for key, count in result["tally"].items():
        rows[key] = rows.get(key, 0) + count
    print(render_markdown_table(["entry point / input kind", "inputs tried"],
                                [[k, f"{v:,}"] for k, v in rows.items()], numeric=(1,)))
    print(f"\ntotal inputs tried: {sum(rows.values()):,}")


#: The parts of a run, in the order they run.
PARTS = ("crash", "concurrency", "disk", "hostile", "storage")
_MODULES = {"hostile": "test_hostile_input.py", "storage": "test_storage_faults.py"}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=kills_default)
    parser.add_argument("--seconds", type=float, default=concurrency_s_default)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--examples", type=int, default=examples_default)
    parser.add_argument("--disk-rounds", type=int, default=disk_rounds_default)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"Comma-separated parts to run, of {','.join(PARTS)}.")
    args = parser.parse_args(argv)
    args.only = {p.strip() for p in args.only.split(",") if p.strip()}
    if not args.only <= set(PARTS):
        parser.error(f"--only takes parts of {','.join(PARTS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every campaign at full size and prints the tables."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    configure_logging("ERROR")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    print("## Machine\n")
    print(machine_markdown(describe_machine()))
    print(f"\nseed {args.seed}; kills {args.kills} per backend; concurrency {args.writers} "
          f"writers x {args.seconds:g} s per backend; {args.examples} examples per property\n")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="al-reliability-") as tmp:
        workdir = Path(tmp)
        for backend in backends:
            if "crash" in args.only:
                rows.append(run_crashes(backend, workdir, args.kills, args.seed))
                print(f"[{backend}] crashes: {rows[-1].injected} kills, {rows[-1].lost} lost",
                      flush=True)
            if "concurrency" in args.only:
                rows.append(run_concurrency(backend, workdir, args.writers, args.seconds))
                print(f"[{backend}] concurrency: {rows[-1].notes}", flush=True)
        if "disk" in args.only and "sqlite" in backends:
            rows += run_full_disks(workdir, args.disk_rounds, args.seed)
        pytest_results = [run_pytest(_MODULES[part], args.examples, workdir)
                          for part in PARTS if part in _MODULES and part in args.only]
        if rows:
            print("\n## Faults injected\n")
            print(render_markdown_table(
                ["fault", "backend", "injected", "survived", "acknowledged events",
                 "events lost", "s", "notes"], [r.cells() for r in rows],
                numeric=(2, 3, 4, 5, 6)))
        for result in pytest_results:
            print(f"\n## {result['module']} ({result['seconds']:.0f} s): {result['summary']}\n")
            if result["tally"]:
                print_hostile(result)
            for name in result["failed"]:
                print(f"- FAILED {name}")
    lost = sum(r.lost for r in rows)
    failed = sum(len(result["failed"]) for result in pytest_results)
    print(f"\nevents lost in total: {lost}; failed tests: {failed}")
    return 1 if lost or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
