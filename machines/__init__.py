"""Holds the pure verdict machines: transition tables, folds, intake and decision arithmetic.

The layer imports only the event vocabulary (``vocabulary``) and the standard library: no
database, clock, randomness, logging or engine. Modules:

- ``refusal``, ``reasons``, ``table``: the refusal record, the one reason-code table, and the
  shared shape of a transition table.
- ``submission``, ``attempt``, ``arena``, ``payment``, ``calibration``: one machine per
  stream category (``calibration`` also derives the A/A noise estimates and bounds).
- ``arithmetic``: the ``paired-windows.v1`` and ``.v2`` arithmetic (Decimal, precision 34;
  v2 adds the noise guard), in the one context of ``decimal_context``; ``chi_square``: exact
  chi-square quantiles for the noise guard and the calibration bounds.
- ``intake``, ``control``: intake rules and the control-outcome projection.
- ``projection``: ``LedgerFold``, the whole-ledger fold and write-side ``decide``.
- ``docs``, ``samples``: docs/machines.md rendering and deterministic example events.
- ``settlement``: settlement-rules.v1 (docs/settlement.md).
"""

__all__ = [
    "arena",
    "arithmetic",
    "attempt",
    "calibration",
    "chi_square",
    "control",
    "decimal_context",
    "docs",
    "intake",
    "payment",
    "projection",
    "reasons",
    "refusal",
    "samples",
    "settlement",
    "submission",
    "table",
]
