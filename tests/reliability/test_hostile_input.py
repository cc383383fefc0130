"""Feeds hostile input to every way into the ledger and proves each is refused and changes nothing.

Entry points: ``EventStore.append``, ``ArenaLedger.intake``, ``arena-ledger append`` (and
``intake``, and every integer option of every command) and ``ledger.bundle.import_bundle``.
Inputs: floats, NaN and infinities, integers past ±(2**53 - 1), nesting past 32, payloads
past 64 KiB, lone surrogates, bytes, Decimals, non-string keys, wrong types, missing and
unknown fields, unknown types and schema versions, bad stream names, actors and idempotency
keys, wrong expected versions, reused keys, malformed JSON, duplicate keys, invalid UTF-8,
control characters, a bundle with one changed byte and bad signatures. For each: a
``LedgerError`` subclass (never a bare exception), the head unchanged, and ``verify()``
still passing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from hostile_inputs import (
    TALLY,
    bad_envelopes,
    base_drafts,
    hostile_values,
    nested,
    payload_mutations,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app
from ledger import migrate
from ledger.bundle import EVENTS_FILE, MANIFEST_FILE, export_bundle, import_bundle
from ledger.chain import envelope_bytes, next_entry_hash
from ledger.merkle import root_from_leaves
from ledger.note import Signer
from ledger.records import NO_STREAM, EventDraft
from ledger.store import EventStore
from machines import samples
from services.arena_ledger import ArenaLedger
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import (
    ConcurrencyConflict,
    IdempotencyKeyReused,
    IntegrityError,
    InvalidInput,
    LedgerError,
)

#: Function-scoped stores are shared by a test's examples on purpose: a refused input
#: writes nothing, so every example starts from the same ledger.
fuzz = settings(suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
HELD = f"submission-{samples.hex64('s')}"


def assert_refused(store: EventStore, call: Callable[[], object], category: str) -> LedgerError:
    """Runs ``call`` and asserts it raised a LedgerError that wrote nothing."""
    TALLY[category] += 1
    before = store.head()
    try:
        call()
    except LedgerError as exc:
        error = exc
    except Exception as exc:  # the point of the test: nothing else may escape
        raise AssertionError(
            f"{category}: {type(exc).__module__}.{type(exc).__name__} escaped instead of a "
            f"LedgerError: {str(exc)[:300]}"
        ) from exc
    else:
        raise AssertionError(f"{category}: the hostile input was accepted")
    assert error.code and error.message, error
    assert store.head() == before, f"{category}: a refused input moved the head"
    assert store.verify().ok
    return error


@pytest.fixture
def ledger_store(store: EventStore) -> EventStore:
    """Returns the store with a few valid events (HELD at version 2), so verify has work."""
    store.append([EventDraft(HELD, "SubmissionHeld", {"reason": "a", "block": 1}),
                  EventDraft(HELD, "SubmissionHeld", {"reason": "b", "block": 2})])
    store.append([EventDraft("arena-mlp-arena", "ArenaCommissioned",
                             json.loads(samples.commissioned().model_dump_json()))])
    return store


# ------------------------------------------------------------------- EventStore.append

_BASES = base_drafts()
_MODELS = {t: CATALOGUE.model(t) for _, t, _ in _BASES}


@fuzz
@given(data=st.data())
def test_append_refuses_hostile_payloads(ledger_store: EventStore, data: st.DataObject) -> None:
    stream, kind, payload = data.draw(st.sampled_from(_BASES))
    category, bad = data.draw(payload_mutations(payload, _MODELS[kind]))
    assert_refused(ledger_store, lambda: ledger_store.append([EventDraft(stream, kind, bad)]),
                   f"append/{category}")


@fuzz
@given(bad=bad_envelopes, base=st.sampled_from(_BASES))
def test_append_refuses_bad_envelopes(
    ledger_store: EventStore, bad: tuple[str, str, Any], base: tuple[str, str, dict[str, Any]]
) -> None:
    category, name, value = bad
    fields: dict[str, Any] = dict(zip(("stream", "type", "payload"), base, strict=True))
    fields[name] = value
    assert_refused(ledger_store, lambda: ledger_store.append([EventDraft(**fields)]),
                   f"append/{category}")


_BAD_TEXT = st.one_of(
    st.just(""),
    st.text(min_size=limits.idempotency_key_chars_max + 1, max_size=400),
    st.text(min_size=1).map(lambda t: t + "\x00"),
    st.text(st.characters(categories=["Cc", "Zl", "Zp", "Cs"]), min_size=1),
    st.sampled_from([None, 5, b"key", ["k"]]),
)


@fuzz
@given(which=st.sampled_from(["actor", "idempotency_key"]), value=_BAD_TEXT)
def test_append_refuses_bad_actors_and_idempotency_keys(
    ledger_store: EventStore, which: str, value: Any
) -> None:
    assume(not (which == "idempotency_key" and value is None))  # no key at all is valid
    draft = EventDraft(HELD, "SubmissionHeld", {"reason": "x", "block": 3})
    keywords: dict[str, Any] = {which: value}
    assert_refused(ledger_store, lambda: ledger_store.append([draft], **keywords),
                   f"append/bad_{which}")


@fuzz
@given(data=st.data())
def test_a_hostile_event_anywhere_in_a_batch_writes_nothing_of_it(
    ledger_store: EventStore, data: st.DataObject
) -> None:
    stream, kind, payload = data.draw(st.sampled_from(_BASES[:2]))
    category, bad = data.draw(payload_mutations(payload, _MODELS[kind]))
    valid = [EventDraft(HELD, "SubmissionHeld", {"reason": f"v{i}", "block": i})
             for i in range(data.draw(st.integers(1, 20)))]
    valid.insert(data.draw(st.integers(0, len(valid))), EventDraft(stream, kind, bad))
    assert_refused(ledger_store, lambda: ledger_store.append(valid), f"batch/{category}")


def test_append_refuses_empty_and_oversized_batches(ledger_store: EventStore) -> None:
    one = EventDraft(HELD, "SubmissionHeld", {"reason": "x", "block": 1})
    assert_refused(ledger_store, lambda: ledger_store.append([]), "append/empty_batch")
    assert_refused(ledger_store, lambda: ledger_store.append([one] * (limits.batch_events_max + 1)),
                   "append/oversized_batch")


@fuzz
@given(expected=st.one_of(st.integers(0, 1), st.integers(3, 2**53), st.just(NO_STREAM)),
       offset=st.integers(0, 3))
def test_a_wrong_expected_version_is_a_conflict_that_writes_nothing(
    ledger_store: EventStore, expected: Any, offset: int
) -> None:
    # HELD is at version 2: every expectation drawn here is wrong for the event at ``offset``.
    drafts = [EventDraft(HELD, "SubmissionHeld", {"reason": f"c{i}", "block": i})
              for i in range(offset)]
    drafts.append(EventDraft(HELD, "SubmissionHeld", {"reason": "w", "block": 9},
                             expected_version=expected if expected is NO_STREAM
                             or expected < 2 else expected + offset))
    error = assert_refused(ledger_store, lambda: ledger_store.append(drafts),
                           "append/wrong_expected_version")
    assert isinstance(error, ConcurrencyConflict), error
    assert error.context["stream"] == HELD


@fuzz
@given(reason=st.text(min_size=1, max_size=50).filter(lambda r: r != "first"))
def test_a_reused_idempotency_key_with_other_content_is_refused(
    ledger_store: EventStore, reason: str
) -> None:
    key = "reused-key"
    first = EventDraft(HELD, "SubmissionHeld", {"reason": "first", "block": 1})
    recorded = ledger_store.append([first], idempotency_key=key)
    again = ledger_store.append([first], idempotency_key=key)
    assert again.already_recorded and again.positions == recorded.positions
    other = EventDraft(HELD, "SubmissionHeld", {"reason": reason, "block": 1})
    error = assert_refused(ledger_store, lambda: ledger_store.append([other], idempotency_key=key),
                           "append/reused_idempotency_key")
    assert isinstance(error, IdempotencyKeyReused | InvalidInput), error


@pytest.mark.parametrize(
    ("field", "value"),
    [("type", ["SubmissionHeld"]), ("type", {"t": 1}), ("schema_version", [1]),
     ("schema_version", "1"), ("schema_version", True), ("schema_version", 1.0)],
    ids=["type-list", "type-dict", "version-list", "version-str", "version-bool",
         "version-float"],
)
def test_append_refuses_a_non_string_type_or_a_non_integer_schema_version(
    ledger_store: EventStore, field: str, value: Any
) -> None:
    fields: dict[str, Any] = {"stream": HELD, "type": "SubmissionHeld",
                              "payload": {"reason": "x", "block": 1}, field: value}
    assert_refused(ledger_store, lambda: ledger_store.append([EventDraft(**fields)]),
                   f"append/non_scalar_{field}")


@fuzz
@given(text=st.text(st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs", "So"]),
                    min_size=1, max_size=200))
def test_free_text_with_control_characters_is_recorded_byte_exactly(
    ledger_store: EventStore, text: str
) -> None:
    # Free text (a hold's reason) may hold any Unicode scalar; it is escaped canonically and
    # verifies. Identifiers (streams, hotkeys, ids, actors, keys) refuse control characters.
    TALLY["append/control_characters_in_free_text"] += 1
    result = ledger_store.append([EventDraft(HELD, "SubmissionHeld", {"reason": text,
                                                                     "block": 1})])
    assert ledger_store.get(result.first).payload["reason"] == text
    assert ledger_store.verify().ok


# ---------------------------------------------------------------------- ArenaLedger.intake


@pytest.fixture
def arena(ledger_store: EventStore) -> Iterator[ArenaLedger]:
    """Opens an ArenaLedger on the populated store (its arena ``mlp-arena`` commissioned)."""
    with ArenaLedger(ledger_store.url) as opened:
        yield opened


def _arrival() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(samples.arrived(payment_ref="pay-1").model_dump_json(
        exclude_unset=True))
    document.pop("submission_id")
    return document


@fuzz
@given(data=st.data())
def test_intake_refuses_hostile_arrivals(arena: ArenaLedger, data: st.DataObject) -> None:
    from vocabulary.events import SubmissionArrived

    kind = data.draw(st.sampled_from(["mutation", "not_an_object"]))
    arrival: Any
    if kind == "not_an_object":
        category, arrival = "not_an_object", data.draw(
            st.sampled_from([[], "arrival", 7, None, [["arena_id", "mlp-arena"]]]))
    else:
        category, arrival = data.draw(
            payload_mutations(_arrival(), SubmissionArrived, reserved={"submission_id"}))
        if category == "missing_field":
            # Without submission_id in the input, "missing" may also hit a nested field.
            nested_key = data.draw(st.sampled_from(["block", "event_index", "event_subindex"]))
            if data.draw(st.booleans()):
                arrival = _arrival()
                del arrival["arrival"][nested_key]
    assert_refused(arena.store, lambda: arena.intake(arrival, payment_amount_rao=10**9),
                   f"intake/{category}")


_BAD_AMOUNTS = st.one_of(
    hostile_values.filter(lambda t: t[0] in ("float", "nan_or_infinity", "huge_integer",
                                             "decimal")).map(lambda t: t[1]),
    st.integers(max_value=-1), st.sampled_from(["1000000000", [10**9], True]),
)


@fuzz
@given(amount=_BAD_AMOUNTS, which=st.sampled_from(["payment_amount_rao", "block"]))
def test_intake_refuses_hostile_amounts_and_blocks(
    arena: ArenaLedger, amount: Any, which: str
) -> None:
    keywords: dict[str, Any] = {"payment_amount_rao": 10**9, which: amount}
    assert_refused(arena.store, lambda: arena.intake(_arrival(), **keywords),
                   f"intake/bad_{which}")
    # The same arrival with sound numbers is still admitted (or found already admitted).
    assert arena.intake(_arrival(), payment_amount_rao=10**9).admitted


# --------------------------------------------------------------------- arena-ledger append

_S = f"submission-{samples.hex64('cli')}"


def _line(payload: Any = None, **fields: Any) -> bytes:
    document = {"stream": _S, "type": "SubmissionHeld",
                "payload": {"reason": "x", "block": 1} if payload is None else payload, **fields}
    return json.dumps(document).encode()


#: (name, the raw line, the exit code, whether the error must name a JSON path)
BAD_LINES: list[tuple[str, bytes, int, bool]] = [
    ("malformed_json", b'{"stream": "submission-ab", "type":', 1, True),
    ("trailing_garbage", _line() + b" {}", 1, True),
    ("not_an_object", b"[1, 2, 3]", 1, True),
    ("nan_literal", _line().replace(b'"block": 1', b'"block": NaN'), 1, True),
    ("infinity_literal", _line().replace(b'"block": 1', b'"block": -Infinity'), 1, True),
    ("float", _line({"reason": "x", "block": 1.5}), 1, True),
    ("float_exponent", _line({"reason": "x", "block": 1}).replace(b": 1}", b": 1e3}"), 1, True),
    ("huge_integer", _line({"reason": "x", "block": 2**53}), 1, True),
    ("enormous_integer_literal",
     _line().replace(b'"block": 1', b'"block": ' + b"9" * 5000), 1, True),
    ("deep_nesting", _line().replace(b'"block": 1', b'"block": 1, "deep": '
                                     + b"[" * 20_000 + b"]" * 20_000), 1, True),
    ("nesting_past_32", _line({"reason": "x", "block": 1, "deep": nested(40)}), 1, True),
    ("oversized_line", _line({"reason": "x" * (2 * limits.payload_bytes_max + 10),
                              "block": 1}), 1, True),
    ("oversized_payload", json.dumps({
        "stream": "arena-mlp-arena", "type": "ArenaCommissioned", "payload": {
            **json.loads(samples.commissioned().model_dump_json()),
            "engine": {**json.loads(samples.commissioned().model_dump_json())["engine"],
                       "engine_config": {"pad": "y" * (limits.payload_bytes_max + 1)}}}}
    ).encode(), 1, True),
    ("unknown_type", _line(type="SubmissionVanished"), 1, True),
    ("unknown_schema_version", _line(schema_version=2), 1, True),
    ("string_schema_version", _line(schema_version="1"), 1, True),
    ("negative_expected_version", _line(expected_version=-1), 1, True),
    ("string_expected_version", _line(expected_version="latest"), 1, True),
    ("wrong_expected_version", _line(expected_version=7), 3, False),
    ("duplicate_key", b'{"stream": "a", "stream": "b", "type": "T", "payload": {}}', 1, True),
    ("duplicate_payload_key",
     _line().replace(b'"block": 1', b'"block": 1, "block": 2'), 1, True),
    ("invalid_utf8", _line().replace(b'"x"', b'"\xff\xfe"'), 1, True),
    ("overlong_utf8", _line().replace(b'"x"', b'"\xc0\xaf"'), 1, True),
    ("raw_control_character", _line().replace(b'"x"', b'"a\x01b"'), 1, True),
    ("nul_byte", b"\x00" + _line(), 1, True),
    ("byte_order_mark", b"\xef\xbb\xbf" + _line(), 1, True),
    ("lone_surrogate_escape", _line().replace(b'"x"', b'"\\ud800"'), 1, True),
    ("control_character_in_stream", _line(stream="submission-a\u0007b"), 1, True),
    ("bad_stream", _line(stream="Submission-AB"), 1, True),
    ("wrong_category", _line(stream="arena-mlp-arena"), 1, True),
    ("missing_payload", b'{"stream": "submission-ab", "type": "SubmissionHeld"}', 1, True),
    ("payload_not_object", _line(payload=[1]), 1, True),
    ("unknown_field", _line(colour="blue"), 1, True),
    ("unknown_payload_field", _line({"reason": "x", "block": 1, "colour": "blue"}), 1, True),
    ("wrong_type", _line({"reason": 5, "block": 1}), 1, True),
    ("negative_block", _line({"reason": "x", "block": -1}), 1, True),
    ("idempotency_key_not_string", _line(idempotency_key=5), 1, True),
]


@pytest.fixture(scope="module")
def cli_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Returns a SQLite ledger (migrated, two events on _S) for the CLI cases."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'ledger.db'}"
    migrate.upgrade(url)
    with ArenaLedger(url) as ledger:
        ledger.commission(json.loads(samples.commissioned().model_dump_json()))
        outcome = ledger.intake(_arrival(), payment_amount_rao=10**9)
        assert outcome.admitted
    return url


def _valid_lines() -> list[bytes]:
    # A line the machines accept (a control of the commissioned arena): with it, a bad line
    # is line 2, and its batch (the whole file) must leave even the good line unwritten.
    control = {"control_id": "c-1", "kind": "identity", "delta_digest": samples.hex64("c"),
               "expected_verdict": "FAIL"}
    return [json.dumps({"stream": "arena-mlp-arena", "type": "ControlRegistered",
                        "payload": control}).encode()]


def _head(url: str) -> int:
    with EventStore(url) as store:
        assert store.verify().ok
        return store.head().position


def test_one_cli_run_with_many_bad_lines_names_the_first_and_writes_nothing(
    cli_db: str, tmp_path: Path
) -> None:
    """Runs the installed console script once on a file of every bad line, after a good one."""
    before = _head(cli_db)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join([*_valid_lines(), *(line for _, line, _, _ in BAD_LINES)]) + b"\n")
    script = Path(sys.executable).with_name("arena-ledger")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_LEDGER_")}
    done = subprocess.run([str(script), "--db", cli_db, "append", str(path)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    TALLY["cli/one_run_many_bad_lines"] += 1
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    # Line 2 is the malformed JSON: not JSON at all, named so (not non_canonical).
    assert done.stderr.startswith("error[invalid_json] [line 2] [path $]: line 2 is not valid "
                                  "JSON"), done.stderr
    assert _head(cli_db) == before


@pytest.mark.parametrize(("name", "line", "code", "has_path"), BAD_LINES,
                         ids=[bad[0] for bad in BAD_LINES])
def test_each_bad_line_fails_the_append_naming_its_line_and_path(
    cli_db: str, tmp_path: Path, name: str, line: bytes, code: int, has_path: bool
) -> None:
    """Runs the CLI in-process (the same Typer app as the script) on good lines plus one bad."""
    before = _head(cli_db)
    good = _valid_lines()
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"\n".join([*good, line]) + b"\n")
    result = CliRunner().invoke(app, ["--db", cli_db, "append", str(path)])
    TALLY[f"cli/{name}"] += 1
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__} escaped: {result.exception}"
    )
    assert result.exit_code == code, (result.exit_code, result.stderr)
    error = result.stderr.strip()
    assert error.count("\n") == 0 and error.startswith("error["), error
    assert f"[line {len(good) + 1}]" in error, error
    if has_path:
        assert "[path " in error, error
    else:
        assert _S in error, error  # a conflict names the stream instead
    assert _head(cli_db) == before


@pytest.mark.parametrize(
    "change",
    [lambda a: a["arrival"].pop("block"), lambda a: a.pop("arena_id"),
     lambda a: a.update(miner_hotkey="has space"), lambda a: a.update(arrival=[1]),
     lambda a: a["arrival"].update(block=1.5), lambda a: a.update(colour="blue")],
    ids=["missing_block", "missing_arena_id", "hotkey_with_space", "arrival_not_object",
         "float_block", "unknown_field"],
)
def test_cli_intake_of_a_hostile_arrival_fails_with_one_line_and_no_traceback(
    cli_db: str, tmp_path: Path, change: Callable[[dict[str, Any]], object]
) -> None:
    before = _head(cli_db)
    arrival = _arrival()
    change(arrival)
    path = tmp_path / "arrival.json"
    path.write_text(json.dumps(arrival))
    result = CliRunner().invoke(app, ["--db", cli_db, "intake", str(path), "--paid-rao", "1"])
    TALLY["cli/intake_hostile_arrival"] += 1
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__} escaped: {result.exception!r}"
    )
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert result.stderr.startswith("error[") and result.stderr.count("\n") == 1
    assert _head(cli_db) == before


def _int_options() -> list[tuple[list[str], str, int | None]]:
    """Every integer option of every command: (command path, option, its largest value)."""
    found: list[tuple[list[str], str, int | None]] = []

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*path, name])
        for param in command.params:
            if param.bare_type() == "int":
                found.append((path, param.opts[0], param.max))

    walk(typer.main.get_command(app), [])
    return found


def test_every_integer_option_stops_at_the_largest_integer_a_ledger_field_holds() -> None:
    # An unbounded one reached the database with a 27-digit number: an OverflowError
    # traceback from the driver (events --from-position, checkpoints --limit), or a
    # pydantic one (expire --block).
    options = _int_options()
    assert len(options) >= 25  # positions, blocks, amounts, limits across the commands
    unbounded = [(" ".join(path), option, most) for path, option, most in options
                 if most is None or most > limits.json_integer_abs_max]
    assert unbounded == []


@pytest.mark.parametrize("args", [
    ["events", "--from-position"], ["events", "--as-of"], ["checkpoints", "--limit"],
    ["expire", "--block"], ["replay", "--as-of"], ["verify", "--to"],
], ids=lambda args: " ".join(args))
def test_a_27_digit_number_is_a_usage_error_naming_its_option(
    cli_db: str, args: list[str]
) -> None:
    before = _head(cli_db)
    result = CliRunner().invoke(app, ["--db", cli_db, *args, "1" + "0" * 26])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__} escaped: {result.exception!r}"
    )
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert f"Invalid value for '{args[-1]}'" in " ".join(result.output.split())
    assert _head(cli_db) == before


# ------------------------------------------------------------------------ bundle import


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("ops.example")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, signer: Signer) -> Path:
    """Returns a signed bundle of a 12-event ledger over four streams (exported from SQLite)."""
    root = tmp_path_factory.mktemp("bundle")
    url = f"sqlite:///{root / 'source.db'}"
    migrate.upgrade(url)
    with EventStore(url) as source:
        streams = [HELD, f"submission-{samples.hex64('t')}"]
        source.append([EventDraft(streams[i % 2], "SubmissionHeld",
                                  {"reason": f"r{i}", "block": i}) for i in range(10)],
                      idempotency_key="k")
        source.append([EventDraft("arena-mlp-arena", "ArenaCommissioned",
                                  json.loads(samples.commissioned().model_dump_json())),
                       EventDraft("settlement", "EmissionPolicySet", {
                           "half_life_blocks": 10, "burn_hotkey": "5B",
                           "validator_hotkey": "5V"})])
        export_bundle(source, root / "bundle", signer=signer)
    return root / "bundle"


def _fresh_target(store: EventStore) -> None:
    """Empties the target ledger after an import that (rightly) succeeded."""
    store.close()
    migrate.downgrade(store.url, "base", discard_recorded=True)
    migrate.upgrade(store.url)


@fuzz
@given(data=st.data())
def test_a_bundle_with_one_changed_byte_is_refused(
    store: EventStore, bundle: Path, signer: Signer, tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from([EVENTS_FILE, MANIFEST_FILE, "checkpoint.note"]))
    raw = (bundle / name).read_bytes()
    offset = data.draw(st.integers(0, len(raw) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != raw[offset]))
    changed = Path(shutil.copytree(bundle, tmp_path_factory.mktemp("changed") / "b"))
    (changed / name).write_bytes(raw[:offset] + bytes([byte]) + raw[offset + 1:])
    TALLY[f"bundle/changed_byte_in_{name}"] += 1
    try:
        import_bundle(store, changed, signer.verifier())
    except LedgerError:
        assert store.head().position == 0
        assert store.verify().ok
        return
    except Exception as exc:
        raise AssertionError(f"{type(exc).__name__} escaped the import: {exc}") from exc
    # Every file must be exactly the bytes export wrote (the manifest's whitespace too), so
    # no changed byte may pass.
    _fresh_target(store)
    raise AssertionError(
        f"a changed byte at {name}:{offset} ({raw[offset]:#x} -> {byte:#x}) was imported"
    )


def _other_signer_same_name(bundle: Path, note: str) -> str:
    from ledger.note import Checkpoint, sign_checkpoint

    body = note.split("\n\n", 1)[0] + "\n"
    return sign_checkpoint(Checkpoint.parse(body), Signer.generate("ops.example"))


def _flip_signature(_: Path, note: str) -> str:
    body, signature = note.rstrip("\n").rsplit(" ", 1)
    swapped = "A" if signature[20] != "A" else "B"
    return f"{body} {signature[:20]}{swapped}{signature[21:]}\n"


@pytest.mark.parametrize(
    "forge",
    [_other_signer_same_name, _flip_signature,
     lambda _b, note: note.replace("\n\n", "\n\n\n", 1),
     lambda _b, note: note.split("\n\n", 1)[0] + "\n\n"],
    ids=["signed_by_another_key_of_the_same_name", "one_signature_byte",
         "extra_blank_line", "signature_removed"],
)
def test_a_bad_signature_is_refused_and_nothing_is_imported(
    store: EventStore, bundle: Path, signer: Signer, tmp_path: Path,
    forge: Callable[[Path, str], str],
) -> None:
    forged = Path(shutil.copytree(bundle, tmp_path / "forged"))
    note = (forged / "checkpoint.note").read_text()
    (forged / "checkpoint.note").write_text(forge(forged, note))
    error = assert_refused(store, lambda: import_bundle(store, forged, signer.verifier()),
                           "bundle/bad_signature")
    assert isinstance(error, IntegrityError | InvalidInput), error
    assert store.head().position == 0


def test_an_endless_events_file_is_refused(
    store: EventStore, bundle: Path, signer: Signer, tmp_path: Path
) -> None:
    endless = Path(shutil.copytree(bundle, tmp_path / "endless"))
    (endless / EVENTS_FILE).unlink()
    (endless / EVENTS_FILE).symlink_to("/dev/zero")
    assert_refused(store, lambda: import_bundle(store, endless, signer.verifier()),
                   "bundle/endless_events_file")
    assert store.head().position == 0


def _rewrite(bundle: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Edits the parsed lines, then recomputes every entry hash and the manifest totals."""
    lines = [orjson.loads(line) for line in (bundle / EVENTS_FILE).read_bytes().splitlines()]
    change(lines)
    previous = bytes(32)
    for line in lines:
        envelope = envelope_bytes(line["position"], line["stream"], line["version"],
                                  line["type"], line["schema_version"],
                                  base64.b64decode(line["payload_b64"]), line["recorded_at"],
                                  line["actor"])
        previous = next_entry_hash(previous, envelope)
        line["entry_hash"] = previous.hex()
    data = b"".join(orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n" for line in lines)
    (bundle / EVENTS_FILE).write_bytes(data)
    manifest = orjson.loads((bundle / MANIFEST_FILE).read_bytes())
    manifest.update(head_hash=previous.hex(), events_sha256=hashlib.sha256(data).hexdigest(),
                    events_bytes=len(data), merkle_root=root_from_leaves(
                        [bytes.fromhex(line["entry_hash"]) for line in lines]).hex(),
                    checkpoint_file=None)
    (bundle / MANIFEST_FILE).write_bytes(  # as export spells it, which import insists on
        orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    (bundle / "checkpoint.note").unlink()


def _payload(raw: bytes) -> Callable[[list[dict[str, Any]]], None]:
    def change(lines: list[dict[str, Any]]) -> None:
        lines[3]["payload_b64"] = base64.b64encode(raw).decode()
    return change


def _retype(lines: list[dict[str, Any]]) -> None:
    lines[3]["type"] = "SubmissionVanished"


@pytest.mark.parametrize(
    "change",
    [_retype, _payload(b'{"block":1.5,"reason":"r"}'), _payload(b'{"block":1,"reason":"r",'
                                                               b'"block":2}'),
     _payload(b'{"reason": "r", "block": 3}'), _payload(b"not json"),
     _payload(b'{"block":1,"reason":"r","colour":"blue"}')],
    ids=["unknown_type", "float", "duplicate_key", "non_canonical_spacing", "not_json",
         "unknown_field"],
)
def test_an_unsigned_bundle_of_invalid_events_is_refused_even_when_its_chain_is_consistent(
    store: EventStore, bundle: Path, tmp_path: Path,
    change: Callable[[list[dict[str, Any]]], None],
) -> None:
    # Import with --no-signature-check is explicit, but it must still not record events the
    # catalogue refuses: every later reader of the ledger would trip over them.
    forged = Path(shutil.copytree(bundle, tmp_path / "forged"))
    _rewrite(forged, change)
    assert_refused(store, lambda: import_bundle(store, forged, None, allow_unsigned=True),
                   "bundle/consistent_invalid_events")
    assert store.head().position == 0
