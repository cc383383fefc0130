"""Tests audit grading arithmetic, payloads, receipts and hook specs (no torch needed)."""

from __future__ import annotations

import fnmatch
import json
from decimal import Decimal
from pathlib import Path

import pytest

from engine_bridge.decimals import is_canonical_decimal
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
