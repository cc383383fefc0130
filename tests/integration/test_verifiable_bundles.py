"""Checks bundle export, offline verification and import on SQLite and PostgreSQL.

Every refusal is checked twice: the error names the fault (the first bad line of
events.jsonl, the signature, the manifest), and the target ledger is still empty.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from bundle_files import (
    copy_bundle,
    flip,
    lines_of,
    parsed_line,
    restate_digest,
    rewrite_lines,
    write_lines,
    write_manifest,
)
from sqlalchemy import text

import ledger.bundle as bundle_module
from ledger import migrate
from ledger.bundle import (
    BUNDLE_FORMAT,
    CHECKPOINT_FILE,
    EVENTS_FILE,
    MANIFEST_FILE,
    bundle_line_bytes_max,
    export_bundle,
    import_bundle,
    read_bundle_events,
    read_bundle_rows,
    read_manifest,
    verify_bundle,
)
from ledger.checkpoint import consistency_document, sign_tree, verify_proof
from ledger.merkle import root_from_leaves
from ledger.note import Checkpoint, Signer, sign_checkpoint
from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary.errors import (
    IntegrityError,
    InvalidInput,
    LimitExceeded,
    SignatureInvalid,
    StoreError,
)
from vocabulary.limits import (
    actor_chars_max,
    payload_bytes_max,
    stream_name_chars_max,
    type_name_chars_max,
)

Draft = Callable[..., EventDraft]


@pytest.fixture
def target(spare_store: EventStore) -> EventStore:
    """Is the import target: a second, migrated, empty store on the same backend."""
    return spare_store


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("ops.example")


def fill(store: EventStore, draft: Draft, count: int) -> None:
    """Appends ``count`` events over several streams, one batch under an idempotency key."""
    streams = ("arena-b", "credit-b", "submission-" + "cd" * 32, "settlement")
    store.append([draft(streams[n % 4], n) for n in range(1, count // 2 + 1)],
                 idempotency_key="first-half")
    store.append([draft(streams[n % 4], n) for n in range(count // 2 + 1, count + 1)])


@pytest.fixture
def exported(store: EventStore, draft: Draft, signer: Signer, tmp_path: Path) -> Path:
    """Holds a signed bundle of a 12-event ledger."""
    fill(store, draft, 12)
    export_bundle(store, tmp_path / "bundle", signer=signer)
    return tmp_path / "bundle"


@pytest.fixture(scope="module")
def offline(draft: Draft, signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds the same signed bundle, exported once from SQLite, for the checks of the bundle
    files themselves: verify_bundle reads no database, so a second backend would only repeat
    them. Tests copy it before changing anything."""
    return export_sample(tmp_path_factory.mktemp("offline"), draft, signer)


def export_sample(folder: Path, draft: Draft, signer: Signer) -> Path:
    """Exports a signed bundle of a 12-event SQLite ledger made in ``folder``; returns it."""
    url = f"sqlite:///{folder / 'ledger.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store:
        fill(store, draft, 12)
        export_bundle(store, folder / "bundle", signer=signer)
    return folder / "bundle"


def rows(store: EventStore) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        found = conn.execute(text("SELECT * FROM events ORDER BY position")).all()
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in found]


def assert_empty(store: EventStore) -> None:
    assert store.head().position == 0
    with store.engine.connect() as conn:
        for table in ("events", "merkle_nodes", "checkpoints"):
            assert conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one() == 0, table


# --------------------------------------------------------------------------------- export


def test_export_writes_the_stored_bytes_and_a_manifest_that_matches_the_store(
    store: EventStore, exported: Path
) -> None:
    manifest = orjson.loads((exported / MANIFEST_FILE).read_bytes())
    head = store.head()
    assert manifest == {
        "format": BUNDLE_FORMAT, "events": 12, "first_position": 1, "last_position": 12,
        "tree_size": 12, "head_hash": head.entry_hash,
        "merkle_root": store.merkle_root()[1].hex(), "events_file": EVENTS_FILE,
        "events_sha256": hashlib.sha256((exported / EVENTS_FILE).read_bytes()).hexdigest(),
        "events_bytes": (exported / EVENTS_FILE).stat().st_size,
        "checkpoint_file": CHECKPOINT_FILE,
    }
    for line, recorded in zip(lines_of(exported), store.read_all(), strict=True):
        document = orjson.loads(line)
        assert base64.b64decode(document["payload_b64"]) == recorded.payload_bytes
        assert document["entry_hash"] == recorded.entry_hash
        assert line == orjson.dumps(document, option=orjson.OPT_SORT_KEYS) + b"\n"
    assert store.checkpoints(1)[0]["note"] == (exported / CHECKPOINT_FILE).read_text()


def test_export_without_a_key_includes_a_stored_checkpoint_of_the_same_size_only(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    fill(store, draft, 8)
    export_bundle(store, tmp_path / "unsigned")
    assert not (tmp_path / "unsigned" / CHECKPOINT_FILE).exists()
    with pytest.raises(IntegrityError, match=r"no checkpoint\.note"):
        verify_bundle(tmp_path / "unsigned", signer.verifier())
    note = sign_tree(store, signer, size=5).note
    export_bundle(store, tmp_path / "prefix", to_position=5)
    assert (tmp_path / "prefix" / CHECKPOINT_FILE).read_text() == note
    assert verify_bundle(tmp_path / "prefix", signer.verifier()).events == 5


def test_export_refuses_an_existing_target_and_a_position_past_the_head(
    store: EventStore, exported: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="already exists"):
        export_bundle(store, exported)
    with pytest.raises(InvalidInput, match="outside"):
        export_bundle(store, tmp_path / "far", to_position=13)
    with pytest.raises(InvalidInput, match=re.escape("--to-position -1 is outside 0..12")):
        export_bundle(store, tmp_path / "far", to_position=-1)
    assert not (tmp_path / "far").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("tamper", ["payload", "entry_hash"])
def test_export_refuses_a_ledger_whose_chain_is_broken_and_writes_nothing(
    store: EventStore, draft: Draft, tmp_path: Path, tamper: str
) -> None:
    from tampering import triggers_bypassed

    fill(store, draft, 12)
    with triggers_bypassed(store) as conn:
        if tamper == "payload":  # content changed, its stored hash kept
            conn.execute(text("UPDATE events SET payload = :p WHERE position = 7"),
                         {"p": b'{"tampered":true}'})
        else:  # the hash changed, the content kept
            conn.execute(text("UPDATE events SET entry_hash = :h WHERE position = 7"),
                         {"h": "00" * 32})
    with pytest.raises(IntegrityError, match="fails its hash chain at position 7") as caught:
        export_bundle(store, tmp_path / "tampered")
    assert caught.value.context["position"] == 7
    assert not (tmp_path / "tampered").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_refuses_a_ledger_whose_last_events_are_gone_and_writes_nothing(
    store: EventStore, draft: Draft, tmp_path: Path
) -> None:
    """The head says 12 but rows end at 10: the first missing position is named."""
    from tampering import triggers_bypassed

    fill(store, draft, 12)
    with triggers_bypassed(store) as conn:
        conn.execute(text("DELETE FROM events WHERE position > 10"))
    with pytest.raises(IntegrityError, match="events end at position 10, not at 12") as caught:
        export_bundle(store, tmp_path / "cut")
    assert caught.value.context == {"reason": "chain_broken", "position": 11}
    assert not (tmp_path / "cut").exists()


def test_export_names_a_database_failure_while_reading_and_writes_nothing(
    store: EventStore, draft: Draft, tmp_path: Path
) -> None:
    """The events table fails under the reader (the head, read first, still answers): the
    store's error, not the driver's traceback, and no bundle or partial directory."""
    from vocabulary.errors import SchemaNotInitialised

    fill(store, draft, 12)
    exports = tmp_path / "exports"
    exports.mkdir()
    with store.engine.begin() as conn:
        conn.execute(text("ALTER TABLE events RENAME TO events_moved"))
    try:
        assert store.head().position == 12
        with pytest.raises(SchemaNotInitialised, match="run `arena-ledger init`"):
            export_bundle(store, exports / "out")
    finally:
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE events_moved RENAME TO events"))
    assert list(exports.iterdir()) == []
    report = export_bundle(store, exports / "out")  # and the same store exports once fixed
    assert report.events == 12


def test_export_names_a_directory_it_may_not_write_and_leaves_nothing(
    store: EventStore, exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system's refusal (here permission, as for a directory of another user; the
    tests may run as root, so the refusal is simulated) is one InvalidInput naming the
    bundle, not an OSError."""
    mkdir = Path.mkdir

    def refused(path: Path, *args: Any, **kwargs: Any) -> None:
        if path.name.startswith(".denied.partial-"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(InvalidInput) as caught:
        export_bundle(store, tmp_path / "denied")
    assert caught.value.message == (
        f"cannot write the bundle {tmp_path / 'denied'}: Permission denied; nothing was written")
    assert caught.value.context == {"path": str(tmp_path / "denied")}
    assert not any(p.name.startswith(".denied") for p in tmp_path.iterdir())


@pytest.mark.parametrize("stage", ["events", "manifest"])
def test_export_onto_a_full_disk_names_the_bundle_and_removes_what_it_wrote(
    store: EventStore, exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if stage == "events":  # a write of events.jsonl fails half way (no file name given)
        original = bundle_module._write_events

        def fills_up(store: EventStore, file: Any, size: int, *rest: Any) -> Any:
            original(store, file, size // 2, *rest)
            raise full

        monkeypatch.setattr(bundle_module, "_write_events", fills_up)
    else:  # the last file written, after events.jsonl was complete
        write_bytes = Path.write_bytes

        def no_room(path: Path, data: Any) -> int:
            if path.name == MANIFEST_FILE:
                raise full
            return write_bytes(path, data)

        monkeypatch.setattr(Path, "write_bytes", no_room)
    with pytest.raises(InvalidInput, match=re.escape(
            f"cannot write the bundle {tmp_path / 'full'}: No space left on device")):
        export_bundle(store, tmp_path / "full")
    assert not (tmp_path / "full").exists()
    assert not any(p.name.startswith(".full") for p in tmp_path.iterdir())


# ------------------------------------------------------------------------- verify, import


def test_a_bundle_verifies_offline_and_imports_identically(
    store: EventStore, target: EventStore, exported: Path, signer: Signer
) -> None:
    offline = verify_bundle(exported, signer.verifier())
    assert offline.signature_checked and offline.events == 12
    report = import_bundle(target, exported, signer.verifier())
    assert report.to_json() == {**offline.to_json()}
    assert rows(target) == rows(store)
    assert target.head() == store.head()
    assert target.merkle_root() == store.merkle_root()
    assert target.verify().ok
    assert target.checkpoints()[0]["note"] == (exported / CHECKPOINT_FILE).read_text()


def test_an_empty_ledger_exports_verifies_and_imports(
    store: EventStore, target: EventStore, signer: Signer, tmp_path: Path
) -> None:
    # A validator may publish before its first event; zero is a count, not damage.
    export_bundle(store, tmp_path / "empty", signer=signer)
    assert read_manifest(tmp_path / "empty").events == 0
    offline = verify_bundle(tmp_path / "empty", signer.verifier())
    assert (offline.events, offline.signature_checked) == (0, True)
    assert import_bundle(target, tmp_path / "empty", signer.verifier()).events == 0
    assert target.head().position == 0 and target.verify().ok


def test_an_imported_ledger_keeps_growing_consistently_with_the_bundle_checkpoint(
    target: EventStore, exported: Path, draft: Draft, signer: Signer
) -> None:
    import_bundle(target, exported, signer.verifier())
    target.append([draft("arena-b", 100), draft("arena-new", 1)])
    assert target.verify().ok
    note = (exported / CHECKPOINT_FILE).read_text()
    verdict = verify_proof(consistency_document(target, 12), [note], signer.verifier())
    assert (verdict.from_size, verdict.tree_size) == (12, 14)
    with target.tree() as tree:  # the stored nodes agree with a tree built from scratch
        leaves = [bytes.fromhex(e.entry_hash) for e in target.read_all()]
        assert tree.root(13) == root_from_leaves(leaves[:13])


def test_a_bundle_needs_a_key_or_an_explicit_waiver(
    target: EventStore, exported: Path
) -> None:
    with pytest.raises(InvalidInput, match="--no-signature-check"):
        import_bundle(target, exported, None)
    with pytest.raises(InvalidInput, match="--no-signature-check"):
        verify_bundle(exported, None)
    assert_empty(target)
    report = import_bundle(target, exported, None, allow_unsigned=True)
    assert not report.signature_checked and target.head().position == 12
    assert target.checkpoints() == []  # an unchecked note is not recorded as a checkpoint


def test_import_refuses_a_ledger_that_is_not_empty(
    target: EventStore, exported: Path, draft: Draft, signer: Signer
) -> None:
    target.append([draft("arena-x", 1)])
    before = rows(target)
    with pytest.raises(InvalidInput, match=re.escape("already holds events (head 1)")) as caught:
        import_bundle(target, exported, signer.verifier())
    assert caught.value.context == {"head": 1}
    assert rows(target) == before


def test_import_under_the_head_lock_refuses_events_the_head_row_does_not_count(
    target: EventStore, exported: Path, draft: Draft, signer: Signer
) -> None:
    """A damaged target whose head row says 0 over a stored event passes the first look
    and is refused by the check made under the head lock, before anything is written."""
    from tampering import triggers_bypassed

    target.append([draft("arena-x", 1)])
    with triggers_bypassed(target) as conn:
        conn.execute(text("UPDATE ledger_head SET position = 0 WHERE id = 1"))
    before = rows(target)
    with pytest.raises(InvalidInput, match=re.escape("already holds events (head 0)")):
        import_bundle(target, exported, signer.verifier())
    assert rows(target) == before


TAMPERING: dict[str, tuple[Callable[[list[bytes]], list[bytes]], str]] = {
    "payload byte": (lambda ls: [*ls[:4], flip(ls[4], b'"payload_b64":"'), *ls[5:]], "line 5"),
    "entry hash byte": (lambda ls: [*ls[:6], flip(ls[6], b'"entry_hash":"'), *ls[7:]], "line 7"),
    "actor byte": (lambda ls: [*ls[:2], flip(ls[2], b'"actor":"'), *ls[3:]], "line 3"),
    "json syntax": (lambda ls: [*ls[:8], b"[" + ls[8][1:], *ls[9:]], "line 9"),
    "lines swapped": (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "line 2"),
    "line dropped": (lambda ls: [*ls[:3], *ls[4:]], "line 4"),
    "line repeated": (lambda ls: [*ls[:6], ls[5], *ls[6:]], "line 7"),
    "extra field": (lambda ls: [ls[0][:-2] + b',"x":1}\n', *ls[1:]], "line 1"),
    "blank line": (lambda ls: [*ls[:10], b"\n", *ls[10:]], "line 11"),
    "truncated": (lambda ls: [*ls[:-1], ls[-1][:-1]], "line 12"),
    "last line dropped": (lambda ls: ls[:-1], "events"),
    "line appended": (lambda ls: [*ls, ls[-1]], "line 13"),
}


@pytest.mark.parametrize("case", TAMPERING.values(), ids=TAMPERING.keys())
def test_a_tampered_events_file_is_refused_naming_the_first_bad_line(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path,
    case: tuple[Callable[[list[bytes]], list[bytes]], str],
) -> None:
    change, where = case
    tampered = copy_bundle(exported, tmp_path)
    write_lines(tampered, change(lines_of(tampered)))
    with pytest.raises(IntegrityError, match=where):
        verify_bundle(tampered, signer.verifier())
    with pytest.raises(IntegrityError, match=where) as caught:
        import_bundle(target, tampered, signer.verifier())
    if where.startswith("line"):
        assert caught.value.message.startswith(f"{EVENTS_FILE} {where}:")
        assert caught.value.context["line"] == int(where.split()[1])
    assert_empty(target)


def _set_field(name: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda line: line.update({name: value})


MALFORMED_LINES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "missing": (lambda line: line.pop("actor"), "has an unexpected or missing field 'actor'"),
    "extra": (_set_field("checked", True), "has an unexpected or missing field 'checked'"),
    "position text": (_set_field("position", "3"), "position must be a positive integer"),
    "version 0": (_set_field("version", 0), "version must be a positive integer"),
    "schema bool": (_set_field("schema_version", True), "schema_version must be a positive"),
    "empty stream": (_set_field("stream", ""), "stream must be a string of 1..128 characters"),
    "long time": (_set_field("recorded_at", "9" * 33), "recorded_at must be a string of 1..32"),
    "actor number": (_set_field("actor", 5), "actor must be a string of 1.."),
    "type null": (_set_field("type", None), "type must be a string of 1.."),
    "base64": (_set_field("payload_b64", "%%%%"), "payload_b64 is not valid base64"),
    "position": (_set_field("position", 4), "holds position 4; position 3 was expected"),
    "payload size": (
        _set_field("payload_b64", base64.b64encode(b"x" * (payload_bytes_max + 1)).decode()),
        f"payload is over {payload_bytes_max} bytes",
    ),
    "empty type": (_set_field("type", ""), f"type must be a string of 1..{type_name_chars_max}"),
    "empty time": (_set_field("recorded_at", ""), "recorded_at must be a string of 1..32"),
    "empty actor": (_set_field("actor", ""), f"actor must be a string of 1..{actor_chars_max}"),
    "long stream": (
        _set_field("stream", "s" * (stream_name_chars_max + 1)),
        f"stream must be a string of 1..{stream_name_chars_max} characters",
    ),
    # Each text field at its shortest and longest is well formed: read, then found not to
    # be what was hashed (an exported line with a 128-character stream must import).
    "one-character fields": (
        lambda line: line.update(stream="s", type="T", recorded_at="9", actor="a"),
        "entry_hash does not match",
    ),
    "stream at the limit": (
        _set_field("stream", "s" * stream_name_chars_max), "entry_hash does not match"
    ),
    "type at the limit": (_set_field("type", "T" * type_name_chars_max), "entry_hash does not"),
    "time at the limit": (_set_field("recorded_at", "9" * 32), "entry_hash does not match"),
    "actor at the limit": (_set_field("actor", "a" * actor_chars_max), "entry_hash does not"),
    "payload at the limit": (  # read, then found not to be what was hashed
        _set_field("payload_b64", base64.b64encode(b"x" * payload_bytes_max).decode()),
        "entry_hash does not match the event's content",
    ),
}


@pytest.mark.parametrize("case", MALFORMED_LINES.values(), ids=MALFORMED_LINES.keys())
def test_a_malformed_line_is_refused_with_what_is_wrong_with_it(
    offline: Path, signer: Signer, tmp_path: Path,
    case: tuple[Callable[[dict[str, Any]], Any], str],
) -> None:
    change, problem = case
    bad = copy_bundle(offline, tmp_path)
    lines = lines_of(bad)
    line = orjson.loads(lines[2])
    change(line)
    lines[2] = orjson.dumps(line) + b"\n"
    write_lines(bad, lines)
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(bad, signer.verifier())
    assert caught.value.message.startswith(f"{EVENTS_FILE} line 3: {problem}")
    assert caught.value.context == {"line": 3, "reason": "bad_line"}


def _escape_first_actor_character(line: bytes) -> bytes:
    actor = orjson.loads(line)["actor"]
    escaped = f"\\u{ord(actor[0]):04x}{actor[1:]}"
    return line.replace(f'"actor":"{actor}"'.encode(), f'"actor":"{escaped}"'.encode(), 1)


#: Other spellings of the same events: each line parses to the fields export wrote and
#: still hashes to its entry hash; only its bytes differ from what export writes.
RESPELLED: dict[str, tuple[Callable[[list[bytes]], list[bytes]], int]] = {
    "crlf line end": (lambda ls: [*ls[:2], ls[2][:-1] + b"\r\n", *ls[3:]], 3),
    "crlf file": (lambda ls: [line[:-1] + b"\r\n" for line in ls], 1),
    "space after a comma": (lambda ls: [*ls[:2], ls[2].replace(b'","', b'", "', 1), *ls[3:]], 3),
    "trailing space": (lambda ls: [*ls[:2], ls[2][:-1] + b" \n", *ls[3:]], 3),
    "leading space": (lambda ls: [*ls[:2], b" " + ls[2], *ls[3:]], 3),
    "keys reversed": (lambda ls: [*ls[:2], orjson.dumps(dict(reversed(orjson.loads(ls[2])
                                                                     .items()))) + b"\n",
                                  *ls[3:]], 3),
    # orjson keeps the last of two equal keys: the first could claim anything.
    "duplicate key": (lambda ls: [*ls[:2], b'{"actor":"zzz",' + ls[2][1:], *ls[3:]], 3),
    "escaped character": (lambda ls: [*ls[:2], _escape_first_actor_character(ls[2]), *ls[3:]],
                          3),
}


@pytest.mark.parametrize("case", RESPELLED.values(), ids=RESPELLED.keys())
def test_a_line_that_is_not_the_bytes_export_writes_is_refused(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path,
    case: tuple[Callable[[list[bytes]], list[bytes]], int],
) -> None:
    """verify-bundle checks every byte: a respelled line is refused even with the manifest's
    (unsigned) digest and size restated to match the file."""
    change, number = case
    respelled = copy_bundle(exported, tmp_path)
    lines = lines_of(respelled)
    changed = change(lines)
    assert [orjson.loads(line) for line in changed] == [orjson.loads(line) for line in lines]
    write_lines(respelled, changed)
    restate_digest(respelled)
    problem = f"{EVENTS_FILE} line {number}: is not byte for byte the line export writes"
    for run in (lambda: verify_bundle(respelled, signer.verifier()),
                lambda: import_bundle(target, respelled, signer.verifier())):
        with pytest.raises(IntegrityError) as caught:
            run()
        assert caught.value.message.startswith(problem), caught.value.message
        assert caught.value.context == {"line": number, "reason": "bad_line"}
    assert_empty(target)


def test_a_payload_in_non_canonical_base64_is_refused(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path
) -> None:
    """Base64 whose unused trailing bits are set decodes to the same payload (so the entry
    hash still matches); it is refused, so that each payload has one spelling."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    bad = copy_bundle(exported, tmp_path)
    lines = lines_of(bad)
    index, text = next((n, orjson.loads(line)["payload_b64"]) for n, line in enumerate(lines)
                       if orjson.loads(line)["payload_b64"].endswith("="))
    at = -3 if text.endswith("==") else -2  # the last character that carries data
    odd = text[:at] + alphabet[alphabet.index(text[at]) ^ 1] + text[at + 1:]
    assert base64.b64decode(odd, validate=True) == base64.b64decode(text)
    lines[index] = lines[index].replace(text.encode(), odd.encode())
    write_lines(bad, lines)
    restate_digest(bad)
    problem = f"{EVENTS_FILE} line {index + 1}: payload_b64 is not canonical base64"
    with pytest.raises(IntegrityError, match=problem):
        verify_bundle(bad, signer.verifier())
    with pytest.raises(IntegrityError, match=problem) as caught:
        import_bundle(target, bad, signer.verifier())
    assert caught.value.context == {"line": index + 1, "reason": "bad_line"}
    assert_empty(target)


def test_a_line_over_the_size_limit_is_refused_before_it_is_parsed(
    offline: Path, signer: Signer, tmp_path: Path
) -> None:
    bad = copy_bundle(offline, tmp_path)
    lines = lines_of(bad)
    # Line 3 padded with insignificant spaces to exactly the limit (its newline aside): its
    # fields and entry hash are unchanged, so it is read and parsed, then found not to be
    # the bytes export writes (not refused for its size).
    at_limit = lines[2][:-2] + b" " * (bundle_line_bytes_max + 1 - len(lines[2])) + b"}\n"
    assert len(at_limit) == bundle_line_bytes_max + 1
    write_lines(bad, [*lines[:2], at_limit, *lines[3:]])
    with pytest.raises(IntegrityError, match="line 3: is not byte for byte the line export"):
        verify_bundle(bad, signer.verifier())
    write_lines(bad, [*lines[:2], b" " + at_limit, *lines[3:]])
    with pytest.raises(LimitExceeded, match=f"line 3 is over {bundle_line_bytes_max} bytes"):
        verify_bundle(bad, signer.verifier())


@pytest.mark.parametrize("block", [1, 97, 4_096])
def test_lines_that_span_read_blocks_verify_and_import_alike(
    store: EventStore, target: EventStore, exported: Path, signer: Signer,
    monkeypatch: pytest.MonkeyPatch, block: int,
) -> None:
    """The reader joins a line cut by a block boundary (one byte a block at the extreme), and
    the file's digest is taken over the blocks: the same report as one whole-file read."""
    whole = verify_bundle(exported, signer.verifier()).to_json()
    monkeypatch.setattr(bundle_module, "read_block_bytes", block)
    assert verify_bundle(exported, signer.verifier()).to_json() == whole
    assert import_bundle(target, exported, signer.verifier()).to_json() == whole
    assert rows(target) == rows(store)


def test_an_endless_line_is_refused_without_reading_it_whole(
    offline: Path, signer: Signer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line with no end in sight stops the read once it passes the line limit: memory
    holds about the limit and a block, not the file (here 64 times the limit)."""
    import tracemalloc

    bad = copy_bundle(offline, tmp_path)
    lines = lines_of(bad)
    endless = b"{" + b" " * (64 * bundle_line_bytes_max)
    write_lines(bad, [*lines[:2], endless])
    monkeypatch.setattr(bundle_module, "read_block_bytes", 65_536)
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded, match=f"line 3 is over {bundle_line_bytes_max} bytes"):
            verify_bundle(bad, signer.verifier())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * bundle_line_bytes_max, peak


def test_a_line_that_is_not_an_object_is_named(
    offline: Path, signer: Signer, tmp_path: Path
) -> None:
    bad = copy_bundle(offline, tmp_path)
    write_lines(bad, [*lines_of(bad)[:2], b"[1, 2]\n", *lines_of(bad)[3:]])
    with pytest.raises(IntegrityError, match=f"{EVENTS_FILE} line 3: is not a JSON object"):
        verify_bundle(bad, signer.verifier())


def _rewrite_payload(lines: list[dict[str, Any]]) -> None:
    lines[2]["payload_b64"] = base64.b64encode(b'{"block":3,"reason":"rewritten"}').decode()


def test_a_consistently_rewritten_bundle_fails_on_the_signed_checkpoint(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path
) -> None:
    forged = copy_bundle(exported, tmp_path)
    rewrite_lines(forged, _rewrite_payload)
    with pytest.raises(IntegrityError, match="does not match the manifest") as caught:
        import_bundle(target, forged, signer.verifier())
    assert caught.value.context["reason"] == "checkpoint_mismatch"
    assert_empty(target)
    # Without a checkpoint to hold it to, a self-consistent rewrite is indistinguishable:
    # that is why skipping the signature check must be asked for explicitly.
    assert verify_bundle(forged, None, allow_unsigned=True).events == 12


def _flip_note(note: str) -> str:
    body, signature = note.rsplit(" ", 1)
    swapped = "B" if signature[10] != "B" else "C"
    return f"{body} {signature[:10]}{swapped}{signature[11:]}"


def _edit_note(bundle: Path, change: Callable[[str], str]) -> None:
    (bundle / CHECKPOINT_FILE).write_text(change((bundle / CHECKPOINT_FILE).read_text()))


SIGNATURE_TAMPERING: dict[str, Callable[[Path], None]] = {
    "signature byte": lambda b: _edit_note(b, _flip_note),
    "tree size": lambda b: _edit_note(b, lambda n: n.replace("\n12\n", "\n13\n", 1)),
    "origin": lambda b: _edit_note(b, lambda n: n.replace("ops.example\n", "ops.exampl\n", 1)),
    "missing note": lambda b: (b / CHECKPOINT_FILE).unlink(),
}


@pytest.mark.parametrize("tamper", SIGNATURE_TAMPERING.values(), ids=SIGNATURE_TAMPERING.keys())
def test_a_bad_signature_is_refused(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path,
    tamper: Callable[[Path], None],
) -> None:
    bad = copy_bundle(exported, tmp_path)
    tamper(bad)
    with pytest.raises(IntegrityError):
        import_bundle(target, bad, signer.verifier())
    assert_empty(target)


def test_a_checkpoint_note_that_is_not_utf8_is_a_malformed_note(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path
) -> None:
    bad = copy_bundle(exported, tmp_path)
    note = (bad / CHECKPOINT_FILE).read_bytes()
    (bad / CHECKPOINT_FILE).write_bytes(note[:3] + b"\xff" + note[4:])
    # Damage like any other (SignatureInvalid, exit 4), not an input error (exit 1).
    with pytest.raises(SignatureInvalid, match="malformed signed note: not valid UTF-8 at byte 3"
                       ) as caught:
        import_bundle(target, bad, signer.verifier())
    assert caught.value.context["reason"] == "malformed"
    assert_empty(target)


def test_another_key_or_origin_is_refused(
    target: EventStore, exported: Path, signer: Signer
) -> None:
    with pytest.raises(SignatureInvalid):
        import_bundle(target, exported, Signer.generate("ops.example").verifier())
    with pytest.raises(IntegrityError, match="origin"):
        import_bundle(target, exported, signer.verifier(), origin="ledger.example/other")
    assert_empty(target)


def test_a_manifest_that_disagrees_with_its_checkpoint_is_refused(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path
) -> None:
    bad = copy_bundle(exported, tmp_path)
    manifest = orjson.loads((bad / MANIFEST_FILE).read_bytes())
    manifest["merkle_root"] = "00" * 32
    write_manifest(bad, manifest)
    with pytest.raises(IntegrityError, match="does not match the manifest"):
        import_bundle(target, bad, signer.verifier())
    manifest["events"] = 11
    write_manifest(bad, manifest)
    with pytest.raises(IntegrityError, match="inconsistent"):
        read_manifest(bad)
    manifest["format"] = "arena-ledger.bundle.v9"
    write_manifest(bad, manifest)
    with pytest.raises(InvalidInput, match="bundle format"):
        import_bundle(target, bad, signer.verifier())
    assert_empty(target)


@pytest.mark.parametrize(
    ("change", "path", "problem"),
    [
        ({"events": -1}, "$.events", "events must be a non-negative integer"),
        ({"events": "12"}, "$.events", "events must be a non-negative integer"),
        ({"events": True}, "$.events", "events must be a non-negative integer"),
        ({"events_bytes": -5}, "$.events_bytes", "events_bytes must be a non-negative integer"),
        ({"head_hash": "AB" * 32}, "$.head_hash", "head_hash must be 64 lowercase hex digits"),
        ({"merkle_root": "ab" * 31}, "$.merkle_root", "merkle_root must be 64 lowercase hex"),
        ({"events_sha256": 7}, "$.events_sha256", "events_sha256 must be 64 lowercase hex"),
        ({"events_sha256": "zz" * 32}, "$.events_sha256", "events_sha256 must be 64 lowercase"),
        ({"signed": True}, "$.signed", "unexpected or missing field 'signed'"),
        ({"tree_size": 11}, "$.tree_size", "field 'tree_size' is inconsistent with the others"),
        ({"last_position": 13}, "$.last_position", "field 'last_position' is inconsistent"),
    ],
)
def test_a_damaged_manifest_field_is_named(
    offline: Path, tmp_path: Path, change: dict[str, Any], path: str, problem: str
) -> None:
    bad = copy_bundle(offline, tmp_path)
    manifest = orjson.loads((bad / MANIFEST_FILE).read_bytes())
    manifest.update(change)
    write_manifest(bad, manifest)
    with pytest.raises(IntegrityError, match=problem) as caught:
        read_manifest(bad)
    assert caught.value.context == {"reason": "bad_manifest", "path": path}
    assert caught.value.message.startswith(f"{MANIFEST_FILE}: ")


def _keys_reversed(raw: bytes) -> bytes:
    document = dict(reversed(orjson.loads(raw).items()))
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


MANIFEST_SPELLINGS: dict[str, Callable[[bytes], bytes]] = {
    "compact": lambda raw: orjson.dumps(orjson.loads(raw)),
    "crlf": lambda raw: raw.replace(b"\n", b"\r\n"),
    "no final newline": lambda raw: raw[:-1],
    "two final newlines": lambda raw: raw + b"\n",
    "trailing space": lambda raw: raw.replace(b",\n", b", \n", 1),
    "keys reversed": _keys_reversed,
    "escaped character": lambda raw: raw.replace(b'"events.jsonl"', b'"events\\u002ejsonl"'),
}


@pytest.mark.parametrize("change", MANIFEST_SPELLINGS.values(), ids=MANIFEST_SPELLINGS.keys())
def test_a_manifest_that_is_not_the_bytes_export_writes_is_refused(
    offline: Path, signer: Signer, tmp_path: Path, change: Callable[[bytes], bytes]
) -> None:
    bad = copy_bundle(offline, tmp_path)
    raw = (bad / MANIFEST_FILE).read_bytes()
    respelled = change(raw)
    assert respelled != raw and orjson.loads(respelled) == orjson.loads(raw)
    (bad / MANIFEST_FILE).write_bytes(respelled)
    for run in (lambda: read_manifest(bad), lambda: verify_bundle(bad, signer.verifier())):
        with pytest.raises(IntegrityError, match=r"manifest\.json: is not byte for byte the "
                           "manifest export writes") as caught:
            run()
        assert caught.value.context == {"reason": "bad_manifest", "path": "$"}


def test_a_bundle_path_that_is_not_a_directory_is_named(signer: Signer, tmp_path: Path) -> None:
    (tmp_path / "bundle.tar").write_bytes(b"not a directory")
    for path in (tmp_path / "bundle.tar", tmp_path / "missing"):
        with pytest.raises(InvalidInput, match=f"bundle {path} is not a directory") as caught:
            verify_bundle(path, signer.verifier())
        assert caught.value.context["path"] == str(path)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [(b"[]", "manifest.json: must be a JSON object"),
     (b"{", "manifest.json: the file is not valid JSON: Expecting property name"),
     (b'{"events": "\xff"}', r"manifest.json: the file is not valid UTF-8 \(byte 12\)")],
)
def test_a_manifest_that_is_no_json_object_is_refused(
    offline: Path, tmp_path: Path, raw: bytes, problem: str
) -> None:
    bad = copy_bundle(offline, tmp_path)
    (bad / MANIFEST_FILE).write_bytes(raw)
    with pytest.raises(IntegrityError, match=problem) as caught:
        read_manifest(bad)
    assert caught.value.context == {"reason": "bad_manifest", "path": "$"}


# ------------------------------------------------------------------- all or nothing


def test_a_failure_while_inserting_leaves_the_target_empty(
    target: EventStore, exported: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bundle_module, "import_chunk_events", 5)
    calls = []
    original = bundle_module._Inserter.__call__

    def failing(self: Any, chunk: Any, entries: Any) -> None:
        calls.append(len(chunk))
        if len(calls) == 2:
            raise IntegrityError("simulated failure after the first chunk was inserted")
        original(self, chunk, entries)

    monkeypatch.setattr(bundle_module._Inserter, "__call__", failing)
    with pytest.raises(IntegrityError, match="simulated"):
        import_bundle(target, exported, signer.verifier())
    assert calls == [5, 5]
    assert_empty(target)


def test_a_database_error_while_inserting_is_a_store_error_and_writes_nothing(
    target: EventStore, exported: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    def refuse(self: Any, chunk: Any, entries: Any) -> None:
        raise OperationalError("INSERT INTO events …", {}, Exception("disk is full"))

    monkeypatch.setattr(bundle_module._Inserter, "__call__", refuse)
    with pytest.raises(StoreError, match="nothing was written: disk is full"):
        import_bundle(target, exported, signer.verifier())
    assert_empty(target)
    if target.backend == "postgresql":  # trust auth takes any password: it must not leak
        from sqlalchemy.engine import make_url

        url = make_url(target.url).set(password="s3cret-pw")
        with EventStore(url.render_as_string(hide_password=False)) as keyed, pytest.raises(
            StoreError
        ) as caught:
            import_bundle(keyed, exported, signer.verifier())
        assert "s3cret-pw" not in caught.value.message
        assert "s3cret-pw" not in str(caught.value.context) and "***" in caught.value.context["url"]


def test_a_file_changed_between_the_passes_is_refused(
    target: EventStore, exported: Path, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moving = copy_bundle(exported, tmp_path)
    original = bundle_module._check_totals

    def then_change(scan: Any, manifest: Any) -> None:
        original(scan, manifest)
        lines = lines_of(moving)
        write_lines(moving, [*lines[:7], flip(lines[7], b'"actor":"'), *lines[8:]])

    monkeypatch.setattr(bundle_module, "_check_totals", then_change)
    with pytest.raises(IntegrityError, match="line 8"):
        import_bundle(target, moving, signer.verifier())
    assert_empty(target)


# ------------------------------------------------------------------ parallel verification


def _parallel_in_chunks_of_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sends even a small bundle through the parallel pass: 2 workers, 4 lines a chunk."""
    monkeypatch.setattr(bundle_module, "parallel_events_min", 0)
    monkeypatch.setattr(bundle_module, "parallel_chunk_lines", 4)
    monkeypatch.setattr(bundle_module, "_workers", lambda: 2)


def test_the_parallel_pass_agrees_and_falls_back_to_name_the_bad_line(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fill(store, draft, 23)
    export_bundle(store, tmp_path / "b", signer=signer)
    sequential = verify_bundle(tmp_path / "b", signer.verifier())
    _parallel_in_chunks_of_4(monkeypatch)
    scan = bundle_module._scan_parallel(tmp_path / "b", 2)
    assert (scan.events, scan.merkle_root) == (23, sequential.merkle_root)
    assert verify_bundle(tmp_path / "b", signer.verifier()) == sequential
    gap = copy_bundle(tmp_path / "b", tmp_path, "gap")
    lines = lines_of(tmp_path / "b")
    write_lines(tmp_path / "b", [*lines[:13], flip(lines[13], b'"actor":"'), *lines[14:]])
    with pytest.raises(IntegrityError, match="line 14"):  # inside a worker's chunk
        verify_bundle(tmp_path / "b", signer.verifier())

    def skip_a_version(parsed: list[dict[str, Any]]) -> None:
        # Line 9 opens the third chunk; its stream's previous event is in an earlier chunk,
        # so only the parent's stitching can see the gap.
        for line in parsed[8:]:
            if line["stream"] == parsed[8]["stream"]:
                line["version"] += 1

    rewrite_lines(gap, skip_a_version)
    with pytest.raises(bundle_module._Suspect):
        bundle_module._scan_parallel(gap, 2)
    stream, version = parsed_line(gap, 9)
    with pytest.raises(IntegrityError, match=re.escape(
            f"line 9: stream {stream!r} jumps from version {version - 2} to {version}")):
        verify_bundle(gap, None, allow_unsigned=True)


def test_the_parallel_pass_checks_versions_inside_a_chunk(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight-line chunks hold each of the four streams twice: a worker checks the versions
    within its chunk itself, and accepts only what the sequential pass accepts."""
    fill(store, draft, 23)
    export_bundle(store, tmp_path / "b", signer=signer)
    sequential = verify_bundle(tmp_path / "b", signer.verifier())
    monkeypatch.setattr(bundle_module, "parallel_chunk_lines", 8)
    scan = bundle_module._scan_parallel(tmp_path / "b", 2)
    assert (scan.events, scan.merkle_root) == (23, sequential.merkle_root)

    def skip_a_version(parsed: list[dict[str, Any]]) -> None:
        # Line 6's stream was last seen on line 2, in the same chunk (lines 1-8).
        for line in parsed[5:]:
            if line["stream"] == parsed[5]["stream"]:
                line["version"] += 1

    gap = copy_bundle(tmp_path / "b", tmp_path, "gap")
    rewrite_lines(gap, skip_a_version)
    with pytest.raises(bundle_module._Suspect):
        bundle_module._scan_parallel(gap, 2)
    with pytest.raises(IntegrityError, match=r"line 6: stream .* jumps from version"):
        verify_bundle(gap, None, allow_unsigned=True)


def test_the_parallel_pass_refuses_a_respelled_line_and_the_sequential_pass_names_it(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fill(store, draft, 23)
    export_bundle(store, tmp_path / "b", signer=signer)
    _parallel_in_chunks_of_4(monkeypatch)
    lines = lines_of(tmp_path / "b")
    # Line 14 (inside the fourth chunk) with a space: same fields, same entry hash.
    write_lines(tmp_path / "b", [*lines[:13], lines[13].replace(b'","', b'", "', 1),
                                 *lines[14:]])
    restate_digest(tmp_path / "b")
    with pytest.raises(bundle_module._Suspect):
        bundle_module._scan_parallel(tmp_path / "b", 2)
    with pytest.raises(IntegrityError, match="line 14: is not byte for byte the line export"):
        verify_bundle(tmp_path / "b", signer.verifier())


# --------------------------------------------------------------------- round trip


@pytest.mark.postgres
def test_sqlite_to_postgresql_to_sqlite_keeps_every_hash_and_the_root(
    pg_database: str, tmp_path: Path, signer: Signer, draft: Draft
) -> None:
    urls = [f"sqlite:///{tmp_path / 'first.db'}", pg_database, f"sqlite:///{tmp_path / 'last.db'}"]
    stores = []
    for url in urls:
        migrate.upgrade(url)
        stores.append(EventStore(url))
    try:
        fill(stores[0], draft, 40)
        export_bundle(stores[0], tmp_path / "one", signer=signer)
        import_bundle(stores[1], tmp_path / "one", signer.verifier())
        export_bundle(stores[1], tmp_path / "two")  # carries the imported checkpoint
        for name in (EVENTS_FILE, MANIFEST_FILE, CHECKPOINT_FILE):
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
        import_bundle(stores[2], tmp_path / "two", signer.verifier())
        first, middle, last = (rows(s) for s in stores)
        assert first == middle == last
        assert stores[0].merkle_root() == stores[1].merkle_root() == stores[2].merkle_root()
        assert all(s.verify().ok for s in stores)
    finally:
        for s in stores:
            s.close()


@pytest.mark.parametrize(
    ("field", "named"), [("events_sha256", "events.jsonl sha256"), ("head_hash", "head hash")]
)
def test_a_manifest_stating_another_digest_or_head_is_refused(
    offline: Path, signer: Signer, tmp_path: Path, field: str, named: str
) -> None:
    # The checkpoint signs size and root only: the manifest's events_sha256 (which people
    # check the file against) and head_hash must equal the file's, or a reader is misled.
    bundle = copy_bundle(offline, tmp_path)
    assert verify_bundle(bundle, signer.verifier()).events == 12
    manifest = orjson.loads((bundle / MANIFEST_FILE).read_bytes())
    manifest[field] = hashlib.sha256(b"something else").hexdigest()
    write_manifest(bundle, manifest)
    with pytest.raises(IntegrityError, match=named) as err:
        verify_bundle(bundle, signer.verifier())
    assert err.value.context["reason"] == "manifest_mismatch"


# Bundle rules as docs/verification.md (Bundle, the four checks of verify-bundle and import, the
# Errors table) and docs/concepts.md state them: manifest digests are 64 lowercase hex digits; the
# signed checkpoint must state the manifest's size as well as its root; a checkpoint.note an
# unsigned manifest does not list is never the bundle's signature; line fields are held to the
# store's limits; the totals are compared one by one in the documented order; the parallel pass
# starts at its threshold; import and --to-position 0 export behave as documented; the replay
# reader agrees with verify on a bad last line.


#: The origin a checkpoint signed by key "ops.example" carries by default (verification.md).
ORIGIN = "arena-ledger/ops.example"


#: MTH({}) = SHA-256("") (verification.md, Merkle tree).
EMPTY_TREE_ROOT = hashlib.sha256(b"").hexdigest()


@pytest.fixture(scope="module")
def published(draft: Draft, signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds a signed bundle of a 12-event ledger, exported once; tests copy it first."""
    return export_sample(tmp_path_factory.mktemp("published"), draft, signer)


def _manifest(bundle: Path) -> dict[str, Any]:
    return dict(orjson.loads((bundle / MANIFEST_FILE).read_bytes()))


def _line_changed(bundle: Path, number: int, name: str, value: Any) -> None:
    """Sets one field of line ``number`` (spelled as export spells a line)."""
    lines = lines_of(bundle)
    line = orjson.loads(lines[number - 1])
    line[name] = value
    lines[number - 1] = orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n"
    write_lines(bundle, lines)


# ------------------------------------------------------------------------------ manifest


@pytest.mark.parametrize("field", ["head_hash", "merkle_root", "events_sha256"])
def test_a_manifest_digest_longer_than_64_hex_digits_is_named(
    published: Path, tmp_path: Path, field: str
) -> None:
    """verification.md: a digest is 64 lowercase hex digits; 66 is damage (bad_manifest,
    its path), not a value to compare later."""
    bad = copy_bundle(published, tmp_path)
    manifest = _manifest(bad)
    manifest[field] = manifest[field] + "ab"
    write_manifest(bad, manifest)
    with pytest.raises(IntegrityError) as caught:
        read_manifest(bad)
    assert caught.value.message == f"{MANIFEST_FILE}: {field} must be 64 lowercase hex digits"
    assert caught.value.context == {"reason": "bad_manifest", "path": f"$.{field}"}


def test_an_empty_bundle_manifest_states_first_position_zero(
    draft: Draft, tmp_path: Path
) -> None:
    """verification.md: ``first_position`` is 1, "or 0 for an empty bundle"; head 64 zeros,
    root MTH({}); and a manifest of no events stating first position 1 is inconsistent."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store:
        export_bundle(store, tmp_path / "empty")
    assert _manifest(tmp_path / "empty") == {
        "format": "arena-ledger.bundle.v1", "events": 0, "first_position": 0,
        "last_position": 0, "tree_size": 0, "head_hash": "0" * 64,
        "merkle_root": EMPTY_TREE_ROOT, "events_file": EVENTS_FILE,
        "events_sha256": hashlib.sha256(b"").hexdigest(), "events_bytes": 0,
        "checkpoint_file": None,
    }
    manifest = _manifest(tmp_path / "empty")
    manifest["first_position"] = 1
    write_manifest(tmp_path / "empty", manifest)
    with pytest.raises(IntegrityError, match="field 'first_position' is inconsistent") as caught:
        read_manifest(tmp_path / "empty")
    assert caught.value.context == {"reason": "bad_manifest", "path": "$.first_position"}


# --------------------------------------------------------------------------- checkpoint


@pytest.mark.parametrize("size", [11, 13])
def test_a_checkpoint_signed_at_another_size_over_the_manifest_root_is_refused(
    published: Path, signer: Signer, tmp_path: Path, size: int
) -> None:
    """Check 2: the note's size *and* root must equal the manifest's. A note the key holder
    signed for (size 11 or 13, this bundle's root) vouches for another tree."""
    bad = copy_bundle(published, tmp_path)
    root = bytes.fromhex(read_manifest(bad).merkle_root)
    (bad / CHECKPOINT_FILE).write_text(sign_checkpoint(Checkpoint(ORIGIN, size, root), signer))
    with pytest.raises(IntegrityError, match="does not match the manifest") as caught:
        verify_bundle(bad, signer.verifier())
    assert caught.value.context == {"reason": "checkpoint_mismatch"}
    assert f"(size {size}, root" in caught.value.message


def test_a_checkpoint_note_an_unsigned_manifest_does_not_list_is_not_its_signature(
    published: Path, signer: Signer, tmp_path: Path
) -> None:
    """verification.md: a ``checkpoint.note`` that an unsigned manifest does not list is not
    part of the bundle: checking with ``--key`` is refused (no_checkpoint), not satisfied by
    the unlisted note, which is reported as unlisted when the check is waived."""
    bundle = copy_bundle(published, tmp_path)
    manifest = _manifest(bundle)
    manifest["checkpoint_file"] = None
    write_manifest(bundle, manifest)
    with pytest.raises(IntegrityError, match=r"carries no checkpoint\.note") as caught:
        verify_bundle(bundle, signer.verifier())
    assert caught.value.context == {"reason": "no_checkpoint"}
    report = verify_bundle(bundle, None, allow_unsigned=True)
    assert (report.checkpoint_included, report.unlisted) == (False, (CHECKPOINT_FILE,))


# ------------------------------------------------------------------------------- lines

#: Fields out of the store's limits (verification.md, check 3: "well-formed, fields within
#: the store's limits"), each named on its line with the documented range.
OUT_OF_LIMITS: dict[str, tuple[str, Any, str]] = {
    "schema version 0": ("schema_version", 0, "schema_version must be a positive integer"),
    "type over the limit": ("type", "T" * (type_name_chars_max + 1),
                            f"type must be a string of 1..{type_name_chars_max} characters"),
    "actor over the limit": ("actor", "a" * (actor_chars_max + 1),
                             f"actor must be a string of 1..{actor_chars_max} characters"),
    "payload_b64 a number": ("payload_b64", 5, "payload_b64 must be a string of "
                             f"1..{bundle_line_bytes_max} characters"),
}


@pytest.mark.parametrize("case", OUT_OF_LIMITS.values(), ids=OUT_OF_LIMITS.keys())
def test_a_line_field_out_of_the_store_limits_is_named(
    published: Path, signer: Signer, tmp_path: Path, case: tuple[str, Any, str]
) -> None:
    name, value, problem = case
    bad = copy_bundle(published, tmp_path)
    _line_changed(bad, 4, name, value)
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(bad, signer.verifier())
    assert caught.value.message == f"{EVENTS_FILE} line 4: {problem}"
    assert caught.value.context == {"line": 4, "reason": "bad_line"}


def test_a_line_exactly_at_the_size_limit_is_read_whole_across_read_blocks(
    published: Path, signer: Signer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of exactly ``bundle_line_bytes_max`` bytes (its newline aside) is within the
    limit: with a read block ending just before its newline, so that its unfinished part is
    exactly the limit long, it is still read whole and judged on its bytes (here: padded
    with spaces, so not what export writes), not taken for an over-long or truncated line."""
    bad = copy_bundle(published, tmp_path)
    lines = lines_of(bad)
    at_limit = lines[2][:-2] + b" " * (bundle_line_bytes_max + 1 - len(lines[2])) + b"}\n"
    assert len(at_limit) == bundle_line_bytes_max + 1
    block = len(lines[0]) + len(lines[1]) + bundle_line_bytes_max  # up to line 3's newline
    write_lines(bad, [*lines[:2], at_limit, *lines[3:]])
    monkeypatch.setattr(bundle_module, "read_block_bytes", block)
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(bad, signer.verifier())
    assert caught.value.message.startswith(
        f"{EVENTS_FILE} line 3: is not byte for byte the line export writes")
    assert caught.value.context == {"line": 3, "reason": "bad_line"}


def test_a_stream_that_starts_past_version_one_is_named(
    published: Path, tmp_path: Path
) -> None:
    """Check 3: "each stream's versions 1, 2, 3… without gaps". A rewrite (every hash and
    total recomputed, so only the signature could tell) whose first stream starts at 2 is
    refused on its first line, without a key too."""
    forged = copy_bundle(published, tmp_path)

    def start_at_two(lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if line["stream"] == lines[0]["stream"]:
                line["version"] += 1

    rewrite_lines(forged, start_at_two)
    stream = orjson.loads(lines_of(forged)[0])["stream"]
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(forged, None, allow_unsigned=True)
    assert caught.value.message == (
        f"{EVENTS_FILE} line 1: stream {stream!r} jumps from version 0 to 2")
    assert caught.value.context == {"line": 1, "reason": "bad_line"}


# ------------------------------------------------------------------------------ totals


def _totals_refused(bundle: Path) -> IntegrityError:
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(bundle, None, allow_unsigned=True)
    assert caught.value.context == {"reason": "manifest_mismatch"}
    return caught.value


def test_an_unsigned_manifest_stating_another_event_count_is_refused(
    published: Path, tmp_path: Path
) -> None:
    """Check 4 compares the count itself: a manifest of 11 events (its sizes consistent)
    over the file of 12 is refused even with no signature to hold it to."""
    bad = copy_bundle(published, tmp_path)
    manifest = _manifest(bad)
    manifest.update(events=11, last_position=11, tree_size=11)
    write_manifest(bad, manifest)
    assert read_manifest(bad).events == 11
    assert _totals_refused(bad).message.startswith(
        f"the bundle's event count is 12 but {MANIFEST_FILE} states 11")


def test_an_unsigned_manifest_stating_another_merkle_root_is_refused(
    published: Path, tmp_path: Path
) -> None:
    bad = copy_bundle(published, tmp_path)
    manifest = _manifest(bad)
    computed, manifest["merkle_root"] = manifest["merkle_root"], "ab" * 32
    write_manifest(bad, manifest)
    assert _totals_refused(bad).message.startswith(
        f"the bundle's Merkle root is {computed} but {MANIFEST_FILE} states {'ab' * 32}")


def test_a_manifest_stating_another_size_in_bytes_is_refused(
    published: Path, signer: Signer, tmp_path: Path
) -> None:
    """``events_bytes`` is not signed and the file's SHA-256 still matches: the size is
    compared on its own (check 4, last)."""
    bad = copy_bundle(published, tmp_path)
    manifest = _manifest(bad)
    manifest["events_bytes"] += 1
    write_manifest(bad, manifest)
    with pytest.raises(IntegrityError, match=r"the bundle's events\.jsonl size in bytes is "
                       ) as caught:
        verify_bundle(bad, signer.verifier())
    assert caught.value.context == {"reason": "manifest_mismatch"}


def test_the_totals_are_compared_in_the_documented_order(
    published: Path, signer: Signer, tmp_path: Path
) -> None:
    """Check 4 lists "count, head hash, Merkle root, SHA-256, size": a file whose last line
    was dropped is named by its count; a manifest whose head hash and root are both wrong,
    by its head hash."""
    cut = copy_bundle(published, tmp_path, "cut")
    write_lines(cut, lines_of(cut)[:-1])
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(cut, signer.verifier())
    assert caught.value.message.startswith(
        f"the bundle's event count is 11 but {MANIFEST_FILE} states 12")
    assert caught.value.context == {"reason": "manifest_mismatch"}
    both = copy_bundle(published, tmp_path, "both")
    manifest = _manifest(both)
    manifest.update(head_hash="cd" * 32, merkle_root="ab" * 32)
    write_manifest(both, manifest)
    assert _totals_refused(both).message.startswith("the bundle's head hash is ")


# ------------------------------------------------------------------ parallel verification


def test_the_parallel_pass_hands_a_truncated_last_line_to_the_sequential_pass(
    published: Path, signer: Signer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parallel pass only ever accepts: a last line without its newline is a fault it
    hands over, and the sequential pass names that line, as without workers."""
    monkeypatch.setattr(bundle_module, "parallel_events_min", 0)
    monkeypatch.setattr(bundle_module, "parallel_chunk_lines", 4)
    monkeypatch.setattr(bundle_module, "_workers", lambda: 2)
    cut = copy_bundle(published, tmp_path)
    lines = lines_of(cut)
    write_lines(cut, [*lines[:-1], lines[-1][:-1]])
    with pytest.raises(bundle_module._Suspect):
        bundle_module._scan_parallel(cut, 2)
    with pytest.raises(IntegrityError) as caught:
        verify_bundle(cut, signer.verifier())
    assert caught.value.message == (
        f"{EVENTS_FILE} line 12: does not end in a newline (the file is truncated)")
    assert caught.value.context == {"line": 12, "reason": "bad_line"}


def test_a_bundle_of_exactly_the_parallel_threshold_goes_to_the_workers(
    published: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verification.md: bundles of ``parallel_events_min`` events "or more" are spread over
    worker processes (here a threshold of 12, met exactly by the 12-event bundle)."""
    monkeypatch.setattr(bundle_module, "parallel_events_min", 12)
    monkeypatch.setattr(bundle_module, "parallel_chunk_lines", 4)
    monkeypatch.setattr(bundle_module, "_workers", lambda: 2)
    calls: list[int] = []
    original = bundle_module._scan_parallel

    def spy(bundle: Path, workers: int, *rest: Any) -> Any:
        calls.append(workers)
        return original(bundle, workers, *rest)

    monkeypatch.setattr(bundle_module, "_scan_parallel", spy)
    assert verify_bundle(published, signer.verifier()).events == 12
    assert calls == [2]


# ------------------------------------------------------------------------------ import


def test_import_stores_the_checked_checkpoint_with_its_key_name(
    target: EventStore, published: Path, signer: Signer
) -> None:
    """Import stores "the verified checkpoint note" as ``checkpoint`` stores one: size,
    root, origin and the name of the key that checked it."""
    import_bundle(target, published, signer.verifier())
    stored = target.checkpoints()
    assert len(stored) == 1
    manifest = read_manifest(published)
    assert (stored[0]["tree_size"], stored[0]["root_hash"], stored[0]["origin"],
            stored[0]["key_name"]) == (12, manifest.merkle_root, ORIGIN, "ops.example")
    assert stored[0]["note"] == (published / CHECKPOINT_FILE).read_text()


def test_an_import_without_the_signature_check_reports_the_note_it_carried(
    target: EventStore, published: Path
) -> None:
    """verification.md: a skipped check says so: no origin, ``signature_checked`` false,
    ``checkpoint_included`` true for a bundle that carries a note; the note is not stored."""
    report = import_bundle(target, published, None, allow_unsigned=True)
    assert (report.checkpoint_origin, report.signature_checked, report.checkpoint_included
            ) == (None, False, True)
    assert report.to_json()["checkpoint_included"] is True
    assert target.head().position == 12
    assert target.checkpoints() == []


def test_import_refuses_a_stream_name_the_catalogue_refuses(
    target: EventStore, published: Path, tmp_path: Path
) -> None:
    """verification.md: import holds every event to the append rules, "a valid stream name"
    first. A forged unsigned bundle (every hash recomputed) naming a stream "arena-B" passes
    verify-bundle and is refused by import on its first such line; nothing is written."""
    forged = copy_bundle(published, tmp_path)

    def upper_case_stream(lines: list[dict[str, Any]]) -> None:
        for line in lines:
            if line["stream"] == "arena-b":
                line["stream"] = "arena-B"

    rewrite_lines(forged, upper_case_stream)
    first = next(n for n, line in enumerate(lines_of(forged), 1)
                 if orjson.loads(line)["stream"] == "arena-B")
    assert verify_bundle(forged, None, allow_unsigned=True).events == 12
    with pytest.raises(IntegrityError) as caught:
        import_bundle(target, forged, None, allow_unsigned=True)
    assert caught.value.message.startswith(
        f"{EVENTS_FILE} line {first}: event is not valid: stream 'arena-B' is not a valid "
        "stream name")
    assert caught.value.context == {"line": first, "reason": "bad_line"}
    assert target.head().position == 0


def test_import_names_the_line_of_a_payload_not_in_canonical_form(
    target: EventStore, published: Path, tmp_path: Path
) -> None:
    """verification.md: "… payload is not in canonical form", ``bad_line``, named by line:
    a forged unsigned bundle whose line 5 holds a valid payload spelled with spaces."""
    forged = copy_bundle(published, tmp_path)
    payload = orjson.loads(base64.b64decode(orjson.loads(lines_of(forged)[4])["payload_b64"]))
    spaced = orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)

    def respaced(lines: list[dict[str, Any]]) -> None:
        lines[4]["payload_b64"] = base64.b64encode(spaced).decode()

    rewrite_lines(forged, respaced)
    with pytest.raises(IntegrityError) as caught:
        import_bundle(target, forged, None, allow_unsigned=True)
    assert caught.value.message == f"{EVENTS_FILE} line 5: payload is not in canonical form"
    assert caught.value.context == {"line": 5, "reason": "bad_line"}
    assert target.head().position == 0


# ------------------------------------------------------------------------------ export


def test_export_to_position_zero_writes_an_empty_bundle(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    """``--to-position N`` exports ``1..N``; 0 is inside ``0..head``: the empty prefix."""
    fill(store, draft, 4)
    report = export_bundle(store, tmp_path / "none", signer=signer, to_position=0)
    assert (report.events, report.merkle_root) == (0, EMPTY_TREE_ROOT)
    assert (tmp_path / "none" / EVENTS_FILE).read_bytes() == b""
    checked = verify_bundle(tmp_path / "none", signer.verifier())
    assert (checked.events, checked.signature_checked) == (0, True)


# ------------------------------------------------------------------------- replay source


def test_the_replay_reader_names_an_unterminated_over_long_last_line_as_verify_does(
    published: Path, tmp_path: Path
) -> None:
    bad = copy_bundle(published, tmp_path)
    lines = lines_of(bad)
    last = lines[-1][:-2] + b" " * (bundle_line_bytes_max + 2 - len(lines[-1])) + b"}"
    assert len(last) == bundle_line_bytes_max + 1 and not last.endswith(b"\n")
    write_lines(bad, [*lines[:-1], last])
    problem = f"{EVENTS_FILE} line 12 is over {bundle_line_bytes_max} bytes"
    with pytest.raises(LimitExceeded, match=problem):
        verify_bundle(bad, None, allow_unsigned=True)
    with pytest.raises(LimitExceeded, match=problem):
        list(read_bundle_rows(bad)[0])


def test_the_replay_reader_counts_only_the_events_there_are_past_the_head(
    published: Path,
) -> None:
    """``read_bundle_events`` returns "how many will come": with ``as_of`` past the
    bundle's 12 events, 12, the number it then yields."""
    rows, total = read_bundle_rows(published, 50)
    assert (total, len(list(rows))) == (12, 12)
    events, total = read_bundle_events(published, 5)
    assert (total, [event.position for event in events]) == (5, [1, 2, 3, 4, 5])
