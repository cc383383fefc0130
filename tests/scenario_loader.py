"""Loads the settled ledger's builder from tests/integration/settled_ledger.py.

tests/ is not a package, so the e2e tests that replay that hand-computed ledger through the
CLI and the dashboard suites load that helper module by path, once per process, under one
name.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def settlement_scenario() -> ModuleType:
    """Returns the integration helper module that builds the settled ledger."""
    name = "settlement_scenario"
    if name not in sys.modules:
        path = Path(__file__).parent / "integration" / "settled_ledger.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it executes
        spec.loader.exec_module(module)
    return sys.modules[name]
