"""Pins bundle rules of ``ledger/bundle.py`` that no test held.

A hand-made mutation review of the module found these rules unpinned: a mutant that broke
each one still passed every bundle test. Expected values come from docs/verification.md
(Bundle, the four checks of ``verify-bundle`` and ``import``, the Errors table) and DOMAIN
§2.6, never from what the code happens to print. The rules: every manifest digest is exactly
64 lowercase hex digits, and an empty bundle's manifest states ``first_position`` 0; the
signed checkpoint must state the manifest's size, not just its root; a ``checkpoint.note``
an unsigned manifest does not list is never taken for the bundle's signature; each line
field is held to the store's limits (type and actor too, a schema version of at least 1, a
string ``payload_b64``), each stream starts at version 1, and a line exactly at the size
limit is read whole however the file is cut into blocks; the totals are compared each on
its own and in the documented order (count, head hash, Merkle root, SHA-256, size), also
when no signature holds the manifest; the parallel pass starts at its threshold and hands a
truncated last line to the sequential pass to be named; import refuses a stream name the
catalogue refuses, names the line of a non-canonical payload, stores the checked checkpoint
with its key name and reports a note it carried but did not check; ``--to-position 0``
exports the empty prefix. One test pins a disagreement the review found between the replay
reader and ``verify-bundle`` over an unterminated over-long last line (now mended). Bundles
are exported from SQLite: their bytes are the same on any backend.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_verifiable_bundles import (  # same directory, prepend import mode
    _rewrite,
    copy_bundle,
    export_sample,
    fill,
    lines_of,
    write_lines,
    write_manifest,
)

import ledger.bundle as bundle_module
from ledger import migrate
from ledger.bundle import (
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
from ledger.note import Checkpoint, Signer, sign_checkpoint
from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary.errors import IntegrityError, LimitExceeded
from vocabulary.limits import actor_chars_max, type_name_chars_max

Draft = Callable[..., EventDraft]

#: The origin a checkpoint signed by key "ops.example" carries by default (verification.md).
ORIGIN = "arena-ledger/ops.example"
#: MTH({}) = SHA-256("") (verification.md, Merkle tree).
EMPTY_TREE_ROOT = hashlib.sha256(b"").hexdigest()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("ops.example")


@pytest.fixture(scope="module")
def published(draft: Draft, signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds a signed bundle of a 12-event ledger, exported once; tests copy it first."""
    return export_sample(tmp_path_factory.mktemp("published"), draft, signer)


@pytest.fixture
def target(spare_store: EventStore) -> EventStore:
    """Is the import target: a second, migrated, empty store on the same backend."""
    return spare_store


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

    _rewrite(forged, start_at_two)
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

    def spy(bundle: Path, workers: int) -> Any:
        calls.append(workers)
        return original(bundle, workers)

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

    _rewrite(forged, upper_case_stream)
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

    _rewrite(forged, respaced)
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
