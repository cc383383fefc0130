"""Checks how replay names its build: pure Python, or setup.py's mypyc modules."""

from __future__ import annotations

import ast
import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from services import build_info as build

_ROOT = Path(__file__).resolve().parents[2]


def _setup_compiled() -> list[str]:
    """Returns setup.py's COMPILED list, read without running setup.py."""
    tree = ast.parse((_ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "COMPILED" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return value
    raise AssertionError("setup.py has no COMPILED list")


def test_the_replay_modules_are_the_files_setup_py_compiles() -> None:
    files = [name.replace(".", "/") + ".py" for name in build.REPLAY_MODULES]
    assert _setup_compiled() == files
    assert all((_ROOT / path).is_file() for path in files)


def test_compiled_modules_are_those_imported_from_extensions() -> None:
    expected = [
        name
        for name in build.REPLAY_MODULES
        if str(importlib.import_module(name).__file__).endswith(tuple(EXTENSION_SUFFIXES))
    ]
    assert build.compiled_modules() == expected
    name = build.build_name()
    if expected:
        assert name == f"mypyc-compiled ({', '.join(expected)})"
    else:
        assert name == "pure Python"


def test_a_module_loaded_from_an_extension_counts_as_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settle = importlib.import_module("services.settlements")
    suffix = EXTENSION_SUFFIXES[0]
    monkeypatch.setattr(settle, "__file__", str(_ROOT / "ledger" / f"settle{suffix}"))
    chain = importlib.import_module("ledger.chain")
    monkeypatch.setattr(chain, "__file__", str(_ROOT / "ledger" / "chain.py"))
    assert "services.settlements" in build.compiled_modules()
    assert "ledger.chain" not in build.compiled_modules()
    assert "services.settlements" in build.build_name()


def test_throughput_is_events_over_wall_seconds_rounded_down() -> None:
    timing = build.throughput(1_000_231, 12.5, 12.25)
    assert timing == {
        "seconds": 12.5,
        "cpu_seconds": 12.25,
        "events_per_second": 80_018,  # 1,000,231 / 12.5 = 80,018.48
        "build": build.build_name(),
    }
    assert build.throughput(10, 0.0, 0.0)["events_per_second"] == 0
    assert build.throughput(0, 1.0, 1.0)["events_per_second"] == 0
