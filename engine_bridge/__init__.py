"""Connects the ledger to inference engines: boots lanes, measures windows, audits, grades.

The package is the engine port (``protocol``) plus its adapters. Everything importable from
here is torch-free; the torch reference engine (``engine_bridge.torch_engine``), the lane
host (``engine_bridge.subprocess_lane``) and the SGLang adapter
(``engine_bridge.sglang_adapter``) import their engines lazily. See docs/engine.md.
"""

from __future__ import annotations

from engine_bridge.deltas import DeltaSpec, control_deltas, load_file_delta, registered
from engine_bridge.hooks import AuditSpec, run_audit
from engine_bridge.prompt_slice import ReplaySlice, load_replay_slice
from engine_bridge.protocol import (
    Clock,
    Engine,
    FakeEngine,
    FaultCode,
    Lane,
    infrastructure_fault_payload,
)
from engine_bridge.quality import QualityPolicy, QualityReport, grade_quality
from engine_bridge.speed import iter_windows, run_windows

__all__ = [
    "AuditSpec",
    "Clock",
    "DeltaSpec",
    "Engine",
    "FakeEngine",
    "FaultCode",
    "Lane",
    "QualityPolicy",
    "QualityReport",
    "ReplaySlice",
    "control_deltas",
    "grade_quality",
    "infrastructure_fault_payload",
    "iter_windows",
    "load_file_delta",
    "load_replay_slice",
    "registered",
    "run_audit",
    "run_windows",
]
