"""Times offline bundle verification of two source trees side by side on one bundle.

Builds a SQLite ledger of ``bench/integrity.py``'s events once, exports it signed, then
runs ``verify_bundle`` on it in fresh processes, alternating this checkout and ``--tree``
(another checkout, e.g. a git worktree of an earlier commit), and prints each run's
events/s (wall, and per CPU-second of the process and its forked workers) and the ratio
of the medians. Only ratios from one run mean anything: the machines are noisy.

    python bench/bundle_verify.py --events 300000 --tree /tmp/wt-old --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

#: Run in a fresh interpreter with the tree to measure first on sys.path: prints
#: "<wall seconds> <cpu seconds>" of one verify_bundle.
_VERIFY = """
import resource, sys, time
from pathlib import Path
from ledger.bundle import verify_bundle
from ledger.checkpoint import load_verifier

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

verifier = load_verifier(Path(sys.argv[2]))
started, used = time.perf_counter(), cpu()
verify_bundle(Path(sys.argv[1]), verifier)
print(time.perf_counter() - started, cpu() - used)
"""


def build(work: Path, events: int) -> tuple[Path, Path]:
    """Builds the ledger and exports its signed bundle; returns (bundle, verifier key)."""
    from bench import integrity
    from ledger import migrate
    from ledger.bundle import export_bundle
    from ledger.checkpoint import load_signer, write_key_files
    from ledger.store import EventStore

    url = f"sqlite:///{work / 'ledger.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store:
        integrity.build(store, events, integrity.Figures(events))
        write_key_files("bench.example", work / "bench.key")
        export_bundle(store, work / "bundle", signer=load_signer(work / "bench.key"))
    return work / "bundle", work / "bench.key.pub"


def verify_once(tree: Path, bundle: Path, key: Path) -> tuple[float, float]:
    """Returns (wall, CPU) seconds of one verification with ``tree``'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _VERIFY, str(bundle), str(key)], cwd=tree,
                          env=env, capture_output=True, text=True, check=True)
    wall, cpu = map(float, done.stdout.split())
    return wall, cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--tree", type=Path, required=True, help="the other checkout")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    trees = {"this": ROOT, "other": args.tree.resolve()}
    rates: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="bundle-verify-") as tmp:
        bundle, key = build(Path(tmp), args.events)
        for run in range(args.runs):
            for name in ("other", "this"):
                wall, cpu = verify_once(trees[name], bundle, key)
                rates[name].append(args.events / wall)
                print(f"run {run + 1} {name:5} ({trees[name]}): {args.events / wall:,.0f} "
                      f"events/s wall, {args.events / cpu:,.0f} per CPU-second")
    this, other = statistics.median(rates["this"]), statistics.median(rates["other"])
    print(f"median: this {this:,.0f}, other {other:,.0f} events/s; this ÷ other "
          f"{this / other:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
