"""Replays an exported bundle only as the bundle its manifest (and signature) describe.

A replay of a bundle reads every line, also past ``--as-of``: a truncated, extended or
altered events file fails with IntegrityError however early the replay was asked to stop,
instead of replaying as a shorter ledger that reports "ok". Given the publisher's key, the
bundle is first verified whole (signature, Merkle root), which is the only thing that tells
a consistently rewritten bundle from the signed one. The bundle is exported once, from
SQLite: its files are the same whichever backend wrote them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path

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
)
from settled_ledger import build_settled, open_ledger  # same directory

from ledger.bundle import export_bundle, read_manifest, verify_bundle
from ledger.note import Signer
from services.replay import replay_bundle
from vocabulary.errors import IntegrityError, LimitExceeded

#: Positions the settled ledger holds (settled_ledger.build_settled).
HEAD = 92


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("validator.example")


@pytest.fixture(scope="module")
def published(signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds the signed bundle of the settled ledger; tests copy it before changing it."""
    folder = tmp_path_factory.mktemp("published")
    ledger = open_ledger(f"sqlite:///{folder / 'ledger.db'}")
    try:
        build_settled(ledger)
        export_bundle(ledger.store, folder / "bundle", signer=signer)
    finally:
        ledger.close()
    return folder / "bundle"


Lines = list[bytes]

TAMPERING: dict[str, tuple[Callable[[Lines], Lines], str]] = {
    "last line dropped": (lambda ls: ls[:-1], "event count is 91 but manifest.json states 92"),
    "last ten lines dropped": (lambda ls: ls[:-10], "event count is 82 but"),
    "newline of the last line lost": (lambda ls: [*ls[:-1], ls[-1][:-1]], "line 92: does not "
                                      "end in a newline"),
    "last line repeated": (lambda ls: [*ls, ls[-1]], "line 93: holds position 92"),
    "line appended": (lambda ls: [*ls, b"{}\n"], "line 93"),
    "a late payload byte": (
        lambda ls: [*ls[:89], flip(ls[89], b'"payload_b64":"'), *ls[90:]], "line 90"
    ),
    "a late line dropped": (lambda ls: [*ls[:60], *ls[61:]], "line 61: holds position 62"),
}


@pytest.mark.parametrize("as_of", [None, 10], ids=["whole", "as-of-10"])
@pytest.mark.parametrize("case", TAMPERING.values(), ids=TAMPERING.keys())
def test_a_damaged_events_file_fails_the_replay_even_short_of_the_damage(
    published: Path, tmp_path: Path, case: tuple[Callable[[Lines], Lines], str],
    as_of: int | None,
) -> None:
    change, problem = case
    damaged = copy_bundle(published, tmp_path)
    write_lines(damaged, change(lines_of(damaged)))
    with pytest.raises(IntegrityError, match=problem):
        replay_bundle(damaged, as_of)


def test_the_intact_bundle_replays_whole_and_in_part(published: Path, signer: Signer) -> None:
    whole = replay_bundle(published)
    assert (whole.ok, whole.events, whole.settlements_checked) == (True, HEAD, 3)
    assert whole.head_hash == read_manifest(published).head_hash
    assert whole.bundle is None  # no key: the signature was not checked
    part = replay_bundle(published, 10)
    assert (part.ok, part.events, part.last_position) == (True, 10, 10)

    checked = replay_bundle(published, verifier=signer.verifier())
    assert checked.to_json() == whole.to_json()
    assert checked.bundle is not None
    assert (checked.bundle.signature_checked, checked.bundle.checkpoint_origin) == (
        True, "arena-ledger/validator.example")
    assert checked.bundle.events == HEAD


def test_only_the_key_tells_a_consistent_rewrite_from_the_signed_bundle(
    published: Path, signer: Signer, tmp_path: Path
) -> None:
    # A forger without the signing key rewrites a late event's actor and recomputes every
    # entry hash and the manifest's totals: the lines and the manifest agree again.
    forged = copy_bundle(published, tmp_path)

    def other_actor(lines: list[dict[str, object]]) -> None:
        lines[85]["actor"] = "someone-else"

    rewrite_lines(forged, other_actor)
    assert replay_bundle(forged).ok  # nothing in the bundle itself contradicts it
    with pytest.raises(IntegrityError, match="does not match the manifest") as caught:
        replay_bundle(forged, verifier=signer.verifier())
    assert caught.value.context["reason"] == "checkpoint_mismatch"
    with pytest.raises(IntegrityError):  # another validator's key does not vouch for it
        replay_bundle(published, verifier=Signer.generate("validator.example").verifier())
    with pytest.raises(IntegrityError, match="origin"):
        replay_bundle(published, verifier=signer.verifier(), origin="arena-ledger/other")


def test_a_line_over_the_size_limit_fails_the_replay_even_past_as_of(
    published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.bundle as bundle_module

    monkeypatch.setattr(bundle_module, "bundle_line_bytes_max", 4096)
    damaged = copy_bundle(published, tmp_path)
    lines = lines_of(damaged)
    line = orjson.loads(lines[30])
    line["payload_b64"] = base64.b64encode(b"x" * 8192).decode()
    write_lines(damaged, [*lines[:30], orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n",
                          *lines[31:]])
    with pytest.raises(LimitExceeded, match="line 31 is over 4096 bytes"):
        replay_bundle(damaged, 5)


def _skip_a_version_from(index: int) -> Callable[[list[dict[str, object]]], None]:
    def change(lines: list[dict[str, object]]) -> None:
        stream = lines[index]["stream"]
        for line in lines[index:]:
            if line["stream"] == stream:
                line["version"] = int(str(line["version"])) + 1
    return change


@pytest.mark.parametrize("as_of", [None, 10], ids=["whole", "as-of-10"])
def test_a_stream_that_skips_a_version_fails_the_replay_as_it_fails_verification(
    published: Path, tmp_path: Path, as_of: int | None
) -> None:
    """A rewrite with every hash and total recomputed, but one stream jumping a version from
    line 61 on, is refused by a replay without --key as verify-bundle and import refuse it,
    also when the replay stops before the gap."""
    forged = copy_bundle(published, tmp_path)
    rewrite_lines(forged, _skip_a_version_from(60))
    stream, version = parsed_line(forged, 61)
    problem = re.escape(f"line 61: stream {stream!r} jumps from version {version - 2} to "
                        f"{version}")
    with pytest.raises(IntegrityError, match=problem) as caught:
        replay_bundle(forged, as_of)
    assert caught.value.context == {"line": 61, "reason": "bad_line"}
    with pytest.raises(IntegrityError, match=problem):
        verify_bundle(forged, None, allow_unsigned=True)


def test_a_respelled_line_fails_the_replay(published: Path, tmp_path: Path) -> None:
    respelled = copy_bundle(published, tmp_path)
    lines = lines_of(respelled)
    write_lines(respelled, [*lines[:40], lines[40][:-1] + b"\r\n", *lines[41:]])
    restate_digest(respelled)
    with pytest.raises(IntegrityError, match="line 41: is not byte for byte the line export"):
        replay_bundle(respelled, 5)
