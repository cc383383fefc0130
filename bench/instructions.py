"""Counts the CPU instructions replay spends per event, under valgrind's callgrind.

On a shared, noisy machine the CPU time of the same replay varies from run to run by more
than the few percent a change of the code makes (and from one machine to the next by more).
Callgrind counts instructions instead: the same code on the same ledger gives the same
count, whatever else the machine is doing. The count is not time (a cache miss costs
nothing here, and SHA-256 runs without the CPU's SHA instructions, so hashing counts
several times what it costs), so use it to compare two versions of the code, not to
predict events per second.

Each measurement is a fresh ``python`` under callgrind: one that imports everything and
opens the store without replaying (the baseline), then one per mode that also replays
the whole ledger with ``replay_store`` (``archived``: finished submissions go to the
temporary archive, the default; ``kept``: everything stays in memory). Instructions per
event = (replay's count - baseline) / events. ``--tree PATH`` measures another checkout
too (e.g. ``git worktree add /tmp/before HEAD~3``), with this checkout's interpreter and
libraries, so the comparison isolates the code.

    python bench/instructions.py --events 200000 --db /tmp/replay200k.db --keep
    python bench/instructions.py --events 200000 --db /tmp/replay200k.db --keep \
        --tree /tmp/before

Needs valgrind (``apt-get install valgrind``); a 200,000-event replay takes a few minutes
under it (the modes and trees run two at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from bench._common import replace_doc_section  # noqa: E402  (after the path fix above)
from bench.replay import build, generator_fingerprint  # noqa: E402

#: What each measured process runs: argv = tree, ledger file, mode ("none": no replay).
_PROBE = """
import os, sys
sys.path.insert(0, sys.argv[1])
from ledger.store import EventStore
if os.path.isdir(os.path.join(sys.argv[1], "services")):
    from services.replay import replay_store
    import ledger.archive, services.settlements, machines.projection, machines.settlement_rules
else:  # a checkout from before the services package (0.1.0)
    from ledger.replay import replay_store
    import ledger.archive, ledger.settle, machines.projection, machines.settlement
store = EventStore(f"sqlite:///{sys.argv[2]}")
store.head()
if sys.argv[3] != "none":
    report = replay_store(store, archive_finished=sys.argv[3] == "archived")
    assert report.ok, report.divergence
"""
_COLLECTED = re.compile(r"Collected : (\d+)")
#: Processes run at once (the machine's cores, at most two: callgrind is single-threaded).
parallel_runs_max = 2


def count(tree: Path, db: Path, mode: str) -> int:
    """Returns the instructions one probe process executes under callgrind."""
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as scratch:
        out = Path(scratch) / "callgrind.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, "-c", _PROBE, str(tree), str(db), mode],
            capture_output=True, text=True, check=False,
        )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({tree}, {mode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def measure(trees: Sequence[Path], db: Path, modes: Sequence[str],
            events: int) -> dict[tuple[str, str], float]:
    """Returns instructions per event for every (tree, mode)."""
    jobs = [(tree, mode) for tree in trees for mode in ("none", *modes)]
    workers = max(1, min(parallel_runs_max, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(job[0], db, job[1]), jobs),
                          strict=True))
    return {
        (str(tree), mode): (counts[(tree, mode)] - counts[(tree, "none")]) / events
        for tree in trees
        for mode in modes
    }


def label(tree: Path) -> str:
    """Names a checkout by its commit (and "+ changes" when its files differ from it)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True,
                              text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return str(tree)
    return f"{commit} + changes" if git("status", "--porcelain", "--untracked-files=no") \
        else commit


def render(per_event: dict[tuple[str, str], float], trees: Sequence[Path],
           modes: Sequence[str], events: int) -> str:
    """Returns the figures as a Markdown table; each later tree's ratio is to the first."""
    lines = [f"Instructions per replayed event, {events:,} events (callgrind):", "",
             "| Checkout | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    first = str(trees[0])
    for tree in trees:
        cells = []
        for mode in modes:
            value = per_event[(str(tree), mode)]
            ratio = value / per_event[(first, mode)]
            cells.append(f"{value:,.0f}" + ("" if str(tree) == first else f" ({ratio:.3f}×)"))
        lines.append(f"| {label(tree)} | " + " | ".join(cells) + " |")
    if "archived" in modes and "kept" in modes:
        lines.append("")
        for tree in trees:
            extra = per_event[(str(tree), "archived")] / per_event[(str(tree), "kept")] - 1
            lines.append(f"- {label(tree)}: archiving costs {extra:+.1%} instructions over "
                         "keeping everything in memory.")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000,
                        help="generated events (settlements come on top)")
    parser.add_argument("--db", type=Path, help="SQLite ledger to build, or to reuse when it "
                        "exists (built by bench/replay.py or this script with the same "
                        "--events)")
    parser.add_argument("--keep", action="store_true", help="keep the --db file afterwards")
    parser.add_argument("--modes", default="archived,kept",
                        help="comma-separated: archived, kept")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="another checkout to measure as well (repeatable)")
    parser.add_argument("--write-docs", action="store_true",
                        help='rewrite the "Replay instructions" section of docs/benchmarks.md')
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Builds (or reuses) the ledger, counts instructions, prints the table."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - {"archived", "kept"})
    if unknown or not modes:
        print(f"--modes: unknown {unknown or 'empty'}; use archived, kept", file=sys.stderr)
        return 2
    trees = [_ROOT, *(tree.resolve() for tree in args.tree)]
    # services/replay.py, or ledger/replay.py in a checkout from before the services package
    missing = [str(t) for t in trees if not any(
        (t / package / "replay.py").is_file() for package in ("services", "ledger"))]
    if missing:
        print(f"--tree: no services/replay.py under {', '.join(missing)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as scratch:
        db = args.db or Path(scratch) / "replay.db"
        meta_path = db.with_suffix(".json")
        stale = meta_path.exists() and json.loads(meta_path.read_text()).get(
            "generator") != generator_fingerprint()
        if not (db.exists() and meta_path.exists()) or stale:
            for old in (db, meta_path, Path(f"{db}-wal"), Path(f"{db}-shm")):
                old.unlink(missing_ok=True)
            print(f"building {args.events:,} events into {db} …", flush=True)
            build(db, args.events, seed=7, concurrency=256, settle_every=360)
        events = int(json.loads(meta_path.read_text())["events"])
        print(f"counting {len(trees) * (len(modes) + 1)} runs under callgrind …", flush=True)
        per_event = measure(trees, db, modes, events)
        if args.db and not args.keep:
            db.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
    table = render(per_event, trees, modes, events)
    print(table)
    if args.write_docs:
        command = " ".join(["python bench/instructions.py", *sys.argv[1:]])
        text = textwrap.fill(_DOC_TEXT, 92, break_on_hyphens=False)
        body = "\n\n".join([text, f"Command:\n\n    {command}", table])
        print(f"\nwrote {replace_doc_section('Replay instructions', body)}")
    return 0


_DOC_TEXT = (
    "Replay's CPU instructions per event, counted by valgrind's callgrind "
    "(`bench/instructions.py`): the same code on the same ledger gives the same count on "
    "any machine, busy or idle, so it compares versions where timings on a shared machine "
    "vary by 20-30% between runs. It is not time: cache misses cost nothing here, and "
    "SHA-256 runs without the CPU's SHA instructions; hash randomisation moves it by about "
    "0.1% between runs. The first row is this checkout; others are earlier commits (`git "
    "worktree add`), run with the same interpreter and libraries, each with its count over "
    "the first row's in brackets."
)


if __name__ == "__main__":
    raise SystemExit(main())
