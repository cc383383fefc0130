"""Runs the sessions the documentation shows, as a reader would type them, and checks that
every command prints what the document says it prints (``transcripts``: digests, time
stamps, signatures and sizes by their shape, ``…`` for what a document leaves out).

A change to a command's output that the documents do not follow fails here, naming the
document, the command and the first line that differs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import transcripts  # same directory, prepend import mode

ROOT = Path(__file__).resolve().parents[2]


def _section(path: Path, start: str, end: str) -> str:
    text = path.read_text()
    begin = text.index(start)
    return text[begin:text.index(end, begin)]


@pytest.mark.parametrize(("document", "start", "end"), [
    ("docs/quickstart.md", "## 3. A session by hand", "## 4. Where next"),
])
def test_a_documented_session_prints_what_the_document_shows(
    document: str, start: str, end: str, tmp_path: Path,
) -> None:
    session = transcripts.parse(_section(ROOT / document, start, end))
    assert sum(isinstance(step, transcripts.Command) for step in session.steps) >= 10
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_LEDGER_")}
    # The script next to this interpreter, first on PATH; tables at the documents' width
    # (at 100 columns rich folds a 17-character submission id over two lines).
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               COLUMNS="110", NO_COLOR="1")
    results = transcripts.run(session, tmp_path, env)
    problems = [f"$ {command.line}\n  {difference}"
                for command, output in results
                if (difference := transcripts.compare(command.expected, output)) is not None]
    assert not problems, f"{document}:\n" + "\n".join(problems)


def test_the_matcher_takes_shapes_for_what_varies_and_nothing_else() -> None:
    compare = transcripts.compare
    digest, other = "ab" * 32, "cd" * 32
    assert compare([f"head {digest}"], [f"head {other}"]) is None  # an entry hash: its shape
    assert compare([f"head {digest}"], ["head abc"]) is not None
    assert compare(["signed 2026-11-29T23:02:13.169407Z"], ["signed 2026-12-02T01:00:00Z"]) is None
    assert compare(["wrote b.db (81,920 bytes, x)"], ["wrote b.db (4,096 bytes, x)"]) is None
    assert compare(["held at position 25"], ["held at position 26"]) == (
        "line 1: expected 'held at position 25', got 'held at position 26'")
    # … in a line is any text; a line of … is any number of lines, then the rest in order.
    assert compare(['{"next_step":"…","attempts":1}'], ['{"next_step":"pay","attempts":1}']) is None
    assert compare(["a", " …", "z"], ["a", "b", "c", "z"]) is None
    assert compare(["a", " …", "z"], ["a", "z"]) is None
    assert compare(["a", " …", "z"], ["a", "b"]) is not None
    assert compare(["a"], ["a", "b"]) == "line 2: expected nothing more, got 'b'"
    assert compare(["a", "b"], ["a"]) == "expected 'b', got nothing more"


def test_a_document_names_the_files_its_json_blocks_write() -> None:
    session = transcripts.parse(
        "`made.json` comes from a script:\n```sh\ncat > made.json <<EOF\n{}\nEOF\n```\n"
        "`one.jsonl` holds a line, `two.jsonl` another:\n```json\n{\"a\": 1}\n```\n\n"
        "```json\n{\"b\": 2}\n```\n```console\n$ wc -l one.jsonl\n1 one.jsonl\n$ echo $?\n0\n```\n"
    )
    assert session.files == {"one.jsonl": '{"a": 1}\n', "two.jsonl": '{"b": 2}\n'}
    commands = [step for step in session.steps if isinstance(step, transcripts.Command)]
    assert [(c.line, c.expected) for c in commands] == [
        ("wc -l one.jsonl", ["1 one.jsonl"]), ("echo $?", ["0"])]
