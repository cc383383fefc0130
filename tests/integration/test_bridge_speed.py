"""Tests paired speed windows on the in-process reference engine with the real clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_bridge.deltas import load_file_delta, registered
from engine_bridge.hooks import AuditSpec
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.reference_model import write_reference_model
from engine_bridge.speed import iter_windows
from engine_bridge.stage_timings import MLP_SHAPES, compare_mlp_calls
from vocabulary.errors import EngineFault, InvalidInput

pytest.importorskip("torch")
from engine_bridge.torch_engine import TorchReferenceEngine

REPLAY = load_replay_slice()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TorchReferenceEngine:
    return TorchReferenceEngine(write_reference_model(tmp_path_factory.mktemp("reference")))


def test_four_windows_have_the_domain_shape(engine: TorchReferenceEngine) -> None:
    payloads = list(iter_windows(engine, registered("fast_mlp"), REPLAY, windows=4))
    assert [(p["window"], p["orientation"]) for p in payloads] == [(1, 1), (2, 1), (3, 2),
                                                                   (4, 2)]
    for p in payloads:
        assert set(p) == {"window", "orientation", "stock_cost_ns", "candidate_cost_ns",
                          "stock_output_tokens", "candidate_output_tokens"}
        assert all(type(v) is int for v in p.values())
        assert p["stock_output_tokens"] == p["candidate_output_tokens"] == 128
        assert p["stock_cost_ns"] > 0 and p["candidate_cost_ns"] > 0
    assert engine.lanes == []


def test_slow_delta_is_slower_on_the_real_clock(engine: TorchReferenceEngine) -> None:
    payloads = list(iter_windows(engine, registered("slow", repeats="8"), REPLAY, windows=2,
                                 warmup_runs=0))
    stock = sum(p["stock_cost_ns"] for p in payloads)
    candidate = sum(p["candidate_cost_ns"] for p in payloads)
    # Eight MLP passes instead of one: measured about 2.5x here; 1.3x leaves room for noise.
    assert candidate > 1.3 * stock


def test_engine_kill_control_inline_keeps_earlier_windows(engine: TorchReferenceEngine) -> None:
    seen = []
    with pytest.raises(EngineFault) as caught:
        for payload in iter_windows(engine, registered("engine_kill", window="3"), REPLAY,
                                    windows=4, warmup_runs=0):
            seen.append(payload["window"])
    assert seen == [1, 2]
    assert caught.value.context["fault_code"] == "engine_killed"
    assert caught.value.context["stage"] == "speed"
    assert engine.lanes == []


def test_pod_restart_control_inline(engine: TorchReferenceEngine) -> None:
    with pytest.raises(EngineFault) as caught:
        list(iter_windows(engine, registered("pod_restart", window="1"), REPLAY, windows=2,
                          warmup_runs=0))
    assert caught.value.context["fault_code"] == "pod_service_restart"


def test_inline_engine_refuses_untrusted_file_deltas(engine: TorchReferenceEngine,
                                                     tmp_path: Path) -> None:
    source = tmp_path / "delta.py"
    source.write_text("def build_mlp(stock):\n    return stock\n")
    with pytest.raises(InvalidInput):
        engine.boot_lane("A", load_file_delta(source))
    with pytest.raises(InvalidInput):  # an audit runs the candidate's code too
        engine.boot_lane("audit", audit=AuditSpec(load_file_delta(source)))


def test_mlp_call_timing_covers_both_shapes_and_every_fast_delta(tmp_path: Path) -> None:
    # A measurement tool, so only its shape is asserted: times are positive and stock is
    # its own baseline. Two rounds of two calls keep it under a second.
    result = compare_mlp_calls(str(write_reference_model(tmp_path)), rounds=2, calls=2)
    assert set(result) == set(MLP_SHAPES)
    for shape in result.values():
        assert set(shape) == {"stock", "faithful", "fast_mlp", "fused_gate_up"}
        assert shape["stock"]["speedup"] == 1.0
        assert all(row["median_us"] > 0 and row["speedup"] > 0 for row in shape.values())
