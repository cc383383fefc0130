"""Tests the SGLang adapter's config allowlist and lane arguments without sglang."""

from __future__ import annotations

import pytest

from engine_bridge.deltas import registered
from engine_bridge.hooks import AuditSpec
from engine_bridge.sglang_adapter import (
    SGLangEngine,
    server_args_for_lane,
    validate_engine_config,
    validate_engine_env,
)
from vocabulary.errors import CanonicalFormError, InvalidInput


def test_allowed_keys_pass_and_decimal_strings_become_floats() -> None:
    kwargs = validate_engine_config({"dtype": "bfloat16", "tp_size": 1,
                                     "mem_fraction_static": "0.8", "disable_cuda_graph": False})
    assert kwargs == {"disable_cuda_graph": False, "dtype": "bfloat16",
                      "mem_fraction_static": 0.8, "tp_size": 1}


def test_unknown_key_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_engine_config({"dtype": "bfloat16", "enable_magic": True})
    assert "enable_magic" in caught.value.message and "allowed keys" in caught.value.message
    assert caught.value.context["unknown"] == ["enable_magic"]


@pytest.mark.parametrize("key", ["model_path", "forward_hooks", "port", "trust_remote_code"])
def test_bridge_owned_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_engine_config({key: "x"})
    assert caught.value.context["owned"] == [key]


@pytest.mark.parametrize("config", [{"tp_size": "1"}, {"tp_size": True}, {"dtype": 1},
                                    {"mem_fraction_static": 0.8}])
def test_wrong_value_kinds_are_refused(config: dict) -> None:
    with pytest.raises(InvalidInput):
        validate_engine_config(config)


def test_non_decimal_string_is_refused() -> None:
    with pytest.raises(CanonicalFormError):
        validate_engine_config({"mem_fraction_static": "most"})


def test_engine_refuses_before_boot() -> None:
    with pytest.raises(InvalidInput):
        SGLangEngine("/nonexistent", {"bogus": 1})


def test_engine_env_names_and_values() -> None:
    assert validate_engine_env({"NCCL_DEBUG": "WARN"}) == {"NCCL_DEBUG": "WARN"}
    for env in ({"lower": "x"}, {"OK": 1}):
        with pytest.raises(InvalidInput):
            validate_engine_env(env)


def test_audit_lane_forces_eager_uncached_and_carries_the_hook() -> None:
    audit = AuditSpec(registered("scaled"), receipts_dir="/r")
    kwargs = server_args_for_lane("/m", {"dtype": "float32", "disable_cuda_graph": False},
                                  delta=None, audit=audit, target_modules=["model.layers.*.mlp"],
                                  receipts_dir="/r", session=audit.session, gpu=1)
    assert kwargs["disable_cuda_graph"] is True and kwargs["disable_radix_cache"] is True
    assert kwargs["skip_tokenizer_init"] is True and kwargs["base_gpu_id"] == 1
    assert [h["name"] for h in kwargs["forward_hooks"]] == [
        "arena-audit-names", "arena-audit", "arena-audit-receipt"]


def test_candidate_lane_installs_delta_and_stock_lane_has_no_hooks() -> None:
    cand = server_args_for_lane("/m", {}, delta=registered("fused_gate_up"), audit=None,
                                target_modules=["model.layers.*.mlp"], receipts_dir="/r",
                                session="s", gpu=None)
    assert [h["name"] for h in cand["forward_hooks"]] == ["arena-delta-install"]
    stock = server_args_for_lane("/m", {}, delta=None, audit=None,
                                 target_modules=["model.layers.*.mlp"], receipts_dir="/r",
                                 session="s", gpu=None)
    assert "forward_hooks" not in stock and "base_gpu_id" not in stock


def test_sglang_engine_boots_a_lane_on_a_gpu_host(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("sglang")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("SGLang lanes need a CUDA device")
    from engine_bridge.prompt_slice import load_replay_slice
    from engine_bridge.reference_model import write_reference_model

    model = write_reference_model(tmp_path / "model")
    engine = SGLangEngine(str(model), {"dtype": "float32", "mem_fraction_static": "0.3"})
    lane = engine.boot_lane("A")
    try:
        lane.ready()
        assert lane.run_window(load_replay_slice(), window=1).output_tokens == 128
    finally:
        engine.shutdown()
