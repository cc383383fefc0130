"""Measures how every ledger operation scales as the ledger grows from 10,000 to 5,000,000 events.

Each size runs in its own fresh process (so a peak RSS is that size's, not a leftover of a
smaller one), and inside it every step after the build runs in a fresh process too:

- ``append``: ``bench/fold.py``'s generator (arenas, payments, credits, rejections,
  interleaved attempts, audits, faults, holds, requeues, expiries) written with
  ``EventStore.append`` in batches of 10,000 *without* the domain guard; only the appends
  are timed, not the generation;
- ``read_all`` and ``verify`` over the whole ledger;
- ``checkpoint`` (``ledger.checkpoint.sign_tree`` of the head), inclusion and consistency
  proof documents at random positions and sizes;
- ``replay``: ``services.replay.replay_store(store)``, what ``arena-ledger replay`` runs
  (chain, decode, every machine, every recorded decision re-derived; the generator writes
  no settlements, so none are re-checked here: bench/replay.py measures those);
- ``explain submission`` and ``history --hotkey`` as a user runs them (the CLI in a new
  process: interpreter start, imports, ``ArenaLedger`` opening and folding the ledger,
  the query), and the same queries on an ``ArenaLedger`` whose fold has caught up.

Every figure carries the 1-minute load average when it was taken: the machine is shared,
so read figures of one size against each other (the ``× read_all`` rows), not across runs.
Not a test: nothing gates on the figures (STYLE.md).

    python bench/scale.py [--sizes 10k,100k] [--pg-sizes 10k] [--write-docs]
    python bench/scale.py --sizes 1m    # about six minutes on 2 busy cores, 0.5 GiB of disk

Time and disk grow about linearly with the size (the CLI rows fold the whole ledger once
per command), so 5m takes roughly five times as long as 1m.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid `ledger` still wins

from bench._common import (  # noqa: E402  (after the path fix above)
    describe_machine,
    fmt_kib,
    fmt_rate,
    machine_markdown,
    render_markdown_table,
    replace_doc_section,
    run_in_fresh_process,
)

__all__ = [
    "SizeResult",
    "figure",
    "format_size",
    "parse_sizes",
    "postgres_version",
    "quantile",
    "render_section",
    "run_series",
]

#: Sizes when --sizes is not given, and the PostgreSQL sizes when --pg-sizes is not given.
sizes_default = "10k,100k"
pg_sizes_default = ""
#: Events per append while building (the store's batch limit, ``limits.batch_events_max``).
build_batch_events = 10_000
#: Generator seed and submissions in flight (bench/fold.py's defaults).
seed = 7
concurrency = 256
#: Checkpoints signed per size (the median is reported).
checkpoint_samples = 5
#: Random positions (inclusion) and sizes (consistency) timed per size.
proof_samples = 200
#: Submissions explained, and hotkeys' histories listed, on a caught-up ledger.
explain_warm_samples = 20
history_warm_samples = 10
#: CLI runs per command: each one folds the whole ledger, so big ledgers get one.
cli_runs_small = 3
cli_runs_large = 1
cli_runs_small_events_max = 50_000
#: Biggest size accepted, in events (a 5M SQLite ledger is about 2.5 GiB on disk).
size_events_max = 20_000_000

_PG_DSN_DEFAULT = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
_SUFFIXES = {"k": 1_000, "m": 1_000_000}


# -- sizes ---------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    """Parses ``10k,100k,1m,5m`` (or plain integers) into event counts, in order, deduplicated."""
    sizes: list[int] = []
    for part in (p.strip().lower().replace("_", "") for p in text.split(",")):
        if not part:
            continue
        scale = _SUFFIXES.get(part[-1], 1)
        number = part[:-1] if part[-1] in _SUFFIXES else part
        try:
            events = int(float(number) * scale)
        except ValueError:
            raise ValueError(f"not a size: {part!r} (use e.g. 10k, 100k, 1m, 5m)") from None
        if not 1_000 <= events <= size_events_max:
            raise ValueError(f"size {part!r} is outside 1k..{size_events_max:,} events")
        if events not in sizes:
            sizes.append(events)
    return sizes


def format_size(events: int) -> str:
    """Returns ``10k``, ``1m``… for a size (the spelling --sizes takes)."""
    for suffix, unit in (("m", 1_000_000), ("k", 1_000)):
        if events % unit == 0:
            return f"{events // unit}{suffix}"
    return str(events)


# -- per-step measurement (inside a size's process) ----------------------------------------


def _status_kib(name: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


@contextlib.contextmanager
def _step(name: str, into: list[dict[str, Any]], **fixed: Any) -> Iterator[dict[str, Any]]:
    """Times a step and records its peak RSS (VmHWM reset at the start) and the load average.

    The caller fills ``events`` (throughput) or ``samples_ms`` (latency) in the yielded dict.
    """
    gc.collect()
    with contextlib.suppress(OSError):  # Linux ≥ 4.0: resets VmHWM to the current RSS
        Path("/proc/self/clear_refs").write_text("5")
    figures: dict[str, Any] = {"step": name, **fixed, "rss_start_kib": _status_kib("VmRSS")}
    wall, cpu = time.perf_counter(), time.process_time()
    yield figures
    figures.setdefault("seconds", time.perf_counter() - wall)
    figures.setdefault("cpu_seconds", time.process_time() - cpu)
    figures["rss_peak_kib"] = _status_kib("VmHWM")
    figures["load1"] = os.getloadavg()[0]
    into.append(figures)
    _echo(figures)


def _echo(figures: Mapping[str, Any]) -> None:
    """Prints one step as soon as it is measured (stderr: stdout carries the report)."""
    print(f"    {describe_step(figures):<60} peak RSS {fmt_kib(figures['rss_peak_kib']):>10}  "
          f"load {figures['load1']:.2f}", file=sys.stderr, flush=True)


def describe_step(figures: Mapping[str, Any]) -> str:
    """Returns one line: the step's throughput or latency."""
    if "samples_ms" in figures:
        p50, p99 = quantile(figures["samples_ms"], 0.5), quantile(figures["samples_ms"], 0.99)
        return f"{figures['step']}: p50 {_fmt_ms(p50)}, p99 {_fmt_ms(p99)}"
    return f"{figures['step']}: {fmt_rate(_rate(figures))} events/s"


def quantile(values: Sequence[float], q: float) -> float:
    """Returns the ``q`` quantile of ``values`` (the nearest rank below; NaN when empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _rate(figures: Mapping[str, Any]) -> float:
    return figures["events"] / figures["seconds"] if figures.get("seconds") else 0.0


def _fmt_ms(ms: float) -> str:
    if ms >= 10_000:
        return f"{ms / 1000:,.0f} s"
    if ms >= 1_000:
        return f"{ms / 1000:,.1f} s"
    return f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"


# -- building the ledger --------------------------------------------------------------------


@dataclass
class Picks:
    """Is what the queries ask about: attempted submissions, a typical and the busiest hotkey."""

    submissions: list[str] = field(default_factory=list)
    typical_hotkey: str = ""
    busy_hotkey: str = ""
    typical_count: int = 0
    busy_count: int = 0


def build(url: str, events: int, steps: list[dict[str, Any]]) -> Picks:
    """Writes the generated ledger with unguarded ``EventStore.append``; times only the appends."""
    import bench.fold as fold_bench
    from ledger.records import EventDraft
    from ledger.store import EventStore

    hotkeys: Counter[str] = Counter()
    attempted: list[str] = []
    batch: list[EventDraft] = []
    started = time.perf_counter()
    with EventStore(url) as store, _step("append", steps, batch=build_batch_events) as figures:
        appending = 0.0

        def flush() -> None:
            nonlocal appending
            started = time.perf_counter()
            store.append(batch, actor="bench")
            appending += time.perf_counter() - started
            batch.clear()

        for _position, stream, kind, event in fold_bench.generate(events, seed, concurrency):
            batch.append(EventDraft.of(stream, event))
            if kind == "SubmissionArrived":
                hotkeys[event.miner_hotkey] += 1  # type: ignore[attr-defined]
            elif kind == "QualificationStarted":
                attempted.append(stream.partition("-")[2])
            if len(batch) == build_batch_events:
                flush()
        if batch:
            flush()
        # Only the appends count; the generator's time is kept apart as build_seconds.
        figures.update(events=events, seconds=appending,
                       build_seconds=time.perf_counter() - started)
    return _picks(hotkeys, attempted)


def _picks(hotkeys: Counter[str], attempted: list[str]) -> Picks:
    rng = random.Random(seed)
    unique = list(dict.fromkeys(attempted))
    chosen = rng.sample(unique, min(explain_warm_samples, len(unique)))
    ranked = hotkeys.most_common()
    busy, busy_count = ranked[0] if ranked else ("", 0)
    typical, typical_count = ranked[len(ranked) // 2] if ranked else ("", 0)
    return Picks(chosen, typical, busy, typical_count, busy_count)


# -- the steps after the build (each in a fresh process) -----------------------------------


def measure_store(url: str, events: int) -> list[dict[str, Any]]:
    """Times read_all, verify, checkpoints and proof documents; runs in a fresh process."""
    from ledger.checkpoint import consistency_document, inclusion_document, sign_tree
    from ledger.note import Signer
    from ledger.store import EventStore

    steps: list[dict[str, Any]] = []
    rng = random.Random(seed)
    signer = Signer.generate("bench.example")
    with EventStore(url) as store:
        store.head()  # opens the pool: connecting is not a per-event cost
        with _step("read_all", steps) as figures:
            figures["events"] = sum(1 for _ in store.read_all())
        with _step("verify", steps) as figures:
            report = store.verify()
            if not report.ok:
                raise SystemExit(f"the generated ledger fails verification: {report.problem}")
            figures["events"] = report.checked
        with _step("checkpoint", steps) as figures:
            figures["samples_ms"] = [_ms(partial(sign_tree, store, signer))
                                     for _ in range(checkpoint_samples)]
        with _step("inclusion proof", steps) as figures:
            figures["samples_ms"] = [
                _ms(partial(inclusion_document, store, rng.randint(1, events)))
                for _ in range(proof_samples)]
        with _step("consistency proof", steps) as figures:
            figures["samples_ms"] = [
                _ms(partial(consistency_document, store, rng.randint(1, events)))
                for _ in range(proof_samples)]
    return steps


def _ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def measure_replay(url: str) -> list[dict[str, Any]]:
    """Times ``replay_store(store)`` (what ``arena-ledger replay`` runs) in a fresh process."""
    from ledger.store import EventStore
    from services.replay import replay_store

    steps: list[dict[str, Any]] = []
    with EventStore(url) as store:
        store.head()
        with _step("replay", steps) as figures:
            report = replay_store(store)
            figures.update(events=report.events, ok=report.ok,
                           verdicts=report.verdicts_checked)
    if not report.ok:
        raise SystemExit(f"replay diverged: {report.divergence}")
    return steps


def measure_warm(url: str, picks: Picks) -> list[dict[str, Any]]:
    """Opens an ArenaLedger (its catch-up fold is timed), then queries it; a fresh process."""
    from services.arena_ledger import ArenaLedger

    steps: list[dict[str, Any]] = []
    with _step("ArenaLedger open + fold catch-up", steps) as figures:
        ledger = ArenaLedger(url, actor="bench")
        figures["events"] = ledger.guard.catch_up(ledger.store)
    with ledger:
        with _step("explain submission (caught-up fold)", steps) as figures:
            figures["samples_ms"] = [_ms(partial(ledger.explain_submission, sid))
                                     for sid in picks.submissions]
        for label, hotkey, count in (("typical", picks.typical_hotkey, picks.typical_count),
                                     ("busiest", picks.busy_hotkey, picks.busy_count)):
            with _step(f"submissions(hotkey=…) {label} (caught-up fold)", steps,
                       rows=count) as figures:
                figures["samples_ms"] = [_ms(partial(ledger.submissions, hotkey=hotkey))
                                         for _ in range(history_warm_samples)]
    return steps


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("arena-ledger")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from cli.app import main; main()"]


# Linux copies the parent's peak RSS into a forked child (ru_maxrss survives exec), so the
# command is started from this small launcher, not from the size's process, whose peak (the
# build) would otherwise show up as the command's.
_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
error = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"ms": (time.perf_counter() - started) * 1000, "kib": usage.ru_maxrss,
                  "status": status, "stderr": error.decode(errors="replace")[-2000:]}))
"""


def _run_command(argv: Sequence[str]) -> tuple[float, int]:
    """Runs one command through the launcher; returns (milliseconds, its peak RSS in KiB)."""
    done = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *argv], cwd=_ROOT,
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    if result["status"] != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({result['status']}): {result['stderr']}")
    return float(result["ms"]), int(result["kib"])


def measure_cli(url: str, events: int, picks: Picks) -> list[dict[str, Any]]:
    """Runs the commands as a user does, each in a new process; peak RSS from ``wait4``."""
    runs = cli_runs_small if events <= cli_runs_small_events_max else cli_runs_large
    sid = picks.submissions[0] if picks.submissions else "none"
    # The ledger was appended without the guard, so its read models stand behind the head:
    # these rows time the fold from nothing (bench/queries.py times the read models).
    url_options = ["--db", url]
    commands = [
        ("CLI start-up (arena-ledger --help)", ["--help"], {}),
        ("arena-ledger explain submission",
         [*url_options, "explain", "submission", sid, "--json"], {}),
        ("arena-ledger history --hotkey (typical)",
         [*url_options, "history", "--hotkey", picks.typical_hotkey, "--json"],
         {"rows": picks.typical_count}),
        ("arena-ledger history --hotkey (busiest)",
         [*url_options, "history", "--hotkey", picks.busy_hotkey, "--json"],
         {"rows": picks.busy_count}),
    ]
    steps = []
    for name, args, extra in commands:
        measured = [_run_command([*_cli(), *args]) for _ in range(runs)]
        figures = {"step": name, "samples_ms": [ms for ms, _ in measured],
                   "rss_peak_kib": max(kib for _, kib in measured), "rss_start_kib": 0,
                   "load1": os.getloadavg()[0], "process": "own", **extra}
        steps.append(figures)
        _echo(figures)
    return steps


# -- one size (a fresh process of its own) --------------------------------------------------


def _new_database(backend: str, pg_dsn: str, workdir: Path, events: int) -> tuple[str, str]:
    """Returns (SQLAlchemy URL, name to drop) of a new, empty database."""
    if backend == "sqlite":
        path = workdir / f"scale-{format_size(events)}.db"
        for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            stale.unlink(missing_ok=True)
        return f"sqlite:///{path}", ""
    import psycopg

    name = f"al_scale_{format_size(events)}_{secrets.token_hex(3)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    params = dict(part.split("=", 1) for part in shlex.split(pg_dsn))
    host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
    return f"postgresql+psycopg://{params['user']}@{host}:{port}/{name}", name


def _drop_database(pg_dsn: str, name: str) -> None:
    if not name:
        return
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure_size(backend: str, events: int, pg_dsn: str, workdir: Path) -> dict[str, Any]:
    """Builds one ledger and measures every step on it; the body of a size's process."""
    from ledger import migrate

    url, dropped = _new_database(backend, pg_dsn, workdir, events)
    steps: list[dict[str, Any]] = []
    try:
        migrate.upgrade(url)
        print(f"  [{backend} {events:,}] building …", file=sys.stderr, flush=True)
        picks = build(url, events, steps)
        steps += run_in_fresh_process(measure_store, url, events)
        steps += run_in_fresh_process(measure_replay, url)
        steps += measure_cli(url, events, picks)
        steps += run_in_fresh_process(measure_warm, url, picks)
        disk = Path(url.removeprefix("sqlite:///")).stat().st_size if backend == "sqlite" else 0
    finally:
        _drop_database(pg_dsn, dropped)
        if backend == "sqlite":
            for made in workdir.glob(f"scale-{format_size(events)}.db*"):
                made.unlink(missing_ok=True)
    return {"backend": backend, "events": events, "steps": steps, "db_bytes": disk,
            "picks": picks.__dict__}


# -- the series (the parent process) -------------------------------------------------------


@dataclass
class SizeResult:
    """Is one size's figures as its process returned them."""

    backend: str
    events: int
    steps: list[dict[str, Any]]
    db_bytes: int
    picks: dict[str, Any]
    wall_seconds: float

    def step(self, name: str) -> dict[str, Any] | None:
        """Returns a step's figures by name (None when it did not run)."""
        return next((s for s in self.steps if s["step"] == name), None)


def run_size(backend: str, events: int, pg_dsn: str, workdir: Path) -> SizeResult:
    """Runs one size in a new interpreter (``--child``) and reads back its JSON."""
    out = workdir / f"{backend}-{events}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", backend, str(events),
               "--pg-dsn", pg_dsn, "--workdir", str(workdir), "--out", str(out)]
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=_ROOT)
    data = json.loads(out.read_text())
    return SizeResult(data["backend"], data["events"], data["steps"], data["db_bytes"],
                      data["picks"], time.perf_counter() - started)


def run_series(sizes: Sequence[int], pg_sizes: Sequence[int], pg_dsn: str = _PG_DSN_DEFAULT,
               workdir: Path | None = None) -> list[SizeResult]:
    """Runs every size on SQLite and every ``pg_sizes`` size on PostgreSQL, smallest first."""
    runs = [("sqlite", n) for n in sizes] + [("postgresql", n) for n in pg_sizes]
    results = []
    with tempfile.TemporaryDirectory(prefix="al_scale_", dir=workdir) as tmp:
        for backend, events in runs:
            print(f"[scale] {backend}, {events:,} events (load {os.getloadavg()[0]:.2f}) …",
                  file=sys.stderr, flush=True)
            results.append(run_size(backend, events, pg_dsn, Path(tmp)))
    return results


# -- report --------------------------------------------------------------------------------

#: Rows of the tables: (step name, label in the figures table, label in the memory table).
_ROWS = [
    ("append", "append (`EventStore.append` ×10,000, no guard), events/s", "append"),
    ("read_all", "`read_all`, events/s", "`read_all`"),
    ("verify", "`verify` (read + chain), events/s", "`verify`"),
    ("replay", "`replay_store(store)`, events/s", "replay"),
    ("ArenaLedger open + fold catch-up", "`ArenaLedger` open + fold catch-up, events/s",
     "`ArenaLedger` open + fold catch-up"),
    ("checkpoint", "checkpoint (`sign_tree`), median", "checkpoint"),
    ("inclusion proof", "inclusion proof document, p50 / p99", "inclusion proofs"),
    ("consistency proof", "consistency proof document, p50 / p99", "consistency proofs"),
    ("CLI start-up (arena-ledger --help)", "CLI start-up (`arena-ledger --help`), median",
     "`arena-ledger --help`"),
    ("arena-ledger explain submission", "`arena-ledger explain submission`, median",
     "`arena-ledger explain submission`"),
    ("arena-ledger history --hotkey (typical)", "`arena-ledger history --hotkey`, typical",
     "`arena-ledger history`, typical"),
    ("arena-ledger history --hotkey (busiest)", "`arena-ledger history --hotkey`, busiest",
     "`arena-ledger history`, busiest"),
    ("explain submission (caught-up fold)",
     "`explain_submission`, caught-up fold, p50 / p99", "`explain_submission`, caught up"),
    ("submissions(hotkey=…) typical (caught-up fold)",
     "`submissions(hotkey=…)` typical, caught-up fold, p50 / p99",
     "`submissions(hotkey=…)` typical"),
    ("submissions(hotkey=…) busiest (caught-up fold)",
     "`submissions(hotkey=…)` busiest, caught-up fold, p50 / p99",
     "`submissions(hotkey=…)` busiest"),
]


def figure(step: Mapping[str, Any]) -> str:
    """Renders a step's figure: events/s, a median, or p50 / p99 (latencies)."""
    if "samples_ms" not in step:
        return fmt_rate(_rate(step))
    samples = step["samples_ms"]
    if len(samples) < 10:
        return _fmt_ms(statistics.median(samples)) + ("" if len(samples) > 1 else " (1 run)")
    return f"{_fmt_ms(quantile(samples, 0.5))} / {_fmt_ms(quantile(samples, 0.99))}"


def _cell(step: Mapping[str, Any] | None) -> str:
    if step is None:
        return "–"
    rows = ""
    if "rows" in step:
        rows = f", {step['rows']:,} row" + ("" if step["rows"] == 1 else "s")
    return f"{figure(step)}{rows} (load {step['load1']:.1f})"


def _ratio_row(results: Sequence[SizeResult], name: str, label: str) -> list[str]:
    cells = [label]
    for res in results:
        step, read = res.step(name), res.step("read_all")
        cells.append(f"{_rate(step) / _rate(read):.2f}×" if step and read and _rate(read) else "–")
    return cells


def throughput_table(results: Sequence[SizeResult]) -> str:
    """Renders every operation (rows) at every size (columns) with the load average."""
    rows = [[label, *(_cell(res.step(name)) for res in results)] for name, label, _ in _ROWS]
    rows.append(_ratio_row(results, "verify", "verify ÷ read_all (same ledger, same process)"))
    rows.append(_ratio_row(results, "replay", "replay ÷ read_all (same ledger)"))
    headers = ["Operation", *(f"{res.events:,}" for res in results)]
    return render_markdown_table(headers, rows, numeric=tuple(range(1, len(headers))))


def memory_table(results: Sequence[SizeResult]) -> str:
    """Renders each step's peak RSS (and its growth over the step's start) at every size."""
    rows = []
    for name, _, label in _ROWS:
        cells = [label]
        for res in results:
            step = res.step(name)
            if step is None:
                cells.append("–")
            elif step.get("process") == "own":
                cells.append(f"{fmt_kib(step['rss_peak_kib'])} (own process)")
            else:
                grown = max(0, step["rss_peak_kib"] - step["rss_start_kib"])
                cells.append(f"{fmt_kib(step['rss_peak_kib'])} (+{fmt_kib(grown)})")
        rows.append(cells)
    headers = ["Step", *(f"{res.events:,}" for res in results)]
    return render_markdown_table(headers, rows, numeric=tuple(range(1, len(headers))))


def _backend_tables(results: Sequence[SizeResult]) -> list[str]:
    out = []
    for backend, title in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        mine = [r for r in results if r.backend == backend]
        if not mine:
            continue
        sizes = ", ".join(
            f"{r.events:,} events ({r.db_bytes / 2**20:,.0f} MiB, {r.wall_seconds:,.0f} s in all)"
            if r.db_bytes else f"{r.events:,} events ({r.wall_seconds:,.0f} s in all)"
            for r in mine)
        out += [f"### {title}", "", f"Ledgers: {sizes}.", "", throughput_table(mine), "",
                "Peak RSS of each step (growth over the step's start in brackets; the CLI rows "
                "are the whole command's process, from `wait4`):", "", memory_table(mine), ""]
    return out


def render_section(results: Sequence[SizeResult], commands: Sequence[str],
                   machine: Mapping[str, str]) -> str:
    """Renders the body of the "Scale series" section."""
    return "\n".join([
        "Every operation on one generated ledger per size (`bench/fold.py`'s generator: six "
        "arenas, thousands of hotkeys, payments, credits, rejections, interleaved attempts, "
        "audits, faults, holds, requeues, expiries; no settlements), written with "
        "`EventStore.append` in batches of 10,000 without the domain guard. Each size runs in "
        "a fresh process and each step after the build in a fresh process of its own, so each "
        "peak RSS is that step's. Every figure carries the 1-minute load average when it was "
        "taken; the machine is shared, so compare figures within a column.",
        "",
        "Commands:",
        "",
        *(f"    {c}" for c in commands),
        "",
        "Machine:",
        "",
        machine_markdown(machine),
        "",
        *_backend_tables(results),
        "The CLI rows are what a user waits for: a new interpreter, imports, `ArenaLedger` "
        "folding the whole ledger from position 1, then the query (`--json`, output "
        f"discarded); {cli_runs_small} runs up to {cli_runs_small_events_max:,} events, "
        f"{cli_runs_large} above. The \"caught-up fold\" rows are the query alone on an "
        "`ArenaLedger` that has already folded the ledger (a long-running process); "
        "`submissions(hotkey=…)` is the fold query `history` starts from (the command also "
        "reads each listed submission's stream). Replay here re-checks verdicts and "
        "resolutions but no settlements (see the Replay section for those). The append "
        "row's peak includes the generator, which on its own grows by about 10 MiB per "
        "300,000 events; the rest is the writing process's own growth.",
    ])


# -- command line --------------------------------------------------------------------------


def command_line(argv: Sequence[str]) -> str:
    """Returns the command that reproduces this run."""
    shown = [a for a in argv if a != "--write-docs"]
    return "python bench/scale.py" + ("" if not shown else " " + " ".join(shown))


def machine_description(results: Sequence[SizeResult], pg_dsn: str,
                        loads: Sequence[float]) -> dict[str, str]:
    """Describes the machine plus PostgreSQL's version and the load seen during the run."""
    extra: dict[str, str] = {}
    if any(r.backend == "postgresql" for r in results):
        extra["PostgreSQL"] = postgres_version(pg_dsn)
    samples = [s["load1"] for r in results for s in r.steps] + list(loads)
    if samples:
        extra["Load average (1 min) during the run"] = (
            f"{min(samples):.2f}–{max(samples):.2f} (median {statistics.median(samples):.2f})")
    return describe_machine(extra)


def postgres_version(pg_dsn: str) -> str:
    """Returns the server's version string, or why it could not be read."""
    try:
        import psycopg

        with psycopg.connect(pg_dsn, connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"
    except Exception as exc:  # a description, never a failure: any error is reported
        return f"unavailable ({type(exc).__name__})"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default=sizes_default,
                        help=f"SQLite ledger sizes (default {sizes_default}; e.g. 10k,100k,1m,5m)")
    parser.add_argument("--pg-sizes", default=pg_sizes_default,
                        help="PostgreSQL ledger sizes (default none; e.g. 10k,100k)")
    parser.add_argument("--pg-dsn", default=_PG_DSN_DEFAULT,
                        help="libpq DSN of a server where databases may be created")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where SQLite ledgers are built (default: the temp directory)")
    parser.add_argument("--write-docs", action="store_true",
                        help='rewrite the "Scale series" section of docs/benchmarks.md')
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "EVENTS"),
                        help=argparse.SUPPRESS)  # one size, run by the series
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
        args.pg_sizes = parse_sizes(args.pg_sizes)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the series (or, with --child, one size) and prints the section."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.child:
        backend, events = args.child[0], int(args.child[1])
        figures = measure_size(backend, events, args.pg_dsn, args.workdir)
        args.out.write_text(json.dumps(figures))
        return 0
    loads = [os.getloadavg()[0]]
    results = run_series(args.sizes, args.pg_sizes, args.pg_dsn, args.workdir)
    loads.append(os.getloadavg()[0])
    body = render_section(results, [command_line(argv)],
                          machine_description(results, args.pg_dsn, loads))
    print(body)
    if args.write_docs:
        print(f"\nwrote the Scale series section of {replace_doc_section('Scale series', body)}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
