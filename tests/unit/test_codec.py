"""Pins the canonical JSON codec (docs/concepts.md) to RFC 8785 and to its refusals."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal, Inexact, localcontext
from enum import StrEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ConfigDict, TypeAdapter, ValidationError

from vocabulary import limits
from vocabulary.codec import (
    canonical_bytes,
    canonical_decimal,
    digest,
    fixed6,
    is_canonical_decimal,
    is_fixed6,
    loads,
    normalise,
    plain_canonical_bytes,
)
from vocabulary.errors import CanonicalFormError, InvalidInput, LedgerError, LimitExceeded
from vocabulary.fields import DecimalStr

MAX_INT = 2**53 - 1

# -- canonical bytes -------------------------------------------------------------------------


def test_keys_are_sorted_and_there_is_no_whitespace() -> None:
    document = {"b": [1, {"z": None, "a": True}], "a": "x", "c": {"y": False, "x": -3}}
    assert canonical_bytes(document) == (
        b'{"a":"x","b":[1,{"a":true,"z":null}],"c":{"x":-3,"y":false}}'
    )


def test_text_is_utf8_with_only_the_mandatory_escapes() -> None:
    text = "caf\u00e9 \u20ac \U0001f600 / \u007f \u2028 \"q\" \\ \b\t\n\f\r \x00\x1f"
    assert canonical_bytes(text) == (
        '"caf\u00e9 \u20ac \U0001f600 / \u007f \u2028 \\"q\\" \\\\ '
        '\\b\\t\\n\\f\\r \\u0000\\u001f"'
    ).encode("utf-8")


def test_keys_sort_by_utf16_code_units_not_code_points() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16, which sorts before U+E000; by code
    # point it would sort after. RFC 8785 §3.2.3 requires the UTF-16 order.
    assert canonical_bytes({"\ue000": 1, "\U0001f600": 2}) == (
        '{"\U0001f600":2,"\ue000":1}'.encode()
    )
    assert sorted(["\ue000", "\U0001f600"]) == ["\ue000", "\U0001f600"]  # code point order


def test_the_rfc8785_sorting_example() -> None:
    # RFC 8785 §3.2.3, verbatim.
    document = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    values = list(json.loads(canonical_bytes(document)).values())
    assert values == [
        "Carriage Return",
        "One",
        "Control",
        "Latin Small Letter O With Diaeresis",
        "Euro Sign",
        "Emoji: Grinning Face",
        "Hebrew Letter Dalet With Dagesh",
    ]


def test_tuples_encode_as_arrays_and_normalise_rebuilds_sorted() -> None:
    assert canonical_bytes({"a": (1, 2)}) == b'{"a":[1,2]}'
    rebuilt = normalise({"b": 1, "a": {"d": 2, "c": 3}})
    assert list(rebuilt) == ["a", "b"] and list(rebuilt["a"]) == ["c", "d"]


@pytest.mark.parametrize("value", [MAX_INT, -MAX_INT, 0, -1])
def test_integers_within_the_interoperable_range_are_kept(value: int) -> None:
    assert canonical_bytes({"n": value}) == b'{"n":%d}' % value


_NO_FLOAT = "is not allowed; use an integer or a decimal string"
_OUT_OF_RANGE = "is outside ±(2**53 - 1)"


@pytest.mark.parametrize(
    ("document", "error", "path", "message"),
    [
        ({"a": [0, 1, {"b": 1.5}]}, CanonicalFormError, "$.a[2].b",
         f"float at $.a[2].b {_NO_FLOAT}"),
        ({"a": [0, 1, {"b": float("nan")}]}, CanonicalFormError, "$.a[2].b",
         f"float at $.a[2].b {_NO_FLOAT}"),
        ({"x": float("inf")}, CanonicalFormError, "$.x", f"float at $.x {_NO_FLOAT}"),
        ({"x": [float("-inf")]}, CanonicalFormError, "$.x[0]", f"float at $.x[0] {_NO_FLOAT}"),
        ({"x": 1.0}, CanonicalFormError, "$.x", f"float at $.x {_NO_FLOAT}"),
        ({"d": {"e": Decimal("1.5")}}, CanonicalFormError, "$.d.e",
         "Decimal at $.d.e must be written as a canonical decimal string"),
        ({"b": [b"raw"]}, CanonicalFormError, "$.b[0]",
         "value of type bytes at $.b[0] has no JSON form"),
        ({"b": bytearray(b"raw")}, CanonicalFormError, "$.b",
         "value of type bytearray at $.b has no JSON form"),
        ({"s": {1, 2}}, CanonicalFormError, "$.s", "value of type set at $.s has no JSON form"),
        ({1: "one"}, CanonicalFormError, "$", "object key 1 at $ is not a string"),
        ({"a": {("t",): 1}}, CanonicalFormError, "$.a", "object key ('t',) at $.a is not a string"),
        ({"a": {"n": MAX_INT + 1}}, CanonicalFormError, "$.a.n",
         f"integer at $.a.n {_OUT_OF_RANGE}"),
        ({"a": [-(MAX_INT + 1)]}, CanonicalFormError, "$.a[0]",
         f"integer at $.a[0] {_OUT_OF_RANGE}"),
        ({"a": 10**400}, CanonicalFormError, "$.a", f"integer at $.a {_OUT_OF_RANGE}"),
    ],
)
def test_values_without_a_canonical_form_are_refused_with_their_path(
    document: Any, error: type[LedgerError], path: str, message: str
) -> None:
    # The message names the problem as well as the place: a float, a Decimal and a byte
    # string are three different mistakes with three fixes.
    with pytest.raises(error) as caught:
        canonical_bytes(document)
    assert caught.value.path == path  # type: ignore[attr-defined]
    assert caught.value.code == "non_canonical"
    assert path in str(caught.value)
    assert caught.value.message == message


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_nesting_is_limited_to_json_depth_max() -> None:
    assert canonical_bytes(_nested(limits.json_depth_max)).count(b"[") == limits.json_depth_max
    with pytest.raises(LimitExceeded) as caught:
        canonical_bytes({"a": _nested(limits.json_depth_max)})
    assert caught.value.path.startswith("$.a[0]")  # type: ignore[attr-defined]
    assert caught.value.code == "limit_exceeded"


def _nested_tuples(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = (value,)
    return value


def test_the_full_walk_limits_nesting_as_the_fast_path_does() -> None:
    # Tuples are not plain: these documents go through normalise, not plain_canonical_bytes.
    deepest = _nested_tuples(limits.json_depth_max)
    assert plain_canonical_bytes(deepest) is None
    assert canonical_bytes(deepest) == canonical_bytes(_nested(limits.json_depth_max))
    assert canonical_bytes({"a": _nested_tuples(limits.json_depth_max - 1)}).count(b"[") == (
        limits.json_depth_max - 1
    )
    for too_deep in ({"a": _nested_tuples(limits.json_depth_max)},
                     _nested_tuples(limits.json_depth_max + 1)):
        with pytest.raises(LimitExceeded):
            canonical_bytes(too_deep)
    with pytest.raises(LimitExceeded):
        normalise({"a": {"b": _nested_tuples(limits.json_depth_max - 1)}})


@pytest.mark.parametrize(
    "text", [r'{"a":"\ud800"}', r'{"\uDFFF":1}', r'[1,{"b":["x\udbff"]}]', r'"\ud83d x"']
)
def test_loads_refuses_a_lone_surrogate_escape_and_keeps_a_pair(text: str) -> None:
    # JSON can spell a lone surrogate; it has no UTF-8 form, and what took it in failed
    # later outside the error contract (verify-proof printed orjson's TypeError).
    with pytest.raises(CanonicalFormError, match="lone UTF-16 surrogate"):
        loads(text, where="the file")
    assert loads(r'{"a":"\ud83d\ude00","\uD83D\uDE00":[1]}') == {"a": "😀", "😀": [1]}


@pytest.mark.parametrize("document", [{"a": "\ud800"}, {"\ud800": None}, ["x\udfff"]])
def test_lone_surrogates_are_refused(document: Any) -> None:
    # Pinned from a hypothesis run: {"\ud800": None} has no UTF-8 form, so RFC 8785 has no
    # answer for it either (rfc8785.dumps raises); the property below draws no lone surrogates.
    with pytest.raises(CanonicalFormError):
        canonical_bytes(document)
    with pytest.raises((rfc8785.CanonicalizationError, UnicodeEncodeError)):
        rfc8785.dumps(document)


def test_a_str_subclass_encodes_as_the_string_or_is_refused() -> None:
    # A StrEnum is a `str` but not exactly `str`; it must never turn into a list of letters.
    class Verdict(StrEnum):
        PASS = "PASS"

    try:
        encoded = canonical_bytes({"v": Verdict.PASS})
    except CanonicalFormError:
        return
    assert encoded == b'{"v":"PASS"}'


@pytest.mark.parametrize("raw", [b"ab", bytearray(b"ab"), memoryview(b"ab")])
def test_binary_values_are_refused(raw: Any) -> None:
    with pytest.raises(CanonicalFormError):
        canonical_bytes({"b": raw})


@pytest.mark.parametrize(
    "document",
    [
        {"a": 1.5},
        {"a": (1, 2)},
        {"é": 1},
        {"a": {"b": "c"}, "ü": None},
        {"a": MAX_INT + 1},
        {"a": [-(MAX_INT + 1)]},
        {"a": Decimal("1")},
        {"a": _nested(limits.json_depth_max)},
        [1, 2],
        {1: "one"},
    ],
)
def test_only_plain_documents_take_the_fast_path(document: Any) -> None:
    # plain_canonical_bytes serves every append; what it declines goes through normalise.
    assert plain_canonical_bytes(document) is None


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"b": [1, {"z": None, "a": True}], "a": "x", "c": {"y": False, "x": -3}},
        {"n": [MAX_INT, -MAX_INT, 0], "s": "é\u2028\"", "t": True, "f": False},
        {"a": _nested(limits.json_depth_max - 1)},
    ],
)
def test_plain_documents_take_the_fast_path_with_the_canonical_bytes(document: Any) -> None:
    assert plain_canonical_bytes(document) == rfc8785.dumps(document)


# -- RFC 8785 agreement (property) -----------------------------------------------------------

_INTERESTING = "\x00\x08\x1f\x7f\u0080\u2028\u2029\"\\/\ud7ff\ue000\ufb33\uffff\U0001f600\U0010ffff"
_chars = st.one_of(
    st.characters(exclude_categories=["Cs"]),  # lone surrogates: see the test above
    st.sampled_from(_INTERESTING),
)
_text = st.text(_chars, max_size=12)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-MAX_INT, max_value=MAX_INT), _text
)
json_documents = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(_text, inner, max_size=5)
    ),
    max_leaves=25,
)


@given(json_documents)
@example({"\ue000": 1, "\U0001f600": 2})
@example({"\u0080": 0, "\r": 1, "1": 2, "\U0001f600": 3, "\ufb33": 4})
@example(["\x7f\u2028\u2029/\\\"\x00\x1f"])
@example({"": None, "a": [MAX_INT, -MAX_INT, 0]})
def test_canonical_bytes_equal_rfc8785_for_every_float_free_document(document: Any) -> None:
    assert canonical_bytes(document) == rfc8785.dumps(document)


@given(json_documents)
def test_canonical_bytes_round_trip_through_loads(document: Any) -> None:
    data = canonical_bytes(document)
    assert loads(data) == document
    assert canonical_bytes(loads(data)) == data


# -- strict loads ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',
        b'{"x":{"a":1,"b":2,"a":1}}',
        b'[{"k":1,"k":1}]',
        b'{"a":NaN}',
        b'{"a":Infinity}',
        b"[-Infinity]",
        b'{"a":"\xff"}',
        b'{"a":"\xc3"}',
        b'\xef\xbb\xbf{"a":1}',
        b'{"a":1',
        b"",
    ],
)
def test_loads_refuses_duplicates_nan_invalid_utf8_and_bad_json(data: bytes) -> None:
    with pytest.raises(CanonicalFormError):
        loads(data)


def test_loads_names_the_duplicate_key() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        loads('{"amount_rao": 1, "amount_rao": 2}')
    assert caught.value.key == "amount_rao"  # type: ignore[attr-defined]


def test_loads_refuses_deep_nesting_as_a_limit() -> None:
    with pytest.raises(LimitExceeded):
        loads("[" * 200_000 + "]" * 200_000)


def test_loads_refuses_an_enormous_integer_as_invalid_input() -> None:
    # Python refuses int literals over 4300 digits with a bare ValueError; the ledger must
    # turn that into its own InvalidInput so callers (the CLI) report it as bad input.
    with pytest.raises(InvalidInput):
        loads(b'{"a":' + b"1" * 5000 + b"}")


def test_loads_accepts_text_and_bytes() -> None:
    assert loads('{"a":[1,"\u00e9"]}') == loads('{"a":[1,"\u00e9"]}'.encode()) == {
        "a": [1, "\u00e9"]
    }


# -- digests ---------------------------------------------------------------------------------


def _independent_digest(domain: str, payload: Any) -> str:
    body = json.dumps({"domain": domain, "payload": payload}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


_COMMISSION_PAYLOAD = {"arena_id": "mlp-qwen", "fee_rao": 1_000_000, "policy": {"windows": 4}}


def test_digest_is_sha256_of_the_canonical_domain_envelope() -> None:
    expected = _independent_digest("arena-ledger.commission", _COMMISSION_PAYLOAD)
    assert digest("arena-ledger.commission", _COMMISSION_PAYLOAD) == expected
    # Pinned (the sha256 of the literal bytes below) so a change to both the codec and the
    # helper above is still caught.
    assert hashlib.sha256(
        b'{"domain":"arena-ledger.commission","payload":'
        b'{"arena_id":"mlp-qwen","fee_rao":1000000,"policy":{"windows":4}}}'
    ).hexdigest() == expected == "079e9db34170fb89a41831822bec2e72052c0dae803559116b63ca13af35dcf7"


def test_equal_payloads_in_two_domains_have_different_digests() -> None:
    payload = {"arena_id": "mlp-qwen", "block": 7}
    a = digest("arena-ledger.commission", payload)
    b = digest("arena-ledger.policy", payload)
    assert a != b
    assert a == _independent_digest("arena-ledger.commission", payload)
    assert b == _independent_digest("arena-ledger.policy", payload)
    assert len(a) == 64 and a == a.lower()


def test_digest_ignores_key_order_and_refuses_floats() -> None:
    assert digest("d.x", {"a": 1, "b": 2}) == digest("d.x", {"b": 2, "a": 1})
    with pytest.raises(CanonicalFormError) as caught:
        digest("d.x", {"speedup": 1.02})
    assert caught.value.path == "$.payload.speedup"  # type: ignore[attr-defined]


# -- canonical decimals and fixed6 -----------------------------------------------------------

CANONICAL_DECIMALS = ["0", "1", "-1", "10", "100", "1.0224", "0.5", "-0.5", "0.000001",
                      "1.000001", "-12.75", "123456789012345678901234567890.125"]
NON_CANONICAL_DECIMALS = ["1.02240", "01", "+1", "1e3", "1E3", "1.", ".5", "-0", "0.0", "00",
                          "-0.0", "1.0", "-.5", "", " 1", "1 ", "1,5", "1_000", "NaN",
                          "Infinity", "-", "0x10", "\u0661", "1.5\n", "1\n"]


@pytest.mark.parametrize("text", CANONICAL_DECIMALS)
def test_canonical_decimal_spellings_are_accepted(text: str) -> None:
    assert is_canonical_decimal(text)
    assert canonical_decimal(Decimal(text)) == text


@pytest.mark.parametrize("text", NON_CANONICAL_DECIMALS)
def test_non_canonical_decimal_spellings_are_refused(text: str) -> None:
    assert not is_canonical_decimal(text)


@pytest.mark.parametrize(
    ("value", "spelled"),
    [("1.02240", "1.0224"), ("0E-7", "0"), ("-0", "0"), ("-0.000", "0"), ("1E+3", "1000"),
     ("-1.50", "-1.5"), ("1E-7", "0.0000001"), ("100", "100"), ("12.000", "12")],
)
def test_canonical_decimal_spells_a_decimal_one_way(value: str, spelled: str) -> None:
    assert canonical_decimal(Decimal(value)) == spelled


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "sNaN"])
def test_canonical_decimal_refuses_non_finite(value: str) -> None:
    with pytest.raises(CanonicalFormError):
        canonical_decimal(Decimal(value))


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_every_finite_decimal_has_one_canonical_spelling(value: Decimal) -> None:
    spelled = canonical_decimal(value)
    assert is_canonical_decimal(spelled)
    assert Decimal(spelled) == value
    assert canonical_decimal(Decimal(spelled)) == spelled


@pytest.mark.parametrize(
    ("value", "spelled"),
    [("1.0191290", "1.019129"), ("1", "1.000000"), ("0", "0.000000"), ("-0", "0.000000"),
     ("0.0000005", "0.000000"), ("0.0000015", "0.000002"), ("2.5000005", "2.500000"),
     ("-1.2345675", "-1.234568"), ("-0.0000001", "0.000000"), ("0.0188844", "0.018884")],
)
def test_fixed6_quantizes_half_even_to_six_places(value: str, spelled: str) -> None:
    assert fixed6(Decimal(value)) == spelled
    assert is_fixed6(spelled)


@pytest.mark.parametrize(
    "text",
    ["1.01912", "1.0191290", "1", "-0.000000", "+1.000000", "1.019129\n", ".019129",
     "01.019129", "-00.000001", "1e0.000000", ""],
)
def test_is_fixed6_refuses_other_spellings(text: str) -> None:
    assert not is_fixed6(text)


@given(st.decimals(allow_nan=False, allow_infinity=False, min_value=-10**9, max_value=10**9))
def test_fixed6_is_always_a_fixed6_spelling_of_the_rounded_value(value: Decimal) -> None:
    spelled = fixed6(value)
    assert is_fixed6(spelled)
    assert abs(Decimal(spelled) - value) <= Decimal("0.0000005")


# -- the decimal field type agrees with the codec ---------------------------------------------

_DECIMAL_FIELD = TypeAdapter(DecimalStr, config=ConfigDict(strict=True))


def _field_accepts(text: str) -> bool:
    try:
        _DECIMAL_FIELD.validate_python(text)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("text", [*CANONICAL_DECIMALS, *NON_CANONICAL_DECIMALS, "1.5\n", "\n1.5"])
def test_decimal_fields_accept_exactly_the_canonical_spellings(text: str) -> None:
    # Event fields check the spelling in pydantic-core (Rust regex); the codec in Python.
    assert _field_accepts(text) is is_canonical_decimal(text)


@given(st.text(alphabet="0123456789.-+eE \n\u0661", max_size=12))
@example("0.10")
@example("-0")
@example("01")
def test_decimal_fields_and_the_codec_agree_on_any_string(text: str) -> None:
    assert _field_accepts(text) is is_canonical_decimal(text)


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_decimal_fields_accept_every_canonical_spelling(value: Decimal) -> None:
    assert _field_accepts(canonical_decimal(value))


# Fixed-6 quantizing ignores the caller's decimal context; a str subclass is refused as a key and
# rebuilt as a plain str as a value; loads reads a bytearray as strict UTF-8, as it reads bytes.
# Expected bytes are written out here, never taken from the codec.


# -- codec: fixed6 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        ("1.0191285", "1.019128"),  # half-even: the 8 before the dropped 5 stays
        ("1.0191295", "1.019130"),
        ("123456.7890125", "123456.789012"),
        ("-2.5000005", "-2.500000"),
    ],
)
def test_fixed6_does_not_depend_on_the_callers_decimal_context(value: str, spelled: str) -> None:
    # Two validators with different decimal contexts must spell one result the same way: a
    # low precision or a trapped Inexact in the caller's context changes nothing.
    with localcontext() as ctx:
        ctx.prec = 3
        ctx.traps[Inexact] = True
        assert fixed6(Decimal(value)) == spelled


# -- codec: str subclasses --------------------------------------------------------------------


class _Text(str):
    """A str subclass with nothing overridden."""


def test_a_str_subclass_value_is_rebuilt_as_a_plain_str() -> None:
    rebuilt = normalise({"k": _Text("v"), "l": [_Text("w")]})
    assert rebuilt == {"k": "v", "l": ["w"]}
    assert type(rebuilt["k"]) is str
    assert type(rebuilt["l"][0]) is str
    assert canonical_bytes({"k": _Text("v")}) == b'{"k":"v"}'


class _Spelled(str):
    """A str subclass whose ``__str__`` spells something else (as a ``(str, Enum)`` member's
    spells its name, "Speed.FAST", not the "fast" it holds)."""

    def __str__(self) -> str:
        return "spelled otherwise"


def test_a_str_subclass_with_its_own_str_encodes_as_the_string_it_holds() -> None:
    # One value, one spelling (docs/concepts.md): a str subclass holding "fast" must hash like
    # "fast", not like what its __str__ returns.
    fast = _Spelled("fast")
    assert str(fast) == "spelled otherwise"
    assert canonical_bytes({"k": fast, "l": [fast]}) == b'{"k":"fast","l":["fast"]}'
    rebuilt = normalise({"k": fast})
    assert rebuilt == {"k": "fast"} and type(rebuilt["k"]) is str


def test_a_str_subclass_key_is_refused_naming_the_key_and_its_path() -> None:
    for call in (normalise, canonical_bytes):
        with pytest.raises(CanonicalFormError) as caught:
            call({"a": {_Text("k"): 1}})
        assert caught.value.message == "object key 'k' at $.a is not a string"
        assert caught.value.context["path"] == "$.a"


# -- codec: loads and a bytearray -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # json.loads would read these from bytes of another encoding; the ledger reads UTF-8.
        (b"\xef\xbb\xbf{}", "input is not valid JSON: Unexpected UTF-8 BOM (decode using "
         "utf-8-sig) at column 1"),
        (b'\xff\xfe{\x00"\x00a\x00"\x00:\x001\x00}\x00', "input is not valid UTF-8 (byte 0)"),
        (b'{"a":"\xff"}', "input is not valid UTF-8 (byte 6)"),
    ],
)
def test_loads_reads_a_bytearray_as_strict_utf8_like_bytes(data: bytes, message: str) -> None:
    both: tuple[Any, ...] = (data, bytearray(data))  # loads takes a bytearray as bytes
    for raw in both:
        with pytest.raises(CanonicalFormError) as caught:
            loads(raw)
        assert caught.value.message == message


def test_loads_accepts_a_bytearray_of_utf8_json() -> None:
    raw: Any = bytearray('{"a":["é",1]}'.encode())
    assert loads(raw) == {"a": ["é", 1]}
