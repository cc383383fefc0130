"""Tests that one full attempt's payloads validate against the ledger's event catalogue."""

from __future__ import annotations

import pytest

from engine_bridge.protocol import FaultCode, engine_fault, infrastructure_fault_payload
from engine_bridge.reference_model import write_reference_model
from vocabulary.catalogue import CATALOGUE

pytest.importorskip("torch")
from engine_bridge.stage_timings import time_attempt
from engine_bridge.torch_engine import TorchReferenceEngine

STREAM = "attempt-bridge-test"


def test_full_attempt_payloads_validate_as_ledger_events(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    engine = TorchReferenceEngine(write_reference_model(tmp_path_factory.mktemp("ref")))
    result = time_attempt(engine, "fast_mlp", windows=4)
    assert len(result["windows"]) == 4 and len(result["audit"]) == 4
    typed = ([("WindowMeasured", p) for p in result["windows"]]
             + [("AuditNodeGraded", p) for p in result["audit"]]
             + [("QualityGraded", result["quality"])])
    for event_type, payload in typed:
        # The catalogue refuses floats, non-canonical decimals and unknown fields.
        assert CATALOGUE.validate(event_type, 1, payload, stream=STREAM)
    assert engine.lanes == []


def test_fault_payloads_validate_for_every_code() -> None:
    for code in FaultCode:
        payload = infrastructure_fault_payload(engine_fault(code, "detail", stage="speed"))
        assert CATALOGUE.validate("InfrastructureFault", 1, payload, stream=STREAM)
