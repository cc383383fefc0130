"""Tests that a bundle line is accepted exactly when it is the bytes export writes for it.

Verification refuses every other spelling of an event (``ledger.bundle._check_line``); these
properties check the other half: whatever text and payload an event holds (quotes,
backslashes, control characters, characters beyond the BMP, any payload bytes), the line
export writes for it (``ledger.bundle._export_line``) is accepted and read back as that
event, and no other base64 spelling of its payload is.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.bundle import _check_line, _export_line
from ledger.chain import envelope_bytes
from vocabulary.errors import IntegrityError

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
texts = st.text(min_size=1, max_size=24)
events = st.tuples(
    st.integers(1, 2**40), texts, st.integers(1, 2**40), texts, st.integers(1, 9),
    st.binary(max_size=96), texts, texts,
)


def _exported(event: tuple[int, str, int, str, int, bytes, str, str], previous: bytes) -> bytes:
    entry = hashlib.sha256(previous + envelope_bytes(*event)).hexdigest()
    return _export_line(*event, entry)


@given(event=events, previous=st.binary(min_size=32, max_size=32))
def test_every_line_export_writes_is_accepted_as_the_event_it_holds(
    event: tuple[int, str, int, str, int, bytes, str, str], previous: bytes
) -> None:
    line = _exported(event, previous)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    row, entry = _check_line(line[:-1], event[0], previous)
    assert row == (*event, entry.hex())


@given(event=events, previous=st.binary(min_size=32, max_size=32), data=st.data())
def test_only_the_canonical_base64_of_a_payload_is_accepted(
    event: tuple[int, str, int, str, int, bytes, str, str], previous: bytes,
    data: st.DataObject,
) -> None:
    payload = event[5]
    text = base64.b64encode(payload).decode()
    unused = {1: 4, 2: 2}.get(len(payload) % 3)  # bits of the last data character unused
    if unused is None:
        return  # no padding, no unused bits: the only spelling there is
    at = -3 if unused == 4 else -2
    bits = data.draw(st.integers(1, 2**unused - 1))
    odd = text[:at] + _ALPHABET[_ALPHABET.index(text[at]) ^ bits] + text[at + 1:]
    assert base64.b64decode(odd) == payload
    line = _exported(event, previous).replace(f'"payload_b64":"{text}"'.encode(),
                                              f'"payload_b64":"{odd}"'.encode())
    with pytest.raises(IntegrityError, match="payload_b64 is not canonical base64"):
        _check_line(line[:-1], event[0], previous)


@pytest.mark.parametrize("padding", ["==", "="])
def test_the_base64_check_accepts_exactly_what_re_encodes_to_the_same_text(padding: str) -> None:
    """Every last group of four characters that strict decoding accepts, with one or two
    "=": the line check agrees with re-encoding the decoded bytes on each (only this group
    can hold unused bits; the groups before it are decoded bit for bit)."""
    filler = "QUJD"  # one whole group before: the check looks at the end only
    groups = ([f"{a}{b}==" for a in _ALPHABET for b in _ALPHABET] if padding == "==" else
              [f"Q{b}{c}=" for b in _ALPHABET for c in _ALPHABET])
    previous = bytes(32)
    for group in groups:
        text = filler + group
        payload = base64.b64decode(text, validate=True)
        event = (1, "s", 1, "T", 1, payload, "t", "a")
        line = _exported(event, previous).replace(
            f'"payload_b64":"{base64.b64encode(payload).decode()}"'.encode(),
            f'"payload_b64":"{text}"'.encode())
        if base64.b64encode(payload).decode() == text:
            _check_line(line[:-1], 1, previous)
        else:
            with pytest.raises(IntegrityError, match="payload_b64 is not canonical base64"):
                _check_line(line[:-1], 1, previous)
