"""Implements the verifiable-ledger commands: keys, checkpoints, proofs and bundles.

Each command parses its options, calls one function of ``ledger.checkpoint`` or
``ledger.bundle`` and renders the result. ``verify-proof`` and ``verify-bundle`` never open
the database: they need only the files named and a public key.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.common import (
    INT_MAX,
    console,
    counted,
    emit_json,
    emit_jsonl,
    handle_errors,
    new_table,
    state,
)
from cli.limits import unlisted_shown_max
from cli.progress import ProgressBar
from ledger.limits import note_file_bytes_max, proof_document_bytes_max
from vocabulary.errors import InvalidInput

if TYPE_CHECKING:
    from ledger.bundle import BundleReport

__all__ = ["checkpoint_app", "key_app", "prove_app", "register"]

#: Most checkpoints ``checkpoints`` lists unless told otherwise.
checkpoints_listed_default = 20

key_app = typer.Typer(help="Create checkpoint signing keys.", no_args_is_help=True)
prove_app = typer.Typer(
    help="Print a self-contained inclusion or consistency proof as JSON.", no_args_is_help=True
)

_ORIGIN_HELP = "Checkpoint origin (default: arena-ledger/<key name>)."
_JSON_HELP = "Print JSON."


@key_app.command("generate")
@handle_errors
def key_generate(
    name: str = typer.Option(..., "--name", help="Key name (no spaces, no '+'), e.g. the "
                             "operator's domain."),
    out: Path = typer.Option(..., "--out", help="Private key file to write (mode 0600); the "
                             "public key goes to the same path plus .pub."),
    force: bool = typer.Option(False, "--force", help="Replace existing key files."),
) -> None:
    """Generates an Ed25519 signing key: PATH (private, 0600) and PATH.pub (verifier key)."""
    from ledger.checkpoint import default_origin, write_key_files

    files = write_key_files(name, out, force=force)
    console.print(f"private key: {files.private_path} (mode 0600; keep it secret, never "
                  "commit it)")
    console.print(f"public key:  {files.public_path}")
    console.print(f"verifier key: {files.verifier_key}")
    console.print(f"default origin: {default_origin(name)}")


checkpoint_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)


@checkpoint_app.callback(invoke_without_command=True)
@handle_errors
def checkpoint(
    ctx: typer.Context,
    key: Path | None = typer.Option(None, "--key", help="Private key file (from `key "
                                    "generate`); required to sign."),
    origin: str | None = typer.Option(None, "--origin", help=_ORIGIN_HELP),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Signs the head (tree size, Merkle root) as a C2SP checkpoint, stores and prints it.

    `checkpoint show` prints a stored checkpoint's note, or writes it to a file for
    `verify-proof --checkpoint`.
    """
    from ledger.checkpoint import load_signer, sign_tree

    if ctx.invoked_subcommand is not None:
        given = [name for name, value in (("--key", key), ("--origin", origin),
                                          ("--json", as_json)) if value]
        if given:  # they belong to signing; `show` has options of its own
            ctx.fail(f"{', '.join(given)} before `{ctx.invoked_subcommand}` belongs to "
                     f"signing the head; give `checkpoint {ctx.invoked_subcommand}` its own "
                     "options, after its name")
        return
    if key is None:
        ctx.fail("Missing option '--key': signing the head needs the private key file "
                 "(`checkpoint show` prints a stored checkpoint instead)")
    signer = load_signer(key)
    with state.store() as store:
        issued = sign_tree(store, signer, origin)
    if as_json:
        emit_json(issued.to_json())
    else:
        sys.stdout.write(issued.note)


@checkpoint_app.command("show")
@handle_errors
def checkpoint_show(
    size: int | None = typer.Option(
        None, "--size", min=0, max=INT_MAX,
        help="Tree size of the checkpoint (default: the newest stored checkpoint).",
    ),
    origin: str | None = typer.Option(None, "--origin", help="Only a checkpoint of this "
                                      "origin (when several were signed at the size)."),
    out: Path | None = typer.Option(None, "--out", help="Write the note to this file (for "
                                    "`verify-proof --checkpoint FILE`) instead of stdout."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Prints a stored checkpoint's signed note, byte for byte, or writes it to --out."""
    from ledger.checkpoint import stored_checkpoint, write_note_file

    if force and out is None:
        raise InvalidInput("--force replaces an --out file: give --out FILE", path="--force")
    with state.store() as store:
        row = stored_checkpoint(store, size, origin)
    note = str(row["note"])
    if out is not None:
        write_note_file(out, note, force=force)
    if as_json:
        emit_json({**row, "out": None if out is None else str(out)})
    elif out is None:
        sys.stdout.write(note)
    else:
        console.print(f"wrote the checkpoint of tree size {row['tree_size']} "
                      f"({row['origin']}, key {row['key_name']}, id {row['id']}) to {out}")


@handle_errors
def checkpoints(
    limit: int = typer.Option(
        checkpoints_listed_default, "--limit", min=1, max=INT_MAX, help="Most to list."
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines, one checkpoint a line."),
) -> None:
    """Lists the stored checkpoints, newest first."""
    with state.store() as store:
        rows = store.checkpoints(limit)
    if as_json:  # a list: JSON Lines, as every list command prints (docs/cli.md)
        emit_jsonl(rows)
        return
    table = new_table("id", "tree_size", "root_hash", "origin", "key", "created_at", box=None)
    for row in rows:
        table.add_row(str(row["id"]), str(row["tree_size"]), str(row["root_hash"])[:16] + "…",
                      str(row["origin"]), str(row["key_name"]), str(row["created_at"]))
    console.print(table)
    console.print(counted(len(rows), "checkpoint"))


@prove_app.command("inclusion")
@handle_errors
def prove_inclusion(
    position: int = typer.Option(
        ..., "--position", min=1, max=INT_MAX, help="Position of the event."
    ),
    size: int | None = typer.Option(
        None, "--size", min=1, max=INT_MAX,
        help="Tree size to prove against (default: the head; use a checkpoint's size).",
    ),
) -> None:
    """Prints a JSON proof that the event at POSITION is in the tree of SIZE."""
    from ledger.checkpoint import inclusion_document

    with state.store() as store:
        emit_json(inclusion_document(store, position, size))


@prove_app.command("consistency")
@handle_errors
def prove_consistency(
    from_size: int = typer.Option(..., "--from", min=0, max=INT_MAX, help="Older tree size."),
    to_size: int | None = typer.Option(
        None, "--to", min=0, max=INT_MAX, help="Newer tree size (default: the head)."
    ),
) -> None:
    """Prints a JSON proof that the tree of size FROM is a prefix of the tree of size TO."""
    from ledger.checkpoint import consistency_document

    with state.store() as store:
        emit_json(consistency_document(store, from_size, to_size))


@handle_errors
def verify_proof_command(
    proof: Path = typer.Argument(..., help="Proof document from `prove`."),
    notes: list[Path] = typer.Option(..., "--checkpoint", help="Signed checkpoint note "
                                     "(repeat for both ends of a consistency proof)."),
    key: Path = typer.Option(..., "--key", help="Public key file (KEY.pub)."),
    origin: str | None = typer.Option(None, "--origin", help="Expected checkpoint origin "
                                      "(default: arena-ledger/<key name>)."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Checks a proof against signed checkpoints offline (no database); exit 4 if it fails."""
    from ledger.checkpoint import (
        load_verifier,
        parse_proof_document,
        read_file_bytes,
        read_text_file,
        verify_proof,
    )

    verifier = load_verifier(key)
    document = parse_proof_document(
        read_text_file(proof, "proof file", proof_document_bytes_max), where=str(proof)
    )
    texts = [read_file_bytes(n, "checkpoint note", note_file_bytes_max) for n in notes]
    verdict = verify_proof(document, texts, verifier, origin)
    if as_json:
        emit_json(verdict.to_json())
    elif verdict.kind == "inclusion":
        console.print(f"ok: position {verdict.position} (entry {verdict.entry_hash}) is in the "
                      f"tree of size {verdict.tree_size} signed by {verdict.origin}")
    else:
        sizes = verdict.checkpoint_sizes
        against = (f"the checkpoint at size {sizes[0]}" if len(sizes) == 1 else
                   f"the checkpoints at sizes {', '.join(map(str, sizes))}")
        console.print(f"ok: the tree of size {verdict.from_size} is a prefix of the tree of "
                      f"size {verdict.tree_size}; checked against {against} of {verdict.origin}")


def _report(verb: str, report: BundleReport, as_json: bool) -> None:
    from ledger.bundle import CHECKPOINT_FILE

    if as_json:
        emit_json(report.to_json())
        return
    if verb == "exported":
        signed = (f"checkpoint of {report.checkpoint_origin}, signed" if report.checkpoint_origin
                  else "no checkpoint, unsigned (add --key to sign)")
    elif report.signature_checked:
        signed = f"checkpoint of {report.checkpoint_origin}, signature verified"
    elif report.checkpoint_included:  # its origin is unread: nothing vouches for it
        signed = (f"{CHECKPOINT_FILE} not checked"
                  f"{', not imported' if verb == 'imported' else ''} (--no-signature-check)")
    else:
        signed = "no checkpoint, signature not checked"
    console.print(f"{verb} {counted(report.events, 'event')} ({report.path}); root "
                  f"{report.merkle_root}, head {report.head_hash}; {signed}")
    if report.unlisted:
        shown = ", ".join(report.unlisted[:unlisted_shown_max])
        more = len(report.unlisted) - unlisted_shown_max
        console.print(f"not part of the bundle, so not verified"
                      f"{' or imported' if verb == 'imported' else ''}: {shown}"
                      f"{f' and {more:,} more' if more > 0 else ''}", markup=False)


@handle_errors
def export(
    path: Path = typer.Argument(..., help="Bundle directory to create (must not exist)."),
    key: Path | None = typer.Option(None, "--key", help="Private key file: sign a checkpoint "
                                    "at the bundle's size (else the latest stored one at that "
                                    "size is included, if any)."),
    origin: str | None = typer.Option(None, "--origin", help=_ORIGIN_HELP),
    to_position: int | None = typer.Option(None, "--to-position", min=0, max=INT_MAX, help="Export "
                                           "positions 1..N only (default: the head)."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Writes the ledger as a bundle: events.jsonl, manifest.json and checkpoint.note."""
    from ledger.bundle import export_bundle
    from ledger.checkpoint import load_signer

    signer = load_signer(key) if key is not None else None
    with state.store() as store, ProgressBar(as_json) as progress:
        report = export_bundle(store, path, signer=signer, origin=origin,
                               to_position=to_position, progress=progress)
    _report("exported", report, as_json)


@handle_errors
def import_(
    path: Path = typer.Argument(..., help="Bundle directory from `export`."),
    key: Path | None = typer.Option(None, "--key", help="Public key file (KEY.pub) that "
                                    "signed the bundle's checkpoint."),
    origin: str | None = typer.Option(None, "--origin", help="Expected checkpoint origin "
                                      "(default: arena-ledger/<key name>)."),
    no_signature_check: bool = typer.Option(False, "--no-signature-check", help="Import "
                                            "without checking a signed checkpoint."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Verifies a bundle completely, then loads it into an EMPTY ledger in one transaction."""
    from ledger.bundle import import_bundle
    from ledger.checkpoint import load_verifier

    verifier = load_verifier(key) if key is not None else None
    from services.projections import rebuild_ledger

    with ProgressBar(as_json) as progress:
        with state.store() as store:
            report = import_bundle(store, path, verifier, origin=origin,
                                   allow_unsigned=no_signature_check, progress=progress)
        # The bundle's events went in without the guard: the read models follow them now
        # (until then the queries fold, so an interruption here costs speed, not answers).
        rebuild_ledger(state.db_url, progress)
    _report("imported", report, as_json)


@handle_errors
def verify_bundle_command(
    path: Path = typer.Argument(..., help="Bundle directory from `export`."),
    key: Path | None = typer.Option(None, "--key", help="Public key file (KEY.pub)."),
    origin: str | None = typer.Option(None, "--origin", help="Expected checkpoint origin "
                                      "(default: arena-ledger/<key name>)."),
    no_signature_check: bool = typer.Option(False, "--no-signature-check", help="Check the "
                                            "chain and digests only, not the signature."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Checks a bundle offline (no database): every line, the root, digests and signature."""
    from ledger.bundle import verify_bundle
    from ledger.checkpoint import load_verifier

    verifier = load_verifier(key) if key is not None else None
    with ProgressBar(as_json) as progress:
        report = verify_bundle(path, verifier, origin=origin,
                               allow_unsigned=no_signature_check, progress=progress)
    _report("verified", report, as_json)


def register(app: typer.Typer) -> None:
    """Adds the verifiable-ledger commands to the ``arena-ledger`` application."""
    app.add_typer(key_app, name="key")
    app.add_typer(prove_app, name="prove")
    app.add_typer(checkpoint_app, name="checkpoint")
    app.command("checkpoints")(checkpoints)
    app.command("verify-proof")(verify_proof_command)
    app.command("export")(export)
    app.command("import")(import_)
    app.command("verify-bundle")(verify_bundle_command)
