"""Tests the engine port: fault codes and payloads, the clock, the fake, torch-free imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine_bridge.decimals import canonical_decimal, floor_decimal, is_canonical_decimal
from engine_bridge.deltas import registered
from engine_bridge.limits import detail_chars_max
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import (
    Engine,
    FakeEngine,
    FaultCode,
    Lane,
    ManualClock,
    engine_fault,
    infrastructure_fault_payload,
    wrap_unexpected,
)
from vocabulary.errors import CanonicalFormError, EngineFault, InvalidInput

DOMAIN_FAULT_CODES = {
    "engine_killed", "pod_service_restart", "adapter_start_failed", "adapter_request_failed",
    "adapter_timeout", "work_mismatch", "evidence_unavailable",
    "unproven_infrastructure_failure",
}


def test_fault_codes_are_exactly_the_domain_list() -> None:
    assert {c.value for c in FaultCode} == DOMAIN_FAULT_CODES


def test_engine_fault_carries_plain_code_and_stage() -> None:
    fault = engine_fault(FaultCode.ENGINE_KILLED, "lane A died", stage="speed", window=3)
    assert isinstance(fault, EngineFault)
    assert type(fault.fault_code) is str and fault.fault_code == "engine_killed"
    assert fault.to_dict()["context"] == {"fault_code": "engine_killed", "stage": "speed",
                                          "window": 3}


def test_infrastructure_fault_payload_is_bounded() -> None:
    fault = engine_fault(FaultCode.ADAPTER_TIMEOUT, "x" * 2000, stage="audit")
    payload = infrastructure_fault_payload(fault)
    assert set(payload) == {"code", "stage", "detail"}
    assert payload["code"] == "adapter_timeout" and payload["stage"] == "audit"
    assert len(payload["detail"]) == detail_chars_max


def test_a_fault_detail_at_its_bound_is_kept_whole_and_one_more_is_cut() -> None:
    exact = "y" * detail_chars_max
    whole = infrastructure_fault_payload(engine_fault(FaultCode.WORK_MISMATCH, exact,
                                                      stage="speed"))
    assert whole["detail"] == exact
    over = infrastructure_fault_payload(engine_fault(FaultCode.WORK_MISMATCH, exact + "z",
                                                     stage="speed"))
    assert over["detail"] == "y" * (detail_chars_max - 3) + "..."


def test_wrap_unexpected_keeps_ledger_errors_and_wraps_others() -> None:
    original = InvalidInput("bad")
    assert wrap_unexpected(original, stage="speed", code=FaultCode.WORK_MISMATCH) is original
    wrapped = wrap_unexpected(RuntimeError("boom"), stage="speed",
                              code=FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE)
    assert isinstance(wrapped, EngineFault)
    assert wrapped.context["fault_code"] == "unproven_infrastructure_failure"
    assert "boom" in wrapped.message


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(5)
    assert clock() == 5
    clock.advance(10)
    assert clock() == 15 and isinstance(clock(), int)


def test_fake_engine_satisfies_the_protocols_and_costs_by_script() -> None:
    engine = FakeEngine(cost_ns=lambda lane, delta, window: 7 if delta else 3)
    assert isinstance(engine, Engine)
    lane = engine.boot_lane("A", registered("faithful"))
    assert isinstance(lane, Lane)
    run = lane.run_window(load_replay_slice(), window=1)
    assert run.cost_ns == 7 and run.output_tokens == 128
    engine.shutdown()
    assert engine.live == []


@pytest.mark.parametrize(("text", "canonical"), [
    ("1.02240", "1.0224"), ("0.0", "0"), ("-0", "0"), ("1E+2", "100"), ("1e-7", "0.0000001"),
    ("0.99999", "0.99999"), ("5", "5"),
])
def test_canonical_decimal(text: str, canonical: str) -> None:
    from decimal import Decimal

    assert canonical_decimal(Decimal(text)) == canonical
    assert is_canonical_decimal(canonical)


def test_floor_decimal_never_rounds_up_and_refuses_nan() -> None:
    assert floor_decimal(0.9999999, 6) == "0.999999"
    assert floor_decimal(1.0, 6) == "1"
    assert floor_decimal(0.0, 6) == "0"
    assert not is_canonical_decimal("1.50")
    with pytest.raises(CanonicalFormError):
        floor_decimal(float("nan"), 6)


def test_port_modules_import_without_torch() -> None:
    code = ("import sys; import engine_bridge, engine_bridge.protocol, engine_bridge.speed, "
            "engine_bridge.quality, engine_bridge.hooks, engine_bridge.deltas, "
            "engine_bridge.prompt_slice, engine_bridge.subprocess_lane, "
            "engine_bridge.sglang_adapter; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'sglang' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


#: What the port imports with the base dependencies alone: no ``engine`` or ``sglang`` extra.
PORT_MODULES = (
    "engine_bridge", "engine_bridge.protocol", "engine_bridge.speed", "engine_bridge.quality",
    "engine_bridge.hooks", "engine_bridge.grading", "engine_bridge.deltas",
    "engine_bridge.prompt_slice", "engine_bridge.reference_spec", "engine_bridge.subprocess_lane",
    "engine_bridge.sglang_adapter", "services.evaluation",
)


@pytest.mark.parametrize("module", PORT_MODULES)
def test_port_modules_import_without_the_engine_extra(module: str) -> None:
    # A None entry in sys.modules makes that import fail, as if the package were absent.
    blocked = ("numpy", "torch", "transformers", "safetensors", "sglang")
    code = (f"import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
            f"import {module}")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_a_blocked_import_really_fails_in_the_port_check() -> None:
    code = "import sys; sys.modules['numpy'] = None; import engine_bridge.reference_model"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False)
    assert result.returncode != 0 and "numpy" in result.stderr


def test_the_engine_doc_states_the_real_fault_detail_bound() -> None:
    # Every place docs/engine.md gives the detail's bound names detail_chars_max's value.
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    stated = re.findall(r"detail[^.|]*?\b(?:at most|cut at)\s+([\d,]+)\s+characters", doc)
    assert len(stated) >= 2, stated
    assert {int(n.replace(",", "")) for n in stated} == {detail_chars_max}


@pytest.mark.parametrize("blocked", [("numpy",), ("torch", "transformers")])
def test_a_missing_engine_extra_is_named_with_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, blocked: tuple[str, ...]) -> None:
    from engine_bridge.extra import missing_engine_modules, require_engine_extra
    from services.evaluation import make_engine
    from vocabulary.errors import EngineUnavailable

    assert missing_engine_modules() == []  # this venv has the extra
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    assert missing_engine_modules() == sorted(blocked)
    with pytest.raises(EngineUnavailable) as missing:
        require_engine_extra("the demo")
    assert missing.value.message == (
        f"the demo needs the engine extra, which is not installed (no module "
        f"{', '.join(sorted(blocked))}): install it with pip install -e '.[engine]' in a "
        "clone, or pip install 'arena-ledger[engine]'")
    assert missing.value.exit_code == 6 and not isinstance(missing.value, EngineFault)
    # evaluate and run-controls boot their engine here, before anything is written.
    with pytest.raises(EngineUnavailable):
        make_engine("torch-reference")
