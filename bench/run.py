"""Runs every benchmark in one go, peers side by side, and sums up the targets as PASS or MISS.

One command, one machine, one stretch of time: ``bench/store.py`` (our store beside the
``eventsourcing`` library on SQLite and PostgreSQL and the raw ``sqlite3`` multi-row INSERT and
psycopg ``COPY`` ceilings), ``bench/integrity.py`` (checkpoints, proofs, bundles),
``bench/fold.py`` (``LedgerFold``), ``bench/replay.py`` (replay with settlements) and
``bench/scale.py`` (every operation at 10k … 5M events). Each runs in a fresh interpreter
of its own, so no benchmark's memory or warm caches leak into the next; each prints its
own report, then this script prints the ratios to the peers and a table of every target.

The machine is shared: a background thread samples the load average all through the run,
and every figure is printed with the load it was taken under. Nothing gates on absolute
time (STYLE.md); a MISS is a figure to read, not a failure.

    python bench/run.py --quick                      # 10k and 100k, small sub-runs
    python bench/run.py [--sizes 10k,100k,1m,5m] [--pg-sizes 10k] [--write-docs]

``--write-docs`` rewrites the "Summary" section of docs/benchmarks.md and the sections of the
benchmarks that ran (Store, Integrity, Replay, Scale series)
(the other sections belong to their own scripts). Each target keeps its latest figure in
``bench/out/summary.json``, so a later run that skips a benchmark (``--only``) or measures
a target below the size it is defined at (checkpoint of 1M) keeps the earlier figure, dated.
``--write-docs`` also writes them to ``bench/targets.json``, tracked with the docs, which a
checkout without ``bench/out`` starts from.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid `ledger` still wins

from bench import scale  # noqa: E402  (after the path fix above)
from bench._common import (  # noqa: E402
    BENCHMARKS_DOC,
    describe_machine,
    fmt_rate,
    fmt_ratio,
    machine_markdown,
    parse_backends,
    render_markdown_table,
    replace_doc_section,
    verdict,
)

#: Where each target's latest figure is kept between runs, and every figure of the latest
#: run (both git-ignored).
SUMMARY_JSON = _ROOT / "bench" / "out" / "summary.json"
#: The targets behind docs/benchmarks.md's Summary as last written (``--write-docs``),
#: tracked with the docs: a fresh checkout's first ``--only`` run carries the others over
#: from here instead of dropping them from the Summary.
TARGETS_JSON = _ROOT / "bench" / "targets.json"
RUN_JSON = _ROOT / "bench" / "out" / "run-latest.json"
#: Seconds between load-average samples.
load_sample_interval_s = 5.0
#: Benchmarks in the order they run.
BENCHES = ("store", "integrity", "fold", "replay", "scale")

#: Targets from the issues (the bars live here once; the sub-benchmarks keep their own copies
#: for their own sections).
target_sqlite_append_vs_es = 2.0
target_sqlite_append_vs_raw = 0.70
target_pg_append_vs_es = 3.0
target_sqlite_verify_events_per_s = 150_000
target_verify_vs_es_read = 3.0
target_fold_events_per_s = 100_000
target_replay_events_per_s = 80_000
#: Replay runs (fresh processes) whose median the replay target is judged on, as
#: ``bench/replay.py --repeat``'s default.
replay_repeat = 5
target_checkpoint_s = 1.0
target_checkpoint_events = 1_000_000
target_inclusion_ms = 10.0
target_bundle_verify_events_per_s = 150_000


@dataclass(frozen=True)
class Profile:
    """Sizes each benchmark runs at."""

    store_events: int
    integrity_events: int
    fold_events: int
    replay_events: int
    sizes: str
    pg_sizes: str


PROFILES = {
    # About four minutes on 2 busy cores (load 4-6).
    "quick": Profile(store_events=10_000, integrity_events=100_000, fold_events=100_000,
                     replay_events=50_000, sizes="10k,100k", pg_sizes=""),
    # About six minutes on 2 busy cores; bundle verification takes its parallel path (≥ 200k).
    # --sizes 10k,100k,1m adds about six minutes more.
    "default": Profile(store_events=20_000, integrity_events=250_000, fold_events=300_000,
                       replay_events=100_000, sizes="10k,100k", pg_sizes="10k"),
}


# -- the children: one benchmark each, in a fresh interpreter -------------------------------


def _child_store(params: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    import bench.store as store

    results = [store.run_backend(b, params["events"], params["pg_dsn"], tmp)
               for b in params["backends"]]
    section = store.report(results, ["--events", str(params["events"])], params["events"])
    print(section)
    return {
        "section": section,
        "events": params["events"],
        "versions": {r.name: r.version for r in results},
        "rows": [{"backend": row.backend, "operation": row.operation,
                  "contender": row.contender, "batch": row.batch, "events": row.tally.events,
                  "rate": row.tally.rate} for r in results for row in r.rows],
        # The contender labels as bench/store.py spells them (module constants, private).
        "labels": {key: getattr(store, key) for key in _STORE_LABELS if hasattr(store, key)},
    }


_STORE_LABELS = ("_OURS_APPEND", "_OURS_VERIFY", "_ES_SAVE", "_ES_INSERT", "_ES_READ",
                 "_RAW_SQLITE", "_RAW_COPY", "_RAW_VERIFY_SQLITE", "_RAW_VERIFY_PG")


def _child_integrity(params: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    import bench.integrity as integrity

    figures = integrity.run(params["events"], tmp)
    section = integrity.report(figures, ["--events", str(params["events"])])
    print(section)
    return {**dataclasses.asdict(figures), "section": section}


def _child_fold(params: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    import bench.fold as fold

    figures = fold.run(params["events"], 7, 50_000, 256)
    fold._report(figures)  # the script's own printout (private, but its only renderer)
    keep = ("events", "seconds", "rate", "cpu_seconds", "cpu_rate", "refusals",
            "rss_peak_kib", "rss_growth_kib", "submissions", "live", "in_memory", "archived")
    return {key: figures[key] for key in keep if key in figures}


def _child_replay(params: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    """Uses bench/replay.py's parts when they are there; otherwise its main, unparsed."""
    import bench.replay as replay
    from bench._common import run_in_fresh_process

    argv = ["--events", str(params["events"]), "--settle-every-blocks",
            str(params["settle_every_blocks"])]
    if not all(hasattr(replay, n) for n in ("build", "measure", "summarize", "render")):
        code = replay.main(argv)
        return {"parsed": False, "exit": code}
    path = tmp / "replay.db"
    meta = replay.build(path, params["events"], 7, 256, params["settle_every_blocks"])
    meta["settle_every_blocks"] = params["settle_every_blocks"]
    url = f"sqlite:///{path}"
    figures = run_in_fresh_process(replay.measure, url, True, False)
    if hasattr(replay, "add_repeats"):  # the target is judged on the median of the runs
        replay.add_repeats(figures, url, replay_repeat, True)
    summary = replay.summarize(meta, figures)
    section = replay.render(meta, figures, summary)
    print(section)
    return {"parsed": True, "summary": summary, "peak_rss_kib": figures.get("rss_peak_kib"),
            "events": meta["events"], "section": section}


def _child_scale(params: Mapping[str, Any], tmp: Path) -> dict[str, Any]:
    results = scale.run_series(scale.parse_sizes(params["sizes"]),
                               scale.parse_sizes(params["pg_sizes"]), params["pg_dsn"], tmp)
    return {"results": [dataclasses.asdict(r) for r in results]}


_CHILDREN: dict[str, Callable[[Mapping[str, Any], Path], dict[str, Any]]] = {
    "store": _child_store,
    "integrity": _child_integrity,
    "fold": _child_fold,
    "replay": _child_replay,
    "scale": _child_scale,
}


def run_child(name: str, params: Mapping[str, Any], out: Path) -> None:
    """Runs one benchmark in this (fresh) interpreter and writes its figures as JSON."""
    with tempfile.TemporaryDirectory(prefix=f"al_run_{name}_") as tmp:
        figures = _CHILDREN[name](params, Path(tmp))
    out.write_text(json.dumps(figures, default=str))


# -- the parent ----------------------------------------------------------------------------


class LoadSampler:
    """Samples the 1-minute load average in the background while the run lasts."""

    def __init__(self) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(load_sample_interval_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def describe(self) -> str:
        """Returns min–max (median) of the samples."""
        s = self.samples
        return f"{min(s):.2f}–{max(s):.2f} (median {statistics.median(s):.2f}, {len(s)} samples)"


@dataclass
class BenchRun:
    """Is one benchmark's outcome in this run."""

    name: str
    params: dict[str, Any]
    figures: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0

    @property
    def load(self) -> str:
        """Returns the 1-minute load before → after the benchmark."""
        return f"{self.load_before:.1f}→{self.load_after:.1f}"


def run_bench(name: str, params: dict[str, Any], workdir: Path) -> BenchRun:
    """Runs one benchmark as ``python bench/run.py --child NAME`` and reads its JSON back."""
    out = workdir / f"{name}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name,
               "--params", json.dumps(params), "--out", str(out)]
    run = BenchRun(name, params, load_before=os.getloadavg()[0])
    print(f"\n===== {name} ({_params_text(params)}; load {run.load_before:.2f}) =====\n",
          flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=_ROOT, check=False)
    run.seconds, run.load_after = time.perf_counter() - started, os.getloadavg()[0]
    if done.returncode == 0 and out.exists():
        run.figures = json.loads(out.read_text())
    else:
        run.error = f"exited {done.returncode}"
    print(f"\n----- {name}: {run.seconds:,.0f} s, load {run.load}"
          f"{'' if run.error is None else ', FAILED: ' + run.error} -----", flush=True)
    return run


def _params_text(params: Mapping[str, Any]) -> str:
    def shown(value: Any) -> str:
        if isinstance(value, int):
            return f"{value:,}"
        return ",".join(value) if isinstance(value, list) else str(value or "none")

    return ", ".join(f"{k.replace('_', ' ')} {shown(v)}" for k, v in params.items()
                     if k != "pg_dsn")


def bench_params(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Returns each benchmark's parameters for this run's profile and flags."""
    p: Profile = args.profile
    return {
        "store": {"events": args.store_events or p.store_events, "pg_dsn": args.pg_dsn,
                  "backends": args.backends},
        "integrity": {"events": args.integrity_events or p.integrity_events},
        "fold": {"events": args.fold_events or p.fold_events},
        "replay": {"events": args.replay_events or p.replay_events,
                   "settle_every_blocks": args.settle_every_blocks},
        "scale": {"sizes": args.sizes or p.sizes,
                  "pg_sizes": p.pg_sizes if args.pg_sizes is None else args.pg_sizes,
                  "pg_dsn": args.pg_dsn},
    }


def equivalent_commands(params: Mapping[str, Mapping[str, Any]], only: Sequence[str]) -> list[str]:
    """Returns the stand-alone command of each benchmark run here (same sizes)."""
    commands = {
        "store": f"python bench/store.py --events {params['store']['events']} --backends "
                 + ",".join("postgres" if b == "postgresql" else b
                            for b in params["store"]["backends"]),
        "integrity": f"python bench/integrity.py --events {params['integrity']['events']}",
        "fold": f"python bench/fold.py --events {params['fold']['events']}",
        "replay": f"python bench/replay.py --events {params['replay']['events']} "
                  f"--settle-every-blocks {params['replay']['settle_every_blocks']}",
        "scale": f"python bench/scale.py --sizes {params['scale']['sizes']}"
                 + (f" --pg-sizes {params['scale']['pg_sizes']}"
                    if params["scale"]["pg_sizes"] else ""),
    }
    return [commands[name] for name in BENCHES if name in only]


# -- targets -------------------------------------------------------------------------------


@dataclass
class TargetRow:
    """Is one target's latest figure: what, how much, where it came from, PASS or MISS."""

    key: str
    goal: str
    measured: str
    peers: str
    source: str
    load: str
    ok: bool | None
    events: int = 0
    when: str = ""
    required_events: int = 0
    #: The machine the figure was measured on (``host_name``); empty when not recorded.
    host: str = ""

    def result(self) -> str:
        """Returns PASS, MISS or n/a."""
        return "n/a" if self.ok is None else verdict(self.ok)


@dataclass
class SummaryBlock:
    """Is a part of the Summary that one benchmark alone measures: the store's peers table
    (``peers``), the Scale series' query latencies (``queries``).

    Kept with the targets, so that a run without that benchmark (``--only replay``) still
    shows it, named with the run and machine it came from, instead of dropping it.
    """

    key: str
    lines: list[str]
    when: str
    host: str = ""


#: The order the blocks appear in the summary, below the targets.
BLOCK_ORDER = ["queries", "peers"]


def summary_blocks(runs: Mapping[str, BenchRun], when: str, host: str) -> list[SummaryBlock]:
    """Returns the blocks this run measured (none for a benchmark it did not run)."""
    blocks = []
    notes = untargeted_notes(runs.get("scale"))
    if notes:
        blocks.append(SummaryBlock("queries", notes, when, host))
    peers = peers_table(runs.get("store"))
    if peers:
        heading = "Ours beside each peer in the same run (bench/store.py):"
        blocks.append(SummaryBlock("peers", [heading, "", peers, ""], when, host))
    return blocks


def merge_blocks(fresh: Sequence[SummaryBlock], previous: Sequence[SummaryBlock]
                 ) -> list[SummaryBlock]:
    """Keeps each block from this run, else the one kept from an earlier run."""
    merged = {block.key: block for block in previous}
    merged.update({block.key: block for block in fresh})
    ordered = [merged.pop(key) for key in BLOCK_ORDER if key in merged]
    return ordered + list(merged.values())


def blocks_lines(blocks: Sequence[SummaryBlock], when: str, host: str) -> list[str]:
    """Renders the blocks; one carried over from an earlier run ends with a line naming that
    run, and its machine when that was another one (as ``targets_table`` names them)."""
    lines: list[str] = []
    for block in blocks:
        lines += block.lines
        if block.when != when:
            lines += [f"(From the {_earlier_run(block.when, block.host, host)}.)", ""]
    return lines


def _earlier_run(when: str, host: str, this_host: str) -> str:
    """Names an earlier run a figure comes from: "run of WHEN", plus its machine when that
    was another one than ``this_host`` (or was not recorded)."""
    if host == this_host:
        return f"run of {when}"
    return f"run of {when} on {host}" if host else f"run of {when}, machine not recorded"


def _store_rate(figures: Mapping[str, Any], backend: str, operation: str, label: str,
                batch: str | None = None) -> float:
    contender = figures.get("labels", {}).get(label, label)
    for row in figures["rows"]:
        if (row["backend"], row["operation"], row["contender"]) == (backend, operation,
                                                                    contender) and (
                batch is None or row["batch"] == batch):
            return float(row["rate"])
    return 0.0


@dataclass
class StoreRates:
    """Is one backend's headline rates from bench/store.py."""

    ours: float
    es_app: float
    es_insert: float
    raw: float
    verify: float
    es_read: float
    raw_verify: float

    @classmethod
    def of(cls, figures: Mapping[str, Any], backend: str) -> StoreRates:
        """Picks the rates out of the store benchmark's rows."""
        sqlite = backend == "sqlite"
        return cls(
            ours=_store_rate(figures, backend, "append", "_OURS_APPEND", "1,000"),
            es_app=_store_rate(figures, backend, "append", "_ES_SAVE"),
            es_insert=_store_rate(figures, backend, "append", "_ES_INSERT"),
            raw=_store_rate(figures, backend, "append", "_RAW_SQLITE" if sqlite else "_RAW_COPY"),
            verify=_store_rate(figures, backend, "verify", "_OURS_VERIFY"),
            es_read=_store_rate(figures, backend, "read", "_ES_READ"),
            raw_verify=_store_rate(figures, backend, "verify",
                                   "_RAW_VERIFY_SQLITE" if sqlite else "_RAW_VERIFY_PG"),
        )


def _div(a: float, b: float) -> float:
    return a / b if b else 0.0


def store_targets(run: BenchRun) -> list[TargetRow]:
    """Returns the append and read+verify targets from bench/store.py's figures."""
    f = run.figures or {}
    if not f:
        return []
    source = f"bench/store.py, {f['events']:,} events/contender"
    rows: list[TargetRow] = []
    for backend in sorted({r["backend"] for r in f["rows"]}, reverse=True):  # sqlite first
        r = StoreRates.of(f, backend)
        name = "SQLite" if backend == "sqlite" else "PostgreSQL"
        bar = target_sqlite_append_vs_es if backend == "sqlite" else target_pg_append_vs_es
        rows.append(TargetRow(
            f"{backend}_append_vs_es", f"{name} append ×1,000 ≥ {bar:g}× eventsourcing "
            "Application.save", fmt_ratio(_div(r.ours, r.es_app)),
            f"{fmt_rate(r.ours)} vs {fmt_rate(r.es_app)} ev/s; raw ceiling "
            f"{fmt_ratio(_div(r.raw, r.es_app))}", source, run.load,
            r.es_app > 0 and r.ours >= bar * r.es_app, f["events"]))
        if backend == "sqlite":
            rows.append(TargetRow(
                "sqlite_append_vs_raw",
                "SQLite append ×1,000 ≥ 70% of raw sqlite3 multi-row INSERT",
                f"{_div(r.ours, r.raw):.0%}", f"raw {fmt_rate(r.raw)} ev/s", source, run.load,
                r.raw > 0 and r.ours >= target_sqlite_append_vs_raw * r.raw, f["events"]))
            rows.append(TargetRow(
                "sqlite_verify_rate", "SQLite read + verify ≥ 150,000 events/s",
                f"{fmt_rate(r.verify)} ev/s", f"raw ceiling {fmt_rate(r.raw_verify)} ev/s",
                source, run.load, r.verify >= target_sqlite_verify_events_per_s, f["events"]))
        rows.append(TargetRow(
            f"{backend}_verify_vs_es", f"{name} read + verify ≥ 3× eventsourcing read (mapped)",
            fmt_ratio(_div(r.verify, r.es_read)),
            f"{fmt_rate(r.verify)} vs {fmt_rate(r.es_read)} ev/s; raw ceiling "
            f"{fmt_ratio(_div(r.raw_verify, r.es_read))}", source, run.load,
            r.es_read > 0 and r.verify >= target_verify_vs_es_read * r.es_read, f["events"]))
    return rows


def _largest_scale(scale_run: BenchRun | None, backend: str = "sqlite") -> dict[str, Any] | None:
    if scale_run is None or not scale_run.figures:
        return None
    mine = [r for r in scale_run.figures["results"] if r["backend"] == backend]
    return max(mine, key=lambda r: r["events"]) if mine else None


def _scale_step(result: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in result["steps"] if s["step"] == name), None)


def integrity_targets(run: BenchRun, scale_run: BenchRun | None) -> list[TargetRow]:
    """Returns checkpoint, inclusion and bundle targets (the largest ledger measured wins)."""
    rows: list[TargetRow] = []
    f = run.figures or {}
    big = _largest_scale(scale_run)
    candidates: list[tuple[int, float, float, str, str]] = []  # events, ckpt s, incl ms, src, load
    if f:
        candidates.append((f["events"], statistics.median(f["checkpoint_s"]),
                           statistics.median(f["inclusion_ms"]),
                           f"bench/integrity.py, {f['events']:,} events", run.load))
    if big is not None and scale_run is not None:
        ckpt, incl = _scale_step(big, "checkpoint"), _scale_step(big, "inclusion proof")
        if ckpt and incl:
            candidates.append((big["events"], statistics.median(ckpt["samples_ms"]) / 1000,
                               statistics.median(incl["samples_ms"]),
                               f"bench/scale.py, {big['events']:,} events",
                               f"{ckpt['load1']:.1f}"))
    if candidates:
        events, ckpt_s, incl_ms, source, load = max(candidates, key=lambda c: c[0])
        rows.append(TargetRow(
            "checkpoint_1m", "checkpoint (sign_tree) of 1,000,000 events < 1 s",
            f"{ckpt_s * 1000:.2f} ms", "", source, load,
            ckpt_s < target_checkpoint_s if events >= target_checkpoint_events else None,
            events, required_events=target_checkpoint_events))
        rows.append(TargetRow(
            "inclusion_proof", "SQLite inclusion proof document < 10 ms (median)",
            f"{incl_ms:.2f} ms", "", source, load, incl_ms < target_inclusion_ms, events))
    rows += _pg_inclusion_target(scale_run)
    if f and f.get("verify_s"):
        rate = f["events"] / f["verify_s"]
        rows.append(TargetRow(
            "bundle_verify", "offline bundle verification ≥ 150,000 events/s",
            f"{fmt_rate(rate)} ev/s", f"{fmt_rate(f['events'] / f['verify_cpu_s'])} per "
            "CPU-second" if f.get("verify_cpu_s") else "", f"bench/integrity.py, "
            f"{f['events']:,} events", f"{f['load_before']:.1f}→{f['load_after']:.1f}",
            rate >= target_bundle_verify_events_per_s, f["events"]))
    return rows


def _pg_inclusion_target(scale_run: BenchRun | None) -> list[TargetRow]:
    """Returns the inclusion-proof target on PostgreSQL when the scale series ran there."""
    big = _largest_scale(scale_run, "postgresql")
    step = _scale_step(big, "inclusion proof") if big else None
    if big is None or step is None:
        return []
    median = statistics.median(step["samples_ms"])
    return [TargetRow(
        "inclusion_proof_pg", "PostgreSQL inclusion proof document < 10 ms (median)",
        f"{median:.2f} ms", f"p99 {scale.quantile(step['samples_ms'], 0.99):.2f} ms",
        f"bench/scale.py, {big['events']:,} events", f"{step['load1']:.1f}",
        median < target_inclusion_ms, big["events"])]


def fold_replay_targets(fold_run: BenchRun | None, replay_run: BenchRun | None,
                        scale_run: BenchRun | None) -> list[TargetRow]:
    """Returns the fold and replay throughput targets."""
    rows: list[TargetRow] = []
    f = fold_run.figures if fold_run else None
    if f and fold_run:
        rows.append(TargetRow(
            "fold_rate", "LedgerFold ≥ 100,000 events/s", f"{fmt_rate(f['rate'])} ev/s",
            f"{fmt_rate(f['cpu_rate'])} per CPU-second; finished submissions "
            f"{'archived' if f.get('archived') else 'in memory'}, "
            f"{f.get('in_memory', 0):,} held", f"bench/fold.py, {f['events']:,} events",
            fold_run.load, f["rate"] >= target_fold_events_per_s, f["events"]))
    r = replay_run.figures if replay_run else None
    if r and replay_run and r.get("parsed"):
        s = r["summary"]
        rows.append(TargetRow(
            "replay_rate", "replay ≥ 80,000 events/s (with settlement checks)",
            f"{fmt_rate(s['replay_rate'])} ev/s",
            _replay_peers(s), f"bench/replay.py, {s['events']:,} events",
            replay_run.load, s["replay_rate"] >= target_replay_events_per_s, s["events"]))
    big = _largest_scale(scale_run)
    step = _scale_step(big, "replay") if big else None
    read = _scale_step(big, "read_all") if big else None
    if big and step:
        rate = step["events"] / step["seconds"]
        read_rate = read["events"] / read["seconds"] if read else 0.0
        rows.append(TargetRow(
            "replay_rate_no_settlements", "replay ≥ 80,000 events/s (no settlements)",
            f"{fmt_rate(rate)} ev/s", f"{_div(rate, read_rate):.2f}× read_all",
            f"bench/scale.py, {big['events']:,} events", f"{step['load1']:.1f}",
            rate >= target_replay_events_per_s, big["events"]))
    return rows


def _replay_peers(summary: Mapping[str, Any]) -> str:
    """Says what the replay figure is beside: its runs' median (when several), the read."""
    rates = summary.get("replay_rates", [])
    runs = f"median of {len(rates)} runs ({fmt_rate(min(rates))}–{fmt_rate(max(rates))}); " \
        if len(rates) > 1 else ""
    build = "mypyc-compiled build; " if summary.get("compiled") else ""
    return (f"{build}{runs}{summary['ratio']:.2f}× read_all; "
            f"{fmt_rate(summary['rate_without_settlements'])} ev/s outside settlement checks")


def host_name(machine: Mapping[str, str]) -> str:
    """Names a machine for a carried-over figure: its CPU and kernel build, which is what
    told this workplace's hosts apart (the same code replayed at 72k and 44k events/s on
    two of them)."""
    return f"{machine.get('CPU', '?')}, {platform.release()}"


def all_targets(runs: Mapping[str, BenchRun], when: str, host: str = "") -> list[TargetRow]:
    """Evaluates every target from this run's figures, measured on ``host``."""
    scale_run = runs.get("scale")
    rows: list[TargetRow] = []
    if "store" in runs:
        rows += store_targets(runs["store"])
    rows += fold_replay_targets(runs.get("fold"), runs.get("replay"), scale_run)
    rows += integrity_targets(runs.get("integrity") or BenchRun("integrity", {}), scale_run)
    for row in rows:
        row.when = when
        row.host = host
    return rows


#: The order targets appear in the summary.
TARGET_ORDER = [
    "sqlite_append_vs_es", "sqlite_append_vs_raw", "postgresql_append_vs_es",
    "sqlite_verify_rate", "sqlite_verify_vs_es", "postgresql_verify_vs_es", "fold_rate",
    "replay_rate", "replay_rate_no_settlements", "checkpoint_1m", "inclusion_proof",
    "inclusion_proof_pg", "bundle_verify",
]


def merge_targets(fresh: Sequence[TargetRow], previous: Sequence[TargetRow]) -> list[TargetRow]:
    """Keeps each target's latest figure; an older one stays when this run did not measure it,
    or measured it below the size the target is defined at while the older one did not."""
    merged = {row.key: row for row in previous}
    for row in fresh:
        old = merged.get(row.key)
        too_small = row.required_events and row.events < row.required_events
        if old is not None and too_small and old.events >= row.required_events:
            continue
        merged[row.key] = row
    ordered = [merged.pop(key) for key in TARGET_ORDER if key in merged]
    return ordered + list(merged.values())


def load_previous(path: Path = SUMMARY_JSON, documented: Path = TARGETS_JSON
                  ) -> list[TargetRow]:
    """Reads the targets kept from earlier runs on this machine (``path``), else those the
    docs were last written with (``documented``); none when neither can be read."""
    for data in _kept(path, documented):
        try:
            return [TargetRow(**row) for row in data["targets"]]
        except (KeyError, TypeError):
            continue
    return []


def load_blocks(path: Path = SUMMARY_JSON, documented: Path = TARGETS_JSON
                ) -> list[SummaryBlock]:
    """Reads the Summary blocks kept with the targets, from the first of the two files that
    holds any (one written before blocks were kept holds none); none when neither does."""
    for data in _kept(path, documented):
        try:
            blocks = [SummaryBlock(**block) for block in data["blocks"]]
        except (KeyError, TypeError):
            continue
        if blocks:
            return blocks
    return []


def _kept(*paths: Path) -> Iterator[dict[str, Any]]:
    """Yields each of ``paths`` that reads as a JSON object, in order."""
    for source in paths:
        try:
            data = json.loads(source.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield data


def save_targets(rows: Sequence[TargetRow], path: Path = SUMMARY_JSON,
                 blocks: Sequence[SummaryBlock] = ()) -> None:
    """Writes the targets, and the Summary blocks, for the next run to merge with."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"targets": [dataclasses.asdict(r) for r in rows],
                                "blocks": [dataclasses.asdict(b) for b in blocks]}, indent=2))


# -- report --------------------------------------------------------------------------------


def targets_table(rows: Sequence[TargetRow], when: str, host: str = "") -> str:
    """Renders the targets: figure, peers in the same run, source, load, PASS/MISS.

    A figure carried over from an earlier run names that run, and its machine when that
    was another one than ``host`` (or was not recorded).
    """
    cells = []
    for row in rows:
        source = row.source
        if row.when != when:
            source = f"{row.source} ({_earlier_run(row.when, row.host, host)})"
        result = row.result()
        if row.ok is None and row.required_events:
            result = f"n/a (needs {row.required_events:,})"
        cells.append([row.goal, row.measured, row.peers or "–", source, row.load, result])
    headers = ["Target", "Measured", "Peers / ceiling, same run", "From", "Load (1 min)",
               "Result"]
    return render_markdown_table(headers, cells, numeric=(1,))


def peers_table(store_run: BenchRun | None) -> str:
    """Renders ours beside each peer and ceiling of bench/store.py, as ratios."""
    if store_run is None or not store_run.figures:
        return ""
    rows = []
    for backend in sorted({r["backend"] for r in store_run.figures["rows"]}, reverse=True):
        r = StoreRates.of(store_run.figures, backend)
        ceiling = "raw sqlite3 multi-row INSERT" if backend == "sqlite" else "raw psycopg COPY"
        rows += [
            [backend, "append ×1,000", "eventsourcing Application.save", fmt_rate(r.es_app),
             fmt_rate(r.ours), fmt_ratio(_div(r.ours, r.es_app))],
            [backend, "append ×1,000", "eventsourcing recorder.insert_events",
             fmt_rate(r.es_insert), fmt_rate(r.ours), fmt_ratio(_div(r.ours, r.es_insert))],
            [backend, "append ×1,000", ceiling + " (ceiling)", fmt_rate(r.raw), fmt_rate(r.ours),
             fmt_ratio(_div(r.ours, r.raw))],
            [backend, "read + verify", "eventsourcing notification log + mapper",
             fmt_rate(r.es_read), fmt_rate(r.verify), fmt_ratio(_div(r.verify, r.es_read))],
            [backend, "read + verify", "raw driver read + chain (ceiling)",
             fmt_rate(r.raw_verify), fmt_rate(r.verify), fmt_ratio(_div(r.verify, r.raw_verify))],
        ]
    headers = ["Backend", "Operation", "Peer", "Peer ev/s", "Ours ev/s", "Ours ÷ peer"]
    return render_markdown_table(headers, rows, numeric=(3, 4, 5))


def benches_table(runs: Mapping[str, BenchRun]) -> str:
    """Renders what ran: sizes, wall time, load before → after, outcome."""
    rows = [[r.name, _params_text(r.params), f"{r.seconds:,.0f} s", r.load,
             "ok" if r.error is None else r.error] for r in runs.values()]
    return render_markdown_table(["Benchmark", "Sizes", "Wall", "Load (1 min)", "Outcome"],
                                 rows, numeric=(2,))


def summary_section(rows: Sequence[TargetRow], runs: Mapping[str, BenchRun], when: str,
                    commands: Sequence[str], machine: Mapping[str, str],
                    blocks: Sequence[SummaryBlock] = ()) -> str:
    """Renders the body of the "Summary" section (``blocks``: ``merge_blocks``'s)."""
    misses = [r.goal for r in rows if r.ok is False]
    host = host_name(machine)
    ran = ("every benchmark" if set(runs) == set(BENCHES)
           else "only the benchmarks under \"What ran\"")
    return "\n".join([
        "Every target from the issues with its latest figure. The run of `bench/run.py` of "
        f"{when} ran {ran} in turn on the machine below, each in a fresh interpreter. "
        "Ratios compare contenders measured in one run; absolute figures move with the "
        "load, printed beside each one. A figure carried over from an earlier run says so, "
        "and names the machine it was measured on when that was another one: absolute "
        "figures differ by up to 1.7× between this workplace's hosts (see \"Replay "
        "builds\").",
        "",
        targets_table(rows, when, host),
        "",
        f"{len(rows) - len(misses)} of {len(rows)} targets met"
        + (f"; missed: {'; '.join(misses)}." if misses else "."),
        "",
        *blocks_lines(blocks, when, host),
        "What ran:",
        "",
        benches_table(runs),
        "",
        "Commands (the first is the run; the others reproduce each part alone):",
        "",
        *(f"    {c}" for c in commands),
        "",
        "Machine:",
        "",
        machine_markdown(machine),
    ])


def _open_summary_section(path: Path = BENCHMARKS_DOC) -> None:
    """Puts an empty "## Summary" heading above the first section when there is none yet.

    ``replace_doc_section`` appends a missing section at the end; a summary belongs on top.
    Every other section is left byte for byte as it was.
    """
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    if any(line.strip() == "## Summary" for line in lines):
        return
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
    lines[first:first] = ["## Summary", ""]
    path.write_text("\n".join(lines) + "\n")


def untargeted_notes(scale_run: BenchRun | None) -> list[str]:
    """Returns lines on what no issue sets a target for: the user-facing query latencies."""
    big = _largest_scale(scale_run)
    if big is None:
        return []
    figures = {name: _scale_step(big, name) for name in (
        "arena-ledger explain submission", "arena-ledger history --hotkey (typical)",
        "CLI start-up (arena-ledger --help)", "explain submission (caught-up fold)",
        "submissions(hotkey=…) busiest (caught-up fold)")}
    if any(step is None for step in figures.values()):
        return []
    shown = {name: f"{scale.figure(step)} (load {step['load1']:.1f})"
             for name, step in figures.items() if step is not None}
    return [
        f"No issue sets a target for the queries a user types. On the {big['events']:,}-event "
        "SQLite ledger of the Scale series: `arena-ledger explain submission` "
        f"{shown['arena-ledger explain submission']}, `arena-ledger history --hotkey` "
        f"{shown['arena-ledger history --hotkey (typical)']}, of which interpreter start and "
        f"imports are {shown['CLI start-up (arena-ledger --help)']}; each command folds the "
        "whole ledger from nothing before it answers (the ledger is appended without the "
        "domain guard, so its read models stand behind the head; bench/queries.py times the "
        "read models). On a fold that has caught up (p50 / p99), "
        f"`explain_submission` takes {shown['explain submission (caught-up fold)']} and "
        "`submissions(hotkey=…)` for the busiest hotkey "
        f"{shown['submissions(hotkey=…) busiest (caught-up fold)']}.",
        "",
    ]


def command_line(argv: Sequence[str]) -> str:
    """Returns the command that reproduces this run."""
    shown = [a for a in argv if a != "--write-docs"]
    return "python bench/run.py" + ("" if not shown else " " + shlex.join(shown))


def machine_description(runs: Mapping[str, BenchRun], loads: LoadSampler,
                        pg_dsn: str) -> dict[str, str]:
    """Describes the machine, PostgreSQL's version and the load during the run."""
    extra = {"PostgreSQL": scale.postgres_version(pg_dsn)}
    store = runs.get("store")
    if store and store.figures and "postgresql" in store.figures.get("versions", {}):
        extra["PostgreSQL"] = store.figures["versions"]["postgresql"]
    extra["Load average (1 min) during the run"] = loads.describe()
    return describe_machine(extra)


# -- command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10k and 100k only, small sub-runs (about four minutes)")
    parser.add_argument("--sizes", help="scale-series SQLite sizes, e.g. 10k,100k,1m,5m "
                        "(default 10k,100k)")
    parser.add_argument("--pg-sizes", help="scale-series PostgreSQL sizes (default: 10k; "
                        "--quick: none)")
    parser.add_argument("--only", default=",".join(BENCHES),
                        help=f"comma-separated subset of {','.join(BENCHES)}")
    parser.add_argument("--backends", default="sqlite,postgres",
                        help="bench/store.py backends (default sqlite,postgres)")
    parser.add_argument("--store-events", type=int, help="bench/store.py --events")
    parser.add_argument("--integrity-events", type=int, help="bench/integrity.py --events")
    parser.add_argument("--fold-events", type=int, help="bench/fold.py --events")
    parser.add_argument("--replay-events", type=int, help="bench/replay.py --events")
    parser.add_argument("--settle-every-blocks", type=int, default=360,
                        help="bench/replay.py --settle-every-blocks (default 360)")
    parser.add_argument("--pg-dsn", default="host=127.0.0.1 port=5432 user=postgres "
                        "dbname=postgres", help="libpq DSN of a server where databases may "
                        "be created")
    parser.add_argument("--write-docs", action="store_true",
                        help='rewrite the "Summary" and "Scale series" sections')
    parser.add_argument("--child", choices=BENCHES, help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.profile = PROFILES["quick" if args.quick else "default"]
    if args.quick and args.sizes:
        parser.error("--quick runs 10k and 100k; drop --quick to choose --sizes")
    try:
        for sizes in (args.sizes, args.pg_sizes):
            scale.parse_sizes(sizes or "")
    except ValueError as exc:
        parser.error(str(exc))
    args.only = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = sorted(set(args.only) - set(BENCHES))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)} (use {', '.join(BENCHES)})")
    try:
        args.backends = parse_backends(args.backends)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmarks, prints the peers and the targets, optionally rewrites the docs."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.child:
        run_child(args.child, json.loads(args.params), args.out)
        return 0
    params = bench_params(args)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    runs: dict[str, BenchRun] = {}
    with LoadSampler() as loads, tempfile.TemporaryDirectory(prefix="al_run_") as tmp:
        for name in BENCHES:
            if name in args.only:
                runs[name] = run_bench(name, params[name], Path(tmp))
    machine = machine_description(runs, loads, args.pg_dsn)
    commands = [command_line(argv), *equivalent_commands(params, args.only)]
    host = host_name(machine)
    rows = merge_targets(all_targets(runs, when, host), load_previous())
    blocks = merge_blocks(summary_blocks(runs, when, host), load_blocks())
    save_targets(rows, blocks=blocks)
    RUN_JSON.write_text(json.dumps({"when": when, "command": command_line(argv),
                                    "machine": machine,
                                    "runs": [dataclasses.asdict(r) for r in runs.values()]},
                                   default=str))
    summary = summary_section(rows, runs, when, commands, machine, blocks)
    print("\n===== Summary =====\n\n" + summary)
    scale_body = None
    scale_run = runs.get("scale")
    if scale_run and scale_run.figures:
        results = [scale.SizeResult(**r) for r in scale_run.figures["results"]]
        scale_commands = [command_line(argv), equivalent_commands(params, ["scale"])[0]]
        scale_body = scale.render_section(results, scale_commands, machine)
        print("\n===== Scale series =====\n\n" + scale_body)
    if args.write_docs:
        _open_summary_section()
        replace_doc_section("Summary", summary)
        save_targets(rows, TARGETS_JSON, blocks)
        written = ["Summary"]
        # Each benchmark's own section comes from this same run, so the Summary and the
        # sections below it never quote two different runs.
        for name, heading in (("store", "Store"), ("integrity", "Integrity"),
                              ("replay", "Replay")):
            ran = runs.get(name)
            section = ran.figures.get("section") if ran and ran.figures else None
            if isinstance(section, str):
                replace_doc_section(heading, section)
                written.append(heading)
        if scale_body is not None:
            replace_doc_section("Scale series", scale_body)
            written.append("Scale series")
        print(f"\nwrote the {', '.join(written)} sections of docs/benchmarks.md",
              file=sys.stderr)
    return 0 if all(r.error is None for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
