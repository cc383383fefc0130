"""Times CLI commands on a long ledger folded from nothing and restored from a fold snapshot.

Every command that answers from the machines (explain, history, submissions, fees, rewards,
weights, settle, intake, ...) folds the ledger first; ``services.fold_cache`` lets it start from
the fold a previous command saved. This runs one such command (``fees --json`` by default: an
auditor's fee totals; ``--command`` names another) in fresh processes, as a user does: with
``--no-snapshots`` (the peer), once cold (folds from nothing and writes the snapshot) and
restored, alternating the peer and the restored runs, and checks every run printed the same
bytes. It prints each run's wall time and peak RSS and the ratio of the medians; only ratios
from one run mean anything.

    python bench/snapshot.py --db /tmp/rp/r1m.db --runs 3
    python bench/snapshot.py --db /tmp/rp/r1m.db --runs 3 --command "stats --json"

``--db`` reuses a ledger bench/replay.py built (``--keep``); without it a ledger of
``--events`` is built here the same way.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench._common import describe_machine, machine_markdown  # noqa: E402
from bench.scale import _cli  # noqa: E402

#: Runs the command with stdout to a file and prints its wall ms and peak RSS (from wait4).
_LAUNCHER = """
import json, os, subprocess, sys, time
out = open(sys.argv[1], "wb")
started = time.perf_counter()
child = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.PIPE)
error = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"ms": (time.perf_counter() - started) * 1000, "kib": usage.ru_maxrss,
                  "status": status, "stderr": error.decode(errors="replace")[-2000:]}))
"""

COMMAND = "fees --json"


def _run(options: Sequence[str], command: Sequence[str], output: Path) -> tuple[float, int, bytes]:
    """Runs ``command`` once in a new process; returns (ms, peak RSS KiB, its stdout)."""
    argv = [*_cli(), *options, *command]
    done = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, str(output), *argv],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    if result["status"] != 0:
        raise SystemExit(f"{argv} failed ({result['status']}): {result['stderr']}")
    return float(result["ms"]), int(result["kib"]), output.read_bytes()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="an existing SQLite ledger (bench/replay.py "
                        "--db PATH --keep builds one); default: build --events here")
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="generated events when building")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of the peer and of the restored command, alternating")
    parser.add_argument("--command", default=COMMAND,
                        help=f"the arena-ledger command and its options (default: {COMMAND!r})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Builds or reuses the ledger, runs the commands, prints the figures."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.runs < 1:
        print(f"--runs must be at least 1, not {args.runs}", file=sys.stderr)
        return 2
    command = shlex.split(args.command)
    if not command:
        print("--command names no command", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-snapshot-") as scratch:
        work = Path(scratch)
        path = args.db
        if path is None:
            from bench.replay import build

            path = work / "ledger.db"
            print(f"building {args.events:,} events into {path} …", flush=True)
            build(path, args.events, seed=7, concurrency=256, settle_every=360)
        url = f"sqlite:///{path}"
        from ledger.store import EventStore

        with EventStore(url) as store:
            head = store.head().position
        plain = ["--db", url, "--no-snapshots"]
        snapshots = ["--db", url, "--snapshot-dir", str(work / "snapshots")]
        out = work / "out"
        cold_ms, cold_kib, expected = _run(snapshots, command, out)
        files = list((work / "snapshots").glob("*.snapshot"))
        if len(files) != 1:
            raise SystemExit(f"the cold run wrote {len(files)} snapshots, not one")
        size = files[0].stat().st_size
        peer: list[tuple[float, int]] = []
        restored: list[tuple[float, int]] = []
        for _ in range(args.runs):
            for runs, options in ((peer, plain), (restored, snapshots)):
                ms, kib, printed = _run(options, command, out)
                if printed != expected:
                    raise SystemExit(f"{options} printed other bytes than the cold run")
                runs.append((ms, kib))
    peer_ms = statistics.median(ms for ms, _ in peer)
    restored_ms = statistics.median(ms for ms, _ in restored)
    print(machine_markdown(describe_machine()))
    print(f"Ledger: {head:,} events; command: `arena-ledger {shlex.join(command)}` "
          f"({len(expected):,} bytes printed, the same in every run).\n")
    print("| Run | Wall (each run) | Median | Peak RSS |")
    print("|---|---:|---:|---:|")
    print(f"| `--no-snapshots` (folds from nothing; the peer) | "
          f"{', '.join(f'{ms / 1000:.2f} s' for ms, _ in peer)} | {peer_ms / 1000:.2f} s | "
          f"{max(k for _, k in peer) / 1024:.0f} MiB |")
    print(f"| cold (folds from nothing, writes the snapshot) | {cold_ms / 1000:.2f} s | "
          f"{cold_ms / 1000:.2f} s | {cold_kib / 1024:.0f} MiB |")
    print(f"| restored from the snapshot | "
          f"{', '.join(f'{ms / 1000:.2f} s' for ms, _ in restored)} | "
          f"{restored_ms / 1000:.2f} s | {max(k for _, k in restored) / 1024:.0f} MiB |")
    print(f"\n- Restored ÷ peer (medians): {restored_ms / peer_ms:.2f}× the time "
          f"({peer_ms / restored_ms:.1f}× faster); writing cost the cold run "
          f"{(cold_ms - peer_ms) / 1000:+.2f} s over the peer's median.")
    print(f"- Snapshot file: {size / 2**20:.1f} MiB ({size / head:.0f} bytes per event).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
