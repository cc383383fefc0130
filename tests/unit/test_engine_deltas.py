"""Tests the delta registry, digests and file deltas (no torch needed)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine_bridge.deltas import (
    REGISTRY,
    DeltaSpec,
    control_deltas,
    load_file_delta,
    registered,
    registered_by_digest,
)
from engine_bridge.limits import slow_delta_repeats_max, windows_max
from vocabulary.errors import InvalidInput, NotFound

#: Changing a registered delta's description of itself must be a deliberate act.
PINNED_DIGESTS = {
    "engine_kill": "388610ccdf5975b7623aaf8f5725df72297466d49b55dbf7b8c90c0c3c995c77",
    "fast_mlp": "371105463030ed5615a1cd66ed6eb9e5b141f1dd5422ee5d643bb63507aa093a",
    "faithful": "5b9e6ce517f21b4b5f9a0def605445ca9a73c966308852279be82d9623f94949",
    "fused_gate_up": "08065173babd324827064a35632b9d5c370cd56ac32cab250e1a927e4a0cc2aa",
    "pod_restart": "ff9ce6b80733063b96b6a7b8f83d9888c5a54ad47e4500ace2f8eabfad49b271",
    "scaled": "65ac6e6512fc97e282515992bd5949d44ddf0154397566857c47358bd086fdf7",
    "skip_mlp": "ae46cc7bf6b5c2306de60f019097a08359b625aa7b3f9f66ab5d31f3d4335c6e",
    "slow": "d038a26f662b28a5be4399e827d762db3591cc2b1ac96446b43c067a62e448c2",
    "wrong_mlp": "505b7720e40744c1d5d45f602013a525155a6f1f49ae245647283b94798a3b5d",
}


def test_registry_has_the_required_deltas_and_control_kinds() -> None:
    assert set(REGISTRY) == {"faithful", "fast_mlp", "fused_gate_up", "wrong_mlp", "skip_mlp",
                             "scaled", "slow", "engine_kill", "pod_restart"}
    kinds = {row["name"]: row["control_kind"] for row in control_deltas()}
    assert kinds["wrong_mlp"] == "wrong_mlp" and kinds["skip_mlp"] == "skip_mlp"
    assert kinds["engine_kill"] == "engine_kill" and kinds["pod_restart"] == "pod_restart"
    assert kinds["faithful"] == "identity" and kinds["fast_mlp"] == "honest"


def test_digests_are_stable_distinct_and_parameter_sensitive() -> None:
    digests = {row["name"]: row["delta_digest"] for row in control_deltas()}
    assert len(set(digests.values())) == len(digests)
    assert all(len(d) == 64 and d == d.lower() for d in digests.values())
    assert registered("scaled").digest == registered("scaled", epsilon="0.001").digest
    assert registered("scaled", epsilon="0.002").digest != registered("scaled").digest
    assert registered("faithful").digest == registered("faithful").digest
    assert digests == PINNED_DIGESTS


def test_registered_by_digest_round_trips() -> None:
    spec = registered("slow", repeats="4")
    assert registered_by_digest(spec.digest, [spec]) == spec
    assert registered_by_digest(registered("skip_mlp").digest).name == "skip_mlp"
    with pytest.raises(NotFound):
        registered_by_digest("0" * 64)


@pytest.mark.parametrize("params", [{"epsilon": "1e-3"}, {"epsilon": "0.0010"},
                                    {"epsilon": 0.001}, {"bogus": "1"}])
def test_parameters_must_be_known_canonical_decimal_strings(params: dict) -> None:
    with pytest.raises(InvalidInput):
        registered("scaled", **params)


def test_bounds_and_unknown_names_are_refused() -> None:
    with pytest.raises(InvalidInput):
        registered("slow", repeats="1000")
    with pytest.raises(InvalidInput):
        registered("engine_kill", window="9")
    with pytest.raises(NotFound):
        registered("turbo")


@pytest.mark.parametrize(("name", "key", "limit"), [
    ("slow", "repeats", slow_delta_repeats_max), ("engine_kill", "window", windows_max),
    ("pod_restart", "window", windows_max)])
def test_whole_number_parameters_are_bounded_inclusively(name: str, key: str,
                                                         limit: int) -> None:
    assert registered(name, **{key: "1"}).param_int(key) == 1
    assert registered(name, **{key: str(limit)}).param_int(key) == limit
    for outside in ("0", str(limit + 1), "-1"):
        with pytest.raises(InvalidInput, match=f"must be 1..{limit}"):
            registered(name, **{key: outside})
    # A canonical decimal that is not a whole number is refused by name, not a ValueError.
    with pytest.raises(InvalidInput, match=f"parameter {key} of delta '{name}' must be a "
                                           "whole number, got '1.5'") as caught:
        registered(name, **{key: "1.5"})
    assert caught.value.context["param"] == key


def test_spec_survives_the_dict_round_trip() -> None:
    spec = registered("scaled", epsilon="0.01")
    again = DeltaSpec.from_dict(spec.to_dict())
    assert again == spec and again.digest == spec.digest


def test_file_delta_digest_is_sha256_of_bytes_and_entry_point_is_declared(
        tmp_path: Path) -> None:
    source = tmp_path / "delta.py"
    source.write_text('ARENA_DELTA_ENTRY_POINT = "make"\n\ndef make(stock):\n    return stock\n')
    spec = load_file_delta(source)
    assert spec.kind == "file" and spec.name == "make"
    assert spec.digest == hashlib.sha256(source.read_bytes()).hexdigest()
    assert load_file_delta(source, "make").digest == spec.digest
    assert DeltaSpec.from_dict(spec.to_dict()) == spec


def test_file_delta_defaults_to_build_mlp_and_needs_the_function(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text("def build_mlp(stock):\n    return stock\n")
    assert load_file_delta(good).name == "build_mlp"
    bad = tmp_path / "bad.py"
    bad.write_text("def other(stock):\n    return stock\n")
    with pytest.raises(InvalidInput):
        load_file_delta(bad)
    broken = tmp_path / "broken.py"
    broken.write_text("def build_mlp(:\n")
    with pytest.raises(InvalidInput):
        load_file_delta(broken)


def test_a_delta_file_that_cannot_be_read_or_parsed_is_named(tmp_path: Path) -> None:
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"def build_mlp(stock):\n    return stock\x00\n")
    cases = {
        tmp_path / "missing.py": "does not exist",
        tmp_path: "is a directory, not a file",
        nul: "is not valid Python: source code string cannot contain null bytes",
    }
    for path, problem in cases.items():
        with pytest.raises(InvalidInput) as caught:
            load_file_delta(path)
        assert caught.value.message == f"delta file {path.resolve()} {problem}"
        assert caught.value.context["path"] == str(path)
