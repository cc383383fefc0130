"""Shares what every benchmark needs: the machine, interleaved timing, memory, tables, docs.

Benchmarks are not tests (STYLE.md): they print figures and ratios against peers measured
in the same run, and never gate on absolute time. Two habits keep ratios honest on a small,
noisy machine: contenders run *interleaved* in rounds (so a burst of noise hits all of them,
not one), and memory is measured in a fresh process (so a peak is not hidden by arenas an
earlier step left behind).
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import re
import resource
import sqlite3
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "MemoryProbe",
    "Tally",
    "describe_machine",
    "fmt_kib",
    "fmt_rate",
    "fmt_ratio",
    "machine_markdown",
    "parse_backends",
    "probe_memory",
    "render_markdown_table",
    "replace_doc_section",
    "run_in_fresh_process",
    "run_interleaved",
    "verdict",
]

T = TypeVar("T")

#: The file every benchmark writes its section into.
BENCHMARKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
_DOC_TITLE = "# Benchmarks"
_DOC_INTRO = (
    "Figures from `bench/`. Each section is rewritten by its own script with `--write-docs`;\n"
    "absolute numbers depend on the machine, so read the ratios against peers measured in\n"
    "the same run."
)


# -- the machine ---------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else platform.machine()


def _ram_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def describe_machine(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Returns the CPU model, cores, RAM, OS, Python and SQLite versions, plus ``extra``."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = f"{os.cpu_count()} logical" + (f" ({usable} usable)" if usable else "")
    described = {
        "CPU": _cpu_model(),
        "Cores": cores,
        "RAM": f"{_ram_gib():.1f} GiB",
        "OS": platform.platform(terse=True),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "SQLite": sqlite3.sqlite_version,
    }
    described.update(extra or {})
    return described


def machine_markdown(described: Mapping[str, str]) -> str:
    """Renders a machine description as a Markdown bullet list."""
    return "\n".join(f"- {key}: {value}" for key, value in described.items())


# -- timing --------------------------------------------------------------------------------


@dataclass
class Tally:
    """Accumulates timed steps: units of work (events), seconds, and each step's rate."""

    events: int = 0
    seconds: float = 0.0
    calls: int = 0
    rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Returns events per second: the median step's rate from three steps on.

        The median shrugs off a burst of load that lands on one or two steps, which the
        overall rate (``overall_rate``) would charge in full to whichever contender it hit.
        """
        if len(self.rates) >= 3:
            return statistics.median(self.rates)
        return self.overall_rate

    @property
    def overall_rate(self) -> float:
        """Returns all events over all seconds (0 when nothing was timed)."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def add(self, events: int, seconds: float) -> None:
        """Adds one timed step."""
        self.events += events
        self.seconds += seconds
        self.calls += 1
        if seconds > 0:
            self.rates.append(events / seconds)


def run_interleaved(steps: Mapping[str, Callable[[], int]], rounds: int) -> dict[str, Tally]:
    """Times each step once per round, rotating the order, and sums per step.

    A step does one unit of work and returns how many events it handled. Rotating the
    order each round spreads warm-up and background noise over every contender, so the
    ratios between them are steadier than back-to-back runs.
    """
    names = list(steps)
    tallies = {name: Tally() for name in names}
    clock = time.perf_counter
    for round_index in range(rounds):
        shift = round_index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            started = clock()
            events = steps[name]()
            tallies[name].add(events, clock() - started)
    return tallies


# -- memory --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryProbe:
    """Is the memory one call needed: peak RSS above its start, and the tracemalloc peak."""

    rss_delta_kib: int
    rss_exact: bool  # False when the kernel could not reset the peak (ru_maxrss fallback)
    traced_peak_kib: int


def _status_kib(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _reset_peak_rss() -> bool:
    # Linux ≥ 4.0: writing 5 resets VmHWM to the current RSS, so the next peak is this call's.
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_kib() -> int:
    hwm = _status_kib("VmHWM")
    if hwm is not None:
        return hwm
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB on Linux


def probe_memory(call: Callable[[], object]) -> MemoryProbe:
    """Runs ``call`` twice: once for peak RSS growth, once under tracemalloc for its peak.

    Run it in a fresh process (``run_in_fresh_process``) after one warm-up call, so that
    import-time peaks and arenas kept by earlier work neither hide nor inflate the figure.
    """
    exact = _reset_peak_rss()
    before = _status_kib("VmRSS") if exact else _peak_rss_kib()
    call()
    rss_delta = max(0, _peak_rss_kib() - (before or 0))
    tracemalloc.start()
    try:
        call()
        traced_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return MemoryProbe(rss_delta, exact, traced_peak // 1024)


def run_in_fresh_process(func: Callable[..., T], *args: Any) -> T:
    """Calls a module-level ``func(*args)`` in a newly spawned interpreter; returns its result."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(func, args)


# -- rendering -----------------------------------------------------------------------------


_BACKEND_NAMES = {"sqlite": "sqlite", "postgres": "postgresql", "postgresql": "postgresql"}


def parse_backends(text: str) -> list[str]:
    """Turns "sqlite,postgres" into dialect names; raises ValueError naming an unknown one."""
    names = []
    for given in (b.strip() for b in text.split(",")):
        if not given:
            continue
        if given not in _BACKEND_NAMES:
            raise ValueError(f"unknown backend {given!r} (use sqlite, postgres)")
        names.append(_BACKEND_NAMES[given])
    return names


def fmt_rate(per_second: float) -> str:
    """Formats events per second with thousands separators."""
    return f"{per_second:,.0f}"


def fmt_ratio(value: float) -> str:
    """Formats a ratio to two places with a trailing multiplication sign."""
    return f"{value:.2f}×"


def fmt_kib(kib: float) -> str:
    """Formats KiB as MiB with one decimal."""
    return f"{kib / 1024:,.1f} MiB"


def verdict(ok: bool) -> str:
    """Returns PASS or MISS."""
    return "PASS" if ok else "MISS"


def render_markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()
) -> str:
    """Renders a Markdown table padded for a terminal; ``numeric`` columns align right."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        padded = (
            c.rjust(widths[i]) if i in numeric else c.ljust(widths[i]) for i, c in enumerate(row)
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(
        ("-" * (w + 1) + ":") if i in numeric else ("-" * (w + 2)) for i, w in enumerate(widths)
    ) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def replace_doc_section(heading: str, body: str, path: Path = BENCHMARKS_DOC) -> Path:
    """Rewrites the ``## heading`` section of the benchmarks doc, keeping every other section.

    The section runs from its heading to the next ``## `` heading (or the end). A missing
    file is created with a title; a missing section is appended.
    """
    marker = f"## {heading}"
    text = path.read_text() if path.exists() else f"{_DOC_TITLE}\n\n{_DOC_INTRO}\n"
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == marker), None)
    section = [marker, "", *body.strip("\n").splitlines(), ""]
    if start is None:
        while lines and not lines[-1].strip():
            lines.pop()
        lines += ["", *section]
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        lines[start:end] = section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n")
    return path
