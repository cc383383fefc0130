"""The checkpoint pages: the stored checkpoints as the CLI lists them, each note as a
download, and inclusion and consistency proofs that are the CLI's documents and verify
with the project's own verifier against the stored notes and the public key."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import orjson
import pytest
from dashboard_ledger import DashboardLedger, build
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from cli.app import app as cli_app
from ledger.checkpoint import load_signer, load_verifier, open_checkpoint, sign_tree, verify_proof
from ledger.store import EventStore
from services.checkpoint_board import checkpoint_page, consistency_proof, inclusion_proof
from vocabulary.errors import IntegrityError
from web.pages import PROBLEM

#: The tree size of the older checkpoint this module signs beside the dashboard's own.
OLD_SIZE = 40


@pytest.fixture(scope="module")
def sizes(dashboard: DashboardLedger) -> tuple[int, int]:
    """Signs a second checkpoint, of an older tree, with the dashboard's key: (old, new)."""
    private = dashboard.public_key.with_suffix("")  # KEY.pub sits beside KEY
    with EventStore(dashboard.url) as store:
        sign_tree(store, load_signer(private), size=OLD_SIZE)
    return OLD_SIZE, dashboard.checkpoint_size


def cli(dashboard: DashboardLedger, *args: str) -> str:
    """Runs ``arena-ledger --db URL ARGS`` in-process; returns stdout (exit 0 asserted)."""
    done = CliRunner().invoke(cli_app, ["--db", dashboard.url, *args])
    assert done.exit_code == 0, done.output
    return done.stdout


def cli_lines(dashboard: DashboardLedger, *args: str) -> list[Any]:
    """Runs a listing command with ``--json`` and returns its JSON Lines, parsed."""
    return [orjson.loads(line) for line in cli(dashboard, *args, "--json").splitlines()]


def note(client: TestClient, size: int) -> str:
    """Downloads the stored checkpoint note of ``size``."""
    response = client.get(f"/checkpoints/{size}/note")
    assert response.status_code == 200, response.text
    return response.text


def problem(client: TestClient, path: str, status: int) -> dict[str, Any]:
    """GETs ``path`` and returns its problem details, asserting the status."""
    response = client.get(path)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    found: dict[str, Any] = response.json()
    return found


# --- the list and the notes -----------------------------------------------------------------


def test_the_list_is_what_the_cli_lists(client: TestClient, dashboard: DashboardLedger,
                                        sizes: tuple[int, int]) -> None:
    body = client.get("/api/checkpoints").json()
    assert body["checkpoints"] == cli_lines(dashboard, "checkpoints")
    assert [row["tree_size"] for row in body["checkpoints"]] == [sizes[0], sizes[1]]  # newest first
    assert body["next_before"] is None
    assert body["head"] == client.get("/api/head").json()["position"]


def test_paging_walks_every_checkpoint_once(client: TestClient, dashboard: DashboardLedger,
                                            sizes: tuple[int, int]) -> None:
    first = client.get("/api/checkpoints", params={"limit": 1}).json()
    second = client.get("/api/checkpoints",
                        params={"limit": 1, "before": first["next_before"]}).json()
    assert second["next_before"] is None
    assert first["checkpoints"] + second["checkpoints"] == cli_lines(dashboard, "checkpoints")


def test_each_note_downloads_as_the_cli_shows_it_and_verifies(
        client: TestClient, dashboard: DashboardLedger, sizes: tuple[int, int]) -> None:
    verifier = load_verifier(dashboard.public_key)
    rows = {row["tree_size"]: row for row in client.get("/api/checkpoints").json()["checkpoints"]}
    for size in sizes:
        response = client.get(f"/checkpoints/{size}/note")
        assert response.headers["content-type"] == "text/plain; charset=utf-8"
        assert response.headers["content-disposition"] == (
            f'attachment; filename="checkpoint-{size}.note"')
        assert response.content == cli(dashboard, "checkpoint", "show", "--size",
                                       str(size)).encode()
        signed = open_checkpoint(response.content, verifier)
        assert (signed.size, signed.root_hash.hex()) == (size, rows[size]["root_hash"])


def test_the_page_links_each_note(client: TestClient, html_page: Any,
                                  sizes: tuple[int, int]) -> None:
    html = html_page("/checkpoints")
    links = [unescape(link) for link in re.findall(r'<a class="note" download href="([^"]+)"',
                                                   html)]
    assert [link.split("?")[0] for link in links] == [f"/checkpoints/{s}/note" for s in sizes]
    for link in links:
        assert client.get(link).text == note(client, int(link.split("/")[2]))
    assert 'action="/api/proofs/inclusion"' in html and 'action="/api/proofs/consistency"' in html


def test_a_size_without_a_checkpoint_is_a_404_naming_the_stored_ones(
        client: TestClient, sizes: tuple[int, int], html_page: Any) -> None:
    body = problem(client, f"/checkpoints/{sizes[0] + 1}/note", 404)
    assert f"no checkpoint at tree size {sizes[0] + 1}" in body["detail"]
    assert str(sizes[1]) in body["detail"] and str(sizes[0]) in body["detail"]
    assert 'data-code="not_found"' in html_page(f"/checkpoints/{sizes[0] + 1}/note", 404)


# --- proofs ---------------------------------------------------------------------------------


def test_a_consistency_proof_is_the_clis_and_verifies_against_both_notes(
        client: TestClient, dashboard: DashboardLedger, sizes: tuple[int, int]) -> None:
    old, new = sizes
    response = client.get("/api/proofs/consistency",
                          params={"old": old, "new": new, "download": 1})
    assert response.headers["content-disposition"] == (
        f'attachment; filename="consistency-{old}-{new}.json"')
    document = response.json()
    assert document == orjson.loads(cli(dashboard, "prove", "consistency", "--from", str(old),
                                        "--to", str(new)))
    verdict = verify_proof(document, [note(client, old), note(client, new)],
                           load_verifier(dashboard.public_key))
    assert (verdict.kind, verdict.from_size, verdict.tree_size) == ("consistency", old, new)
    plain = client.get("/api/proofs/consistency", params={"old": old, "new": new})
    assert "content-disposition" not in plain.headers and plain.json() == document


def test_an_inclusion_proof_is_the_clis_and_verifies_against_the_note(
        client: TestClient, dashboard: DashboardLedger, sizes: tuple[int, int]) -> None:
    verifier = load_verifier(dashboard.public_key)
    size = sizes[1]
    settled = [position for _, position in dashboard.settlements]
    for position in (1, *settled, size):
        response = client.get("/api/proofs/inclusion",
                              params={"position": position, "size": size, "download": 1})
        assert response.headers["content-disposition"] == (
            f'attachment; filename="inclusion-{position}-{size}.json"')
        document = response.json()
        assert document == orjson.loads(cli(dashboard, "prove", "inclusion", "--position",
                                            str(position), "--size", str(size)))
        verdict = verify_proof(document, [note(client, size)], verifier)
        assert (verdict.position, verdict.tree_size) == (position, size)
    # The check is real: the proof does not verify against the other checkpoint's note.
    with pytest.raises(IntegrityError, match=r"proof is for tree size \d+ but the checkpoint"):
        verify_proof(document, [note(client, sizes[0])], verifier)


def test_a_proof_without_its_newer_size_is_at_the_head(client: TestClient) -> None:
    head = client.get("/api/head").json()["position"]
    assert client.get("/api/proofs/consistency", params={"old": 3}).json()["to_size"] == head
    assert client.get("/api/proofs/inclusion", params={"position": 3}).json()["tree_size"] == head


@pytest.mark.parametrize(("query", "name"), [
    ("consistency?old=3&new={beyond}", "new"),
    ("consistency?old={beyond}", "old"),
    ("consistency?old=30&new=20", "old"),
    ("consistency?old=-1", "query.old"),
    ("consistency?old=x", "query.old"),
    ("inclusion?position=3&size={beyond}", "size"),
    ("inclusion?position=30&size=20", "position"),
    ("inclusion?position=3&size=0", "query.size"),
    ("inclusion?position=0", "query.position"),
    ("inclusion", "query.position"),
])
def test_a_bad_size_or_position_is_a_400_naming_the_parameter(
        client: TestClient, query: str, name: str) -> None:
    beyond = client.get("/api/head").json()["position"] + 1
    body = problem(client, "/api/proofs/" + query.format(beyond=beyond), 400)
    assert body["code"] == "invalid_input" and body["path"] == name
    assert body["detail"].startswith(f"{name}:")


def test_a_position_past_the_head_is_a_404(client: TestClient) -> None:
    beyond = client.get("/api/head").json()["position"] + 1
    body = problem(client, f"/api/proofs/inclusion?position={beyond}", 404)
    assert body["path"] == "position" and f"no event at position {beyond}" in body["detail"]


def test_the_api_routes_are_in_the_openapi_document(client: TestClient) -> None:
    paths = client.get("/api/openapi.json").json()["paths"]
    for path in ("/api/checkpoints", "/api/proofs/consistency", "/api/proofs/inclusion",
                 "/api/settlements", "/api/settlements/{position}"):
        assert path in paths
    assert "/checkpoints/{size}/note" not in paths


def test_the_pages_and_proofs_are_the_same_on_each_backend(store_url: str,
                                                           tmp_path: Path) -> None:
    built = build(store_url, tmp_path)
    private = built.public_key.with_suffix("")
    verifier = load_verifier(built.public_key)
    with EventStore(store_url) as store:
        sign_tree(store, load_signer(private), size=OLD_SIZE)
        first = checkpoint_page(store, 1)
        second = checkpoint_page(store, 1, first["next_before"])
        assert first["checkpoints"] + second["checkpoints"] == store.checkpoints(10)
        assert second["next_before"] is None
        notes = {row["tree_size"]: row["note"] for row in store.checkpoints(10)}
        consistency = consistency_proof(store, OLD_SIZE, built.checkpoint_size)
        inclusion = inclusion_proof(store, built.settlements[-1][1], built.checkpoint_size)
    assert verify_proof(consistency, list(notes.values()), verifier).from_size == OLD_SIZE
    assert verify_proof(inclusion, [notes[built.checkpoint_size]], verifier).position == (
        built.settlements[-1][1])


def test_in_a_browser_the_note_and_a_proof_download_and_verify(
        browser_page: Any, base_url: str, dashboard: DashboardLedger,
        sizes: tuple[int, int]) -> None:
    assert browser_page.goto(f"{base_url}/checkpoints").status == 200
    assert browser_page.console_errors == []
    newest = browser_page.locator("a.note").first  # the checkpoint stored last: OLD_SIZE's
    with browser_page.expect_download() as saved:
        newest.click()
    signed = Path(saved.value.path()).read_bytes()
    form = browser_page.locator('form[action="/api/proofs/inclusion"]')
    form.locator('input[name="position"]').fill("3")
    assert form.locator('input[name="size"]').input_value() == str(sizes[0])  # prefilled
    with browser_page.expect_download() as saved:
        form.locator('button[type="submit"]').click()
    assert saved.value.suggested_filename == f"inclusion-3-{sizes[0]}.json"
    document = orjson.loads(Path(saved.value.path()).read_bytes())
    verdict = verify_proof(document, [signed], load_verifier(dashboard.public_key))
    assert (verdict.position, verdict.tree_size) == (3, sizes[0])
