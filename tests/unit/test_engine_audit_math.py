"""Tests audit grading arithmetic, payloads, receipts and hook specs (no torch needed)."""

from __future__ import annotations

import fnmatch
import json
from decimal import Decimal
from pathlib import Path

import pytest

from engine_bridge.decimals import floor_decimal, is_canonical_decimal, parse_decimal
from engine_bridge.deltas import registered
from engine_bridge.hooks import (
    ANCHOR_MODULE,
    AuditSpec,
    NodeTally,
    audit_hook_specs,
    classify,
    delta_install_specs,
    read_receipts,
    resolve_callable,
    run_audit,
    tallies_to_payloads,
)
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import FakeEngine
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import CanonicalFormError, EngineFault

BAR, BAND = Decimal("0.99999"), Decimal("0.03")


@pytest.mark.parametrize(("score", "verdict"), [
    # The float 0.99999 is a hair above the decimal bar "0.99999".
    (1.0, "ok"), (0.99999, "ok"),
    (0.99998999, "near_miss"), (0.999991, "ok"), (0.999, "near_miss"), (0.97, "near_miss"),
    (0.969, "violation"),
    (0.0, "violation"), (None, "uncomparable"), (float("nan"), "uncomparable"),
    (float("inf"), "uncomparable"),
])
def test_classify_uses_exact_decimal_thresholds(score: float | None, verdict: str) -> None:
    assert classify(score, BAR, BAND) == verdict


def test_a_score_exactly_at_the_bar_is_ok_and_exactly_at_the_band_a_near_miss() -> None:
    # Dyadic thresholds, so the float scores equal them to the last digit.
    bar, band = Decimal("0.5"), Decimal("0.25")
    assert classify(0.5, bar, band) == "ok"
    assert classify(0.25, bar, band) == "near_miss"
    assert classify(0.2499999, bar, band) == "violation"


def test_tally_counts_and_payload_are_canonical() -> None:
    tally = NodeTally("model.layers.0.mlp", 0)
    for score in (1.0, 0.998999123, 0.5, None):
        tally.record(score, BAR, BAND)
    payload = tally.to_payload("0.99999")
    assert payload == {"node": "model.layers.0.mlp", "rank": 0, "calls": 4, "violations": 1,
                       "near_misses": 1, "uncomparable": 1, "min_score": "0.5",
                       "bar": "0.99999"}
    assert is_canonical_decimal(payload["min_score"])


def test_min_score_floors_to_six_places_and_is_zero_without_comparable_calls() -> None:
    tally = NodeTally("n", 0)
    tally.record(0.9999999, BAR, BAND)
    assert tally.to_payload("0.99999")["min_score"] == "0.999999"
    empty = NodeTally("n", 1)
    empty.record(None, BAR, BAND)
    assert empty.to_payload("0.99999")["min_score"] == "0"
    assert NodeTally("n", 0).to_payload("0.984")["bar"] == "0.984"


def test_payloads_are_sorted_naturally_by_node_then_rank() -> None:
    tallies = [NodeTally(f"model.layers.{i}.mlp", r) for i in (10, 2, 1) for r in (1, 0)]
    nodes = [(p["node"], p["rank"]) for p in tallies_to_payloads(tallies, "0.99999")]
    assert nodes == [("model.layers.1.mlp", 0), ("model.layers.1.mlp", 1),
                     ("model.layers.2.mlp", 0), ("model.layers.2.mlp", 1),
                     ("model.layers.10.mlp", 0), ("model.layers.10.mlp", 1)]


def test_receipts_from_two_processes_merge_per_node_and_rank(tmp_path: Path) -> None:
    def write(pid: int, rank: int, calls: int, low: float) -> None:
        row = {"node": "model.layers.0.mlp", "rank": rank, "calls": calls, "violations": 0,
               "near_misses": calls, "uncomparable": 0, "min_score": low, "first_error": None}
        body = {"session": "s1", "rank": rank, "pid": pid, "tallies": [row]}
        (tmp_path / f"audit-s1-rank{rank}-pid{pid}.json").write_text(json.dumps(body))

    write(10, 0, 3, 0.999)
    write(11, 0, 2, 0.998)
    write(12, 1, 4, 0.997)
    (tmp_path / "audit-other-rank0-pid1.json").write_text('{"tallies": []}')
    merged = read_receipts(str(tmp_path), "s1")
    assert [(t.rank, t.calls, t.near_misses, t.min_score) for t in merged] == [
        (0, 5, 5, 0.998), (1, 4, 4, 0.997)]


def _receipt(folder: Path, pid: int, **row: object) -> None:
    """Writes one process's receipt of node model.layers.0.mlp, rank 0, session s1."""
    tally = {"node": "model.layers.0.mlp", "rank": 0, "calls": 3, "violations": 0,
             "near_misses": 0, "uncomparable": 0, "min_score": 1.0, "first_error": None, **row}
    body = {"session": "s1", "rank": 0, "pid": pid, "tallies": [tally]}
    (folder / f"audit-s1-rank0-pid{pid}.json").write_text(json.dumps(body))


def test_receipts_from_two_processes_add_their_uncomparable_calls(tmp_path: Path) -> None:
    # Per node and rank the counts are summed: two scheduler processes that each saw one
    # uncomparable call record two, not one.
    _receipt(tmp_path, 10, uncomparable=1)
    _receipt(tmp_path, 11, uncomparable=1)
    [payload] = tallies_to_payloads(read_receipts(str(tmp_path), "s1"), "0.99999")
    assert (payload["calls"], payload["uncomparable"]) == (6, 2)


def test_a_host_failure_in_a_second_receipt_of_the_same_rank_still_faults(
    tmp_path: Path,
) -> None:
    # A host failure (out of memory) noted only by a second process of the rank is no
    # miner's verdict: the merged tally still faults the audit, it is not graded.
    _receipt(tmp_path, 10, infrastructure_error=None)
    _receipt(tmp_path, 11, infrastructure_error="OutOfMemoryError: CUDA out of memory")
    with pytest.raises(EngineFault) as caught:
        tallies_to_payloads(read_receipts(str(tmp_path), "s1"), "0.99999")
    assert caught.value.fault_code == "unproven_infrastructure_failure"


def test_merging_tallies_adds_counts_and_keeps_the_first_error() -> None:
    node = "model.layers.0.mlp"
    tally = NodeTally(node, 0, calls=2, violations=1, near_misses=0, uncomparable=1,
                      min_score=0.5)
    tally.merge(NodeTally(node, 0, calls=3, violations=0, near_misses=2, uncomparable=0,
                          min_score=None, first_error="RuntimeError: in rank 0, pid 11"))
    assert (tally.calls, tally.violations, tally.near_misses, tally.uncomparable) == (5, 1, 2, 1)
    assert (tally.min_score, tally.first_error) == (0.5, "RuntimeError: in rank 0, pid 11")
    tally.merge(NodeTally(node, 0, calls=1, min_score=0.25, first_error="a later error"))
    assert (tally.calls, tally.min_score) == (6, 0.25)
    assert tally.first_error == "RuntimeError: in rank 0, pid 11"
    empty = NodeTally(node, 0)
    empty.merge(NodeTally(node, 0, calls=1, min_score=0.75))
    assert (empty.min_score, empty.first_error) == (0.75, None)


def test_audit_hook_specs_follow_sglang_forward_hooks_shape() -> None:
    spec = AuditSpec(registered("wrong_mlp"), receipts_dir="/tmp/r")
    specs = audit_hook_specs(spec)
    assert [s["name"] for s in specs] == ["arena-audit-names", "arena-audit",
                                          "arena-audit-receipt"]
    for entry in specs:
        assert set(entry) <= {"name", "target_modules", "hook_factory", "config", "hook_type"}
        assert callable(resolve_callable(entry["hook_factory"]))
        json.dumps(entry)  # SGLang takes the specs as JSON
    audit = specs[1]
    assert fnmatch.fnmatch("model.layers.3.mlp", audit["target_modules"][0])
    assert not fnmatch.fnmatch("model.layers.3.self_attn", audit["target_modules"][0])
    assert specs[0]["target_modules"] == [ANCHOR_MODULE]
    assert specs[0]["hook_type"] == "forward_pre"
    assert AuditSpec.from_config(audit["config"]) == spec


def test_install_specs_target_the_anchor_with_a_pre_hook() -> None:
    [entry] = delta_install_specs(registered("fused_gate_up"), receipts_dir="/r", session="s")
    assert entry["hook_type"] == "forward_pre" and entry["target_modules"] == [ANCHOR_MODULE]
    assert entry["config"]["delta"]["name"] == "fused_gate_up"
    assert callable(resolve_callable(entry["hook_factory"]))


def test_audit_spec_refuses_float_bar() -> None:
    with pytest.raises(CanonicalFormError):
        AuditSpec(registered("faithful"), bar=0.99999)  # type: ignore[arg-type]


def test_run_audit_through_the_fake_engine_boots_one_audit_lane() -> None:
    from engine_bridge.prompt_slice import load_replay_slice
    from engine_bridge.protocol import FakeEngine

    tally = NodeTally("model.layers.0.mlp", 0, calls=32, near_misses=32, min_score=0.999)
    engine = FakeEngine(tallies=[tally])
    payloads = run_audit(engine, registered("scaled"), load_replay_slice())
    assert payloads == [{"node": "model.layers.0.mlp", "rank": 0, "calls": 32,
                         "violations": 0, "near_misses": 32, "uncomparable": 0,
                         "min_score": "0.998999", "bar": "0.99999"}]
    assert engine.booted == [("audit", None, "audit")] and engine.live == []


# Audit arithmetic as docs/engine.md and the bridge's docstrings (hooks.py,
# decimals.py, quality.py) state it: a threshold is compared without a float-to-text round trip,
# min_score is the smallest comparable score, an Inf or NaN is uncomparable, merging receipts adds
# violations and keeps the lower min_score. Expected values are worked out in the comments.


# --- audit: classification is exact decimal arithmetic ---------------------------------


def test_a_float_just_below_a_decimal_bar_is_a_near_miss_not_ok() -> None:
    # The float nearest 0.984 is 0.98399999999999998578…, below the bfloat16 bar "0.984":
    # compared exactly as decimals it is a near miss (0.954 ≤ it < 0.984), although its
    # shortest repr "0.984" equals the bar.
    just_below, below_band = 0.984, 0.954
    assert Decimal(just_below) < Decimal("0.984")
    assert classify(just_below, Decimal("0.984"), Decimal("0.03")) == "near_miss"
    # The float nearest 0.954 (= 0.984 − 0.03) is 0.95399999999999995914…, below the
    # band's floor: a violation, not a near miss.
    assert Decimal(below_band) < Decimal("0.954")
    assert classify(below_band, Decimal("0.984"), Decimal("0.03")) == "violation"


# --- audit: one node's tally ------------------------------------------------------------


def test_min_score_is_the_smallest_comparable_score_not_the_first_or_last() -> None:
    # Scores 0.25, 1.0, 0.75: the minimum is 0.25 (a violation: below 0.99999 − 0.03),
    # 1.0 is clean and 0.75 another violation.
    tally = NodeTally("model.layers.0.mlp", 0)
    for score in (0.25, 1.0, 0.75):
        tally.record(score, BAR, BAND)
    payload = tally.to_payload("0.99999")
    assert (payload["calls"], payload["violations"], payload["near_misses"]) == (3, 2, 0)
    assert payload["min_score"] == "0.25"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_nan_or_inf_score_is_uncomparable_and_never_enters_min_score(bad: float) -> None:
    # docs/engine.md: NaN or Inf is uncomparable, and uncomparable calls do not
    # enter min_score. Calls: 0.5, bad, so calls 2, uncomparable 1, min_score "0.5".
    tally = NodeTally("model.layers.0.mlp", 0)
    tally.record(0.5, BAR, BAND)
    tally.record(bad, BAR, BAND)
    payload = tally.to_payload("0.99999")
    assert (payload["calls"], payload["uncomparable"], payload["violations"]) == (2, 1, 1)
    assert payload["min_score"] == "0.5"
    only_bad = NodeTally("model.layers.0.mlp", 0)
    only_bad.record(bad, BAR, BAND)
    assert only_bad.to_payload("0.99999")["min_score"] == "0"


def test_merging_two_receipts_adds_violations_and_keeps_the_lower_min_score() -> None:
    # Two scheduler processes of one rank: violations 2 + 3 = 5; min(0.25, 0.75) = 0.25,
    # whichever receipt is merged last.
    node = "model.layers.0.mlp"
    tally = NodeTally(node, 0, calls=4, violations=2, min_score=0.25)
    tally.merge(NodeTally(node, 0, calls=5, violations=3, min_score=0.75))
    assert (tally.calls, tally.violations, tally.min_score) == (9, 5, 0.25)


def test_payload_bar_is_spelled_canonically_whatever_the_policy_spelling() -> None:
    # docs/engine.md: payloads hold canonical decimal strings only; "0.99000" is 0.99.
    [payload] = tallies_to_payloads([NodeTally("model.layers.0.mlp", 0, calls=1,
                                               min_score=1.0)], "0.99000")
    assert payload["bar"] == "0.99"
    assert CATALOGUE.validate("AuditNodeGraded", 1, payload, stream="attempt-x")
    engine = FakeEngine(tallies=[NodeTally("model.layers.0.mlp", 0, calls=1, min_score=1.0)])
    [through_lane] = run_audit(engine, registered("faithful"), load_replay_slice(), bar="0.984000")
    assert through_lane["bar"] == "0.984"


# --- audit: the score itself (torch) ----------------------------------------------------


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_inf_or_nan_in_the_stock_output_is_uncomparable(bad: float) -> None:
    # docs/engine.md: NaN/Inf in *either* output is uncomparable (None), not a
    # violation scoring 0.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    stock = torch.tensor([bad, 1.0])
    assert score_outputs(torch.ones(2), stock) is None


def test_a_tiny_but_nonzero_stock_output_is_scored_by_the_formula() -> None:
    # Only ‖r‖ = 0 is special. r = 2^-120 (a normal float32), c = 1.5 · 2^-120, both exact:
    # ‖c − r‖ / ‖r‖ = 0.5, so the score is 1 − 0.5 = 0.5, not 0.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    r = torch.tensor([2.0 ** -120], dtype=torch.float32)
    assert score_outputs(r * 1.5, r) == 0.5


def test_a_broadcastable_shape_mismatch_is_uncomparable() -> None:
    # Shapes (1, 3) and (2, 3) broadcast in torch arithmetic, but they differ: uncomparable.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    assert score_outputs(torch.ones(1, 3), torch.ones(2, 3)) is None
    assert score_outputs(torch.ones(2, 3), torch.ones(1, 3)) is None


# --- decimals ---------------------------------------------------------------------------


def test_floor_decimal_refuses_infinity_with_the_projects_error() -> None:
    # STYLE: faults raise from the LedgerError root; Decimal's InvalidOperation is not one.
    for value in (float("inf"), float("-inf")):
        with pytest.raises(CanonicalFormError):
            floor_decimal(value, 6)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "sNaN"])
def test_a_non_finite_bar_is_refused(text: str) -> None:
    # A NaN bar would make every comparison raise later, inside the audit lane.
    with pytest.raises(CanonicalFormError):
        parse_decimal(text, field="bar")
    with pytest.raises(CanonicalFormError):
        AuditSpec(registered("faithful"), bar=text)
