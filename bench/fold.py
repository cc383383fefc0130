"""Benchmarks ``LedgerFold``: folds a generated, realistic ledger into every projection.

The generator builds the ledger in memory as event models, chunk by chunk (only the fold is
timed): six arenas (W from 2 to 5, one waived, one with a short SLA, one re-commissioned
half-way), a few thousand hotkeys, payments and credits, rejections (missing payment, epoch
limit), attempts with 2-5 windows interleaved across ~256 submissions in flight, audits over
1-3 nodes and 1-2 ranks, quality checks, infrastructure faults with every disposition
(requeues, holds, releases, expiries), controls and a calibration plan. Every decision is the
one the attempt machine derives, so a correct fold refuses nothing; the refusal count is
printed and must be 0.

    python bench/fold.py [--events 1000000] [--seed 7] [--chunk 50000] [--profile]
                         [--check-decisions] [--trace-memory] [--keep-finished]

The fold archives each finished submission (``ledger.archive.DiskArchive``), so its memory
follows the live submissions; ``--keep-finished`` keeps them all in memory instead (the
default of ``LedgerFold()``), for comparison. ``--trace-memory`` reports what the fold
retains (tracemalloc counts Python's allocations; the archive's SQLite page cache, at most
``ledger.archive.cache_kib``, is outside it).

``--check-decisions`` folds the way the replay does: ``apply`` per event, and before each
AttemptDecided ``derive_decision`` (the replay's verdict check), which ``apply`` reuses.

Prints events/s of the fold, peak RSS and RSS growth while folding, and the projection sizes.
Not a test: nothing gates on the figures (STYLE.md).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import random
import resource
import sys
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from ledger.archive import DiskArchive  # noqa: E402  (after the path fix above)
from machines import arena as arena_machine  # noqa: E402
from machines import attempt as attempt_machine  # noqa: E402
from machines import samples  # noqa: E402
from machines.arithmetic import Decision  # noqa: E402
from machines.intake import epoch_of  # noqa: E402
from machines.limits import admissions_per_epoch_max, requeues_max  # noqa: E402
from machines.projection import LedgerFold, Record  # noqa: E402
from vocabulary.events import (  # noqa: E402  (after the path fix above)
    FAULT_CODES,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    EmissionPolicySet,
    Event,
    HoldReleased,
    IncumbentAdvanced,
    InfrastructureFault,
    PaymentConsumed,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionExpired,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)

Batch = list[tuple[str, Event]]
WAIT: Batch = []  # a pipeline that is waiting (for an operator, for the SLA) yields this
EVENTS_PER_BLOCK = 12
BILLION = 1_000_000_000


@dataclass
class Arena:
    """Is what the generator knows of one arena."""

    arena_id: str
    fee: int
    windows: int
    futility: str | None
    sla: int
    listed: str | None
    commission: Any = None
    controls: list[str] = field(default_factory=list)


@dataclass
class World:
    """Holds the generator's state: clock, ids, arenas, intake bookkeeping."""

    rng: random.Random
    block: int = 10_000
    serial: int = 0
    arenas: list[Arena] = field(default_factory=list)
    hotkeys: list[str] = field(default_factory=list)
    credit_hotkeys: list[str] = field(default_factory=list)
    unspent: dict[str, deque[str]] = field(default_factory=dict)
    admissions: Counter[tuple[str, int]] = field(default_factory=Counter)
    recommissioned: bool = False
    #: Each arena's emission share; None keeps the commission's default.
    emission_share_ppm: int | None = None

    def next_id(self) -> int:
        self.serial += 1
        return self.serial


def _arenas() -> list[Arena]:
    return [
        Arena("mlp-a", BILLION, 4, None, 500_000, None),
        Arena("mlp-b", 2 * BILLION, 5, "0.03", 500_000, None),
        Arena("cache-c", 0, 2, None, 500_000, None),
        Arena("attn-d", BILLION // 2, 3, "0.05", 2_000, None),
        Arena("mlp-e", BILLION, 4, "0.02", 500_000, samples.hex64("ctl:mlp-e:1")),
        Arena("norm-f", BILLION, 5, None, 500_000, None),
    ]


def _commission(arena: Arena, world: World, revision: str) -> Event:
    share_ppm = world.emission_share_ppm
    z = {str(k): "1.645" for k in range(arena.windows // 2 + 1, arena.windows + 1)}
    sealed = samples.policy(
        windows=arena.windows, z=z, futility_margin=arena.futility, sla_blocks=arena.sla,
        audit={"bar": "0.99999", "min_calls": 16},
        audit_control_delta_digests=[arena.listed] if arena.listed else [],
    )
    overrides: dict[str, Any] = {"model": {"name": "tiny-llama", "revision": revision}}
    if share_ppm is not None:
        overrides["emission_share_ppm"] = share_ppm
    event = samples.commissioned(
        arena.arena_id, fee_rao=arena.fee, block=world.block, sealed=sealed, **overrides
    )
    arena.commission = arena_machine.start(event)
    return event


def _setup(world: World) -> Iterator[Batch]:
    yield [("settlement", EmissionPolicySet(half_life_blocks=50_000, burn_hotkey="5Burn",
                                            validator_hotkey="5Validator"))]
    world.arenas = _arenas()
    for arena in world.arenas:
        yield [(f"arena-{arena.arena_id}", _commission(arena, world, "r1"))]
        for n, (kind, verdict, reason) in enumerate(
            [("honest", "PASS", None), ("wrong_mlp", "FAIL", "slot_audit_failed")]
        ):
            delta = samples.hex64(f"ctl:{arena.arena_id}:{n}")
            arena.controls.append(delta)
            control = ControlRegistered(control_id=f"ctl-{n}", kind=kind, delta_digest=delta,
                                        expected_verdict=verdict, expected_reason=reason)
            yield [(f"arena-{arena.arena_id}", control)]
    world.hotkeys = [f"5Miner{n:04d}" for n in range(3_000)]
    world.credit_hotkeys = world.hotkeys[:60]


def _grant(world: World) -> Batch:
    hotkey = world.rng.choice(world.credit_hotkeys)
    credit_id = f"cr-{world.next_id()}"
    world.unspent.setdefault(hotkey, deque()).append(credit_id)
    return [(f"credit-{credit_id}",
             CreditGranted(credit_id=credit_id, hotkey=hotkey, amount_rao=BILLION, note="ops"))]


def _admission(world: World, arena: Arena, arrived: Any) -> Batch:
    """Applies the intake rules the way machines.intake does, for this generator's world."""
    sid, hotkey = arrived.submission_id, arrived.miner_hotkey
    stream = f"submission-{sid}"
    extra: Batch = []
    if arena.fee == 0:
        fee = {"kind": "waived", "ref": "", "amount_rao": 0}
    elif arrived.payment_ref is not None:
        fee = {"kind": "payment", "ref": arrived.payment_ref, "amount_rao": arena.fee}
        extra.append((f"payment-{arrived.payment_ref}", PaymentConsumed(
            payment_ref=arrived.payment_ref, submission_id=sid, arena_id=arena.arena_id,
            amount_rao=arena.fee)))
    elif world.unspent.get(hotkey):
        credit_id = world.unspent[hotkey][0]
        fee = {"kind": "credit", "ref": credit_id, "amount_rao": arena.fee}
        extra.append((f"credit-{credit_id}", CreditSpent(submission_id=sid)))
    else:
        return [(stream, SubmissionRejected(block=world.block, reason="missing_eval_cost_payment"))]
    key = (hotkey, epoch_of(arrived.arrival.block))
    if world.admissions[key] >= admissions_per_epoch_max:
        reason = "hotkey_epoch_admission_limit"
        return [(stream, SubmissionRejected(block=world.block, reason=reason))]
    world.admissions[key] += 1
    if fee["kind"] == "credit":
        world.unspent[hotkey].popleft()
    admitted = SubmissionAdmitted.model_validate({"block": world.block, "fee": fee})
    return [(stream, admitted), *extra]


def _arrival(world: World) -> tuple[Arena, Any]:
    rng, n = world.rng, world.next_id()
    arena = rng.choice(world.arenas)
    roll = rng.random()
    if roll < 0.15:
        hotkey = rng.choice(world.credit_hotkeys)  # pays with a credit if it has one
    elif roll < 0.21:
        hotkey = world.hotkeys[-1]  # one very busy hotkey: hits the epoch limit
    else:
        hotkey = rng.choice(world.hotkeys)
    ref = None if roll < 0.15 or 0.21 <= roll < 0.23 else f"pay-{n}"
    delta = rng.choice(arena.controls) if rng.random() < 0.02 else None
    if arena.listed and rng.random() < 0.02:
        delta = arena.listed
    arrived = samples.arrived(
        arena.arena_id, hotkey=hotkey, content=f"sub-{n}", block=world.block,
        index=n % 4_096, subindex=0, payment_ref=ref, delta_digest=delta,
    )
    return arena, arrived


def _fault(code: str) -> InfrastructureFault:
    return InfrastructureFault(code=code, stage="bench", detail="")


def _attempt(
    world: World, arena: Arena, sid: str, delta: str
) -> Generator[Batch, None, tuple[str, Decision]]:
    """Runs one attempt; its return value is (attempt_id, the decision it recorded)."""
    rng, attempt_id = world.rng, f"t-{world.next_id()}"
    stream = f"attempt-{attempt_id}"
    commission = arena.commission
    plan = "calibration_observation" if delta == arena.listed else "normal"
    claim = samples.claimed(sid, commission.commission_digest, attempt_id=attempt_id,
                            arena_id=arena.arena_id, plan=plan, block=world.block)
    state = attempt_machine.claim(claim, commission.params)
    yield [(stream, claim), (f"submission-{sid}", QualificationStarted(attempt_id=attempt_id))]
    fault_at = rng.randrange(12) if rng.random() < 0.05 else None
    true_ratio = rng.uniform(0.95, 1.05)
    step = 0
    while state.speed is None and state.fault is None:
        step += 1
        index = state.last_window + 1
        stock = rng.randrange(900_000_000, 1_100_000_000)
        cand = int(stock * true_ratio * rng.uniform(0.99, 1.01))
        event: Event = samples.window(index, state.params.orientation(index), stock, cand)
        if step == fault_at:
            event = _fault(rng.choice(FAULT_CODES))
        elif rng.random() < 0.003:
            event = attempt_machine.work_mismatch_fault(event)  # type: ignore[arg-type]
        state = attempt_machine.apply(state, event)
        yield [(stream, event)]
    if state.status == attempt_machine.AUDIT and state.fault is None:
        violate = rng.random() < 0.04 or delta == arena.controls[1]
        for node in range(rng.randint(1, 3)):
            for rank in range(rng.randint(1, 2)):
                event = samples.audit(f"model.layers.{node}.mlp", rank, rng.randint(8, 64),
                                      violations=int(violate and node == 0))
                state = attempt_machine.apply(state, event)
                yield [(stream, event)]
        if attempt_machine.derive_decision(state) is None:
            event = samples.quality(drift_within_envelope=rng.random() > 0.01,
                                    regression=rng.random() < 0.02)
            state = attempt_machine.apply(state, event)
            yield [(stream, event)]
    decision = attempt_machine.derive_decision(state)
    assert decision is not None
    yield [(stream, samples.decided(decision, block=world.block))]
    return attempt_id, decision


def _resolved(attempt_id: str, decision: Decision) -> SubmissionResolved:
    return SubmissionResolved.model_validate({
        "attempt_id": attempt_id, "verdict": decision.verdict, "reason": decision.reason,
        "disposition": decision.disposition,
    })


def _submission(world: World) -> Iterator[Batch]:
    """Runs one submission from arrival to a terminal or parked state."""
    rng = world.rng
    arena, arrived = _arrival(world)
    sid, stream = arrived.submission_id, f"submission-{arrived.submission_id}"
    yield [(stream, arrived)]
    yield WAIT
    intake = _admission(world, arena, arrived)
    yield intake
    if isinstance(intake[0][1], SubmissionRejected):
        return
    requeues = 0
    while True:
        for _ in range(rng.randint(0, 3)):
            yield WAIT
        attempt_id, decision = yield from _attempt(world, arena, sid, arrived.delta_digest)
        yield [(stream, _resolved(attempt_id, decision))]
        held = decision.disposition == "HOLD"
        if decision.disposition == "REQUEUE":
            if requeues < requeues_max:
                requeues += 1
                continue
            held = True
        if held:
            if rng.random() < 0.5 or arena.sla > 100_000:
                for _ in range(rng.randint(2, 20)):
                    yield WAIT
                yield [(stream, HoldReleased(reason="checked", block=world.block,
                                             operator="5Operator"))]
                continue
            while world.block - arrived.arrival.block < arena.sla:
                yield WAIT
            yield [(stream, SubmissionExpired(block=world.block, reason="sla_expired"))]
            return
        if decision.verdict == "NO_DECISION" and rng.random() < 0.3:
            yield [(stream, SubmissionRequeued(reason="operator", block=world.block))]
            continue
        return


def _operator(world: World, position: int, events: int) -> Batch:
    """Returns operator events due now: credits, incumbent advances, one re-commission."""
    rng = world.rng
    if rng.random() < 0.004:
        return _grant(world)
    if rng.random() < 0.00002:
        arena = rng.choice(world.arenas)
        advanced = IncumbentAdvanced(incumbent_digest=samples.hex64(f"inc-{position}"),
                                     block=world.block, reason="rewarded")
        return [(f"arena-{arena.arena_id}", advanced)]
    if position >= events // 2 and not world.recommissioned:
        world.recommissioned = True
        arena = world.arenas[0]
        return [(f"arena-{arena.arena_id}", _commission(arena, world, "r2"))]
    return []


def generate(
    events: int, seed: int, concurrency: int, emission_share_ppm: int | None = None
) -> Iterator[Record]:
    """Yields ``events`` records of a realistic ledger, positions 1, 2, 3...

    ``emission_share_ppm`` sets every arena's share (bench/replay.py settles, so its arenas
    must fit in 1,000,000 together); None keeps the commission's default.
    """
    world = World(random.Random(seed), emission_share_ppm=emission_share_ppm)
    rng, position = world.rng, 0
    for batch in _setup(world):
        for stream, event in batch:
            position += 1
            yield (position, stream, event.event_type, event)
    pool: list[Iterator[Batch]] = []
    while position < events:
        while len(pool) < concurrency:
            pool.append(_submission(world))
        index = rng.randrange(len(pool))
        try:
            batch = next(pool[index])
        except StopIteration:
            pool[index] = pool[-1]
            pool.pop()
            continue
        for stream, event in [*batch, *_operator(world, position, events)]:
            position += 1
            yield (position, stream, event.event_type, event)
            if position % EVENTS_PER_BLOCK == 0:
                world.block += 1


def _chunks(records: Iterator[Record], size: int) -> Iterator[list[Record]]:
    chunk: list[Record] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _fold_checking_decisions(fold: LedgerFold, records: list[Record]) -> None:
    """Folds like the replay: ``apply`` per event, deriving each AttemptDecided first."""
    apply, derive = fold.apply, fold.derive_decision
    for position, stream, event_type, event in records:
        if event_type == "AttemptDecided":
            derive(stream.partition("-")[2])
        apply(position, stream, event)


def run(
    events: int,
    seed: int,
    chunk: int,
    concurrency: int,
    check_decisions: bool = False,
    keep_finished: bool = False,
) -> dict[str, Any]:
    """Generates and folds the ledger; returns the figures (only the fold is timed)."""
    fold = LedgerFold(archive=None if keep_finished else DiskArchive())
    folded, elapsed, cpu, types = 0, 0.0, 0.0, Counter[str]()
    rss_before = _rss_kib()
    for records in _chunks(generate(events, seed, concurrency), chunk):
        types.update(r[2] for r in records)
        # The generator's objects are not the fold's: keep the cyclic collector off them, as
        # a streaming replay (pages of events read and dropped) would.
        gc.collect()
        gc.freeze()
        started, cpu_started = time.perf_counter(), time.process_time()
        if check_decisions:
            _fold_checking_decisions(fold, records)
        else:
            fold.consume(records)
        elapsed += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
        folded += len(records)
        gc.unfreeze()
    return {
        "events": folded,
        "seconds": elapsed,
        "rate": folded / elapsed if elapsed else float("inf"),
        "cpu_seconds": cpu,
        "cpu_rate": folded / cpu if cpu else float("inf"),
        "refusals": len(fold.refusals),
        "first_refusals": fold.refusals[:3],
        "rss_peak_kib": _rss_kib(),
        "rss_growth_kib": _rss_kib() - rss_before,
        "live": fold.live_submissions(),
        "in_memory": len(fold._subs),  # submissions whose state the fold holds in memory
        "archived": fold.archive is not None,
        "submissions": sum(len(fold.submissions(a.arena_id)) for a in fold.arenas()),
        "types": types,
        "fold": fold,
    }


def _report(figures: dict[str, Any]) -> None:
    print(f"events folded      {figures['events']:,}")
    print(f"fold time          {figures['seconds']:.2f} s (generation not timed)")
    print(f"events/s           {figures['rate']:,.0f} wall, {figures['cpu_rate']:,.0f} per CPU "
          f"second ({figures['cpu_seconds']:.2f} s of CPU; one core)")
    print(f"refusals           {figures['refusals']} {figures['first_refusals'] or ''}")
    print(f"peak RSS           {figures['rss_peak_kib'] / 1024:,.1f} MiB "
          f"(grew {figures['rss_growth_kib'] / 1024:,.1f} MiB while generating and folding)")
    if "traced" in figures:
        retained, peak = figures["traced"]
        per_event = retained / figures["events"]
        print(f"fold retains       {retained / 2**20:,.1f} MiB, {per_event:,.0f} bytes/event "
              f"(tracemalloc; traced peak {peak / 2**20:,.1f} MiB with one chunk)")
    print(f"submissions        {figures['submissions']:,} ({figures['live']:,} live at the end, "
          f"{figures['in_memory']:,} held in memory; finished ones "
          f"{'archived on disk' if figures['archived'] else 'kept in memory'})")
    mix = ", ".join(f"{t} {n:,}" for t, n in figures["types"].most_common())
    print(f"event mix          {mix}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events to generate")
    parser.add_argument("--seed", type=int, default=7, help="generator seed")
    parser.add_argument("--chunk", type=int, default=50_000, help="events generated per chunk")
    parser.add_argument("--concurrency", type=int, default=256,
                        help="submissions in flight at once (interleaving)")
    parser.add_argument("--profile", action="store_true", help="print the fold's top functions")
    parser.add_argument("--check-decisions", action="store_true",
                        help="fold as the replay does: apply, deriving each AttemptDecided first")
    parser.add_argument("--trace-memory", action="store_true",
                        help="also report the fold's retained memory (tracemalloc; slower)")
    parser.add_argument("--keep-finished", action="store_true",
                        help="keep finished submissions in memory instead of archiving them")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark and prints its figures; exits 1 if the fold refused anything."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.profile:
        profiler = cProfile.Profile()
        figures = profiler.runcall(
            run, args.events, args.seed, args.chunk, args.concurrency, args.check_decisions,
            args.keep_finished,
        )
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    elif args.trace_memory:
        tracemalloc.start()
        figures = run(
            args.events, args.seed, args.chunk, args.concurrency, args.check_decisions,
            args.keep_finished,
        )
        gc.collect()
        retained, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        figures["traced"] = (retained, peak)
    else:
        figures = run(
            args.events, args.seed, args.chunk, args.concurrency, args.check_decisions,
            args.keep_finished,
        )
    _report(figures)
    return 1 if figures["refusals"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
