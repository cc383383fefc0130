"""Benchmarks the verifiable-ledger paths on a large SQLite ledger: checkpoints, proofs, bundles.

The ledger is built the way production builds it, by incremental ``EventStore.append``
batches (the Merkle frontier and stored nodes advance inside each append), with ~300-byte
``WindowMeasured`` payloads on ``attempt-…`` streams of ten events. Then it times:

- signing a checkpoint of the head (``sign_tree``: root from the frontier, sign, store);
- inclusion proof documents (``inclusion_document``) for random positions;
- consistency proof documents (``consistency_document``) from random sizes to the head;
- exporting a bundle, verifying it offline (``verify_bundle``: every line re-hashed, the
  root rebuilt, the signature checked) and importing it into an empty ledger.

Targets (from the "Verifiable ledger" issue): checkpoint < 1 s, inclusion proof < 10 ms
(median), offline bundle verification ≥ 150,000 events/s. Benchmarks never gate CI.

    python bench/integrity.py [--events N] [--write-docs]      # default 100,000 events
    python bench/integrity.py --events 1000000 --write-docs    # the reference 1M run
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid `ledger` still wins

from bench._common import (  # noqa: E402  (after the path fix above)
    describe_machine,
    fmt_rate,
    machine_markdown,
    render_markdown_table,
    replace_doc_section,
    verdict,
)
from bench.store import stream_of, window_payload  # noqa: E402  (the store benchmark's events)
from ledger import migrate  # noqa: E402
from ledger.bundle import export_bundle, import_bundle, verify_bundle  # noqa: E402
from ledger.checkpoint import (  # noqa: E402
    consistency_document,
    inclusion_document,
    sign_tree,
    verify_proof,
)
from ledger.note import Signer  # noqa: E402
from ledger.records import EventDraft  # noqa: E402
from ledger.store import EventStore  # noqa: E402

#: Events in the ledger unless --events says otherwise (the reference run uses 1,000,000).
events_default = 100_000
#: Events per append batch while building the ledger (the store's batch limit).
build_batch_events = 10_000
#: Random positions (and sizes) each proof kind is timed on.
proof_samples = 500
#: Checkpoints signed for the checkpoint timing.
checkpoint_samples = 5
#: Seed for the random positions, so runs are comparable.
seed = 20_261_129
#: Targets.
target_checkpoint_s = 1.0
target_inclusion_ms = 10.0
target_verify_rate = 150_000


def drafts(first: int, count: int) -> list[EventDraft]:
    """Builds ``count`` drafts for events ``first`` … ``first + count - 1``."""
    return [
        EventDraft(stream_of(i), "WindowMeasured", window_payload(i))
        for i in range(first, first + count)
    ]


@dataclass
class Figures:
    """Collects the measured figures of one run."""

    events: int
    build_s: float = 0.0
    checkpoint_s: list[float] = field(default_factory=list)
    inclusion_ms: list[float] = field(default_factory=list)
    consistency_ms: list[float] = field(default_factory=list)
    proof_verify_ms: list[float] = field(default_factory=list)
    export_s: float = 0.0
    verify_s: float = 0.0
    import_s: float = 0.0
    bundle_bytes: int = 0
    verify_cpu_s: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0


def cpu_seconds() -> float:
    """Returns the CPU time of this process and its reaped children (workers), in seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Runs ``call`` once and returns (seconds, its result)."""
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def build(store: EventStore, total: int, figures: Figures) -> None:
    """Appends ``total`` events in batches, printing progress to stderr."""
    started = time.perf_counter()
    for first in range(0, total, build_batch_events):
        batch = drafts(first, min(build_batch_events, total - first))
        store.append(batch, actor="bench")
        if (first // build_batch_events) % 10 == 9:
            done = first + len(batch)
            rate = done / (time.perf_counter() - started)
            print(f"  built {done:,} events ({rate:,.0f}/s)", file=sys.stderr)
    figures.build_s = time.perf_counter() - started


def bench_proofs(store: EventStore, signer: Signer, figures: Figures) -> None:
    """Times checkpoints, inclusion and consistency documents, and their offline checks."""
    total = figures.events
    notes = []
    for _ in range(checkpoint_samples):
        seconds, issued = timed(lambda: sign_tree(store, signer))
        figures.checkpoint_s.append(seconds)
        notes.append(issued.note)
    rng = random.Random(seed)
    verifier = signer.verifier()
    for _ in range(proof_samples):
        position = rng.randint(1, total)
        seconds, document = timed(functools.partial(inclusion_document, store, position))
        figures.inclusion_ms.append(seconds * 1000)
        seconds, _ = timed(functools.partial(verify_proof, document, [notes[-1]], verifier))
        figures.proof_verify_ms.append(seconds * 1000)
        size = rng.randint(1, total)
        seconds, _ = timed(functools.partial(consistency_document, store, size))
        figures.consistency_ms.append(seconds * 1000)


def bench_bundle(store: EventStore, signer: Signer, tmp: Path, figures: Figures) -> None:
    """Times export, offline verification and import of the whole ledger."""
    bundle = tmp / "bundle"
    figures.export_s, _ = timed(lambda: export_bundle(store, bundle, signer=signer))
    figures.bundle_bytes = sum(f.stat().st_size for f in bundle.iterdir())
    figures.load_before = os.getloadavg()[0]
    cpu = cpu_seconds()
    figures.verify_s, report = timed(lambda: verify_bundle(bundle, signer.verifier()))
    figures.verify_cpu_s = cpu_seconds() - cpu
    figures.load_after = os.getloadavg()[0]
    assert report.events == figures.events and report.signature_checked
    url = f"sqlite:///{tmp / 'imported.db'}"
    migrate.upgrade(url)
    with EventStore(url) as target:
        figures.import_s, _ = timed(lambda: import_bundle(target, bundle, signer.verifier()))
        assert target.merkle_root() == store.merkle_root(figures.events)


def run(total: int, tmp: Path) -> Figures:
    """Builds the ledger under ``tmp`` and measures everything."""
    url = f"sqlite:///{tmp / 'ledger.db'}"
    migrate.upgrade(url)
    figures = Figures(total)
    signer = Signer.generate("bench.example")
    with EventStore(url) as store:
        print(f"building a {total:,}-event ledger…", file=sys.stderr)
        build(store, total, figures)
        print("timing checkpoints and proofs…", file=sys.stderr)
        bench_proofs(store, signer, figures)
        print("timing export, offline verification and import…", file=sys.stderr)
        bench_bundle(store, signer, tmp, figures)
    return figures


def _ms(values: Sequence[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def targets_table(f: Figures) -> str:
    """Renders each target with the measured figure and PASS or MISS."""
    checkpoint = statistics.median(f.checkpoint_s)
    inclusion = statistics.median(f.inclusion_ms)
    rate = f.events / f.verify_s if f.verify_s else 0.0
    rows = [
        ["checkpoint of the head", "< 1 s", f"{checkpoint * 1000:.2f} ms",
         verdict(checkpoint < target_checkpoint_s)],
        ["inclusion proof (median)", "< 10 ms", f"{inclusion:.3f} ms",
         verdict(inclusion < target_inclusion_ms)],
        ["offline bundle verification", "≥ 150,000 events/s", f"{fmt_rate(rate)} events/s",
         verdict(rate >= target_verify_rate)],
    ]
    return render_markdown_table(["Operation", "Target", "Measured", "Result"], rows,
                                 numeric=(2,))


def figures_table(f: Figures) -> str:
    """Renders every figure of the run."""
    n = f.events
    rows = [
        ["build by appends of 10,000", f"{f.build_s:.1f} s", f"{fmt_rate(n / f.build_s)} events/s"],
        ["checkpoint (sign_tree), median of 5",
         f"{statistics.median(f.checkpoint_s) * 1000:.2f} ms",
         "root from the head's frontier, Ed25519, one INSERT"],
        ["inclusion proof document, p50 / p99",
         f"{_ms(f.inclusion_ms, 0.5):.3f} / {_ms(f.inclusion_ms, 0.99):.3f} ms",
         f"{proof_samples} random positions"],
        ["consistency proof document, p50 / p99",
         f"{_ms(f.consistency_ms, 0.5):.3f} / {_ms(f.consistency_ms, 0.99):.3f} ms",
         f"{proof_samples} random sizes to the head"],
        ["verify-proof (offline), p50",
         f"{_ms(f.proof_verify_ms, 0.5):.3f} ms", "signature + entry hash + path"],
        ["export bundle", f"{f.export_s:.1f} s",
         f"{fmt_rate(n / f.export_s)} events/s, {f.bundle_bytes / 2**20:,.0f} MiB"],
        ["verify bundle offline", f"{f.verify_s:.1f} s", f"{fmt_rate(n / f.verify_s)} events/s"],
        ["verify bundle offline, CPU", f"{f.verify_cpu_s:.1f} s",
         f"{f.verify_cpu_s / n * 1e6:.2f} µs per event over all processes "
         f"({fmt_rate(n / f.verify_cpu_s)} events per CPU-second)"],
        ["import bundle (SQLite, two passes)", f"{f.import_s:.1f} s",
         f"{fmt_rate(n / f.import_s)} events/s"],
    ]
    return render_markdown_table(["Operation", "Time", "Notes"], rows, numeric=(1,))


def command_line(argv: Sequence[str]) -> str:
    """Returns the command that reproduces this run."""
    shown = [a for a in argv if a != "--write-docs"]
    return "python bench/integrity.py" + ("" if not shown else " " + " ".join(shown))


def report(f: Figures, argv: Sequence[str]) -> str:
    """Renders the Integrity section: command, machine, targets and figures."""
    return f"""
Checkpoints, proofs and bundles on a SQLite ledger of {f.events:,} events built by
incremental appends of {build_batch_events:,} (~300-byte `WindowMeasured` payloads).

Command:

    {command_line(argv)}

The reference run is `python bench/integrity.py --events 1000000 --write-docs`; the default
(100,000 events) takes about a minute.

Machine:

{machine_markdown(describe_machine())}
- Load average (1 min) around offline verification: {f.load_before:.2f} → {f.load_after:.2f}
  (other work on the machine slows every wall-clock figure; the CPU row below does not
  depend on it)

### Targets

{targets_table(f)}

### Figures

{figures_table(f)}

Proof documents include reading the event and its predecessor's hash; a proof reads
O(log n) stored Merkle nodes whatever the ledger's size. Offline verification re-hashes
every line (entry hash, leaf, nodes), checks stream versions and the file's SHA-256, and
checks the checkpoint signature; from 200,000 events it spreads the lines over forked
worker processes, so on an otherwise idle machine its rate approaches (usable cores) ÷
(CPU per event). Import runs that pass twice (before and inside its transaction, in its own
process) and inserts in the second.
""".strip("\n")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=events_default,
                        help=f"events in the ledger (default {events_default:,})")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite the '## Integrity' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.events < 2:
        parser.error("--events must be at least 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark, prints the section, and optionally rewrites it in the docs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="al_bench_integrity_") as tmp:
        figures = run(args.events, Path(tmp))
    text = report(figures, argv)
    print(text)
    if args.write_docs:
        path = replace_doc_section("Integrity", text)
        print(f"\nwrote the Integrity section of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
