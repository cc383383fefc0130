"""Pins signed-note rules of ledger.note that the main note tests leave loose.

Found by a hand-made mutation review of ledger/note.py: each test here fails on one small
change to the module that the other tests let through. They pin, from the C2SP signed-note
spec and the module's docstrings:

* verifier key IDs are exactly 8 lowercase hex digits, refused with ``InvalidInput``;
* ``compute_key_id`` takes only a 32-byte Ed25519 public key;
* the signature covers the whole note text, even when it ends in several newlines;
* control characters up to U+001F are refused in note text, on signing and on opening;
* a signature line's key name runs to its first space (as Go's ``strings.Cut``);
* signature lines are read and reported in note order, and ``signed_by`` names keys as
  ``<name>+<hex key ID>``, so two keys sharing a name stay distinguishable;
* two different verifier keys sharing name and key ID (a 32-bit collision, found offline)
  are refused rather than one silently shadowing the other;
* a checkpoint line must be valid UTF-8, and a signed note that is not a checkpoint is an
  ``IntegrityError`` with reason ``malformed_checkpoint``, not a signature failure.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from test_note import (  # Go's sumdb/note vectors (same directory, prepend import mode)
    ENOCH_SIG,
    PETER_SIG,
    PETER_VERIFIER_KEY,
    ROOT,
    TEXT,
)

from ledger.note import (
    Checkpoint,
    Signer,
    Verifier,
    compute_key_id,
    open_note,
    sign_note,
    verify_checkpoint,
)
from vocabulary.errors import IntegrityError, InvalidInput, SignatureInvalid

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
