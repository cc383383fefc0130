"""Benchmarks ``replay_store``: a second validator re-checking a 1,000,000-event SQLite ledger.

The ledger comes from ``bench/fold.py``'s generator (six arenas, thousands of hotkeys,
payments, credits, rejections, interleaved attempts with windows, audits, quality, faults,
holds, requeues, expiries, controls, one re-commission), with two changes: every arena's
emission share is 150,000 ppm (the generator's default, 6 x 500,000, would over-commit the
1,000,000 and every settlement would be refused), and a ``SettlementComputed`` is
appended every ``--settle-every-blocks`` blocks (default 360: one Bittensor tempo), each
computed by ``services.settlements.compute`` as of the position before it, so replay must
re-derive it byte for byte. The events are written with ``EventStore.append`` in batches
of 10,000 *without* the domain guard (this times replay, not the guarded write).

The timed part runs in a fresh process (so its peak RSS is its own) and measures, in one
run, on the same file:

1. ``read_all``: the store's plain streaming read (RecordedEvent per event), for reference;
2. ``raw read``: the driver's rows a position window at a time, which is what replay reads;
3. ``raw read + chain``: plus the entry-hash recomputation replay does;
4. ``raw read + chain + decode``: plus replay's payload parse (orjson with the canonical
   re-encoding check, ``codec.loads`` otherwise) and catalogue decode (pydantic models);
5. ``replay_store(store)``: everything (chain, every machine, every AttemptDecided /
   SubmissionResolved / SettlementComputed re-derived), with the time spent in settlement
   checks and in the cyclic garbage collector measured on the side, and its peak RSS;
6. the same with ``archive_finished=False`` (every finished submission kept in memory), the
   peer for speed and memory, and a third replay sampling the resident set every
   100,000 positions (memory bounded by live state levels off; 6 is skipped with
   ``--no-phases``).

Then ``--repeat`` - 1 more fresh processes (default: 4) each time 5 and 6 once more: on a
shared machine one sample of the wall clock varies from run to run, so the target is
judged on the median of the runs of 5, every run listed beside it.

Target (from the replay issue): replay ≥ 80,000 events/s on one core. Not a test: nothing
gates on the figures (STYLE.md).

    python bench/replay.py [--events 1000000] [--settle-every-blocks 360] [--profile]
    python bench/replay.py --events 1000000 --write-docs        # the reference run
    python bench/replay.py --db /tmp/replay.db --keep            # build once, rerun later
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import resource
import statistics
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid `ledger` still wins

import bench.fold as fold_bench  # noqa: E402  (after the path fix above)
from bench._common import (  # noqa: E402
    describe_machine,
    fmt_rate,
    machine_markdown,
    render_markdown_table,
    replace_doc_section,
    run_in_fresh_process,
    verdict,
)
from ledger import migrate  # noqa: E402
from ledger.records import EventDraft  # noqa: E402
from ledger.store import EventStore  # noqa: E402
from services.build_info import compiled_modules  # noqa: E402
from vocabulary import limits  # noqa: E402
from vocabulary.events import EmissionPolicySet, Event, SettlementComputed  # noqa: E402

#: Replay throughput the issue asks for, events per second on one core.
target_events_per_s = 80_000
#: Every arena's emission share in the generated ledger (6 arenas: 900,000, 100,000 burn).
arena_share_ppm = 150_000
#: Events per append while building (the store's batch limit).
build_batch_events = limits.batch_events_max
_FIRST_BLOCK = 10_000  # bench/fold.py's World starts its clock here


# -- building the ledger -----------------------------------------------------------------


def _ledger_events(events: int, seed: int, concurrency: int,
                   settle_every: int) -> Iterator[tuple[str, Event]]:
    """Yields (stream, event) of the generated ledger with settlements spliced in.

    A writer-side fold follows the events so that each SettlementComputed is computed as
    of the position right before it, the way ``ArenaLedger.settle`` computes it.
    """
    from machines.projection import LedgerFold
    from machines.settlement_rules import settlement_payload
    from services.settlements import compute

    fold, policy, position = LedgerFold(), None, 0
    next_settlement = _FIRST_BLOCK + settle_every
    for generated, stream, _type, event in fold_bench.generate(
        events, seed, concurrency, arena_share_ppm
    ):
        position += 1
        fold.apply(position, stream, event)
        if isinstance(event, EmissionPolicySet):
            policy = event
        yield stream, event
        block = _FIRST_BLOCK + generated // fold_bench.EVENTS_PER_BLOCK
        if policy is not None and block >= next_settlement:
            payload = settlement_payload(compute(fold, policy, block))
            settled = SettlementComputed.model_validate(payload)
            position += 1
            fold.apply(position, "settlement", settled, payload)
            yield "settlement", settled
            next_settlement += settle_every
    if fold.refusals:
        raise SystemExit(f"the generated ledger is not valid: {fold.refusals[:3]}")


#: The sources the generated ledger follows from: a ledger built by other ones is built again
#: (one from before a rule changed replays to a divergence, not to a figure).
_GENERATOR_SOURCES = ("bench/replay.py", "bench/fold.py", "machines/samples.py")


def generator_fingerprint() -> str:
    """Returns the SHA-256 of the generator's sources, which a reusable ledger must match."""
    import hashlib

    digest = hashlib.sha256()
    for name in _GENERATOR_SOURCES:
        digest.update((_ROOT / name).read_bytes())
    return digest.hexdigest()


def build(path: Path, events: int, seed: int, concurrency: int,
          settle_every: int) -> dict[str, Any]:
    """Writes the ledger to a new SQLite file; returns counts and the build time."""
    url = f"sqlite:///{path}"
    migrate.upgrade(url)
    started, written, types = time.perf_counter(), 0, Counter[str]()
    with EventStore(url) as store:  # no guard: this benchmark times replay, not the write
        batch: list[EventDraft] = []
        for stream, event in _ledger_events(events, seed, concurrency, settle_every):
            batch.append(EventDraft.of(stream, event))
            types[event.event_type] += 1
            if len(batch) == build_batch_events:
                written += len(store.append(batch, actor="bench").positions)
                batch = []
        if batch:
            written += len(store.append(batch, actor="bench").positions)
    seconds = time.perf_counter() - started
    meta = {"events": written, "seed": seed, "concurrency": concurrency,
            "settle_every_blocks": settle_every, "build_seconds": seconds,
            "types": dict(types.most_common()), "bytes": path.stat().st_size,
            "generator": generator_fingerprint()}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    return meta


# -- the timed passes (run in a fresh process) ---------------------------------------------


def _status_kib(field: str) -> int:
    """Returns a /proc/self/status figure in KiB (VmRSS, VmHWM), or ru_maxrss without /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _reset_peak_rss() -> None:
    # Linux >= 4.0: writing 5 resets VmHWM to the current RSS, so the next peak is the replay's.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _timed(step: Callable[[], int]) -> dict[str, float]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    events = step()
    return {"events": events, "seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu}


def _read(store: EventStore) -> int:
    count = 0
    for _ in store.read_all():
        count += 1
    return count


def _raw_rows(store: EventStore) -> Iterator[Any]:
    from ledger.verify import raw_rows  # replay_store's reader

    return raw_rows(store, 1, store.head().position)


def _read_raw(store: EventStore) -> int:
    count = 0
    for _ in _raw_rows(store):
        count += 1
    return count


def _read_chain(store: EventStore) -> int:
    from ledger.chain import chained

    count = 0
    for row, computed in chained(bytes(32), _raw_rows(store)):
        if computed.hex() != row[8]:
            raise SystemExit(f"chain broken at {row[0]}")
        count += 1
    return count


def _read_chain_decode(store: EventStore) -> int:
    from ledger.chain import chained
    from services.replay import decoder, parse_payload

    count, decode = 0, decoder()
    for row, computed in chained(bytes(32), _raw_rows(store)):
        if computed.hex() != row[8]:
            raise SystemExit(f"chain broken at {row[0]}")
        decode(row[3], row[4], parse_payload(row[5]))
        count += 1
    return count


class _SettlementClock:
    """Wraps ``SettlementTracker.check_recorded`` (replay's settlement check) to time it."""

    def __init__(self) -> None:
        from services.settlements import SettlementTracker

        self.owner, self.original = SettlementTracker, SettlementTracker.check_recorded
        self.calls, self.seconds, self.cpu_seconds, self.last = 0, 0.0, 0.0, 0.0

    def __enter__(self) -> _SettlementClock:
        original = self.original

        def timed(*args: Any) -> Any:
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args)
            finally:
                self.last = time.perf_counter() - started
                self.seconds += self.last
                self.cpu_seconds += time.process_time() - cpu
                self.calls += 1

        self.owner.check_recorded = timed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self.owner.check_recorded = self.original  # type: ignore[method-assign]


class _GcClock:
    """Times the cyclic collector through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds, self.collections, self._started = 0.0, Counter[int](), 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> _GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


#: Positions at which the memory curve samples the replay's resident set.
rss_curve_every = 100_000


def _rss_curve(store: EventStore) -> list[tuple[int, int, int]]:
    """Replays again (archiving), sampling (position, resident set KiB, live submissions).

    Memory bounded by live state means the resident set follows the live submissions, not
    the position; a fold that kept everything would grow with the position. (In the
    generated ledger completed NO_DECISIONs stay live, requeueable until their SLA, so the
    live count itself grows.)
    """
    from ledger.verify import raw_rows
    from services.replay import ReplayReport, _Replayer

    samples: list[tuple[int, int, int]] = []
    gc.collect()
    replayer = _Replayer(ReplayReport())  # replay_rows' replayer, to read its fold's size

    def sample(position: int) -> None:
        if position % rss_curve_every == 0:
            live = replayer.fold.live_submissions()
            samples.append((position, _status_kib("VmRSS"), live))

    replayer.replay(raw_rows(store, 1, store.head().position), sample)
    return samples


def measure(url: str, phases: bool, profile: bool) -> dict[str, Any]:
    """Times the passes over the ledger at ``url``; meant to run in a fresh process."""
    from services.replay import replay_store

    figures: dict[str, Any] = {"rss_start_kib": _status_kib("VmRSS"),
                               "load_before": os.getloadavg()[0],
                               "compiled": compiled_modules()}
    with EventStore(url) as store:
        store.head()  # opens the pool: connection set-up is not a per-event cost
        figures["read_all"] = _timed(lambda: _read(store))
        figures["read_raw"] = _timed(lambda: _read_raw(store))
        if phases:
            figures["read_chain"] = _timed(lambda: _read_chain(store))
            figures["read_chain_decode"] = _timed(lambda: _read_chain_decode(store))
        gc.collect()
        figures["rss_before_replay_kib"] = _status_kib("VmRSS")
        _reset_peak_rss()
        report: Any = None

        def run_replay() -> int:
            nonlocal report
            report = replay_store(store)
            return int(report.events)

        profiler = cProfile.Profile() if profile else None
        with _SettlementClock() as settlements, _GcClock() as collector:
            if profiler is not None:
                figures["replay"] = _timed(lambda: profiler.runcall(run_replay))
            else:
                figures["replay"] = _timed(run_replay)
        figures["rss_peak_kib"] = _status_kib("VmHWM")
        if phases:
            # The peer: the same replay with every finished submission kept in memory.
            gc.collect()
            _reset_peak_rss()
            figures["replay_kept"] = _timed(
                lambda: int(replay_store(store, archive_finished=False).events))
            figures["rss_peak_kept_kib"] = _status_kib("VmHWM")
            figures["rss_curve"] = _rss_curve(store)
        figures["read_all_after"] = _timed(lambda: _read(store))
    figures["report"] = report.to_json()
    figures["load_after"] = os.getloadavg()[0]
    figures["settlement_checks"] = {"calls": settlements.calls, "seconds": settlements.seconds,
                                    "cpu_seconds": settlements.cpu_seconds,
                                    "last_seconds": settlements.last}
    figures["gc"] = {"seconds": collector.seconds, "collections": dict(collector.collections)}
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(30)
        figures["profile"] = out.getvalue()
    return figures


def measure_replays(url: str, kept: bool = True) -> dict[str, Any]:
    """Times one archiving replay, then one that keeps everything; meant for a fresh process.

    The repeats ``--repeat`` adds: one sample of a shared machine's wall clock varies by
    5-10% from run to run, so the target is judged on the median of several fresh
    processes, each paired with its peer.
    """
    from services.replay import replay_store

    with EventStore(url) as store:
        store.head()
        gc.collect()
        runs = {"replay": _timed(lambda: int(replay_store(store).events))}
        if kept:
            gc.collect()
            runs["replay_kept"] = _timed(
                lambda: int(replay_store(store, archive_finished=False).events))
    return runs


def add_repeats(figures: dict[str, Any], url: str, repeat: int, kept: bool) -> None:
    """Times the replay (and its peer, with ``kept``) ``repeat`` - 1 more times, each in a
    fresh process, into ``figures`` beside the first run (``<pass>_repeats``)."""
    for number in range(2, repeat + 1):
        print(f"replay run {number} of {repeat} …", flush=True)
        again = run_in_fresh_process(measure_replays, url, kept)
        for key, step in again.items():
            if key in figures:
                figures.setdefault(f"{key}_repeats", []).append(step)


# -- reporting -----------------------------------------------------------------------------


def _rate(step: dict[str, float]) -> float:
    return step["events"] / step["seconds"] if step["seconds"] else 0.0


def _cpu_rate(step: dict[str, float]) -> float:
    return step["events"] / step["cpu_seconds"] if step["cpu_seconds"] else 0.0


def _runs(figures: dict[str, Any], key: str) -> list[dict[str, float]]:
    """Returns every timed run of a replay pass: the measured one, then the repeats."""
    return [figures[key], *figures.get(f"{key}_repeats", [])] if key in figures else []


def summarize(meta: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """Derives the headline figures: rates, ratio to the plain read, time outside checks.

    With repeats, the target figures are the medians over every run of the replay pass.
    """
    replay, checks, collector = figures["replay"], figures["settlement_checks"], figures["gc"]
    read = {k: (figures["read_all"][k] + figures["read_all_after"][k]) / 2
            for k in ("events", "seconds", "cpu_seconds")}
    outside = replay["seconds"] - checks["seconds"]
    runs = _runs(figures, "replay")
    return {
        "events": replay["events"],
        "replay_rate": statistics.median(map(_rate, runs)),
        "replay_cpu_rate": statistics.median(map(_cpu_rate, runs)),
        "replay_rates": [_rate(run) for run in runs],
        "compiled": figures.get("compiled", []),
        "kept_rates": [_rate(run) for run in _runs(figures, "replay_kept")],
        "read_rate": _rate(read),
        "ratio": _rate(replay) / _rate(read) if _rate(read) else 0.0,
        "rate_without_settlements": replay["events"] / outside if outside > 0 else 0.0,
        "settlement_share": checks["seconds"] / replay["seconds"] if replay["seconds"] else 0.0,
        "gc_share": collector["seconds"] / replay["seconds"] if replay["seconds"] else 0.0,
        "ok": figures["report"]["ok"],
        "settlements": meta["types"].get("SettlementComputed", 0),
    }


def _step_rows(figures: dict[str, Any]) -> list[list[str]]:
    names = [("read_all", "store.read_all() (plain streaming read)"),
             ("read_raw", "raw driver rows, position windows (replay's read)"),
             ("read_chain", "raw read + entry-hash chain"),
             ("read_chain_decode", "raw read + chain + payload parse + catalogue decode"),
             ("replay", "replay_store(store), everything (finished submissions archived)"),
             ("replay_kept", "the same, finished submissions kept in memory (the peer)"),
             ("read_all_after", "store.read_all() again, after the replay")]
    rows = []
    for key, label in names:
        if key not in figures:
            continue
        step = figures[key]
        rows.append([label, f"{int(step['events']):,}", f"{step['seconds']:.1f}",
                     fmt_rate(_rate(step)), f"{step['cpu_seconds']:.1f}",
                     fmt_rate(_cpu_rate(step))])
    return rows


def _checks_untimed(checks: dict[str, Any], report: dict[str, Any]) -> bool:
    """Tells whether the replay checked settlements that the wrapper did not see: a compiled
    ``services.replay`` calls ``SettlementTracker.check_recorded`` directly, past it."""
    return bool(checks["calls"] == 0 and report["settlements_checked"] > 0)


def _settlement_text(checks: dict[str, Any], summary: dict[str, Any],
                     report: dict[str, Any]) -> str:
    """Says what the settlement checks cost, or that this build could not time them."""
    how = ("Each check recomputes only the submissions, payments, credits and arenas touched "
           "since the one before (`services.settlements.SettlementTracker`) and walks rewards on "
           "from where the last one stopped, so it costs what changed plus the claims.")
    if _checks_untimed(checks, report):
        return (f"Settlement checks: {report['settlements_checked']:,} re-derived, not timed "
                "apart on this build: the compiled replay calls "
                "`SettlementTracker.check_recorded` directly, past the timing wrapper, so "
                "they count with the machines below. " + how)
    return (f"Settlement checks: {checks['calls']:,} re-derived, {checks['seconds']:.1f} s "
            f"in all ({summary['settlement_share']:.0%} of the replay's wall time), the "
            f"last one {checks['last_seconds'] * 1000:,.0f} ms; the rest of the replay "
            f"runs at {fmt_rate(summary['rate_without_settlements'])} events/s. " + how)


def _breakdown_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Splits the replay's CPU time by pass differences (CPU, not wall: the host is shared)."""
    if "read_chain_decode" not in figures:
        return []
    cpu = {k: figures[k]["cpu_seconds"] for k in ("read_raw", "read_chain",
                                                   "read_chain_decode", "replay")}
    events = figures["replay"]["events"]
    settlements = figures["settlement_checks"]["cpu_seconds"]
    parts = [
        ("read (SQLite page reads, raw driver rows)", cpu["read_raw"]),
        ("entry-hash chain", cpu["read_chain"] - cpu["read_raw"]),
        ("payload parse (orjson + canonical check) + catalogue decode",
         cpu["read_chain_decode"] - cpu["read_chain"]),
        ("settlement checks (SettlementTracker.check_recorded)", settlements),
        ("machines (LedgerFold.apply) + decision checks + loop",
         cpu["replay"] - cpu["read_chain_decode"] - settlements),
    ]
    if _checks_untimed(figures["settlement_checks"], figures["report"]):
        parts[-2:] = [("machines (LedgerFold.apply) + decision and settlement checks + loop",
                       cpu["replay"] - cpu["read_chain_decode"])]
    return [[name, f"{seconds:.1f}", f"{seconds / cpu['replay']:.0%}",
             f"{seconds * 1e6 / events:.1f}"] for name, seconds in parts]


def _memory_text(figures: dict[str, Any]) -> str:
    """Says what the replay's memory did: peaks of both folds, and the curve when measured."""
    before = figures["rss_before_replay_kib"] / 1024
    text = (f"Peak RSS of the replay process during the replay: "
            f"{figures['rss_peak_kib'] / 1024:,.0f} MiB ({before:,.0f} MiB before it started). "
            "Finished submissions go to a temporary file (`ledger.archive.DiskArchive`) and "
            "the settlement tracker keeps fee sums and the unwalked part of each reward scan, "
            "so memory follows live submissions and claims, not the ledger's length")
    if "rss_peak_kept_kib" in figures:
        kept = figures["replay_kept"]
        text += (f"; kept in memory instead, the peak is "
                 f"{figures['rss_peak_kept_kib'] / 1024:,.0f} MiB at "
                 f"{fmt_rate(_cpu_rate(kept))} events per CPU-second")
    curve = figures.get("rss_curve")
    if curve:
        points = ", ".join(f"{position // 1000:,}k: {kib / 1024:,.0f} MiB, {live:,} live"
                           for position, kib, live in curve)
        text += (". Resident set and live submissions as the archiving replay goes, by "
                 f"position (completed NO_DECISIONs stay live until their SLA): {points}")
    return text + "."


def _para(text: str) -> str:
    return textwrap.fill(text, width=92, break_on_hyphens=False)


def _bullet(text: str) -> str:
    return textwrap.fill(text, width=92, initial_indent="- ", subsequent_indent="  ",
                         break_on_hyphens=False)


def render(meta: dict[str, Any], figures: dict[str, Any], summary: dict[str, Any]) -> str:
    """Renders the figures as the body of the "Replay" section."""
    checks, collector, report = figures["settlement_checks"], figures["gc"], figures["report"]
    steps = render_markdown_table(
        ["Pass", "Events", "Wall s", "Events/s", "CPU s", "Events/CPU-s"],
        _step_rows(figures), numeric=(1, 2, 3, 4, 5))
    runs = len(summary["replay_rates"])
    measured = "Measured (wall)" if runs == 1 else f"Median of {runs} runs (wall)"
    target = render_markdown_table(
        ["Target", measured, "Per CPU-second", "Result"],
        [[f"replay ≥ {target_events_per_s:,} events/s on one core",
          fmt_rate(summary["replay_rate"]), fmt_rate(summary["replay_cpu_rate"]),
          verdict(summary["replay_rate"] >= target_events_per_s)]],
        numeric=(1, 2))
    breakdown = render_markdown_table(
        ["Part of the replay", "CPU s", "Share", "µs/event"], _breakdown_rows(figures),
        numeric=(1, 2, 3))
    mix = ", ".join(f"{t} {n:,}" for t, n in meta["types"].items())
    machine = describe_machine({
        "Load average (1 min) before / after the timed passes":
            f"{figures['load_before']:.2f} / {figures['load_after']:.2f}",
    })
    return "\n".join([
        _para(f"`replay_store(store)` over a generated SQLite ledger of "
              f"{meta['events']:,} events ({meta['bytes'] / 2**20:,.0f} MiB), in one process "
              "and thread: read, entry-hash chain, catalogue decode, every machine folded from "
              "nothing, every AttemptDecided, SubmissionResolved and SettlementComputed "
              f"re-derived and compared. The ledger holds {summary['settlements']:,} "
              f"settlements (one every {meta['settle_every_blocks']} blocks, a Bittensor tempo) "
              "and was written with EventStore.append in batches of 10,000 without the domain "
              f"guard, in {meta['build_seconds']:.0f} s (not timed here)."),
        "",
        _para("Build: " + (
            "compiled with mypyc (`ARENA_LEDGER_COMPILE=1 python setup.py build_ext "
            f"--inplace --force`): {', '.join(figures['compiled'])}; the rest interpreted."
            if figures.get("compiled") else
            "pure Python (setup.py's optional mypyc build not in use).")),
        "",
        "Command (builds the ledger, then times every pass in a fresh process):",
        "",
        f"    python bench/replay.py --events {meta['events'] - summary['settlements']} "
        f"--settle-every-blocks {meta['settle_every_blocks']} --write-docs",
        "",
        "`--profile` adds a cProfile listing, `--db PATH --keep` builds once for later runs.",
        "",
        "Machine:",
        "",
        machine_markdown(machine),
        "",
        _para("Other work on a shared host inflates the wall-clock figures; the CPU columns "
              "count this process's own CPU time (one core)."),
        "",
        "### Target",
        "",
        target,
        "",
        *_runs_text(summary),
        "### Passes",
        "",
        steps,
        "",
        _bullet(f"Replay runs at **{summary['ratio']:.2f}×** the store's plain read "
                "throughput measured in the same run (mean of the two read passes)."),
        _bullet(_settlement_text(checks, summary, report)),
        _bullet(f"Cyclic GC during the replay: {collector['seconds']:.1f} s "
                f"({summary['gc_share']:.0%} of the wall time, overlapping the figures above), "
                f"collections by generation {collector['collections']}: every full "
                "collection walks the fold's whole live heap."),
        _bullet(_memory_text(figures)),
        _bullet(f"Replay report: ok={report['ok']}, {report['verdicts_checked']:,} verdicts, "
                f"{report['resolutions_checked']:,} resolutions, "
                f"{report['settlements_checked']:,} settlements checked, no divergence."
                if report["divergence"] is None else
                f"Replay report: DIVERGED {report['divergence']}"),
        "",
        "### Where the time goes",
        "",
        _para("CPU seconds of the replay, split by the differences between the passes above "
              "(the settlement checks are timed inside the replay)."),
        "",
        breakdown,
        "",
        _para(f"Event mix: {mix}."),
    ])


def _runs_text(summary: dict[str, Any]) -> list[str]:
    """Lists every run's rate when the replay was timed more than once (else nothing)."""
    rates, kept = summary["replay_rates"], summary["kept_rates"]
    if len(rates) < 2:
        return []
    text = (f"Each run is a fresh process (the first also times the passes below): "
            f"{', '.join(fmt_rate(r) for r in rates)} events/s archiving (median "
            f"{fmt_rate(statistics.median(rates))}, best {fmt_rate(max(rates))})")
    if len(kept) == len(rates):
        text += (f"; keeping everything in memory, in the same processes: "
                 f"{', '.join(fmt_rate(r) for r in kept)} (median "
                 f"{fmt_rate(statistics.median(kept))})")
    return [_para(text + "."), ""]


# -- command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="generated events (settlements come on top)")
    parser.add_argument("--seed", type=int, default=7, help="generator seed")
    parser.add_argument("--concurrency", type=int, default=256,
                        help="submissions in flight at once (interleaving)")
    parser.add_argument("--settle-every-blocks", type=int, default=360,
                        help="blocks between settlements (0: none)")
    parser.add_argument("--db", type=Path, help="SQLite file to build (reused if it exists "
                        "with the same parameters); default: a temporary file")
    parser.add_argument("--keep", action="store_true", help="keep the --db file afterwards")
    parser.add_argument("--no-phases", action="store_true",
                        help="skip the read+chain and read+chain+decode passes")
    parser.add_argument("--profile", action="store_true",
                        help="run the replay under cProfile and print its top functions")
    parser.add_argument("--repeat", type=int, default=5,
                        help="replays timed in all (each further one in a fresh process, "
                             "paired with the in-memory peer); the target takes the median")
    parser.add_argument("--write-docs", action="store_true",
                        help='rewrite the "Replay" section of docs/benchmarks.md')
    return parser.parse_args(argv)


def _reusable(path: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    meta_path = path.with_suffix(".json")
    if not (path.exists() and meta_path.exists()):
        return None
    meta: dict[str, Any] = json.loads(meta_path.read_text())
    wanted = (args.seed, args.concurrency, args.settle_every_blocks)
    have = (meta["seed"], meta["concurrency"], meta["settle_every_blocks"])
    generated = meta["events"] - meta["types"].get("SettlementComputed", 0)
    same_source = meta.get("generator") == generator_fingerprint()
    return meta if have == wanted and generated == args.events and same_source else None


def main(argv: Sequence[str] | None = None) -> int:
    """Builds (or reuses) the ledger, times the passes in a fresh process, prints figures."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.repeat < 1:
        print(f"--repeat must be at least 1, not {args.repeat}", file=sys.stderr)
        return 2
    settle_every = args.settle_every_blocks if args.settle_every_blocks > 0 else 10**12
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as scratch:
        path = args.db or Path(scratch) / "replay.db"
        meta = _reusable(path, args) if args.db else None
        if meta is None:
            for stale in (path, path.with_suffix(".json"), Path(f"{path}-wal"),
                          Path(f"{path}-shm")):
                stale.unlink(missing_ok=True)
            print(f"building {args.events:,} events into {path} …", flush=True)
            meta = build(path, args.events, args.seed, args.concurrency, settle_every)
            meta["settle_every_blocks"] = args.settle_every_blocks
        print(f"ledger: {meta['events']:,} events, built in {meta['build_seconds']:.0f} s; "
              "timing in a fresh process …", flush=True)
        url = f"sqlite:///{path}"
        figures = run_in_fresh_process(measure, url, not args.no_phases, args.profile)
        add_repeats(figures, url, args.repeat, not args.no_phases)
        if args.db and not args.keep:
            for made in (path, path.with_suffix(".json")):
                made.unlink(missing_ok=True)
    summary = summarize(meta, figures)
    body = render(meta, figures, summary)
    print(body)
    if "profile" in figures:
        print("\n## cProfile of the replay (tottime, then cumulative)\n")
        print(figures["profile"])
    if args.write_docs:
        print(f"\nwrote {replace_doc_section('Replay', body)}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
