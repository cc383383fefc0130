"""Runs the shell sessions a Markdown document shows and compares what they print.

A document's session is its ```` ```sh ```` blocks (set-up, run as written), its
```` ```json ```` blocks (JSON Lines files, written under the names the text before each
gives in backquotes, e.g. `att-1.jsonl`) and its ```` ```console ```` blocks: each
``$ command`` line is run, in order, in one bash session, and the lines after it up to the
next ``$`` are what it must print (stdout and stderr together).

What a rerun cannot reproduce is matched by its shape, not its value: a 64-hex digest, a
time stamp (every entry hash depends on one), a base64 signature or key, a key id, and a
file's size in bytes. ``…`` in an expected line stands for any text; a line that is only
``…`` for any number of lines. Everything else must match exactly, and a digest that the
session depends on (a submission id a later command names) is checked by the command that
names it: it fails otherwise.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Command", "Session", "compare", "parse", "run"]

_BLOCK = re.compile(r"^```(sh|json|console)\n(.*?)^```", re.M | re.S)
_FILE_NAME = re.compile(r"`([\w.-]+\.jsonl?)`")
_NAMED_IN_SCRIPT = re.compile(r"[\w.-]+\.jsonl?")
#: What varies from run to run, in the order they are tried on an expected line.
_SHAPES = (
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), r"\d{4}-\d\d-\d\dT[\d:.]+Z"),
    (re.compile(r"\b[0-9a-f]{64}\b"), r"[0-9a-f]{64}"),
    (re.compile(r"[A-Za-z0-9+/]{40,}={0,2}"), r"[A-Za-z0-9+/]{40,}={0,2}"),
    (re.compile(r"(?<=\+)[0-9a-f]{8}(?=\+)"), r"[0-9a-f]{8}"),
    (re.compile(r"\b[\d,]+ bytes\b"), r"[\d,]+ bytes"),
    (re.compile(r"[0-9a-f]{16}…"), r"[0-9a-f]{16}…"),
)
_MARK = "@@transcript-command "


@dataclass
class Command:
    """One ``$`` line of a console block and what the document says it prints."""

    line: str
    expected: list[str]


@dataclass
class Session:
    """A document's session: set-up scripts, files to write, and commands in order."""

    steps: list[str | Command] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> Session:
    """Reads a document's session (see the module's docstring)."""
    session = Session()
    end = 0
    named: list[str] = []  # file names the text has given so far, in order
    scripted: set[str] = set()  # file names a set-up script writes
    for match in _BLOCK.finditer(text):
        kind, body = match.group(1), match.group(2)
        named += [n for n in _FILE_NAME.findall(text[end:match.start()]) if n not in named]
        end = match.end()
        if kind == "sh":
            session.steps.append(body)
            scripted.update(_NAMED_IN_SCRIPT.findall(body))  # `cat > arena.json` makes it
        elif kind == "json":
            # The first name given and not yet written: "`a.jsonl` … `b.jsonl` …" then
            # two blocks writes a.jsonl, then b.jsonl.
            unwritten = [n for n in named if n not in session.files and n not in scripted]
            if unwritten:
                session.files[unwritten[0]] = body
        else:
            session.steps.extend(_commands(body))
    return session


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:], []))
        elif commands:
            commands[-1].expected.append(line)
    return commands


def run(session: Session, cwd: Path, env: dict[str, str]) -> list[tuple[Command, list[str]]]:
    """Runs the session in one bash process in ``cwd``; returns each command's output."""
    for name, body in session.files.items():
        (cwd / name).write_text(body)
    script = ["set +e", "__rc=0"]
    commands: list[Command] = []
    for step in session.steps:
        if isinstance(step, str):
            script.append(step)
            continue
        # $? is the previous command's status again when this one starts (`echo $?`).
        script += [f"printf '%s\\n' '{_MARK}{len(commands)}'", "(exit $__rc)",
                   f"{{ {step.line}\n}} 2>&1", "__rc=$?"]  # a line may end in a # comment
        commands.append(step)
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    outputs: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith(_MARK):
            current = outputs.setdefault(int(line[len(_MARK):]), [])
        elif current is not None:
            current.append(line.rstrip())
    return [(command, outputs.get(index, [])) for index, command in enumerate(commands)]


def _pattern(expected: str) -> re.Pattern[str]:
    """Returns the regular expression an expected line stands for."""
    pieces: list[str] = []
    rest = expected.rstrip()
    while rest:
        found = None
        for shape, replacement in _SHAPES:
            match = shape.search(rest)
            if match and (found is None or match.start() < found[0].start()):
                found = (match, replacement)
        if found is None:
            pieces.append(_literal(rest))
            break
        match, replacement = found
        pieces.append(_literal(rest[:match.start()]) + replacement)
        rest = rest[match.end():]
    return re.compile("".join(pieces))


def _literal(text: str) -> str:
    return ".*?".join(re.escape(part) for part in text.split("…"))


def compare(expected: list[str], actual: list[str]) -> str | None:
    """Returns None when ``actual`` is what ``expected`` shows, else the first difference."""
    return _match(expected, 0, actual, 0)


def _match(expected: list[str], e: int, actual: list[str], a: int) -> str | None:
    while e < len(expected):
        if expected[e].strip() == "…":  # any number of lines, then the rest must follow
            for skip in range(a, len(actual) + 1):
                if _match(expected, e + 1, actual, skip) is None:
                    return None
            return f"nothing after line {a + 1} matches the lines after an elision"
        if a >= len(actual):
            return f"expected {expected[e]!r}, got nothing more"
        if not _pattern(expected[e]).fullmatch(actual[a].rstrip()):
            return f"line {a + 1}: expected {expected[e]!r}, got {actual[a]!r}"
        e, a = e + 1, a + 1
    if a < len(actual):
        return f"line {a + 1}: expected nothing more, got {actual[a]!r}"
    return None
