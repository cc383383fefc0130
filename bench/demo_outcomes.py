"""Runs ``arena-ledger demo`` many times and tabulates every verdict it reached (issue 42).

Each run is the console script in a process of its own (``arena-ledger --db <fresh SQLite>
demo --workdir <fresh dir> --json``), in a temporary directory of its own, timed from the
outside. Its JSON summary gives each control run's verdict, reason and outcome and each
submission's status, verdict and reason; the ledger it wrote gives what the summary leaves
out: each submission's delta (by digest) and the speedup its latest decided attempt recorded.
``--hog`` runs a one-core busy loop (``python -c 'while True: pass'``) beside every run,
started before the first and killed after the last (on Ctrl-C and errors too).

A **wrong verdict** (the issue's definition) is: the identity control (``faithful``)
PASSing; a faster delta (``fast_mlp``, ``fused_gate_up``) FAILing ``candidate_slower``; a
wrong or skipped MLP (``wrong_mlp``, ``skip_mlp``) anything but FAIL. The report counts
them (target 0), the runs whose controls were all as expected or whose arena the settlement
suspended (target: every run; ``suspensions`` comes with ``settlement-rules.v2``, read from
the summary or else the ledger's settlement, and absent means not suspended), and how often
each fast miner QUALIFIED (PASS; target 15 of 20 runs, i.e. 75%), plus each run's wall time.

Not a test: it exits 0 whatever the outcomes and times (the targets are printed, met or
missed); only a harness error (no console script, a bad option) exits non-zero.

    python bench/demo_outcomes.py [--runs 20] [--hog] [--json] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid package still wins

from bench._common import (  # noqa: E402  (after the path fix above)
    describe_machine,
    machine_markdown,
    render_markdown_table,
    replace_doc_section,
)
from engine_bridge.deltas import REGISTRY, registered  # noqa: E402
from ledger.store import EventStore  # noqa: E402
from vocabulary.errors import LedgerError  # noqa: E402

__all__ = [
    "Entry",
    "LedgerFacts",
    "RunOutcome",
    "classify",
    "delta_names",
    "ledger_facts",
    "main",
    "render_markdown",
    "tabulate_run",
    "targets",
    "totals",
]

#: Runs unless --runs says otherwise (the issue's sample).
runs_default = 20
#: Seconds one demo run may take before it is killed and recorded as timed out.
run_timeout_s_default = 600
#: Share of the runs in which each fast miner must QUALIFY (the issue: 15 of 20).
fast_qualified_share_min = Decimal("0.75")

IDENTITY_DELTAS = frozenset({"faithful"})
FAST_DELTAS = ("fast_mlp", "fused_gate_up")
BROKEN_DELTAS = frozenset({"wrong_mlp", "skip_mlp"})
#: Control kinds that mean the same as the deltas above (a control row names its kind).
_KIND_DELTAS = {"identity": "faithful", "wrong_mlp": "wrong_mlp", "skip_mlp": "skip_mlp"}
#: Deltas the demo submits with other than default parameters (its miner Carol's).
_DEMO_VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (("scaled", {"epsilon": "0.01"}),)
#: Kept at most per failed run in the report: enough to see why, not the whole traceback.
_stderr_tail_chars = 600

BUSY_LOOP = "while True: pass"


# -- classification and tabulation (pure) --------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """Is one verdict of one run: a control run or a miner's submission."""

    role: str  # "control" or "miner"
    name: str  # the control id or the miner's hotkey
    delta: str
    status: str | None
    verdict: str | None
    reason: str | None
    speedup: str | None
    outcome: str | None  # a control's as_expected / unexpected / pending; None for a miner
    wrong: str | None  # why the verdict is wrong (the definition), None if it is not

    @property
    def label(self) -> str:
        """Returns the column heading: the name and, where it differs, the delta."""
        return self.name if self.delta in (self.name, self.name.replace("-", "_")) else (
            f"{self.name} ({self.delta})")


@dataclass(frozen=True)
class LedgerFacts:
    """Is what the summary leaves out, read from the demo's ledger."""

    deltas: Mapping[str, str] = field(default_factory=dict)  # submission id -> delta digest
    speedups: Mapping[str, str | None] = field(default_factory=dict)  # latest decided attempt
    suspensions: tuple[dict[str, Any], ...] = ()  # the latest settlement's, if it has any


@dataclass
class RunOutcome:
    """Is one demo run: exit code, wall time, its verdicts and what they add up to."""

    run: int
    exit_code: int | None  # None: killed after the run timeout
    wall_s: float
    replay_ok: bool | None  # the summary's ``ok``; None without a summary
    entries: list[Entry]
    controls_as_expected: bool
    suspended: bool
    suspensions: list[dict[str, Any]]
    error: str | None = None  # why there is no summary (stderr's tail), when there is none

    @property
    def wrong(self) -> list[Entry]:
        """Returns the run's wrong verdicts."""
        return [e for e in self.entries if e.wrong]


def classify(delta: str, verdict: str | None, reason: str | None) -> str | None:
    """Returns why a verdict on ``delta`` is wrong by the issue's definition, or None."""
    if delta in IDENTITY_DELTAS and verdict == "PASS":
        return "identity PASS"
    if delta in FAST_DELTAS and verdict == "FAIL" and reason == "candidate_slower":
        return "faster delta FAIL candidate_slower"
    if delta in BROKEN_DELTAS and verdict != "FAIL":
        return f"{delta} {verdict or 'undecided'}, not FAIL"
    return None


def delta_names() -> dict[str, str]:
    """Returns registered delta names by digest: every default, plus the demo's variants."""
    names = {registered(name).digest: name for name in sorted(REGISTRY)}
    for name, params in _DEMO_VARIANTS:
        spec = registered(name, **params)
        names.setdefault(spec.digest, name + "(" + ", ".join(
            f"{k}={v}" for k, v in sorted(params.items())) + ")")
    return names


def ledger_facts(records: Iterable[tuple[str, str, Mapping[str, Any]]]) -> LedgerFacts:
    """Folds (type, stream, payload) records into each submission's delta digest, its latest
    decided attempt's speedup, and the latest settlement's suspensions."""
    deltas: dict[str, str] = {}
    speedups: dict[str, str | None] = {}
    attempt_of: dict[str, str] = {}  # attempt stream -> submission id
    suspensions: tuple[dict[str, Any], ...] = ()
    for kind, stream, payload in records:
        if kind == "SubmissionArrived":
            deltas[str(payload["submission_id"])] = str(payload["delta_digest"])
        elif kind == "AttemptClaimed":
            attempt_of[stream] = str(payload["submission_id"])
        elif kind == "AttemptDecided" and stream in attempt_of:
            found = payload.get("speedup")
            speedups[attempt_of[stream]] = None if found is None else str(found)
        elif kind == "SettlementComputed":
            suspensions = tuple(payload.get("suspensions") or ())
    return LedgerFacts(deltas, speedups, suspensions)


def _summary_suspensions(summary: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Returns the summary's suspensions (top level or under ``settlement``), None if it has
    no such field (a summary of settlement-rules.v1)."""
    if "suspensions" in summary:
        return list(summary["suspensions"] or [])
    settlement = summary.get("settlement")
    if isinstance(settlement, Mapping) and "suspensions" in settlement:
        return list(settlement["suspensions"] or [])
    return None


def tabulate_run(
    run: int,
    summary: Mapping[str, Any] | None,
    exit_code: int | None,
    wall_s: float,
    facts: LedgerFacts,
    names: Mapping[str, str],
    error: str | None = None,
) -> RunOutcome:
    """Returns one run's outcome from its JSON summary (None when it printed none)."""
    if summary is None:
        return RunOutcome(run, exit_code, wall_s, None, [], False, False, [],
                          error or "no JSON summary")
    entries = [_control_entry(row, facts, names) for row in summary.get("controls") or []]
    entries += [_miner_entry(row, facts, names) for row in summary.get("submissions") or []]
    controls = [e for e in entries if e.role == "control"]
    arena = summary.get("arena_id")
    found = _summary_suspensions(summary)
    mine = [s for s in (found if found is not None else facts.suspensions)
            if s.get("arena_id") in (None, arena)]
    return RunOutcome(
        run=run,
        exit_code=exit_code,
        wall_s=wall_s,
        replay_ok=bool(summary.get("ok")),
        entries=entries,
        controls_as_expected=bool(controls) and all(
            e.outcome == "as_expected" for e in controls),
        suspended=bool(mine),
        suspensions=mine,
        error=error,
    )


def _name_of(digest: str | None, names: Mapping[str, str]) -> str:
    if digest is None:
        return "?"
    return names.get(digest, f"delta {digest[:12]}")


def _control_entry(row: Mapping[str, Any], facts: LedgerFacts,
                   names: Mapping[str, str]) -> Entry:
    delta = _KIND_DELTAS.get(str(row.get("kind")), _name_of(row.get("delta_digest"), names))
    verdict, reason = row.get("verdict"), row.get("reason")
    speedup = facts.speedups.get(str(row.get("submission_id")))
    return Entry("control", str(row["control_id"]), delta, None, verdict, reason, speedup,
                 row.get("outcome"), classify(delta, verdict, reason))


def _miner_entry(row: Mapping[str, Any], facts: LedgerFacts, names: Mapping[str, str]) -> Entry:
    sid = str(row["submission_id"])
    delta = _name_of(facts.deltas.get(sid), names)
    verdict, reason = row.get("verdict"), row.get("reason")
    return Entry("miner", str(row["hotkey"]), delta, row.get("status"), verdict, reason,
                 facts.speedups.get(sid), None, classify(delta, verdict, reason))


def _evaluated(entry: Entry) -> bool:
    """Tells whether a submission reached evaluation (intake refusals carry no verdict)."""
    return entry.role == "control" or entry.status != "REJECTED"


def totals(runs: Sequence[RunOutcome]) -> dict[str, Any]:
    """Returns the counts over every run: wrong verdicts, controls, fast miners, wall times."""
    fast: dict[str, Counter[str]] = {d: Counter() for d in FAST_DELTAS}
    futility = 0
    for run in runs:
        for e in run.entries:
            if e.role == "miner" and e.delta in fast and _evaluated(e):
                fast[e.delta]["evaluated"] += 1
                fast[e.delta]["qualified"] += e.verdict == "PASS"
                futility += e.verdict == "FAIL" and e.reason == "futility"
    walls = [r.wall_s for r in runs]
    return {
        "runs": len(runs),
        "wrong_verdicts": sum(len(r.wrong) for r in runs),
        "controls_ok_or_suspended": sum(r.controls_as_expected or r.suspended for r in runs),
        "suspended": sum(r.suspended for r in runs),
        "fast_qualified": {d: {"evaluated": c["evaluated"], "qualified": c["qualified"]}
                           for d, c in fast.items()},
        "fast_failed_futility": futility,
        "exit_codes": dict(Counter("timeout" if r.exit_code is None else str(r.exit_code)
                                   for r in runs)),
        "wall_s": {
            "median": statistics.median(walls) if walls else None,
            "min": min(walls) if walls else None,
            "max": max(walls) if walls else None,
        },
    }


def targets(total: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Returns the issue's targets, each with what was measured and whether it was met."""
    runs = total["runs"]
    needed = math.ceil(fast_qualified_share_min * runs)
    rows = [
        {"target": "wrong verdicts = 0", "measured": str(total["wrong_verdicts"]),
         "ok": total["wrong_verdicts"] == 0},
        {"target": f"controls as expected or the arena suspended in every run ({runs})",
         "measured": f"{total['controls_ok_or_suspended']} of {runs}",
         "ok": total["controls_ok_or_suspended"] == runs},
    ]
    for delta, counts in total["fast_qualified"].items():
        rows.append({
            "target": f"{delta} QUALIFIED in ≥ {needed} of {runs} runs",
            "measured": f"{counts['qualified']} of {runs}",
            "ok": counts["qualified"] >= needed,
        })
    return rows


def _cell(entry: Entry) -> str:
    words = [entry.verdict or entry.status or "-"]
    if entry.reason:
        words.append(entry.reason)
    if entry.speedup is not None:
        words.append(f"S {entry.speedup}")
    text = " ".join(words)
    return f"**{text}** (wrong)" if entry.wrong else text


def _columns(runs: Sequence[RunOutcome]) -> list[str]:
    """Returns every evaluated control's and miner's label in order of first appearance."""
    seen: dict[str, None] = {}
    for run in runs:
        for e in run.entries:
            if _evaluated(e):
                seen.setdefault(e.label, None)
    return list(seen)


def _run_rows(runs: Sequence[RunOutcome], columns: Sequence[str]) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in runs:
        cells = {e.label: _cell(e) for e in run.entries if _evaluated(e)}
        controls = [e for e in run.entries if e.role == "control"]
        expected = sum(e.outcome == "as_expected" for e in controls)
        rows.append([
            run.run, f"{run.wall_s:.1f}", "timeout" if run.exit_code is None else run.exit_code,
            *(cells.get(c, "-") for c in columns),
            f"{expected} of {len(controls)}",
            "yes" if run.suspended else "no",
            len(run.wrong),
        ])
    return rows


def _verdict_counts(entries: Sequence[Entry]) -> str:
    counted = Counter(" ".join(filter(None, (e.verdict or e.status or "-", e.reason)))
                      for e in entries)
    return ", ".join(f"{k} ×{n}" for k, n in counted.most_common())


def _speedups(entries: Sequence[Entry]) -> str:
    found = sorted(Decimal(e.speedup) for e in entries if e.speedup is not None)
    if not found:
        return "-"
    return f"{statistics.median(found):.3f} ({found[0]:.3f}–{found[-1]:.3f})"


def _total_rows(runs: Sequence[RunOutcome], columns: Sequence[str]) -> list[list[object]]:
    rows: list[list[object]] = []
    for label in columns:
        entries = [e for r in runs for e in r.entries if e.label == label and _evaluated(e)]
        rows.append([label, len(entries), _verdict_counts(entries), _speedups(entries),
                     sum(1 for e in entries if e.wrong)])
    return rows


def render_markdown(runs: Sequence[RunOutcome], total: Mapping[str, Any]) -> str:
    """Returns the per-run table, the totals per control and miner, and the targets."""
    columns = _columns(runs)
    per_run = render_markdown_table(
        ["run", "wall s", "exit", *columns, "controls as expected", "suspended", "wrong"],
        _run_rows(runs, columns), numeric=(0, 1, 2, len(columns) + 5))
    per_name = render_markdown_table(
        ["control or miner", "runs", "verdicts", "speedup median (range)", "wrong"],
        _total_rows(runs, columns), numeric=(1, 4))
    wall = total["wall_s"]
    lines = [
        per_run, "",
        "S is the speedup the attempt recorded (stock ÷ candidate: above 1, faster); a wrong "
        "verdict is in bold.", "",
        per_name, "",
    ]
    if wall["median"] is not None:
        lines.append(f"Demo wall time per run: median {wall['median']:.1f} s "
                     f"(min {wall['min']:.1f} s, max {wall['max']:.1f} s); exit codes "
                     + ", ".join(f"{k} ×{n}" for k, n in sorted(total["exit_codes"].items()))
                     + ".")
    lines.append(f"Faster deltas FAILed `futility` (outside the issue's definition of wrong): "
                 f"{total['fast_failed_futility']}.")
    lines += ["", render_markdown_table(
        ["target", "measured", "met"],
        [[t["target"], t["measured"], "yes" if t["ok"] else "MISSED"] for t in targets(total)])]
    for run in runs:
        said = (run.error or "").strip().splitlines()
        if said:
            lines.append(f"\nRun {run.run} printed no summary (exit {run.exit_code}): "
                         f"`{said[-1]}`")
    return "\n".join(lines)


def to_json(runs: Sequence[RunOutcome], total: Mapping[str, Any],
            extra: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the whole report as a JSON-ready object."""
    return {
        **extra,
        "runs": [asdict(r) | {"wrong": [asdict(e) for e in r.wrong]} for r in runs],
        "totals": dict(total),
        "targets": targets(total),
    }


# -- the harness ---------------------------------------------------------------------------


def demo_command() -> list[str]:
    """Returns the console script beside this interpreter (or on PATH), else its equivalent."""
    beside = Path(sys.executable).with_name("arena-ledger")
    found = str(beside) if beside.exists() else shutil.which("arena-ledger")
    return [found] if found else [sys.executable, "-c", "from cli.app import main; main()"]


def _child_env() -> dict[str, str]:
    # This checkout first, so the runs measure this tree's code, not whatever is installed.
    paths = [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@contextmanager
def busy_loop(enabled: bool) -> Iterator[subprocess.Popen[bytes] | None]:
    """Keeps one core busy in a child process while the block runs (when ``enabled``)."""
    if not enabled:
        yield None
        return
    hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        yield hog
    finally:
        hog.terminate()
        try:
            hog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            hog.kill()
            hog.wait()


def read_ledger_facts(url: str) -> LedgerFacts:
    """Returns the facts of the ledger at ``url`` (none when it cannot be read)."""
    wanted = ("SubmissionArrived", "AttemptClaimed", "AttemptDecided", "SettlementComputed")
    try:
        with EventStore(url) as store:
            return ledger_facts((r.type, r.stream, r.payload)
                                for r in store.read_all(types=wanted))
    except LedgerError:
        return LedgerFacts()


def run_once(run: int, command: Sequence[str], timeout_s: float,
             names: Mapping[str, str]) -> RunOutcome:
    """Runs the demo once on a fresh ledger in a temporary directory; returns its outcome."""
    with tempfile.TemporaryDirectory(prefix="demo-outcomes-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        argv = [*command, "--db", url, "demo", "--workdir", str(Path(tmp) / "demo"), "--json"]
        started = time.perf_counter()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                                  env=_child_env(), cwd=tmp, check=False)
            code: int | None = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code, stdout = None, ""
            stderr = f"killed after {timeout_s:.0f} s\n{_text(exc.stderr)}"
        wall = time.perf_counter() - started
        try:
            summary = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            summary = None
        facts = read_ledger_facts(url) if (Path(tmp) / "ledger.db").exists() else LedgerFacts()
        error = None if summary is not None else (stderr or stdout)[-_stderr_tail_chars:]
        return tabulate_run(run, summary, code, wall, facts, names, error)


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _progress(outcome: RunOutcome) -> str:
    words = [f"run {outcome.run}: exit {outcome.exit_code}, {outcome.wall_s:.1f} s"]
    words += [f"{e.label} {_cell(e)}" for e in outcome.entries if _evaluated(e)]
    return "; ".join(words)


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds, so the busy loop is killed too


DOC_HEADING = "Demo outcomes"
#: The section's opening, the same whether written by hand or by --write-docs.
DOC_INTRO = """\
Every verdict `arena-ledger demo` reaches, over repeated runs (issue 42's check):
`bench/demo_outcomes.py` runs the console script `--runs` times (20 by default), each on a
fresh SQLite ledger in a temporary directory, optionally beside a one-core busy loop
(`--hog`), and tabulates per run and in total each control's and miner's verdict, reason
and recorded speedup, the controls' outcomes, whether the settlement suspended the arena
(`suspensions`, from `settlement-rules.v2` on; absent means not suspended), the demo's exit
code and its wall time. It never gates: it prints each target met or MISSED and exits 0.

A wrong verdict is the identity control (`faithful`) PASSing, a faster delta (`fast_mlp`,
`fused_gate_up`) FAILing `candidate_slower`, or a wrong or skipped MLP (`wrong_mlp`,
`skip_mlp`) anything but FAIL. Targets: no wrong verdict; in every run the controls as
expected or the arena suspended; each fast miner QUALIFIED (PASS) in at least 15 of 20 runs
(75%). A faster delta FAILed by `futility` is counted on its own line, outside the
definition.

    python bench/demo_outcomes.py [--runs 20] [--hog] [--json] [--write-docs]"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=runs_default, help="demo runs (default 20)")
    parser.add_argument("--hog", action="store_true",
                        help="run a one-core busy loop beside every run")
    parser.add_argument("--timeout", type=float, default=run_timeout_s_default,
                        help="seconds one run may take (default 600)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    parser.add_argument("--write-docs", action="store_true",
                        help='rewrite the "Demo outcomes" section of docs/benchmarks.md')
    args = parser.parse_args(argv)
    if args.runs < 1 or args.timeout <= 0:
        parser.error("--runs must be at least 1 and --timeout positive")
    command = demo_command()
    names = delta_names()
    progress = sys.stderr if args.json else sys.stdout  # --json keeps stdout for the JSON

    def say(text: str) -> None:
        print(text, file=progress, flush=True)  # a run takes a minute: show each as it ends

    outcomes: list[RunOutcome] = []
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    interrupted = False
    with busy_loop(args.hog):
        try:
            for run in range(1, args.runs + 1):
                outcomes.append(run_once(run, command, args.timeout, names))
                say(_progress(outcomes[-1]))
        except KeyboardInterrupt:
            interrupted = True
            say(f"interrupted: reporting the {len(outcomes)} finished run(s)")
    if not outcomes:
        return 130 if interrupted else 0
    total = totals(outcomes)
    machine = describe_machine({"Beside": "a one-core busy loop" if args.hog else "nothing"})
    invoked = "python bench/demo_outcomes.py " + " ".join(argv or sys.argv[1:])
    if args.json:
        print(json.dumps(to_json(outcomes, total, {"machine": machine, "hog": args.hog,
                                                   "command": command}), indent=2))
    else:
        print("\n" + render_markdown(outcomes, total))
    if args.write_docs:
        body = (f"{DOC_INTRO}\n\nCommand: `{invoked.strip()}` "
                f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}).\n\n"
                f"{machine_markdown(machine)}\n\n{render_markdown(outcomes, total)}")
        say(f"wrote {replace_doc_section(DOC_HEADING, body)}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
