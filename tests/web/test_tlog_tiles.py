"""Checks that the ledger served as C2SP tlog-tiles verifies with an independent client.

The client (tlog_client.py) is written from the specifications and shares no code with the
project. The ledger is built once per backend, in steps that cross tile boundaries:

* 300 events, then checkpoint A (300 leaves: a full level-0 tile, a partial of 44, a
  partial level-1 tile of 1);
* 65,936 more, then checkpoint B (66,236 leaves: 258 full level-0 tiles and a partial of
  188, a full level-1 tile and a partial of 2, a partial level-2 tile of 1);
* a checkpoint of size 300 again, newer than B but smaller (as `export --to-position 300
  --key` stores one): the log must keep serving B;
* 100 more events, unsigned: the ledger holds tiles B's tree does not, which must not be
  served.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dashboard_ledger import DashboardLedger
from fastapi.testclient import TestClient
from tlog_client import (
    WIDTH,
    Checkpoint,
    Fetch,
    Rejected,
    TileReader,
    leaf_hash,
    mth_perfect,
    open_checkpoint,
    parse_vkey,
    split_bundle,
    split_hashes,
    tile_path,
    verify_consistency,
    verify_inclusion,
)

from ledger import migrate
from ledger.checkpoint import IssuedCheckpoint, load_signer, sign_tree, write_key_files
from ledger.records import EventDraft
from ledger.store import EventStore
from web.app import create_app
from web.pages import PROBLEM

FIRST, SECOND, UNSIGNED = 300, 66_236, 100
IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class TiledLedger:
    """Is the built ledger: its URL, the verifier key file and the checkpoints signed."""

    url: str
    public_key: Path
    first: IssuedCheckpoint
    second: IssuedCheckpoint
    smaller_newer: IssuedCheckpoint
    head: int


def _append(store: EventStore, count: int) -> None:
    start = store.head().position
    for lo in range(start, start + count, 5_000):
        store.append([
            EventDraft(f"arena-t{n % 50}", "ArenaRetired", {"block": n, "reason": f"r{n}"})
            for n in range(lo, min(start + count, lo + 5_000))
        ])


def build(url: str, keys: Path) -> TiledLedger:
    """Builds the ledger the module docstring describes at ``url`` (migrated first)."""
    migrate.upgrade(url)
    files = write_key_files("tiles.example", keys / "log.key")
    signer = load_signer(files.private_path)
    with EventStore(url) as store:
        _append(store, FIRST)
        first = sign_tree(store, signer)
        _append(store, SECOND - FIRST)
        second = sign_tree(store, signer)
        smaller = sign_tree(store, signer, size=FIRST)
        _append(store, UNSIGNED)
        head = store.head().position
    assert (first.tree_size, second.tree_size, head) == (FIRST, SECOND, SECOND + UNSIGNED)
    return TiledLedger(url, files.public_path, first, second, smaller, head)


@pytest.fixture(
    scope="module",
    params=[pytest.param("sqlite", id="sqlite"),
            pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)],
)
def tiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[TiledLedger]:
    """The tiled ledger on each backend, built once per module and backend."""
    root = tmp_path_factory.mktemp("tiles")
    if request.param == "sqlite":
        yield build(f"sqlite:///{root / 'ledger.db'}", root)
        return
    pool = request.getfixturevalue("_pg_databases")
    name = pool.take()
    try:
        yield build(pool.url(name), root)
    finally:
        pool.give_back(name)


@pytest.fixture(scope="module")
def log(tiled: TiledLedger) -> Iterator[TestClient]:
    """A client of the app over the tiled ledger."""
    with TestClient(create_app(tiled.url), raise_server_exceptions=False) as found:
        yield found


def fetcher(client: TestClient) -> Fetch:
    """Returns ``fetch(path)``: GET ``/path``, which must be a tile served as bytes."""

    def fetch(path: str) -> bytes:
        response = client.get("/" + path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["cache-control"] == IMMUTABLE
        return response.content

    return fetch


def served(client: TestClient, key_file: Path) -> Checkpoint:
    """Fetches /checkpoint and opens it with the verifier key file, as a client would."""
    response = client.get("/checkpoint")
    assert response.status_code == 200, response.text
    return open_checkpoint(response.content, parse_vkey(key_file.read_text()))


def reader(client: TestClient, size: int) -> TileReader:
    return TileReader(fetcher(client), size)


# ----------------------------------------------------------------------- the checkpoint


def test_the_checkpoint_is_the_largest_signed_note_served_as_text(
    log: TestClient, tiled: TiledLedger
) -> None:
    response = log.get("/checkpoint")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert "immutable" not in response.headers["cache-control"]
    assert int(response.headers["cache-control"].rsplit("max-age=", 1)[1]) <= 10
    # The newest checkpoint is the smaller one: the log serves B, never rolling back.
    assert tiled.smaller_newer.id > tiled.second.id
    assert response.text == tiled.second.note
    checkpoint = served(log, tiled.public_key)
    assert (checkpoint.origin, checkpoint.size) == ("arena-ledger/tiles.example", SECOND)
    assert checkpoint.root.hex() == tiled.second.root_hash


def test_a_checkpoint_signed_by_another_key_is_rejected_by_the_client(
    log: TestClient, tmp_path: Path
) -> None:
    other = write_key_files("tiles.example", tmp_path / "other.key")
    with pytest.raises(Rejected, match="no signature by the log's key"):
        served(log, other.public_path)


# ------------------------------------------------------------------------------ tiles


def test_the_tiles_rebuild_the_signed_root(log: TestClient, tiled: TiledLedger) -> None:
    checkpoint = served(log, tiled.public_key)
    tiles = reader(log, checkpoint.size)
    assert tiles.root() == checkpoint.root
    # Exactly the right edge's tiles: partials of 188, 2 and 1, and the full ones under them.
    assert {p for p in tiles.fetched if ".p/" in p} == {
        "tile/0/258.p/188", "tile/1/001.p/2", "tile/2/000.p/1"}


def test_the_tiles_of_the_latest_tree_rebuild_an_older_signed_root(
    log: TestClient, tiled: TiledLedger
) -> None:
    older = open_checkpoint(tiled.first.note.encode(), parse_vkey(tiled.public_key.read_text()))
    assert reader(log, SECOND).root(older.size) == older.root
    # ... and so do the older tree's own partial tiles, still served.
    assert reader(log, older.size).root() == older.root


def test_a_full_tile_is_256_hashes_each_the_root_of_a_full_tile_below(log: TestClient) -> None:
    fetch = fetcher(log)
    level1 = fetch(tile_path(1, 0))
    assert len(level1) == 8_192
    hashes = split_hashes(level1)
    for index in (0, 1, 128, 255):
        assert hashes[index] == mth_perfect(split_hashes(fetch(tile_path(0, index))))
    assert split_hashes(fetch(tile_path(2, 0, 1))) == [mth_perfect(hashes)]
    assert split_hashes(fetch(tile_path(1, 1, 2)))[1] == mth_perfect(
        split_hashes(fetch(tile_path(0, 257))))


def test_an_index_past_999_is_spelled_in_groups(log: TestClient) -> None:
    fetch = fetcher(log)
    assert tile_path(0, 1_000) == "tile/0/x001/000"
    assert tile_path(0, 1_234_067) == "tile/0/x001/x234/067"
    # Tile 257 exists; spelled x000/257 it is refused, one tile having one URL.
    assert len(fetch("tile/0/257")) == 8_192
    response = log.get("/tile/0/x000/257")
    assert response.status_code == 400 and "x000" in response.json()["detail"]


def test_entries_are_the_entry_hashes_whose_leaf_hashes_are_level_zero(
    log: TestClient, tiled: TiledLedger
) -> None:
    tiles = reader(log, SECOND)
    with EventStore(tiled.url) as store:
        for index in (0, 1, 258):
            entries = tiles.entries(index)
            assert [leaf_hash(e) for e in entries] == tiles.tile(0, index)
            events = store.read_all(index * WIDTH + 1, len(entries))
            assert [e.hex() for e in entries] == [event.entry_hash for event in events]
    bundle = fetcher(log)(tile_path("entries", 0))
    assert len(bundle) == WIDTH * 34 and bundle[:2] == b"\x00\x20"


def test_inclusion_proofs_from_tiles_and_entries_verify(log: TestClient, tiled: TiledLedger
                                                        ) -> None:
    key = parse_vkey(tiled.public_key.read_text())
    for note in (tiled.second.note, tiled.first.note):
        checkpoint = open_checkpoint(note.encode(), key)
        tiles = reader(log, SECOND)  # the latest tree's tiles serve the older tree too
        last = checkpoint.size - 1
        for index in sorted({0, 1, 255, 256, 299, 65_535, 65_536, 66_047, 66_048, last}):
            if index > last:
                continue
            entry = tiles.entries(index // WIDTH)[index % WIDTH]
            proof = tiles.inclusion_proof(index, checkpoint.size)
            leaf = leaf_hash(entry)
            assert verify_inclusion(index, checkpoint.size, leaf, proof, checkpoint.root), index
            assert not verify_inclusion(index, checkpoint.size, leaf_hash(entry[::-1]), proof,
                                        checkpoint.root)


def test_consistency_between_two_signed_checkpoints_from_tiles(
    log: TestClient, tiled: TiledLedger
) -> None:
    key = parse_vkey(tiled.public_key.read_text())
    old = open_checkpoint(tiled.first.note.encode(), key)
    new = served(log, tiled.public_key)
    tiles = reader(log, new.size)
    proof = tiles.consistency_proof(old.size, new.size)
    assert verify_consistency(old.size, new.size, old.root, new.root, proof)
    assert not verify_consistency(old.size, new.size, old.root, new.root,
                                  [*proof[:-1], proof[-1][::-1]])
    # Sizes on either side of each tile boundary, a power of two among them.
    for size in (1, 255, 256, 257, 65_536, 65_537, 66_235):
        proof = tiles.consistency_proof(size, new.size)
        assert verify_consistency(size, new.size, tiles.root(size), new.root, proof), size


def test_a_narrower_partial_tile_of_an_older_tree_is_a_prefix_of_the_full_one(
    log: TestClient,
) -> None:
    fetch = fetcher(log)
    full = fetch(tile_path(0, 1))
    assert fetch(tile_path(0, 1, 44)) == full[: 44 * 32]
    assert split_bundle(fetch(tile_path("entries", 1, 44))) == split_bundle(
        fetch(tile_path("entries", 1)))[:44]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("path", "why"), [
    ("tile/0/258", "a full tile the checkpoint's tree holds 188 hashes of"),
    ("tile/0/258.p/189", "wider than the checkpoint's partial tile"),
    ("tile/0/259", "past the checkpoint's tree, though the ledger holds some of it"),
    ("tile/1/001", "a full level-1 tile of a tree of 258 level-0 tiles"),
    ("tile/2/000", "a full level-2 tile"),
    ("tile/3/000.p/1", "a level above the tree"),
    ("tile/63/000", "the top level"),
    ("tile/entries/258", "a full entry bundle the checkpoint's tree holds 188 entries of"),
    ("tile/entries/259.p/1", "entries appended after the checkpoint"),
])
def test_a_tile_the_checkpoints_tree_does_not_hold_is_404(
    log: TestClient, path: str, why: str
) -> None:
    response = log.get("/" + path)
    assert response.status_code == 404, why
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["code"] == "not_found"
    assert path.removeprefix("tile/") in body["detail"] and str(SECOND) in body["detail"]


def test_a_404_names_the_partial_tile_the_tree_holds(log: TestClient) -> None:
    detail = log.get("/tile/0/258").json()["detail"]
    assert "0/258.p/188" in detail


@pytest.mark.parametrize(("path", "element"), [
    ("0/x1/2", "x1"),
    ("001/000", "001"),
    ("0/000.p/0", "0"),
    ("0/000.p/256", "256"),
    ("0/000.p/05", "05"),
    ("99/000", "99"),
    ("64/000", "64"),
    ("a/000", "a"),
    ("0/0a1", "0a1"),
    ("0/1", "1"),
    ("0/x001", "x001"),
    ("0/001/002", "001"),
    ("0/000.p", "000.p"),
    ("entries/x1/000", "x1"),
    ("entries/00a.p/3", "00a"),
])
def test_a_malformed_tile_path_is_400_naming_the_element(
    log: TestClient, path: str, element: str
) -> None:
    response = log.get("/tile/" + path)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["code"] == "invalid_input"
    assert f"{element!r}" in body["detail"], body["detail"]


@pytest.mark.parametrize("path", ["/tile/0", "/tile/entries", "/tile/0/"])
def test_a_tile_path_without_an_index_is_400(log: TestClient, path: str) -> None:
    response = log.get(path)
    assert response.status_code == 400
    assert "no tile index" in response.json()["detail"]


def test_the_log_routes_are_in_the_openapi_document(log: TestClient) -> None:
    paths = log.get("/api/openapi.json").json()["paths"]
    assert {"/checkpoint", "/tile/entries/{index}", "/tile/{path}"} <= set(paths)


# ---------------------------------------------------------------- a ledger that grows


def test_the_log_follows_each_larger_checkpoint(store: EventStore, store_url: str,
                                                tmp_path: Path) -> None:
    files = write_key_files("grow.example", tmp_path / "log.key")
    signer = load_signer(files.private_path)
    with TestClient(create_app(store_url), raise_server_exceptions=False) as client:
        for path in ("/checkpoint", "/tile/0/000.p/1"):
            response = client.get(path)
            assert response.status_code == 404 and "no checkpoint" in response.json()["detail"]
        sign_tree(store, signer)  # the empty tree: a checkpoint, and no tile
        assert served(client, files.public_path).size == 0
        assert client.get("/tile/0/000.p/1").status_code == 404
        _append(store, 3)
        sign_tree(store, signer)
        tiles = reader(client, 3)
        assert served(client, files.public_path).root == tiles.root()
        _append(store, 2)
        assert client.get(f"/{tile_path(0, 0, 4)}").status_code == 404  # signed only at 3
        sign_tree(store, signer)
        new = served(client, files.public_path)
        assert new.size == 5
        assert verify_consistency(3, 5, tiles.root(), new.root,
                                  reader(client, 5).consistency_proof(3, 5))
        sign_tree(store, signer, size=3)
        assert served(client, files.public_path).size == 5


def test_the_dashboard_ledger_verifies_against_its_key_file(
    client: TestClient, dashboard: DashboardLedger
) -> None:
    checkpoint = served(client, dashboard.public_key)
    assert checkpoint.size == dashboard.checkpoint_size
    assert reader(client, checkpoint.size).root() == checkpoint.root
