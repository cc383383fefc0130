"""Tests C2SP signed notes and tlog checkpoints against Go's vectors and by property."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from note_vectors import (
    PETER_VERIFIER_KEY,
)

from ledger.merkle import TREE_SIZE_MAX
from ledger.note import (
    NOTE_BYTES_MAX,
    NOTE_SIGNATURES_MAX,
    Checkpoint,
    Signer,
    Verifier,
    compute_key_id,
    generate_key,
    open_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)
from vocabulary.errors import IntegrityError, InvalidInput, LimitExceeded, SignatureInvalid

# --------------------------------------------------------------------------------------
# Vectors from golang.org/x/mod/sumdb/note (github.com/golang/mod, sumdb/note/note_test.go
# and the package documentation in sumdb/note/note.go). Ed25519 signing is deterministic,
# so signing the text with the PeterNeumann key must give exactly PETER_NOTE.
# --------------------------------------------------------------------------------------

PETER_SIGNER_KEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot "
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
PETER_NOTE = TEXT + "\n" + PETER_SIG

ROOT = hashlib.sha256(b"root").digest()


@pytest.fixture(scope="module")
def log_signer() -> Signer:
    return Signer.generate("ledger.example/arena")


# --------------------------------------------------------------------------- Go vectors


def test_go_signer_reproduces_the_published_signed_note(peter: Verifier) -> None:
    signer = Signer.parse(PETER_SIGNER_KEY)
    assert (signer.name, signer.key_id.hex()) == ("PeterNeumann", "c74f20a3")
    assert signer.verifier() == peter
    assert sign_note(TEXT, signer) == PETER_NOTE
    assert signer.private_key_string() == PETER_SIGNER_KEY
    assert peter.key_string() == PETER_VERIFIER_KEY


def test_go_signed_note_opens_with_its_key(peter: Verifier) -> None:
    assert open_note(PETER_NOTE, [peter]) == TEXT
    assert open_note(PETER_NOTE.encode(), peter) == TEXT


def test_doubly_signed_note_opens_with_either_key(peter: Verifier, enoch: Verifier) -> None:
    note = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    assert open_note(note, [peter]) == TEXT
    assert open_note(note, [enoch]) == TEXT
    assert open_note(note, [peter, enoch, enoch]) == TEXT


def test_key_id_is_the_truncated_hash_of_name_type_and_key(peter: Verifier) -> None:
    expected = hashlib.sha256(b"PeterNeumann\n\x01" + peter.public_key_bytes).digest()[:4]
    assert compute_key_id("PeterNeumann", peter.public_key_bytes) == expected
    assert expected.hex() == "c74f20a3"


@pytest.mark.parametrize("key", [PETER_VERIFIER_KEY, PETER_SIGNER_KEY])
def test_every_truncation_and_mangled_byte_of_a_key_is_refused(key: str) -> None:
    parse = Signer.parse if key.startswith("PRIVATE") else Verifier.parse
    variants = {key[i:j] for i in range(len(key) + 1) for j in range(i + 1, len(key) + 1)}
    variants |= {key[:i] + chr(ord(key[i]) + 1) + key[i + 1 :] for i in range(len(key))}
    variants.discard(key)
    for variant in variants:
        with pytest.raises(InvalidInput):
            parse(variant)


def test_verifier_key_errors_name_the_fault() -> None:
    cases = {
        # wrong key length, with the key ID adjusted to match (from Go's tests); its
        # padding bits are not zero, which this parser refuses first
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==": (
            "not canonical base64"
        ),
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWAA==": (
            "1 type byte and 32 key bytes, got 34 bytes"
        ),
        # unknown algorithm, with the key ID adjusted to match (from Go's tests)
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": (
            "signature type 0x65"
        ),
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": (
            "key ID c74f20a4 does not match its name and public key (expected c74f20a3)"
        ),
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": (
            "8 lowercase hex digits"
        ),
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": (
            "must not contain spaces"
        ),
        "+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW": "non-empty",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T": "canonical base64",
    }
    for key, message in cases.items():
        with pytest.raises(InvalidInput, match=re.escape(message)):
            Verifier.parse(key)


def test_signer_key_errors_never_quote_the_secret() -> None:
    seed_part = PETER_SIGNER_KEY.split("+", 4)[4]  # the base64 field, "+" and all
    assert seed_part.startswith("AYEK")
    for bad in (
        PETER_SIGNER_KEY[len("PRIVATE+") :],
        PETER_SIGNER_KEY.replace("c74f20a3", "c74f20a4"),
        PETER_SIGNER_KEY[:-1],
    ):
        with pytest.raises(InvalidInput) as caught:
            Signer.parse(bad)
        assert seed_part[:12] not in str(caught.value)
        assert seed_part[:12] not in repr(caught.value.to_dict())
    assert seed_part not in repr(Signer.parse(PETER_SIGNER_KEY))


# -------------------------------------------------------------------- opening failures


def _reason(note: str | bytes, verifiers: list[Verifier]) -> str:
    with pytest.raises(SignatureInvalid) as caught:
        open_note(note, verifiers)
    return str(caught.value.context["reason"])


def test_go_malformed_notes_are_refused(peter: Verifier) -> None:
    malformed: list[str | bytes] = [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        b"\xff" + (TEXT + "\n" + PETER_SIG).encode(),
        TEXT + "\n" + "— Bad Name " + PETER_SIG.split(" ")[2],
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ]
    for note in malformed:
        assert _reason(note, [peter]) == "malformed", note


def test_malformed_note_messages_say_what_is_wrong(peter: Verifier) -> None:
    cases = {
        TEXT: "no blank line separates the text from the signatures",
        TEXT + "\n": "no signature lines after the blank line",
        TEXT + "\n" + PETER_SIG[:-1]: "does not end in a newline",
        "a\tb\n\n" + PETER_SIG: "control character U+0009 at offset 1",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n": "signature line 2 does not start",
        TEXT + "\n— PeterNeumann !!!\n": "signature line 1: signature is not canonical base64",
        TEXT + "\n— a+b AAAAAAA=\n": "key name 'a+b' must not contain '+'",
    }
    for note, message in cases.items():
        with pytest.raises(SignatureInvalid, match=re.escape(message)):
            open_note(note, [peter])


def test_a_changed_signature_is_refused_naming_the_key(peter: Verifier) -> None:
    tampered = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(SignatureInvalid, match=r"signature by key PeterNeumann\+c74f20a3"):
        open_note(tampered, [peter])
    assert _reason(tampered, [peter]) == "bad_signature"


def test_a_note_without_a_trusted_signature_is_refused(peter: Verifier, enoch: Verifier) -> None:
    with pytest.raises(SignatureInvalid) as caught:
        open_note(PETER_NOTE, [enoch])
    assert caught.value.context["reason"] == "no_trusted_signature"
    assert "signed by PeterNeumann+c74f20a3" in caught.value.message
    assert "trusted: EnochRoot+af0cfe78" in caught.value.message


def test_signatures_by_unknown_keys_sharing_a_name_or_id_are_ignored(peter: Verifier) -> None:
    impostor = Signer.generate("PeterNeumann")  # same name, another key ID
    note = sign_note(TEXT, impostor) + PETER_SIG
    assert open_note(note, [peter]) == TEXT
    same_id_other_name = "— PeterNeumannX " + PETER_SIG.split(" ")[2]
    assert open_note(PETER_NOTE + same_id_other_name, [peter]) == TEXT


def test_too_many_signatures_are_refused(peter: Verifier) -> None:
    assert open_note(TEXT + "\n" + PETER_SIG * NOTE_SIGNATURES_MAX, [peter]) == TEXT
    note = TEXT + "\n" + PETER_SIG * (NOTE_SIGNATURES_MAX + 1)
    assert _reason(note, [peter]) == "too_many_signatures"


def test_an_oversized_note_is_refused(peter: Verifier) -> None:
    note = "x" * NOTE_BYTES_MAX + "\n\n" + PETER_SIG
    assert _reason(note, [peter]) == "too_large"
    assert _reason(note.encode(), [peter]) == "too_large"


def test_a_note_of_exactly_the_byte_limit_signs_and_opens_and_one_byte_more_does_not(
    log_signer: Signer,
) -> None:
    """The limit is inclusive, for signing and for opening text and bytes alike; the
    multi-byte character counts in bytes, not characters."""
    overhead = len(sign_note("é\n", log_signer).encode()) - len("é\n".encode())
    text = "é" + "x" * (NOTE_BYTES_MAX - overhead - len("é\n".encode())) + "\n"
    note = sign_note(text, log_signer)
    assert len(note.encode()) == NOTE_BYTES_MAX
    assert open_note(note, [log_signer.verifier()]) == text
    assert open_note(note.encode(), [log_signer.verifier()]) == text
    with pytest.raises(LimitExceeded, match=f"would be {NOTE_BYTES_MAX + 1} bytes"):
        sign_note("x" + text, log_signer)
    longer = "x" + note
    assert _reason(longer, [log_signer.verifier()]) == "too_large"
    assert _reason(longer.encode(), [log_signer.verifier()]) == "too_large"


def test_a_signature_line_holding_only_a_key_id_is_malformed(peter: Verifier) -> None:
    """Four bytes are a key ID and no signature: refused as malformed, not tried as an
    empty signature."""
    key_id_only = base64.b64encode(bytes.fromhex("c74f20a3")).decode()
    with pytest.raises(SignatureInvalid, match="signature is not canonical base64 of a key"):
        open_note(TEXT + "\n— PeterNeumann " + key_id_only + "\n", [peter])


def test_opening_needs_verifier_objects() -> None:
    with pytest.raises(InvalidInput, match="at least one verifier key"):
        open_note(PETER_NOTE, [])
    with pytest.raises(InvalidInput, match="not a key string"):
        open_note(PETER_NOTE, PETER_VERIFIER_KEY)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- signing


def test_generated_keys_round_trip_and_sign(peter: Verifier) -> None:
    signer_key, verifier_key = generate_key("ledger.example/arena")
    signer, verifier = Signer.parse(signer_key), Verifier.parse(verifier_key)
    assert signer.verifier() == verifier
    assert Verifier.parse(verifier_key + "\n") == verifier  # as read from a key file
    note = sign_note("hello\n\nworld\n", signer)
    assert open_note(note, [verifier]) == "hello\n\nworld\n"
    assert _reason(note, [peter]) == "no_trusted_signature"
    other = Signer.generate("ledger.example/arena").verifier()
    assert _reason(note, [other]) == "no_trusted_signature"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty"),
        ("a b", "spaces"),
        ("a\u00a0b", "spaces"),
        ("a\u3000b", "spaces"),
        ("a\nb", "spaces"),
        ("a+b", "'+'"),
        ("a\x00b", "control characters"),
        ("a\ud800b", "valid UTF-8"),
    ],
)
def test_key_names_follow_the_spec(name: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        generate_key(name)


def test_sign_note_refuses_text_it_could_not_open_again(log_signer: Signer) -> None:
    with pytest.raises(InvalidInput, match="ending in a newline"):
        sign_note("no newline", log_signer)
    with pytest.raises(InvalidInput, match=re.escape("control character U+0007")):
        sign_note("bell\x07\n", log_signer)
    with pytest.raises(InvalidInput, match="UTF-8"):
        sign_note("\ud800\n", log_signer)
    with pytest.raises(LimitExceeded, match="notes are limited to"):
        sign_note("x" * NOTE_BYTES_MAX + "\n", log_signer)


# -------------------------------------------------------------------------- checkpoints


def test_checkpoint_body_has_the_exact_c2sp_layout() -> None:
    checkpoint = Checkpoint("example.com/behind-the-sofa", 20852163, ROOT)
    body = checkpoint.to_body()
    assert (
        body
        == "example.com/behind-the-sofa\n20852163\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n"
    )
    assert Checkpoint.parse(body) == checkpoint
    with_ext = Checkpoint("o", 0, ROOT, ("ext one", "ext two"))
    assert with_ext.to_body().endswith("=\next one\next two\n")
    assert Checkpoint.parse(with_ext.to_body()) == with_ext


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("o\n1\n" + "A" * 43 + "=", "ending in a newline"),
        ("o\n1\n", "has 2 lines;"),
        ("o\n", "has 1 line;"),
        ("o\n01\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "'01' is not a decimal"),
        ("o\n+1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "'+1' is not a decimal"),
        ("o\n-1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "'-1' is not a decimal"),
        ("o\n 1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "' 1' is not a decimal"),
        ("o\n\u0661\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "is not a decimal"),
        ("o\n" + "9" * 5000 + "\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "decimal"),
        (f"o\n{2**64}\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "integer in 0.."),
        ("o\n1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7J=\n", "not canonical base64"),
        ("o\n1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2\n", "of 32 bytes"),
        ("\n1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n", "origin must be a non-empty"),
        ("o\n1\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n\n", "extension line 1"),
    ],
)
def test_malformed_checkpoint_bodies_are_refused(body: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        Checkpoint.parse(body)


def test_checkpoint_fields_are_checked_on_construction() -> None:
    with pytest.raises(InvalidInput, match="root hash must be 32 bytes"):
        Checkpoint("o", 1, b"short")
    with pytest.raises(InvalidInput, match="tree size must be an integer"):
        Checkpoint("o", -1, ROOT)
    with pytest.raises(InvalidInput, match="tree size must be an integer"):
        Checkpoint("o", True, ROOT)
    with pytest.raises(InvalidInput, match="origin must not contain newlines"):
        Checkpoint("o\nx", 1, ROOT)
    assert Checkpoint("o", TREE_SIZE_MAX, ROOT).size == TREE_SIZE_MAX


def test_signed_checkpoint_verifies_with_key_and_origin(log_signer: Signer) -> None:
    checkpoint = Checkpoint(log_signer.name, 42, ROOT)
    note = sign_checkpoint(checkpoint, log_signer)
    assert note.startswith(checkpoint.to_body() + "\n— ledger.example/arena ")
    verifier = log_signer.verifier()
    assert verify_checkpoint(note, verifier, expected_origin=log_signer.name) == checkpoint
    assert verify_checkpoint(note, [verifier]) == checkpoint


def test_checkpoint_from_another_origin_is_refused(log_signer: Signer) -> None:
    note = sign_checkpoint(Checkpoint("other.example/log", 42, ROOT), log_signer)
    with pytest.raises(
        IntegrityError, match=r"origin 'other\.example/log' is not the expected"
    ) as e:
        verify_checkpoint(note, log_signer.verifier(), expected_origin=log_signer.name)
    assert not isinstance(e.value, SignatureInvalid)
    assert e.value.context["reason"] == "origin_mismatch"


def test_checkpoint_signed_by_another_key_is_refused(log_signer: Signer) -> None:
    note = sign_checkpoint(Checkpoint(log_signer.name, 42, ROOT), log_signer)
    other = Signer.generate(log_signer.name).verifier()
    with pytest.raises(SignatureInvalid, match="no signature by a trusted key"):
        verify_checkpoint(note, other, expected_origin=log_signer.name)


def test_signed_note_that_is_not_a_checkpoint_is_refused(log_signer: Signer) -> None:
    note = sign_note("just one line\n", log_signer)
    with pytest.raises(IntegrityError, match="not a valid checkpoint: checkpoint body has 1"):
        verify_checkpoint(note, log_signer.verifier())


_ORIGINS = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x2FFF, exclude_characters="+"),
    min_size=1,
    max_size=40,
).filter(lambda s: not any(c.isspace() for c in s))
_REPLACEMENTS = st.sampled_from(["\n", " ", "—", "+", "/", "=", "0", "1", "A", "a", "é", "\t"])


@settings(deadline=None, max_examples=150)
@given(
    origin=_ORIGINS,
    size=st.integers(0, TREE_SIZE_MAX),
    root=st.binary(min_size=32, max_size=32),
    data=st.data(),
)
def test_changing_any_one_character_of_a_signed_checkpoint_breaks_it(
    log_signer: Signer, origin: str, size: int, root: bytes, data: st.DataObject
) -> None:
    checkpoint = Checkpoint(origin, size, root)
    note = sign_checkpoint(checkpoint, log_signer)
    verifier = log_signer.verifier()
    assert verify_checkpoint(note, verifier, expected_origin=origin) == checkpoint

    position = data.draw(st.integers(0, len(note) - 1), label="position")
    replacement = data.draw(_REPLACEMENTS.filter(lambda c: c != note[position]), label="char")
    tampered = note[:position] + replacement + note[position + 1 :]
    with pytest.raises(SignatureInvalid):
        verify_checkpoint(tampered, verifier, expected_origin=origin)


def test_oversized_note_bytes_are_refused_as_too_large_before_decoding(peter: Verifier) -> None:
    # Bytes over NOTE_BYTES_MAX are refused for their size whatever they hold (reason
    # too_large), before any UTF-8 decoding: not "malformed" for bytes that are not UTF-8.
    for size in (NOTE_BYTES_MAX + 1, NOTE_BYTES_MAX + 2):
        with pytest.raises(SignatureInvalid) as caught:
            open_note(b"\xff" * size, [peter])
        assert caught.value.context["reason"] == "too_large"


# Key IDs, key names, signature coverage and signature-line parsing at the edges of the C2SP
# signed-note format: each expectation comes from the spec or the module's docstrings.


PETER_KEY_B64 = PETER_VERIFIER_KEY.rsplit("+", 1)[1]


# Two Ed25519 public keys whose key IDs under the name "c" collide: both are
# SHA-256("c" || 0x0A || 0x01 || key)[:4] = 6a696c81 (seeds SHA-256(b"collide-2538") and
# SHA-256(b"collide-154132"), found by a birthday search).
COLLIDING_KEYS = (
    "fce2cd631e1575cbbffc1e0da7f72d0b95463fdfeafde9a5d4ec92894b8fef4f",
    "0a465a12d445a0bf8478416b9c1e1dad6b844c409fef5074ac883e07473a1ed8",
)


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("rules.example/log")


# ------------------------------------------------------------------------------ keys


@pytest.mark.parametrize("key_id", ["c74f20a3f", "c74f20a300", "c74f20a3 "])
def test_a_key_id_longer_than_8_hex_digits_is_refused_as_invalid_input(key_id: str) -> None:
    with pytest.raises(InvalidInput, match="key ID must be 8 lowercase hex digits"):
        Verifier.parse(f"PeterNeumann+{key_id}+{PETER_KEY_B64}")


@pytest.mark.parametrize("length", [0, 31, 33])
def test_compute_key_id_takes_only_a_32_byte_public_key(length: int) -> None:
    with pytest.raises(InvalidInput, match=f"public key is 32 bytes, got {length}"):
        compute_key_id("c", b"\x01" * length)


def test_compute_key_id_follows_the_spec_formula() -> None:
    key = bytes.fromhex(COLLIDING_KEYS[0])
    assert compute_key_id("c", key) == bytes.fromhex("6a696c81")


def test_two_different_keys_sharing_name_and_key_id_are_refused() -> None:
    first, second = (
        Verifier("c", Ed25519PublicKey.from_public_bytes(bytes.fromhex(key)))
        for key in COLLIDING_KEYS
    )
    assert first.key_id == second.key_id == bytes.fromhex("6a696c81")
    assert first != second
    with pytest.raises(InvalidInput, match="two different verifier keys share name 'c'"):
        open_note(TEXT + "\n" + PETER_SIG, [first, second])


# ----------------------------------------------------------------------------- notes


@pytest.mark.parametrize("text", ["a\n\n", "a\n\n\n", "\n", "hello\n\nworld\n\n"])
def test_the_signature_covers_every_final_newline_of_the_text(signer: Signer, text: str) -> None:
    note = sign_note(text, signer)
    assert note.startswith(text + "\n— rules.example/log ")
    assert open_note(note, [signer.verifier()]) == text


def test_the_signature_of_a_text_with_trailing_blank_lines_is_over_the_whole_text(
    signer: Signer,
) -> None:
    """A signature over the text without its extra newline must not verify."""
    short = sign_note("a\n", signer)
    forged = "a\n\n\n" + short.split("\n\n", 1)[1]
    with pytest.raises(SignatureInvalid) as caught:
        open_note(forged, [signer.verifier()])
    assert caught.value.context["reason"] == "bad_signature"


def test_unit_separator_is_a_control_character(signer: Signer, peter: Verifier) -> None:
    with pytest.raises(InvalidInput, match="control character U\\+001F"):
        sign_note("a\x1fb\n", signer)
    with pytest.raises(SignatureInvalid, match="control character U\\+001F at offset 1") as caught:
        open_note("a\x1fb\n\n" + PETER_SIG, [peter])
    assert caught.value.context["reason"] == "malformed"


def test_a_signature_line_key_name_ends_at_the_first_space(peter: Verifier) -> None:
    note = TEXT + "\n— PeterNeumann AAAA AAAA\n"
    with pytest.raises(SignatureInvalid, match="signature line 1: signature is not canonical"):
        open_note(note, [peter])


def test_the_first_malformed_signature_line_is_the_one_reported(peter: Verifier) -> None:
    note = TEXT + "\n— a+b AAAAAAA=\n— PeterNeumann !!!\n"
    with pytest.raises(SignatureInvalid, match="signature line 1: key name 'a\\+b'"):
        open_note(note, [peter])


def test_untrusted_signers_are_reported_in_note_order_as_name_and_key_id(
    peter: Verifier, enoch: Verifier
) -> None:
    with pytest.raises(SignatureInvalid) as caught:
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [Signer.generate("x").verifier()])
    assert caught.value.context["reason"] == "no_trusted_signature"
    assert caught.value.context["signed_by"] == ["PeterNeumann+c74f20a3", "EnochRoot+af0cfe78"]
    with pytest.raises(SignatureInvalid) as caught:
        open_note(TEXT + "\n" + ENOCH_SIG + PETER_SIG, [Signer.generate("x").verifier()])
    assert caught.value.context["signed_by"] == ["EnochRoot+af0cfe78", "PeterNeumann+c74f20a3"]


# ----------------------------------------------------------------------------- checkpoints


def test_checkpoint_lines_must_be_valid_utf8() -> None:
    with pytest.raises(InvalidInput, match="checkpoint origin must be valid UTF-8"):
        Checkpoint("log\ud800", 1, ROOT)
    with pytest.raises(InvalidInput, match="extension line 1 must be valid UTF-8"):
        Checkpoint("log", 1, ROOT, ("ext\udfff",))


def test_a_signed_note_that_is_not_a_checkpoint_has_reason_malformed_checkpoint(
    signer: Signer,
) -> None:
    note = sign_note("just one line\n", signer)
    with pytest.raises(IntegrityError) as caught:
        verify_checkpoint(note, signer.verifier())
    assert not isinstance(caught.value, SignatureInvalid)
    assert caught.value.context["reason"] == "malformed_checkpoint"
