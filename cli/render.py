"""Renders for people: explanations (windows, looks, audit nodes, quality and the decision)
and summaries laid out within a rule's width."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.text import Text

from cli.common import console, new_table, shown, visible

__all__ = ["render_explain", "summary_width_max", "within_summary_width"]

#: The widest a summary (the demo's, under its rule) is laid out, on a wide terminal or in a
#: file alike: a summary is read at a glance, not scrolled sideways.
summary_width_max = 80


@contextlib.contextmanager
def within_summary_width() -> Iterator[None]:
    """Lays out what is printed inside within ``summary_width_max`` columns (or the
    terminal's, if fewer): lines wrap between words and tables fit (``cli.tables``).

    Why: printed at a pipe's width or a wide terminal's, the demo summary's rows ran to 160
    characters under its 80-character rule.
    """
    width, soft_wrap = console.width, console.soft_wrap
    console.width, console.soft_wrap = min(width, summary_width_max), False
    try:
        yield
    finally:
        console.width, console.soft_wrap = width, soft_wrap


def render_explain(kind: str, document: dict[str, Any]) -> None:
    """Prints an ``explain submission`` or ``explain attempt`` document readably."""
    if kind == "submission":
        _submission(document)
        for attempt in document.get("attempts", []):
            console.print()
            _attempt(attempt)
        return
    _attempt(document)


def _submission(doc: dict[str, Any]) -> None:
    console.print(Text.assemble(("submission", "bold"), f" {doc['submission_id']}"))
    console.print(
        f"  arena {doc['arena_id']}  hotkey {doc['hotkey']}  arrival {tuple(doc['arrival'])}"
    )
    # visible() before Text: rich's Text drops CR, BEL and a few others without a trace.
    console.print(Text.assemble(
        "  status ", (str(doc["status"]), "bold"), f"  reason {visible(doc['reason'] or '-')}"
    ))
    if doc.get("cause"):
        console.print(f"  cause: {doc['cause']}")
    if doc.get("next_step"):
        console.print(f"  next step: {doc['next_step']}")


def _attempt(doc: dict[str, Any]) -> None:
    console.print(Text.assemble(
        ("attempt", "bold"),
        f" {doc['attempt_id']} ({doc.get('plan')}) state {doc.get('state')}  commission "
        f"{str(doc.get('commission_digest'))[:16]}…  rules {doc.get('rules_version') or '-'}",
    ))
    windows = new_table(
        "window",
        "orientation",
        "stock ns",
        "candidate ns",
        "ratio",
        title="speed windows",
        caption="ratio = candidate ÷ stock cost: above 1, the candidate was slower",
    )
    for w in doc.get("windows", []):
        windows.add_row(
            str(w["window"]),
            str(w["orientation"]),
            f"{w['stock_cost_ns']:,}",
            f"{w['candidate_cost_ns']:,}",
            _d(w["ratio"]),
        )
    _table_or_none(windows, "speed windows: none measured")
    if doc.get("futility_limit"):
        console.print(f"  futility: R1 {_d(doc.get('r1'))} vs limit {doc['futility_limit']}")
    looks = new_table(
        "look",
        "R1",
        "R2",
        "S",
        "SE",
        "z",
        "pass line L",
        "S-1 ≥ L?",
        title="looks",
        caption="S = speedup, stock ÷ candidate: above 1, the candidate is faster",
    )
    for k in doc.get("looks", []):
        looks.add_row(
            str(k["window"]),
            _d(k["r1"]),
            _d(k["r2"]),
            _d(k["speedup"]),
            _d(k["se"]),
            _d(k["z"]),
            _d(k["pass_line"]),
            str(k["outcome"]),
        )
    _table_or_none(looks, "looks: none taken")
    _noise_guard(doc.get("noise_guard"))
    audit = new_table(
        "node",
        "calls",
        "violations",
        "near misses",
        "uncomparable",
        "min score",
        "outcome",
        title="audit",
    )
    for node, tally in (doc.get("audit") or {}).items():
        audit.add_row(
            node,
            *(
                str(tally.get(k, ""))
                for k in (
                    "calls",
                    "violations",
                    "near_misses",
                    "uncomparable",
                    "min_score",
                    "outcome",
                )
            ),
        )
    _table_or_none(audit, "audit: no node graded")
    if doc.get("quality"):
        console.print(f"  quality: {doc['quality']}")
    if doc.get("fault"):
        console.print(f"  fault: {doc['fault']}")
    decision = doc.get("decision") or {}
    console.print(Text.assemble(
        "  ",
        (f"verdict {decision.get('verdict', '-')}", "bold"),
        f" reason {decision.get('reason') or '-'} disposition {decision.get('disposition', '-')}"
        f" speedup {shown(decision.get('speedup'))} pass line {shown(decision.get('pass_line'))}"
        f" look {shown(decision.get('look_window'))}",
    ))


def _noise_guard(guard: dict[str, Any] | None) -> None:
    """Prints paired-windows.v2's noise checks (nothing under v1, which has no guard)."""
    if guard is None:
        return
    checks = new_table(
        "window", "dof", "T", "bound", "trips?",
        title=f"noise guard (α {guard['alpha']}, σw {guard['window_noise']})",
        caption="T = Σ (ln r − orientation mean)² / σw²; trips when T > χ²(1 − α, dof)",
    )
    for c in guard.get("checks", []):
        checks.add_row(
            str(c["window"]), str(c["dof"]), _d(c["statistic"]), _d(c["critical"]),
            "yes" if c["trips"] else "no",
        )
    _table_or_none(checks, "noise guard: no check yet")


def _table_or_none(table: Any, none: str) -> None:
    """Prints ``table``, or the line ``none`` when it has no row (not headers over nothing)."""
    console.print(table if table.row_count else none)


def _d(value: Any) -> str:
    if value is None:
        return "-"
    text = str(value)
    if "." in text and len(text.split(".")[1]) > 7:
        return text[: text.index(".") + 8]
    return text
