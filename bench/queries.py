"""Benchmarks what a query costs once the read models answer it, on 100k and 1M events.

The ledger is ``bench/replay.py``'s (``bench/fold.py``'s generator with a settlement every
360 blocks), written without the guard, then given its read models by ``projections
rebuild`` (timed: the backfill an upgrade runs). Then, on one snapshot of that file:

1. in-process, ``--repeat`` times each (p50 / p99 in ms): ``explain submission`` of a
   random submission, ``history`` of the busiest hotkey, ``fees``, ``stats``,
   ``submissions --status QUEUED``, ``controls`` of the busiest arena, each from the read
   models; and once each, the same question answered by folding the ledger (``as_of`` the
   head: the path every query took before), the peer;
2. as the console script (``arena-ledger …`` in a fresh interpreter, ``--runs`` times):
   wall time beyond interpreter start (``arena-ledger --help``'s time) and peak RSS;
3. the guarded append of 1,000-event batches (read models written in the transaction)
   beside the plain ``EventStore.append`` of the same batches, interleaved, on copies.

Not a test: nothing gates on the figures (STYLE.md). The 1M ledger takes minutes to build;
``--db PATH --keep`` reuses it.

    python bench/queries.py --events 100000
    python bench/queries.py --events 1000000 --db /tmp/q1m.db --keep
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from bench import replay as replay_bench  # noqa: E402
from bench._common import describe_machine, render_markdown_table  # noqa: E402
from ledger.records import EventDraft  # noqa: E402
from ledger.store import EventStore  # noqa: E402
from services import projections  # noqa: E402
from services.arena_ledger import ArenaLedger  # noqa: E402
from services.operations import history_at, stats  # noqa: E402
from services.weights_preview import preview_weights  # noqa: E402

#: Runs the console script's ``main`` in this interpreter and prints its peak RSS (KiB) last
#: on stderr; with ``--imports-only`` it only imports the CLI (the start-up baseline).
#: VmHWM, not getrusage: a child forked from this large process reports the parent's peak.
_PROBE = (
    "import sys\n"
    "from cli.app import main\n"
    "if sys.argv[1:2] != ['--imports-only']:\n"
    "    sys.argv = ['arena-ledger', *sys.argv[1:]]\n"
    "    try:\n        main()\n"
    "    except SystemExit:\n        pass\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "print(hwm, file=sys.stderr)\n"
)


def _ms(samples: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def _timed(step: Callable[[], Any], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        step()
        samples.append(time.perf_counter() - started)
    return _ms(samples)


def _busiest(url: str) -> tuple[str, str, list[str]]:
    with ArenaLedger(url) as ledger:
        rows = ledger.submissions()
    by_hotkey: dict[str, int] = {}
    by_arena: dict[str, int] = {}
    for row in rows:
        by_hotkey[row["hotkey"]] = by_hotkey.get(row["hotkey"], 0) + 1
        by_arena[row["arena_id"]] = by_arena.get(row["arena_id"], 0) + 1
    return (max(by_hotkey, key=by_hotkey.__getitem__), max(by_arena, key=by_arena.__getitem__),
            [row["submission_id"] for row in rows])


def _questions(url: str, hotkey: str, arena: str, sids: list[str],
               as_of: int | None = None) -> dict[str, Callable[[], Any]]:
    rng = random.Random(7)

    def explain() -> Any:
        with ArenaLedger(url, as_of=as_of) as ledger:
            return ledger.explain_submission(rng.choice(sids))

    def one(method: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        def ask() -> Any:
            with ArenaLedger(url, as_of=as_of) as ledger:
                return getattr(ledger, method)(*args, **kwargs)
        return ask

    def preview() -> Any:
        with ArenaLedger(url, as_of=as_of) as ledger:
            return preview_weights(ledger).settlement.settlement_digest

    return {
        "explain submission": explain,
        "history (busiest hotkey)": lambda: history_at(url, hotkey, as_of),
        "fees": one("fees"),
        "stats": lambda: stats(url, as_of),
        "submissions --status QUEUED": one("submissions", status="QUEUED"),
        f"controls {arena}": one("controls", arena),
        "weights preview": preview,
    }


def _console(url: str, args: Sequence[str], runs: int) -> tuple[float, int]:
    """Returns the median wall seconds and the largest peak RSS (KiB) of ``arena-ledger
    args`` in fresh interpreters."""
    walls, peaks = [], []
    for _ in range(runs):
        started = time.perf_counter()
        command = list(args) if args == ["--imports-only"] else ["--db", url, *args]
        done = subprocess.run([sys.executable, "-c", _PROBE, *command],
                              capture_output=True, text=True, cwd=_ROOT, check=False)
        walls.append(time.perf_counter() - started)
        peaks.append(int(done.stderr.strip().splitlines()[-1]))
    return statistics.median(walls), max(peaks)


def _writes(url: str, rounds: int, seeded: bool) -> dict[str, list[float]]:
    """Times intake, claim, a fault and conclude, each in a fresh ledger (a new process's
    first write: the fold seeded from the read models, or folded from every event)."""
    from machines import samples

    times: dict[str, list[float]] = {"intake": [], "claim": [], "conclude": []}
    with ArenaLedger(url) as ledger:
        arena = ledger.fold.arenas()[0]
        block = max(s.arrival_block for s in ledger.fold.queue(arena.arena_id)) + 1
    tag = time.time_ns()
    for n in range(rounds):
        arrived = samples.arrived(arena.arena_id, hotkey=f"5Bench{n % 7}",
                                  content=f"bench-{tag}-{n}", block=block, index=n,
                                  payment_ref=f"pay-bench-{tag}-{n}")
        fields = arrived.model_dump(mode="json", exclude_unset=True)
        fields.pop("submission_id")
        started = time.perf_counter()
        with ArenaLedger(url, seed_from_read_models=seeded) as ledger:
            ledger.intake(fields, payment_amount_rao=arena.fee_rao)
        times["intake"].append(time.perf_counter() - started)
        aid = f"bench-{tag}-{n}"
        started = time.perf_counter()
        with ArenaLedger(url, seed_from_read_models=seeded) as ledger:
            ledger.claim(attempt_id=aid, pair_id="pair-bench", validator_hotkey="5Val",
                         block=block, arena_id=arena.arena_id)
        times["claim"].append(time.perf_counter() - started)
        with ArenaLedger(url, seed_from_read_models=seeded) as ledger:
            ledger.fault(aid, "engine_killed", "speed", "bench")
        started = time.perf_counter()
        with ArenaLedger(url, seed_from_read_models=seeded) as ledger:
            ledger.conclude(aid, block)
        times["conclude"].append(time.perf_counter() - started)
    return times


def _append_rates(url: str, path: Path, batches: int) -> dict[str, float]:
    """Events/s of guarded appends (read models kept) and of plain ones, on copies."""
    from bench import fold as fold_bench

    with EventStore(url) as store:
        head = store.head().position
    items = [(s, e) for _, s, _, e in fold_bench.generate(head + batches * 1_000 + 2_000, 3, 16,
                                                          150_000)]
    # Events the generator gives after the ones the ledger holds would clash with them
    # (same arenas, same ids); a fresh ledger per contender takes the first ones instead.
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:  # the peer: eventsourcing, no rules at all
        from bench.store import Arena as EsApplication
        from bench.store import Attempt as EsAttempt
        from bench.store import window_payload

        app = EsApplication(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite",
                                 "SQLITE_DBNAME": str(Path(scratch) / "es.db")})
        payloads = [window_payload(i) for i in range(batches * 1_000)]
        started = time.perf_counter()
        for at in range(0, len(payloads), 1_000):
            attempts = []
            for first in range(at, at + 1_000, 10):  # 100 aggregates of 10 events a save
                attempt = EsAttempt(**payloads[first])
                for window in payloads[first + 1:first + 10]:
                    attempt.measure(**window)
                attempts.append(attempt)
            app.save(*attempts)
        rates["eventsourcing Application.save (peer)"] = len(payloads) / (
            time.perf_counter() - started)
        app.close()
    for name in ("plain EventStore.append", "guarded ArenaLedger.append"):
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "append.db"
            copy_url = f"sqlite:///{copy}"
            from ledger import migrate
            migrate.upgrade(copy_url)
            chunks = [items[i:i + 1_000] for i in range(0, batches * 1_000, 1_000)]
            started = time.perf_counter()
            if name.startswith("plain"):
                with EventStore(copy_url) as store:
                    for chunk in chunks:
                        store.append([EventDraft.of(s, e) for s, e in chunk])
            else:
                with ArenaLedger(copy_url) as ledger:
                    for chunk in chunks:
                        ledger.append(chunk)
            rates[name] = batches * 1_000 / (time.perf_counter() - started)
    del path
    return rates


def _copy_to(url: str, target: str) -> int:
    """Copies the SQLite ledger at ``url`` into the empty database ``target`` (events as
    recorded, without the guard, then ``projections rebuild``); returns its head."""
    from ledger import migrate

    migrate.upgrade(target)
    with EventStore(url) as source, EventStore(target) as copy:
        batch: list[EventDraft] = []
        for recorded in source.read_all():
            batch.append(EventDraft(recorded.stream, recorded.type, recorded.payload,
                                    recorded.schema_version))
            if len(batch) == 10_000:
                copy.append(batch, actor="bench")
                batch = []
        if batch:
            copy.append(batch, actor="bench")
    return projections.rebuild_ledger(target)


def _only(url: str, hotkey: str, arena: str, sids: list[str], names: list[str],
          repeat: int) -> int:
    """Times the named questions alone (``--only``); prints the weights preview's digest,
    so two checkouts' previews of one ledger can be compared."""
    questions = _questions(url, hotkey, arena, sids)
    questions["controls"] = questions[f"controls {arena}"]
    rows = []
    for name in names:
        p50, p99 = _timed(questions[name], repeat)
        rows.append([name, f"{p50:.2f}", f"{p99:.2f}"])
    print(render_markdown_table(["question", "p50", "p99"], rows, numeric=[1, 2]))
    if "weights preview" in names:
        print("settlement digest:", questions["weights preview"]())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--append-batches", type=int, default=20)
    parser.add_argument("--write-rounds", type=int, default=20)
    parser.add_argument("--postgres", metavar="URL",
                        help="copy the ledger into this empty PostgreSQL database and measure "
                        "there instead")
    parser.add_argument("--whole-fold-writes", action="store_true",
                        help="also time each write once on a fold of every event (slow)")
    parser.add_argument("--only", metavar="NAMES",
                        help="time only these in-process questions (comma-separated names "
                        "as the table prints them, e.g. 'weights preview'), from the read "
                        "models, and stop; with PYTHONPATH naming another checkout, its code")
    args = parser.parse_args(argv)
    print(describe_machine())
    scratch = None
    path = args.db
    if path is None:
        scratch = tempfile.mkdtemp(prefix="bench-queries-")
        path = Path(scratch) / "ledger.db"
    url = f"sqlite:///{path}"
    try:
        if not path.exists():
            meta = replay_bench.build(path, args.events, 1, 64, 360)
            print(f"built {meta['events']:,} events in {meta['build_seconds']:.0f} s")
            started = time.perf_counter()
            head = projections.rebuild_ledger(url)
            seconds = time.perf_counter() - started
            print(f"projections rebuild (the upgrade's backfill): {head:,} events in "
                  f"{seconds:.1f} s, {head / seconds:,.0f} events/s")
        if args.postgres:
            started = time.perf_counter()
            _copy_to(url, args.postgres)
            print(f"copied into PostgreSQL and rebuilt in {time.perf_counter() - started:.0f} s")
            url = args.postgres
        with EventStore(url) as store:
            head = store.head().position
        hotkey, arena, sids = _busiest(url)
        if args.only:
            return _only(url, hotkey, arena, sids, args.only.split(","), args.repeat)
        rows = []
        for name, ask in _questions(url, hotkey, arena, sids).items():
            p50, p99 = _timed(ask, args.repeat)
            rows.append([name, f"{p50:.2f}", f"{p99:.2f}"])
        folded = []
        for ask in _questions(url, hotkey, arena, sids, as_of=head).values():
            p50, _ = _timed(ask, 1)
            folded.append(p50)
        for row, fold_ms in zip(rows, folded, strict=True):
            row += [f"{fold_ms:,.0f}", f"{fold_ms / float(row[1]):,.0f}×"]
        print(f"\nin-process on {head:,} events (ms; fold: one run, as_of the head)")
        print(render_markdown_table(
            ["question", "p50", "p99", "by folding", "speed-up"], rows, numeric=[1, 2, 3, 4]))
        write_rows = []
        # The folds above leave millions of objects for the collector: without this, one
        # full collection lands inside a timed write and reads as a multi-second p99.
        gc.collect()
        seeded = _writes(url, args.write_rounds, True)
        whole = _writes(url, 1, False) if args.whole_fold_writes else None
        for name, samples_s in seeded.items():
            p50, p99 = _ms(samples_s)
            by_folding = "–" if whole is None else f"{whole[name][0] * 1000:,.0f}"
            write_rows.append([name, f"{p50:.1f}", f"{p99:.1f}", by_folding])
        print(f"\nwrites, each in a fresh ledger ({args.write_rounds} rounds; ms)")
        print(render_markdown_table(["write", "p50 seeded", "p99 seeded", "whole fold (1 run)"],
                                    write_rows, numeric=[1, 2, 3]))
        base, base_rss = _console(url, ["--imports-only"], args.runs)
        console_rows = []
        for name, cli_args in (
            ("explain submission", ["explain", "submission", sids[len(sids) // 2]]),
            ("history --hotkey", ["history", "--hotkey", hotkey, "--json"]),
            ("fees --json", ["fees", "--json"]),
            ("stats --json", ["stats", "--json"]),
        ):
            wall, rss = _console(url, cli_args, args.runs)
            console_rows.append([f"arena-ledger {name}", f"{(wall - base) * 1000:.0f}",
                                 f"{wall * 1000:.0f}", f"{rss / 1024:.0f}"])
        print(f"\nconsole script (median of {args.runs}; interpreter start and imports: "
              f"{base * 1000:.0f} ms, {base_rss / 1024:.0f} MiB)")
        print(render_markdown_table(["command", "beyond start (ms)", "wall (ms)",
                                     "peak RSS (MiB)"], console_rows, numeric=[1, 2, 3]))
        if args.append_batches:
            rates = _append_rates(url, path, args.append_batches)
            plain = rates["plain EventStore.append"]
            print(f"\nappend, {args.append_batches} batches of 1,000 on a fresh ledger")
            print(render_markdown_table(
                ["append", "events/s", "vs plain"],
                [[k, f"{v:,.0f}", f"{v / plain:.2f}×"] for k, v in rates.items()],
                numeric=[1, 2]))
        print(f"\npeak RSS of this process: "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
