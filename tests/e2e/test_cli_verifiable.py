"""Drives the verifiable-ledger commands as a user would: the real CLI in a subprocess.

One SQLite ledger is built per module (init, append, keys, two checkpoints, a signed
export); the tests then prove, verify offline, tamper and import into each backend.
Offline commands run with ``--db`` pointing into a directory that does not exist, so any
attempt to open a database would fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Credit grants: valid domain events that need no other stream, so the machines accept them.
EVENTS = "\n".join(
    json.dumps({"stream": f"credit-c{n}", "type": "CreditGranted",
                "payload": {"credit_id": f"c{n}", "hotkey": f"hk{n % 3}", "amount_rao": n,
                            "note": f"grant {n}"}})
    for n in range(1, 10)
)


@dataclass
class Ledger:
    """Paths of the module's ledger and what was made from it."""

    root: Path
    db: str
    key: Path
    pub: Path
    note6: Path
    note9: Path
    bundle: Path


def cli(*args: str | Path, db: str, cwd: Path, expect: int = 0) -> subprocess.CompletedProcess[str]:
    """Runs ``arena-ledger ARGS`` and checks the exit code and that no traceback leaked."""
    # Output to a pipe, whatever the session's terminal (pytest-xdist workers, and some
    # shells, export COLUMNS): tables as wide as their cells.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["ARENA_LEDGER_DB"] = db
    done = subprocess.run([sys.executable, "-m", "cli.app", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def offline(root: Path) -> str:
    """Returns a database URL that cannot be opened (its directory does not exist)."""
    return f"sqlite:///{root / 'no-such-dir' / 'x.db'}"


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    root = tmp_path_factory.mktemp("cli")
    db = f"sqlite:///{root / 'ledger.db'}"
    lines = EVENTS.splitlines()
    (root / "first.jsonl").write_text("\n".join(lines[:6]) + "\n")
    (root / "more.jsonl").write_text("\n".join(lines[6:]) + "\n")
    cli("init", db=db, cwd=root)
    cli("append", "first.jsonl", db=db, cwd=root)
    made = cli("key", "generate", "--name", "ops.example", "--out", "log.key", db=db, cwd=root)
    assert "arena-ledger/ops.example" in made.stdout
    note6 = cli("checkpoint", "--key", "log.key", db=db, cwd=root).stdout
    (root / "cp6.note").write_text(note6)
    cli("append", "more.jsonl", db=db, cwd=root)
    (root / "cp9.note").write_text(cli("checkpoint", "--key", "log.key", db=db, cwd=root).stdout)
    cli("export", "bundle", "--key", "log.key", db=db, cwd=root)
    return Ledger(root, db, root / "log.key", root / "log.key.pub", root / "cp6.note",
                  root / "cp9.note", root / "bundle")


def test_keys_are_written_0600_and_never_overwritten(ledger: Ledger) -> None:
    assert stat.S_IMODE(ledger.key.stat().st_mode) == 0o600
    assert ledger.pub.read_text().startswith("ops.example+")
    before = ledger.key.read_text()
    done = cli("key", "generate", "--name", "ops.example", "--out", ledger.key,
               db=ledger.db, cwd=ledger.root, expect=1)
    assert "already exists" in done.stderr and "--force" in done.stderr
    assert ledger.key.read_text() == before


def test_checkpoints_are_notes_listed_newest_first(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped, as to a file: no cell cut to fit
    assert ledger.note6.read_text().startswith("arena-ledger/ops.example\n6\n")
    assert "\n\n— ops.example " in ledger.note6.read_text()
    # A list, so JSON Lines (docs/cli.md): one checkpoint a line (was one indented array).
    text = cli("checkpoints", "--json", db=ledger.db, cwd=ledger.root).stdout
    listed = [json.loads(line) for line in text.splitlines()]
    assert len(listed) == 3 and text.endswith("}\n")
    assert [row["tree_size"] for row in listed] == [9, 9, 6]  # export --key signed one more
    assert listed[-1]["note"] == ledger.note6.read_text()
    newest = cli("checkpoints", "--limit", "1", "--json", db=ledger.db, cwd=ledger.root).stdout
    assert [json.loads(line) for line in newest.splitlines()] == listed[:1]
    # The table a person reads: one row per checkpoint, newest first, and the count.
    shown = cli("checkpoints", db=ledger.db, cwd=ledger.root).stdout.splitlines()
    assert shown[0].split() == ["id", "tree_size", "root_hash", "origin", "key", "created_at"]
    assert [line.split() for line in shown[1:-1]] == [
        [str(row["id"]), str(row["tree_size"]), row["root_hash"][:16] + "…", row["origin"],
         row["key_name"], row["created_at"]] for row in listed
    ]
    assert shown[-1] == "3 checkpoints"
    one = cli("checkpoints", "--limit", "1", db=ledger.db, cwd=ledger.root).stdout.splitlines()
    assert len(one) == 3 and one[-1] == "1 checkpoint"


def test_an_inclusion_proof_verifies_offline_at_the_checkpoint_size(ledger: Ledger) -> None:
    at6 = cli("prove", "inclusion", "--position", "2", "--size", "6", db=ledger.db,
              cwd=ledger.root).stdout
    (ledger.root / "inc6.json").write_text(at6)
    assert json.loads(at6)["kind"] == "inclusion"
    done = cli("verify-proof", "inc6.json", "--checkpoint", ledger.note6, "--key", ledger.pub,
               db=offline(ledger.root), cwd=ledger.root)
    assert done.stdout.startswith("ok: position 2")
    assert not (ledger.root / "no-such-dir").exists()
    at9 = cli("prove", "inclusion", "--position", "2", db=ledger.db, cwd=ledger.root).stdout
    (ledger.root / "inc9.json").write_text(at9)
    done = cli("verify-proof", "inc9.json", "--checkpoint", ledger.note6, "--key", ledger.pub,
               db=offline(ledger.root), cwd=ledger.root, expect=4)
    assert "--size 6" in done.stderr


def test_a_consistency_proof_joins_the_two_checkpoints(ledger: Ledger) -> None:
    proof = cli("prove", "consistency", "--from", "6", "--to", "9", db=ledger.db,
                cwd=ledger.root).stdout
    (ledger.root / "con.json").write_text(proof)
    done = cli("verify-proof", "con.json", "--checkpoint", ledger.note6, "--checkpoint",
               ledger.note9, "--key", ledger.pub, "--json", db=offline(ledger.root),
               cwd=ledger.root)
    assert json.loads(done.stdout)["checkpoint_sizes"] == [6, 9]


def test_a_stored_checkpoint_written_to_a_file_verifies_a_proof(ledger: Ledger) -> None:
    # `checkpoint show --out` writes the stored note byte for byte: verify-proof reads it as
    # it reads the note `checkpoint` printed when it signed.
    done = cli("checkpoint", "show", "--size", "6", "--out", "shown6.note", db=ledger.db,
               cwd=ledger.root)
    assert done.stdout.startswith("wrote the checkpoint of tree size 6 (arena-ledger/"
                                  "ops.example, key ops.example, id ")
    assert (ledger.root / "shown6.note").read_bytes() == ledger.note6.read_bytes()
    (ledger.root / "inc6-shown.json").write_text(cli(
        "prove", "inclusion", "--position", "3", "--size", "6", db=ledger.db,
        cwd=ledger.root).stdout)
    done = cli("verify-proof", "inc6-shown.json", "--checkpoint", "shown6.note", "--key",
               ledger.pub, db=offline(ledger.root), cwd=ledger.root)
    assert done.stdout.startswith("ok: position 3 ") and "tree of size 6" in done.stdout
    # Without --out the note goes to stdout; without --size it is the newest one stored.
    printed = cli("checkpoint", "show", "--size", "6", db=ledger.db, cwd=ledger.root).stdout
    assert printed == ledger.note6.read_text()
    newest = json.loads(cli("checkpoint", "show", "--json", db=ledger.db,
                            cwd=ledger.root).stdout)
    listed = [json.loads(line) for line in cli(  # JSON Lines, as every list prints
        "checkpoints", "--limit", "1", "--json", db=ledger.db, cwd=ledger.root
    ).stdout.splitlines()]
    assert {k: v for k, v in newest.items() if k != "out"} == listed[0]
    # A file is never replaced unless asked; a size never signed names the sizes there are.
    done = cli("checkpoint", "show", "--size", "9", "--out", "shown6.note", db=ledger.db,
               cwd=ledger.root, expect=1)
    assert "note file shown6.note already exists; pass --force" in done.stderr
    assert (ledger.root / "shown6.note").read_bytes() == ledger.note6.read_bytes()
    cli("checkpoint", "show", "--size", "9", "--out", "shown6.note", "--force", db=ledger.db,
        cwd=ledger.root)
    assert (ledger.root / "shown6.note").read_text().startswith("arena-ledger/ops.example\n9\n")
    done = cli("checkpoint", "show", "--size", "7", db=ledger.db, cwd=ledger.root, expect=1)
    assert done.stderr.startswith("error[not_found]: no checkpoint at tree size 7 is stored "
                                  "(the sizes of the latest ones: 9, 6)")
    # Signing still needs its key, named as a usage error.
    done = cli("checkpoint", db=ledger.db, cwd=ledger.root, expect=2)
    assert "Missing option '--key'" in done.stderr


def test_a_proof_for_a_larger_tree_suggests_what_verifies_it(ledger: Ledger) -> None:
    # Position 8 is not in the tree of size 6: the error must not send the user to prove
    # it there; its two suggestions, followed, verify.
    (ledger.root / "inc9-p8.json").write_text(cli(
        "prove", "inclusion", "--position", "8", db=ledger.db, cwd=ledger.root).stdout)
    done = cli("verify-proof", "inc9-p8.json", "--checkpoint", ledger.note6, "--key",
               ledger.pub, db=offline(ledger.root), cwd=ledger.root, expect=4)
    assert "--size 6" not in done.stderr and "prove inclusion" not in done.stderr
    assert "larger tree than the checkpoint" in done.stderr
    assert "`arena-ledger checkpoint show --size 9 --out FILE`" in done.stderr
    assert "arena-ledger prove consistency --from 6 --to 9" in done.stderr
    cli("checkpoint", "show", "--size", "9", "--out", "suggested9.note", db=ledger.db,
        cwd=ledger.root)
    cli("verify-proof", "inc9-p8.json", "--checkpoint", "suggested9.note", "--key", ledger.pub,
        db=offline(ledger.root), cwd=ledger.root)
    (ledger.root / "tie.json").write_text(cli(
        "prove", "consistency", "--from", "6", "--to", "9", db=ledger.db,
        cwd=ledger.root).stdout)
    cli("verify-proof", "tie.json", "--checkpoint", ledger.note6, "--checkpoint",
        "suggested9.note", "--key", ledger.pub, db=offline(ledger.root), cwd=ledger.root)


def test_a_checkpoint_fails_with_another_key_origin_or_one_changed_character(
    ledger: Ledger,
) -> None:
    cli("key", "generate", "--name", "ops.example", "--out", "other.key", db=ledger.db,
        cwd=ledger.root)
    # Its own proof: tests of a module may run in any order, or in other processes.
    (ledger.root / "inc6-checked.json").write_text(cli(
        "prove", "inclusion", "--position", "2", "--size", "6", db=ledger.db,
        cwd=ledger.root).stdout)
    note = ledger.note6.read_text()
    (ledger.root / "changed.note").write_text(note.replace("\n6\n", "\n7\n"))
    # A byte that is not UTF-8 is a damaged note like the rest (exit 4), not bad input.
    (ledger.root / "binary.note").write_bytes(b"\xff" + note.encode()[1:])
    cases = [
        ("--checkpoint", ledger.note6, "--key", "other.key.pub"),
        ("--checkpoint", ledger.note6, "--key", ledger.pub, "--origin", "ledger.example/x"),
        ("--checkpoint", "changed.note", "--key", ledger.pub),
        ("--checkpoint", "binary.note", "--key", ledger.pub),
    ]
    for extra in cases:
        done = cli("verify-proof", "inc6-checked.json", *extra, db=offline(ledger.root),
                   cwd=ledger.root, expect=4)
        assert done.stderr.startswith(("error[signature_invalid]", "error[integrity_failure]"))
    assert "not valid UTF-8 at byte 0" in done.stderr
    done = cli("verify-proof", "inc6-checked.json", "--checkpoint", ledger.note6, "--key",
               "log.key", db=offline(ledger.root), cwd=ledger.root, expect=1)
    assert "private key" in done.stderr


def test_a_bundle_verifies_offline_and_needs_a_key_or_a_waiver(ledger: Ledger) -> None:
    done = cli("verify-bundle", ledger.bundle, "--key", ledger.pub, db=offline(ledger.root),
               cwd=ledger.root)
    assert done.stdout.startswith("verified 9 events") and "signature verified" in done.stdout
    done = cli("verify-bundle", ledger.bundle, db=offline(ledger.root), cwd=ledger.root,
               expect=1)
    assert "--no-signature-check" in done.stderr
    cli("verify-bundle", ledger.bundle, "--no-signature-check", db=offline(ledger.root),
        cwd=ledger.root)


def test_a_flipped_byte_is_refused_naming_the_line_and_nothing_is_imported(
    ledger: Ledger, store_url: str,
) -> None:
    tampered = ledger.root / f"tampered-{abs(hash(store_url))}"
    tampered.mkdir()
    for name in ("manifest.json", "checkpoint.note"):
        (tampered / name).write_bytes((ledger.bundle / name).read_bytes())
    lines = (ledger.bundle / "events.jsonl").read_bytes().splitlines(keepends=True)
    at = lines[2].index(b'"payload_b64":"') + 20  # inside line 3's base64 payload
    lines[2] = lines[2][:at] + bytes([lines[2][at] ^ 0x01]) + lines[2][at + 1 :]
    (tampered / "events.jsonl").write_bytes(b"".join(lines))
    cli("init", db=store_url, cwd=ledger.root)
    done = cli("import", tampered, "--key", ledger.pub, db=store_url, cwd=ledger.root, expect=4)
    assert "events.jsonl line 3:" in done.stderr
    assert json.loads(cli("head", "--json", db=store_url, cwd=ledger.root).stdout)["position"] == 0
    done = cli("import", ledger.bundle, "--key", ledger.pub, "--json", db=store_url,
               cwd=ledger.root)
    assert json.loads(done.stdout)["events"] == 9
    source = json.loads(cli("head", "--json", db=ledger.db, cwd=ledger.root).stdout)
    assert json.loads(cli("head", "--json", db=store_url, cwd=ledger.root).stdout) == source
    cli("verify", db=store_url, cwd=ledger.root)
    # The events went in without the guard; the import rebuilt the read models after them.
    assert cli("projections", "check", db=store_url, cwd=ledger.root).stdout == (
        "ok: the read models match the events up to position 9\n")
    done = cli("import", ledger.bundle, "--key", ledger.pub, db=store_url, cwd=ledger.root,
               expect=1)
    assert "empty ledger" in done.stderr


def test_a_bundle_respelled_with_crlf_is_refused_naming_line_one(ledger: Ledger) -> None:
    """The manifest's digest and size are restated (they are not signed): every line still
    parses to the signed event, but is not the bytes export wrote."""
    respelled = ledger.root / "crlf"
    respelled.mkdir()
    (respelled / "checkpoint.note").write_bytes((ledger.bundle / "checkpoint.note").read_bytes())
    data = (ledger.bundle / "events.jsonl").read_bytes().replace(b"\n", b"\r\n")
    (respelled / "events.jsonl").write_bytes(data)
    manifest = json.loads((ledger.bundle / "manifest.json").read_bytes())
    manifest.update(events_sha256=hashlib.sha256(data).hexdigest(), events_bytes=len(data))
    (respelled / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    done = cli("verify-bundle", respelled, "--key", ledger.pub, db=offline(ledger.root),
               cwd=ledger.root, expect=4)
    assert done.stderr.startswith("error[integrity_failure] [line 1]: events.jsonl line 1: is "
                                  "not byte for byte the line export writes"), done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_export_where_the_system_refuses_to_write_is_one_line(ledger: Ledger) -> None:
    done = cli("export", "/proc/bundle", db=ledger.db, cwd=ledger.root, expect=1)
    assert done.stderr.startswith("error[invalid_input] [path /proc/bundle]: cannot write the "
                                  "bundle /proc/bundle: "), done.stderr
    assert done.stderr.count("\n") == 1


def _line(verb: str, report: dict[str, object], signed: str) -> str:
    return (f"{verb} {report['events']} events ({report['path']}); root {report['merkle_root']}, "
            f"head {report['head_hash']}; {signed}\n")


OURS = "checkpoint of arena-ledger/ops.example"


def test_the_bundle_and_proof_commands_say_in_one_line_what_their_json_says(
    ledger: Ledger,
) -> None:
    # Each human line is held to the same command's --json: a line that dropped a hash or
    # the origin, or said "verified" of a signature nobody checked, fails here.
    root, away = ledger.root, offline(ledger.root)
    checked = json.loads(cli("verify-bundle", ledger.bundle, "--key", ledger.pub, "--json",
                             db=away, cwd=root).stdout)
    assert (checked["signature_checked"], checked["checkpoint_included"]) == (True, True)
    done = cli("verify-bundle", ledger.bundle, "--key", ledger.pub, db=away, cwd=root)
    assert done.stdout == _line("verified", checked, f"{OURS}, signature verified")
    # Unchecked, the note's origin is not shown (nothing vouches for it), nor is it denied.
    unchecked = json.loads(cli("verify-bundle", ledger.bundle, "--no-signature-check", "--json",
                               db=away, cwd=root).stdout)
    assert (unchecked["checkpoint_origin"], unchecked["signature_checked"],
            unchecked["checkpoint_included"]) == (None, False, True)
    done = cli("verify-bundle", ledger.bundle, "--no-signature-check", db=away, cwd=root)
    assert done.stdout == _line(
        "verified", checked, "checkpoint.note not checked (--no-signature-check)")

    # Export at the checkpointed size: the stored checkpoint travels (signed, no key given).
    done = cli("export", "again", db=ledger.db, cwd=root)
    assert done.stdout == _line("exported", {**checked, "path": "again"}, f"{OURS}, signed")
    # At a size no checkpoint was signed at: none, and how to get one.
    done = cli("export", "seven", "--to-position", "7", db=ledger.db, cwd=root)
    seven = json.loads(cli("verify-bundle", "seven", "--no-signature-check", "--json",
                           db=away, cwd=root).stdout)
    assert (seven["events"], seven["checkpoint_included"]) == (7, False)
    assert done.stdout == _line("exported", seven, "no checkpoint, unsigned (add --key to sign)")
    done = cli("verify-bundle", "seven", "--no-signature-check", db=away, cwd=root)
    assert done.stdout == _line("verified", seven, "no checkpoint, signature not checked")

    target = f"sqlite:///{root / 'imported.db'}"
    cli("init", db=target, cwd=root)
    done = cli("import", ledger.bundle, "--key", ledger.pub, db=target, cwd=root)
    assert done.stdout == _line("imported", checked, f"{OURS}, signature verified")
    waived = f"sqlite:///{root / 'waived.db'}"
    cli("init", db=waived, cwd=root)
    done = cli("import", ledger.bundle, "--no-signature-check", db=waived, cwd=root)
    assert done.stdout == _line(
        "imported", checked, "checkpoint.note not checked, not imported (--no-signature-check)")
    assert cli("checkpoints", "--json", db=waived, cwd=root).stdout == ""  # no line: none

    (root / "line-inc.json").write_text(cli("prove", "inclusion", "--position", "2", "--size",
                                            "6", db=ledger.db, cwd=root).stdout)
    (root / "line-con.json").write_text(cli("prove", "consistency", "--from", "6", "--to", "9",
                                            db=ledger.db, cwd=root).stdout)
    inclusion = json.loads(cli("verify-proof", "line-inc.json", "--checkpoint", ledger.note6,
                               "--key", ledger.pub, "--json", db=away, cwd=root).stdout)
    done = cli("verify-proof", "line-inc.json", "--checkpoint", ledger.note6, "--key",
               ledger.pub, db=away, cwd=root)
    assert done.stdout == (
        f"ok: position 2 (entry {inclusion['entry_hash']}) is in the tree of size 6 signed by "
        "arena-ledger/ops.example\n")
    done = cli("verify-proof", "line-con.json", "--checkpoint", ledger.note6, "--checkpoint",
               ledger.note9, "--key", ledger.pub, db=away, cwd=root)
    assert done.stdout == (
        "ok: the tree of size 6 is a prefix of the tree of size 9; checked against "
        "the checkpoints at sizes 6, 9 of arena-ledger/ops.example\n")


def test_checkpoint_refuses_a_forged_head_frontier_in_one_line(
    ledger: Ledger, tmp_path: Path
) -> None:
    # A copy of the module's ledger whose ledger_head row (no trigger keeps it) carries
    # another frontier: the key must not vouch for a root the events do not give.
    import shutil
    import sqlite3

    copy = tmp_path / "forged.db"
    shutil.copy(ledger.root / "ledger.db", copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE ledger_head SET frontier = ? WHERE id = 1", (bytes(64),))
    db = f"sqlite:///{copy}"
    listed = cli("checkpoints", "--json", db=db, cwd=ledger.root).stdout
    done = cli("checkpoint", "--key", ledger.key, db=db, cwd=ledger.root, expect=4)
    assert "frontier differs from the stored tree at node (3, 0)" in done.stderr
    assert "nothing was signed" in done.stderr
    assert done.stdout == ""
    assert cli("checkpoints", "--json", db=db, cwd=ledger.root).stdout == listed


def test_files_beside_a_bundle_are_named_as_not_verified(ledger: Ledger) -> None:
    # Nothing vouches for a file the bundle does not list (a weights table someone added, a
    # checkpoint.note an unsigned manifest does not list): verify and import say so, by name.
    root, away = ledger.root, offline(ledger.root)
    cli("export", "seven-extra", "--to-position", "7", db=ledger.db, cwd=root)
    extra = root / "seven-extra"
    (extra / "weights.json").write_text('{"5Alice": 1000000}\n')
    (extra / "[red]x").write_text("")  # printed as it is named, not as console markup
    shutil.copy(ledger.bundle / "checkpoint.note", extra / "checkpoint.note")
    checked = json.loads(cli("verify-bundle", "seven-extra", "--no-signature-check", "--json",
                             db=away, cwd=root).stdout)
    assert checked["unlisted_files"] == ["[red]x", "checkpoint.note", "weights.json"]
    done = cli("verify-bundle", "seven-extra", "--no-signature-check", db=away, cwd=root)
    assert done.stdout.splitlines() == [
        _line("verified", checked, "no checkpoint, signature not checked").rstrip("\n"),
        "not part of the bundle, so not verified: [red]x, checkpoint.note, weights.json"]
    target = f"sqlite:///{root / 'extra-imported.db'}"
    cli("init", db=target, cwd=root)
    done = cli("import", "seven-extra", "--no-signature-check", db=target, cwd=root)
    assert done.stdout.splitlines()[1] == (
        "not part of the bundle, so not verified or imported: [red]x, checkpoint.note, "
        "weights.json")
    # The signed bundle lists its checkpoint.note: nothing unlisted, no second line.
    signed = json.loads(cli("verify-bundle", ledger.bundle, "--key", ledger.pub, "--json",
                            db=away, cwd=root).stdout)
    assert signed["unlisted_files"] == []
    for name in (f"f{n:02d}" for n in range(12)):
        (extra / name).write_text("")
    done = cli("verify-bundle", "seven-extra", "--no-signature-check", db=away, cwd=root)
    assert done.stdout.splitlines()[1] == (
        "not part of the bundle, so not verified: [red]x, checkpoint.note, f00, f01, f02, f03, "
        "f04, f05, f06, f07 and 5 more")
