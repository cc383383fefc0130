"""Checks ``--help`` as a new user reads it at 80 columns (``cli.help``, ``cli.app``): flags
without a ``<bool>`` type, usage lines in capitals, every option explained, docstrings
reflowed, the global defaults whole, the commands grouped by role, and ``--version``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cli.app import app, append
from cli.help import ROLES, role_of
from ledger.store import DEFAULT_URL

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 80


def _help(*args: str) -> str:
    """Returns ``arena-ledger ARGS --help`` as printed on an 80-column terminal."""
    done = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH),
                                                           "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    return done.output


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Yields (path, command) for every group and command under ``group``."""
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*prefix, name), command
        if hasattr(command, "list_commands"):
            yield from _commands(command, (*prefix, name))


ROOT_COMMAND = typer.main.get_command(app)
PATHS = [path for path, _ in _commands(ROOT_COMMAND)]


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "arena-ledger")
def test_no_flag_shows_a_type_and_no_usage_line_shows_braces(path: tuple[str, ...]) -> None:
    # Was: `--json <bool>`, `--help <bool>`, `Usage: … {kind} {ident}`.
    text = _help(*path)
    assert "<bool>" not in text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage


def test_arguments_are_named_in_capitals_in_usage_lines() -> None:
    usage = {path: next(line for line in _help(*path).splitlines() if "Usage:" in line).strip()
             for path in (("append",), ("explain",), ("db", "upgrade"))}
    assert usage[("append",)] == "Usage: arena-ledger append [OPTIONS] FILE"
    assert usage[("explain",)] == "Usage: arena-ledger explain [OPTIONS] KIND IDENT"
    assert usage[("db", "upgrade")] == "Usage: arena-ledger db upgrade [OPTIONS] [REVISION]"


def test_every_option_and_argument_says_what_it_is() -> None:
    # Was: submissions' --arena, --hotkey and --status (and a score more) with no help.
    unexplained = [f"{' '.join(path)} {param.name}"
                   for path, command in _commands(ROOT_COMMAND)
                   for param in command.params if not getattr(param, "help", None)]
    assert unexplained == []
    text = _help("submissions")
    for option in ("--arena", "--hotkey", "--status"):
        (line,) = [line for line in text.splitlines() if f" {option} " in line]
        assert line.split(option, 1)[1].strip(" │")  # its help beside it


def test_the_global_options_show_their_choices_and_defaults_whole() -> None:
    # Was: `<debug|info|warning|er` / `ror>` over two lines, `sqlite:///arena-ledger.…`.
    text = _help()
    words = set(re.findall(r"[\w$:/.+-]+", text))
    assert {"debug", "info", "warning", "error"} <= words
    assert DEFAULT_URL in words
    assert "…" not in text.replace("postgresql+psycopg://…", "")
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def test_a_docstring_is_reflowed_not_broken_where_the_source_broke_it() -> None:
    # Was: "… before the first batch is written." / "Every" / "domain event is checked …".
    text = _help("append")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Every line's schema" in line)
    paragraph = []
    for line in lines[start:]:
        if not line.strip():
            break
        paragraph.append(line.strip())
    assert all(len(line) > WIDTH // 2 for line in paragraph[:-1]), paragraph
    doc = " ".join((append.__doc__ or "").split())
    assert " ".join(paragraph) in doc


def test_the_commands_are_grouped_by_role_in_the_roles_order() -> None:
    text = _help()
    panels = [re.sub(r"[─╭╮ ]+$", "", line.split("─ ", 1)[1]) for line in text.splitlines()
              if line.startswith("╭─ ") and "Options" not in line]
    assert panels == list(ROLES)
    top = typer.Context(ROOT_COMMAND)
    assert [name for name in ROOT_COMMAND.list_commands(top) if role_of(name) is None] == []
    for panel, names in ROLES.items():
        body = text.split(f"╭─ {panel} ", 1)[1].split("╰", 1)[0]
        listed = [line.split()[1] for line in body.splitlines()[1:] if line.split()[1:]
                  and line.split()[1] in ROOT_COMMAND.list_commands(top)]
        assert listed == list(names)


def test_version_prints_the_packages_version_and_exits_0() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.output == f"arena-ledger {project['version']}\n"
