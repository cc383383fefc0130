"""Tells whether the ``engine`` extra is installed, without importing any of it.

The ledger runs on its base dependencies; the torch reference engine needs the ``engine``
extra (pyproject.toml). A command that boots the engine asks here first, so a missing extra
is one clear line before anything is written, not a ModuleNotFoundError after a session
has half run. ``find_spec`` looks the modules up without importing torch (seconds).
"""

from __future__ import annotations

import importlib.util

from vocabulary.errors import EngineUnavailable

__all__ = ["ENGINE_EXTRA_INSTALL", "ENGINE_EXTRA_MODULES", "missing_engine_modules",
           "require_engine_extra"]

#: The top-level modules of the ``engine`` extra's packages (pyproject.toml).
ENGINE_EXTRA_MODULES = ("numpy", "safetensors", "torch", "transformers")
#: How to install the extra, in a clone (the README's way) and from an index.
ENGINE_EXTRA_INSTALL = (
    "pip install -e '.[engine]' in a clone, or pip install 'arena-ledger[engine]'"
)


def missing_engine_modules() -> list[str]:
    """Returns the modules of the engine extra that cannot be found, in name order."""
    missing = []
    for name in ENGINE_EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install or a module set to None
            found = False
        if not found:
            missing.append(name)
    return missing


def require_engine_extra(needed_by: str = "the torch reference engine") -> None:
    """Raises EngineUnavailable, naming the extra and how to install it, when it is missing."""
    missing = missing_engine_modules()
    if missing:
        raise EngineUnavailable(
            f"{needed_by} needs the engine extra, which is not installed (no module "
            f"{', '.join(missing)}): install it with {ENGINE_EXTRA_INSTALL}",
            missing=missing,
        )
