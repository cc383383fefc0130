"""Enforces the layer rules of docs/concepts.md by reading every import statement (none runs).

- Every import between the project's packages, at module level, inside a function or under
  ``TYPE_CHECKING``, follows one table (``MAY_IMPORT``), and neither the packages nor the
  modules inside one package import each other in a cycle.
- ``machines/`` imports only the event vocabulary, itself and the standard library; no pydantic
  except through ``vocabulary.events``; no clock, randomness, logging, threads or database.
- SQLAlchemy (and the database drivers) only in the store modules and ``migrations/``;
  Alembic only in ``ledger/migrate.py`` and ``migrations/``.
- torch, sglang and transformers only inside ``engine_bridge/``, and never at module level of
  ``engine_bridge/__init__.py`` or ``engine_bridge/protocol.py``.
- rich, typer and click only in ``cli/``: below it, progress is a callback, never a bar.
- FastAPI, Starlette, uvicorn, Jinja2 and anyio only in ``web/``, the second shell.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("vocabulary", "ledger", "machines", "engine_bridge", "services", "cli", "web",
            "migrations")

#: Which of our packages each package may import (itself always). Alembic loads
#: ``migrations`` by path, so no package imports it.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "vocabulary": frozenset(),
    "machines": frozenset({"vocabulary"}),
    "ledger": frozenset({"vocabulary"}),
    "engine_bridge": frozenset({"vocabulary"}),
    "migrations": frozenset({"vocabulary", "ledger", "machines", "services"}),
    "services": frozenset({"vocabulary", "ledger", "machines", "engine_bridge"}),
    # Two shells over the same services: the CLI starts the web server (``serve``), the web
    # app never reaches back into the CLI.
    "cli": frozenset({"vocabulary", "ledger", "machines", "services", "web"}),
    "web": frozenset({"vocabulary", "ledger", "machines", "services"}),
}

MACHINES_MAY_IMPORT = ("vocabulary", "machines")
#: Standard-library modules that would give a machine a clock, randomness, logging, threads,
#: the environment or I/O; machines get all of that inside events instead.
MACHINES_MAY_NOT_IMPORT_STDLIB = (
    "random", "secrets", "time", "datetime", "zoneinfo", "logging", "uuid", "sqlite3",
    "threading", "multiprocessing", "asyncio", "concurrent", "subprocess", "socket", "urllib",
    "http", "tempfile", "shutil",
)
#: Where SQLAlchemy may appear, listed explicitly (checked to exist so the list stays true).
SQLALCHEMY_MODULES = {
    "ledger/store.py",
    "ledger/database.py",  # the database handle and how its failures are named
    "ledger/verify.py",
    "ledger/tables.py",
    "ledger/migrate.py",
    "ledger/stored_tree.py",  # the Merkle tree's storage half: reads nodes via the store connection
    "ledger/archive.py",  # the fold's scratch archive: a private temporary SQLite file
    "ledger/sqlite_rows.py",  # multi-row INSERTs, shared by the store and the archive
    "ledger/read_models.py",  # the read model tables: upserts and the queries that read them
}
SQLALCHEMY_LIKE = ("sqlalchemy", "psycopg", "psycopg2", "sqlite3", "asyncpg")
ALEMBIC_MODULES = {"ledger/migrate.py"}
ENGINE_LIBRARIES = ("torch", "sglang", "transformers")
TERMINAL_LIBRARIES = ("rich", "typer", "click")
WEB_LIBRARIES = ("fastapi", "starlette", "uvicorn", "jinja2", "anyio")
ENGINE_ENTRY_MODULES = {"engine_bridge/__init__.py", "engine_bridge/protocol.py"}


@dataclass(frozen=True)
class Import:
    """Is one imported module, where it is, and whether it runs when the file is imported."""

    file: str
    line: int
    module: str
    module_level: bool
    type_only: bool

    def __str__(self) -> str:
        where = "module level" if self.module_level else "function level"
        return f"{self.file}:{self.line} imports {self.module} ({where})"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package_of(relative: str) -> list[str]:
    # The package a relative import starts from: the file's folder (also for __init__.py).
    return relative.removesuffix(".py").split("/")[:-1]


class _Collector(ast.NodeVisitor):
    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.package = _package_of(relative)
        self.found: list[Import] = []
        self._function_depth = 0
        self._type_only_depth = 0

    def _add(self, node: ast.AST, module: str) -> None:
        self.found.append(Import(self.relative, node.lineno, module,  # type: ignore[attr-defined]
                                 self._function_depth == 0, self._type_only_depth > 0))

    def _function(self, node: ast.AST) -> None:
        self._function_depth += 1
        self.generic_visit(node)
        self._function_depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_only_depth += 1
            for child in node.body:
                self.visit(child)
            self._type_only_depth -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        # `from pkg import name` may import the submodule pkg.name; count both spellings.
        self._add(node, module)
        for alias in node.names:
            if alias.name != "*":
                self._add(node, f"{module}.{alias.name}")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._add(node, first.value)
        self.generic_visit(node)


def imports_in_source(relative: str, source: str) -> list[Import]:
    """Returns every import in ``source`` (a file at ``relative`` under the project root)."""
    collector = _Collector(relative)
    collector.visit(ast.parse(source, filename=relative))
    return collector.found


def _project_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imports(package: str) -> list[Import]:
    found: list[Import] = []
    for path in _project_files(package):
        found.extend(imports_in_source(_rel(path), path.read_text(encoding="utf-8")))
    return found


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _within(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# -- the scanner itself ----------------------------------------------------------------------


def test_the_scanner_classifies_imports() -> None:
    source = (
        "from __future__ import annotations\n"
        "import os, sqlalchemy.orm\n"
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from ..chain import entry_hash\n"
        "if TYPE_CHECKING:\n"
        "    from machines.arena import ArenaState\n"
        "class K:\n"
        "    import torch\n"
        "def f():\n"
        "    import sglang\n"
        "    return importlib.import_module('transformers')\n"
    )
    found = {(i.module, i.module_level, i.type_only) for i in
             imports_in_source("ledger/sub/mod.py", source)}
    assert ("os", True, False) in found and ("sqlalchemy.orm", True, False) in found
    assert ("ledger.sub.sibling", True, False) in found
    assert ("ledger.chain.entry_hash", True, False) in found
    assert ("machines.arena", True, True) in found
    assert ("torch", True, False) in found  # a class body runs at import
    assert ("sglang", False, False) in found
    assert ("transformers", False, False) in found


def test_the_scan_covers_the_packages_and_the_explicit_lists_are_true() -> None:
    for package in ("ledger", "machines", "migrations"):
        assert _project_files(package), f"{package}/ has no Python files"
    for relative in SQLALCHEMY_MODULES | ALEMBIC_MODULES:
        assert (ROOT / relative).is_file(), f"{relative} is listed but does not exist"
    store_like = {_rel(p) for p in (ROOT / "ledger").glob("store*.py")}
    assert store_like <= SQLALCHEMY_MODULES, f"add {store_like - SQLALCHEMY_MODULES} to the list"


# -- the rules -------------------------------------------------------------------------------


def _machines_violations() -> list[str]:
    problems = []
    for imp in _imports("machines"):
        top = _top(imp.module)
        if top == "__future__" or imp.type_only:
            continue
        if top in sys.stdlib_module_names:
            if top in MACHINES_MAY_NOT_IMPORT_STDLIB:
                problems.append(f"{imp}: machines get time, randomness and I/O from events")
            continue
        if not _within(imp.module, MACHINES_MAY_IMPORT) and not _is_symbol_of_allowed(imp):
            problems.append(str(imp))
    return problems


def _is_symbol_of_allowed(imp: Import) -> bool:
    # `from vocabulary.events import Event` is recorded as both vocabulary.events and
    # vocabulary.events.Event; the second is a name in an allowed module, not a new module.
    parent = imp.module.rsplit(".", 1)[0]
    return _within(parent, MACHINES_MAY_IMPORT)


def test_machines_import_only_event_schemas_and_the_standard_library() -> None:
    assert _machines_violations() == []


def test_machines_never_import_pydantic_directly() -> None:
    offenders = [str(i) for i in _imports("machines") if _top(i.module) == "pydantic"]
    assert offenders == []


def _ours(imp: Import) -> str | None:
    """Returns the project module ``imp`` names (a module, not a name inside one), or None."""
    if _top(imp.module) not in PACKAGES:
        return None
    for candidate in (imp.module, imp.module.rsplit(".", 1)[0]):
        parts = candidate.split(".")
        if (ROOT.joinpath(*parts).with_suffix(".py").is_file()
                or (ROOT.joinpath(*parts) / "__init__.py").is_file()):
            return candidate
    return None


def _edges() -> dict[str, set[str]]:
    """Returns module -> the project modules it imports, every kind of import counted."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in _project_files(package):
            relative = _rel(path)
            name = relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            targets = graph.setdefault(name, set())
            for imp in imports_in_source(relative, path.read_text(encoding="utf-8")):
                target = _ours(imp)
                if target is not None and target != name and target != _top(name):
                    targets.add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """Returns one cycle of ``graph`` as a path that ends where it starts, or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"a2"}, "a2": set(), "b": {"b"}}) == ["b", "b"]


def test_every_import_between_packages_follows_the_table() -> None:
    assert set(MAY_IMPORT) == set(PACKAGES)
    offenders = [
        f"{module} imports {target}"
        for module, targets in sorted(_edges().items()) for target in sorted(targets)
        if _top(target) != _top(module) and _top(target) not in MAY_IMPORT[_top(module)]
    ]
    assert offenders == []


def test_the_table_itself_has_no_cycle() -> None:
    assert _cycle({p: set(allowed) for p, allowed in MAY_IMPORT.items()}) == []


def test_no_two_modules_import_each_other_even_through_others() -> None:
    assert _cycle(_edges()) == []


def test_sqlalchemy_and_drivers_live_only_in_the_store_and_migrations() -> None:
    offenders = [
        str(i) for package in PACKAGES if package != "migrations" for i in _imports(package)
        if _top(i.module) in SQLALCHEMY_LIKE and not i.type_only
        and i.file not in SQLALCHEMY_MODULES
    ]
    assert offenders == [], "SQLAlchemy belongs to the store modules only: " + "; ".join(offenders)


def test_alembic_lives_only_in_migrate_and_migrations() -> None:
    offenders = [
        str(i) for package in PACKAGES if package != "migrations" for i in _imports(package)
        if _top(i.module) == "alembic" and i.file not in ALEMBIC_MODULES
    ]
    assert offenders == []


def test_terminal_libraries_live_only_in_cli() -> None:
    # The library reports progress through callbacks (ledger.progress) and draws nothing:
    # the CLI decides whether a bar is shown, so rich and typer stay out of every layer
    # below it, type-only imports included.
    offenders = [
        str(i) for package in PACKAGES if package != "cli" for i in _imports(package)
        if _top(i.module) in TERMINAL_LIBRARIES
    ]
    assert offenders == []


def test_web_libraries_live_only_in_web() -> None:
    # The dashboard is an adapter like the CLI: the services answer in plain data, and only
    # web/ knows about HTTP, templates or the server.
    offenders = [
        str(i) for package in PACKAGES if package != "web" for i in _imports(package)
        if _top(i.module) in WEB_LIBRARIES
    ]
    assert offenders == []


def test_engine_libraries_live_only_in_engine_bridge() -> None:
    offenders = [
        str(i) for package in PACKAGES if package != "engine_bridge" for i in _imports(package)
        if _top(i.module) in ENGINE_LIBRARIES
    ]
    assert offenders == []


@pytest.mark.parametrize("relative", sorted(ENGINE_ENTRY_MODULES))
def test_engine_bridge_entry_modules_import_no_engine_at_module_level(relative: str) -> None:
    path = ROOT / relative
    if not path.is_file():
        pytest.skip(f"{relative} does not exist yet")
    offenders = [
        str(i) for i in imports_in_source(relative, path.read_text(encoding="utf-8"))
        if i.module_level and not i.type_only and _top(i.module) in ENGINE_LIBRARIES
    ]
    assert offenders == []

