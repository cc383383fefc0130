"""Shapes ``--help``: commands grouped by who runs them, usage lines and option types as a
person reads them, and docstrings reflowed to the terminal.

typer's own help showed ``<bool>`` after every flag (``--json <bool>``, ``--help <bool>``),
``{path}`` and ``{kind} {ident}`` for arguments in usage lines, and a docstring's hard line
breaks as they stood in the source. ``restyle`` sets the command classes below on every
command of an app before typer builds it, and the role panels of ``roles``.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import DefaultPlaceholder

__all__ = ["ROLES", "HelpCommand", "HelpGroup", "restyle", "role_of"]

#: The help panels, in the order ``--help`` shows them, and the commands in each
#: (docs/concepts.md, "Who does what"). A command missing here fails a test.
ROLES: dict[str, tuple[str, ...]] = {
    "Validator: record intake, attempts and settlements": (
        "append", "intake", "claim", "conclude", "expire", "settle", "weights", "replay",
    ),
    "Operator: set up, migrate, correct, sign and export": (
        "init", "db", "commission", "register-control", "emission-policy", "hold", "release",
        "requeue", "grant-credit", "key", "checkpoint", "export", "import", "verify", "stats",
        "projections",
    ),
    "Auditor: read, explain and check": (
        "events", "head", "explain", "submissions", "controls", "history", "rewards", "fees",
        "earnings", "checkpoints", "prove", "verify-proof", "verify-bundle", "serve",
    ),
    "Engine: evaluate on the reference engine": ("evaluate", "run-controls", "calibrate",
                                                 "demo"),
}


def role_of(command: str) -> str | None:
    """Returns the panel of a top-level command, or None when ``ROLES`` does not list it."""
    return next((panel for panel, names in ROLES.items() if command in names), None)


def _reflowed(text: str | None) -> str | None:
    """Returns a docstring with each paragraph on one line (typer keeps the source's line
    breaks after the first paragraph; the terminal wraps them again where it must)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split("\n")) if not p.startswith("\b") else p
                       for p in paragraphs)


def _usage_name(argument: Any) -> str:
    """Returns an argument as a usage line shows it: FILE, [REVISION], NOTES..."""
    name = str(argument.metavar or str(argument.name).upper())
    if argument.nargs != 1:
        name += "..."
    return name if argument.required else f"[{name}]"


def _restyled(param: Any) -> Any:
    """Returns a parameter as help shows it: a flag without a type, an argument in capitals."""
    if param.param_type_name == "argument":
        param.metavar = param.metavar or str(param.name).upper()
    elif getattr(param, "is_flag", False) and not getattr(param, "count", False):
        param.metavar = ""  # a flag takes no value: no "<bool>" after it
    return param


class _Restyled:
    """What the command and group classes share (see the module's docstring)."""

    help: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _reflowed(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return [_restyled(param) for param in super().get_params(ctx)]  # type: ignore[misc]

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        metavar = getattr(self, "options_metavar", None)
        pieces = [metavar] if metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(_usage_name(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        if isinstance(self, TyperGroup):
            pieces.append(self.subcommand_metavar)
        return pieces


class HelpCommand(_Restyled, TyperCommand):
    """A typer command whose help reads as the module's docstring says."""


class HelpGroup(_Restyled, TyperGroup):
    """A typer group (``arena-ledger``, ``db``, ``key``, ``prove``) likewise; its commands
    listed in ``ROLES`` order, so the panels are too."""

    def list_commands(self, ctx: Any) -> list[str]:
        order = [name for names in ROLES.values() for name in names]
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def _unset(value: Any, default: type) -> bool:
    """Tells whether a command's or group's class is typer's own (given or by default)."""
    return value is None or value is default or isinstance(value, DefaultPlaceholder)


def restyle(app: typer.Typer, *, top: bool = True) -> None:
    """Sets ``HelpCommand`` and ``HelpGroup`` on every command and group of ``app``, and on
    the top level each command's role panel (``ROLES``)."""
    if _unset(app.info.cls, TyperGroup):
        app.info.cls = HelpGroup
    for command in app.registered_commands:
        if _unset(command.cls, TyperCommand):
            command.cls = HelpCommand
        name = command.name or (command.callback.__name__ if command.callback else "")
        if top:
            command.rich_help_panel = role_of(name.replace("_", "-"))
    for group in app.registered_groups:
        if _unset(group.cls, TyperGroup):
            group.cls = HelpGroup
        if top:
            group.rich_help_panel = role_of(str(group.name))
        if group.typer_instance is not None:
            restyle(group.typer_instance, top=False)
