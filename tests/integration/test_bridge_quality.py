"""Tests pristine quality grading on the reference engine."""

from __future__ import annotations

import pytest

from engine_bridge.deltas import registered
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.reference_model import write_reference_model

pytest.importorskip("torch")
from engine_bridge.quality import grade_quality
from engine_bridge.torch_engine import TorchReferenceEngine

REPLAY = load_replay_slice()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TorchReferenceEngine:
    return TorchReferenceEngine(write_reference_model(tmp_path_factory.mktemp("reference")))


@pytest.mark.parametrize("name", ["faithful", "fast_mlp", "fused_gate_up"])
def test_equivalent_deltas_pass_quality(engine: TorchReferenceEngine, name: str) -> None:
    report = grade_quality(engine, registered(name), REPLAY)
    assert report.payload == {"tokens_scored": 128, "argmax_agreement": "1",
                              "drift_within_envelope": True, "regression": False}
    assert report.candidate_drift_nats == report.reference_drift_nats == 0.0
    assert engine.lanes == []


@pytest.mark.parametrize("name", ["wrong_mlp", "skip_mlp"])
def test_wrong_deltas_regress_while_the_reference_holds(engine: TorchReferenceEngine,
                                                        name: str) -> None:
    report = grade_quality(engine, registered(name), REPLAY)
    assert report.payload["regression"] is True
    assert report.payload["drift_within_envelope"] is True  # stock reproduces stock exactly
    assert report.reference_drift_nats == 0.0 and report.candidate_drift_nats > 0.5


def test_tiny_scaling_stays_within_the_envelope(engine: TorchReferenceEngine) -> None:
    report = grade_quality(engine, registered("scaled", epsilon="0.0001"), REPLAY)
    assert report.payload["drift_within_envelope"] is True
    assert report.payload["regression"] is False
    assert 0.0 < report.candidate_drift_nats < 0.01
