"""The arenas overview (``/``) and each arena's page: what they say about the settled ledger
(tests/integration/settled_ledger.py's docstring), that their JSON twins are the CLI's
``--json`` documents, that a page shows its twin's rows, and that a miner's hotkey reaches a
page as text and a link as one escaped path segment."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote

import orjson
import pytest
from dashboard_ledger import HOSTILE_HOTKEY, DashboardLedger, settlement_scenario
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from cli.app import app as cli_app
from ledger import migrate
from machines import samples
from machines.arena import commission_digest, policy_digest
from machines.control import AS_EXPECTED, PENDING, UNEXPECTED, ControlRow
from services.arena_board import control_health, leader
from services.arena_ledger import ArenaLedger
from vocabulary.events import ArenaCommissioned, IncumbentAdvanced
from web.app import create_app
from web.pages import PROBLEM

S = settlement_scenario()
HTML = {"accept": "text/html"}

#: A hotkey with every character a path or query gives a meaning to (printable ASCII may).
ODD_HOTKEY = "5a/b?c=d&e#f%2Fg<h>'i\""


# --- helpers ------------------------------------------------------------------------------


class Rows(HTMLParser):
    """Collects the rows of one table (by id) or the fields of one element: each ``tr`` of
    the table as {data-field: text}, with the hrefs of its links under ``field + "@"``."""

    def __init__(self, table_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.table_id = table_id
        self.inside = 0  # depth inside the chosen element
        self.rows: list[dict[str, Any]] = []
        self.row_attrs: list[dict[str, str | None]] = []
        self.field: list[str] = []  # the data-field elements open, innermost last
        self.depths: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if self.inside:
            self.inside += 1
        elif named.get("id") == self.table_id:
            self.inside = 1
            if tag != "table":  # one element, not a table: its fields are one row
                self.rows.append({})
                self.row_attrs.append(named)
            return
        if not self.inside:
            return
        if tag == "tr" and "data-field" not in named and any(k.startswith("data-") for k in named):
            self.rows.append({})
            self.row_attrs.append(named)
        field = named.get("data-field")
        if field is not None and self.rows:
            self.field.append(field)
            self.depths.append(self.inside)
            self.rows[-1].setdefault(field, "")
        if tag == "a" and self.field and self.rows:
            self.rows[-1].setdefault(self.field[0] + "@", []).append(named.get("href"))

    def handle_endtag(self, tag: str) -> None:
        if not self.inside:
            return
        if self.depths and self.depths[-1] == self.inside:
            self.field.pop()
            self.depths.pop()
        self.inside -= 1

    def handle_data(self, data: str) -> None:
        if self.inside and self.field and self.rows:
            for field in self.field:
                self.rows[-1][field] += data


def table(html: str, table_id: str) -> list[dict[str, Any]]:
    """Returns the rows of ``table_id`` with each field's text, whitespace collapsed."""
    parser = Rows(table_id)
    parser.feed(html)
    assert parser.rows, f"no rows in #{table_id}"
    return [
        {k: (" ".join(v.split()) if isinstance(v, str) else v) for k, v in row.items()}
        for row in parser.rows
    ]


def cli_json(url: str, *args: str) -> Any:
    """Runs ``arena-ledger --db URL ARGS`` in-process and returns its JSON (a list for
    JSON Lines)."""
    result = CliRunner().invoke(cli_app, ["--db", url, *args])
    assert result.exit_code == 0, (args, result.exit_code, result.output)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if args[-1] == "--json" and args[0] in ("rewards", "controls"):
        return [orjson.loads(line) for line in lines]
    return orjson.loads(result.stdout)


def href_segment(href: str, prefix: str) -> str:
    """Returns the one path segment after ``prefix`` in ``href``, asserting it is one: no
    raw ``/``, ``?`` or ``#`` may cut the hotkey short or send the link elsewhere."""
    assert href.startswith(prefix), href
    segment = href[len(prefix):]
    assert not set("/?#<>\"' ") & set(segment), href
    return unquote(segment)


def by_arena(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["arena_id"]: a for a in document["arenas"]}


# --- the overview -------------------------------------------------------------------------


def test_the_overview_lists_each_arena_with_what_its_commission_sealed(
    client: TestClient, dashboard: DashboardLedger
) -> None:
    body = client.get("/api/arenas").json()
    arenas = by_arena(body)
    assert list(arenas) == [S.ARENA_A, S.ARENA_B]
    with ArenaLedger(dashboard.url) as ledger:
        recorded = {r.stream: r for r in ledger.store.read_all(1, types=["ArenaCommissioned"])}
        assert body["as_of_position"] == ledger.store.head().position
    for arena_id, fee, share in ((S.ARENA_A, S.FEE_A, S.SHARE_A), (S.ARENA_B, S.FEE_B, S.SHARE_B)):
        arena = arenas[arena_id]
        assert (arena["fee_rao"], arena["emission_share_ppm"]) == (fee, share)
        assert arena["status"] == "ACTIVE" and arena["retired_block"] is None
        # The docstring's policy: W = 4, z = {3: 2, 4: 1.5}, sigma_w = sigma_b = 0.01,
        # g = 0, reward margin 0.015.
        policy = arena["policy"]
        assert policy["policy_version"] == "paired-windows.v1"
        assert policy["windows"] == 4 and policy["z"] == {"3": "2", "4": "1.5"}
        assert (policy["window_noise"], policy["boot_noise"]) == ("0.01", "0.01")
        assert (policy["required_gain"], policy["reward_margin"]) == ("0", "0.015")
        record = recorded[f"arena-{arena_id}"]
        event = record.event()
        assert isinstance(event, ArenaCommissioned)
        assert arena["commission_digest"] == commission_digest(event, record.payload)
        assert arena["policy_digest"] == policy_digest(event.policy)
        assert arena["incumbent"]["digest"] == event.incumbent_digest


def test_the_leader_is_the_best_rewarded_pass_of_the_current_group(
    client: TestClient, dashboard: DashboardLedger
) -> None:
    arenas = by_arena(client.get("/api/arenas").json())
    # mlp-a: a3 (5Carol) is faster than a1 but lost_potential; a4 (5Bob) beat a1 by the
    # margin. mlp-b: b2 (5Alice), once b1 failed.
    a, b = arenas[S.ARENA_A]["incumbent"]["leader"], arenas[S.ARENA_B]["incumbent"]["leader"]
    assert a == {"submission_id": dashboard.sids["a4"], "hotkey": S.BOB, "block": 1_030,
                 "speedup": "1.052632"}
    assert b == {"submission_id": dashboard.sids["b2"], "hotkey": S.ALICE, "block": 1_015,
                 "speedup": "1.041667"}
    assert (arenas[S.ARENA_A]["passes_total"], arenas[S.ARENA_B]["passes_total"]) == (3, 1)
    # By reward status only on the arena's own page (the overview assesses no arena whole).
    assert client.get(f"/api/arenas/{S.ARENA_A}").json()["passes"] == {
        "rewarded": 2, "pending": 0, "lost_potential": 1, "total": 3}
    assert client.get(f"/api/arenas/{S.ARENA_B}").json()["passes"] == {
        "rewarded": 1, "pending": 0, "lost_potential": 0, "total": 1}


def test_the_overview_counts_fees_and_submissions_as_the_ledger_does(
    client: TestClient, dashboard: DashboardLedger
) -> None:
    body = client.get("/api/arenas").json()
    arenas = by_arena(body)
    # The settled ledger's fees, plus the hostile hotkey's submission paid by its credit.
    assert arenas[S.ARENA_A]["fees"] == {
        **S.FEES_A, "credits_spent_rao": S.FEES_A["credits_spent_rao"] + S.FEE_A}
    assert arenas[S.ARENA_B]["fees"] == S.FEES_B
    assert body["fees_total"] == {
        **S.FEES_TOTAL, "credits_spent_rao": S.FEES_TOTAL["credits_spent_rao"] + S.FEE_A}
    with ArenaLedger(dashboard.url) as ledger:
        for arena_id, arena in arenas.items():
            listed = Counter(row["status"] for row in ledger.submissions(arena_id))
            counts = {k: v for k, v in arena["submissions"].items() if k != "total" and v}
            assert counts == dict(listed)
            assert arena["submissions"]["total"] == sum(listed.values())
            # One arena's page counts with its own query: the same figures.
            detail = client.get(f"/api/arenas/{arena_id}").json()
            assert detail["arena"]["submissions"] == arena["submissions"]
    assert arenas[S.ARENA_A]["submissions"]["HELD"] == 1  # the hostile hotkey's
    assert arenas[S.ARENA_B]["submissions"]["FAILED"] == 1  # b1, slot_audit_failed


def test_the_controls_health_of_each_arena(client: TestClient) -> None:
    arenas = by_arena(client.get("/api/arenas").json())
    # mlp-a's one control was registered but never run; mlp-b has none.
    assert arenas[S.ARENA_A]["controls"] == {"health": PENDING, "block": None,
                                             "unexpected": [], "registered": 1}
    assert arenas[S.ARENA_B]["controls"] == {"health": "none", "block": None,
                                             "unexpected": [], "registered": 0}


def _run(control_id: str, block: int | None, outcome: str) -> dict[str, Any]:
    row = ControlRow(control_id, "wrong_mlp", "ab" * 32, "FAIL", None,
                     None if block is None else f"sub-{control_id}-{block}",
                     None if outcome == PENDING else "FAIL", None, outcome, block, None)
    return dataclasses.asdict(row)


@pytest.mark.parametrize(("rows", "expected"), [
    ([], ("none", None, [])),
    ([_run("c1", None, PENDING)], (PENDING, None, [])),
    ([_run("c1", 10, AS_EXPECTED), _run("c2", 10, AS_EXPECTED)], (AS_EXPECTED, 10, [])),
    ([_run("c1", 10, AS_EXPECTED), _run("c2", 10, UNEXPECTED)], (UNEXPECTED, 10, ["c2"])),
    # A later run still pending does not hide the last one that completed.
    ([_run("c1", 10, UNEXPECTED), _run("c1", 20, PENDING)], (UNEXPECTED, 10, ["c1"])),
    # A later complete run is the one that counts.
    ([_run("c1", 10, UNEXPECTED), _run("c1", 20, AS_EXPECTED)], (AS_EXPECTED, 20, [])),
], ids=["none", "never-run", "as-expected", "unexpected", "pending-later", "latest-wins"])
def test_control_health_reads_the_latest_complete_run(
    rows: list[dict[str, Any]], expected: tuple[str, int | None, list[str]]
) -> None:
    found = control_health(rows)
    assert (found["health"], found["block"], found["unexpected"]) == expected
    assert found["registered"] == len({row["control_id"] for row in rows})


def test_the_overview_page_shows_its_twins_rows(
    client: TestClient, html_page: Any
) -> None:
    body = client.get("/api/arenas").json()
    rows = table(html_page("/"), "arenas")
    assert [r["arena_id"] for r in rows] == [a["arena_id"] for a in body["arenas"]]
    for row, arena in zip(rows, body["arenas"], strict=True):
        assert row["arena_id@"] == [f"/arenas/{arena['arena_id']}"]
        assert int(row["fee_rao"].replace(",", "")) == arena["fee_rao"]
        assert int(row["emission_share_ppm"].replace(",", "")) == arena["emission_share_ppm"]
        assert int(row["net_rao"].replace(",", "")) == arena["fees"]["net_rao"]
        assert row["windows"] == str(arena["policy"]["windows"])
        assert row["window_noise"] == arena["policy"]["window_noise"]
        assert row["controls"].split()[0] == arena["controls"]["health"]
        assert row["passes_total"] == f"{arena['passes_total']:,}"
        leader = arena["incumbent"]["leader"]
        assert row["leader_speedup"] == leader["speedup"]
        assert row["leader@"] == [f"/hotkeys/{leader['hotkey']}",
                                  f"/submissions/{leader['submission_id']}"]


# --- one arena ----------------------------------------------------------------------------


def test_the_leaderboard_gives_each_pass_its_reward_status(
    client: TestClient, dashboard: DashboardLedger
) -> None:
    a = client.get(f"/api/arenas/{S.ARENA_A}").json()["rewards"]
    b = client.get(f"/api/arenas/{S.ARENA_B}").json()["rewards"]
    sid = dashboard.sids
    assert [(r["submission_id"], r["hotkey"], r["status"]) for r in a] == [
        (sid["a1"], S.ALICE, "rewarded"),
        (sid["a3"], S.CAROL, "lost_potential"),
        (sid["a4"], S.BOB, "rewarded"),
    ]
    lost = a[1]
    # 1.030928 < 1.020408 x 1.015 = 1.03571412: a3 needed a4's margin over a1.
    assert lost["best_before"] == {"submission_id": sid["a1"], "speedup": "1.020408"}
    assert lost["required_speedup"] == "1.03571412"
    assert Decimal(lost["speedup"]) < Decimal(lost["required_speedup"]) <= Decimal(a[2]["speedup"])
    # b2 was pending while b1 was held; b1 has since failed, so b2 is rewarded.
    assert [(r["submission_id"], r["hotkey"], r["status"], r["blocked_by"]) for r in b] == [
        (sid["b2"], S.ALICE, "rewarded", []),
    ]


@pytest.mark.parametrize("arena_id", [S.ARENA_A, S.ARENA_B])
def test_the_arena_twins_are_the_cli_documents(
    client: TestClient, dashboard: DashboardLedger, arena_id: str
) -> None:
    detail = client.get(f"/api/arenas/{arena_id}").json()
    rewards = cli_json(dashboard.url, "rewards", "--arena", arena_id, "--json")
    controls = cli_json(dashboard.url, "controls", arena_id, "--json")
    fees = cli_json(dashboard.url, "fees", "--arena", arena_id, "--json")
    assert rewards, "the settled ledger has a PASS in each arena"
    assert detail["rewards"] == rewards == client.get(f"/api/arenas/{arena_id}/rewards").json()
    assert detail["page"] == {"offset": 0, "limit": 100, "total": len(rewards),
                              "previous_offset": None, "next_offset": None}
    assert detail["controls"] == controls == client.get(f"/api/arenas/{arena_id}/controls").json()
    assert detail["fees"] == fees == client.get(f"/api/arenas/{arena_id}/fees").json()
    overview = by_arena(client.get("/api/arenas").json())[arena_id]
    assert detail["arena"] == overview
    with ArenaLedger(dashboard.url) as ledger:  # the service the CLI calls, from Python
        assert detail["rewards"] == ledger.rewards(arena_id)


def test_the_arena_page_shows_its_twins_rows(
    client: TestClient, dashboard: DashboardLedger, html_page: Any
) -> None:
    doc = client.get(f"/api/arenas/{S.ARENA_A}").json()
    html = html_page(f"/arenas/{S.ARENA_A}")
    rows = table(html, "rewards")
    assert len(rows) == len(doc["rewards"])
    passes = table(html, "passes")[0]
    for status, n in doc["passes"].items():
        assert passes[status].split()[0] == str(n)
    for row, want in zip(rows, doc["rewards"], strict=True):
        assert row["submission_id@"] == [f"/submissions/{want['submission_id']}"]
        assert want["submission_id"].startswith(row["submission_id"])
        assert row["hotkey"] == want["hotkey"]
        assert row["hotkey@"] == [f"/hotkeys/{want['hotkey']}"]
        assert (row["block"], row["speedup"], row["status"]) == (
            str(want["block"]), want["speedup"], want["status"])
        assert row["required_speedup"] == (want["required_speedup"] or "-")
        best = want["best_before"]
        assert row.get("best_before@", []) == (
            [] if best is None else [f"/submissions/{best['submission_id']}"])
    controls = table(html, "control-runs")
    assert [(r["control_id"], r["outcome"]) for r in controls] == [
        (c["control_id"], c["outcome"]) for c in doc["controls"]]
    fees = table(html, "fee-summary")[0]
    for key, value in doc["fees"]["arenas"][S.ARENA_A].items():
        assert fees[key] == f"{value:,} rao"
    # The chart's bars: every PASS's gain over stock, fastest first.
    gains = [float(v) for v in _attrs(html, "data-value")]
    assert gains == sorted(
        (float((Decimal(r["speedup"]) - 1) * 100) for r in doc["rewards"]), reverse=True)


def _attrs(html: str, name: str) -> list[str]:
    found: list[str] = []

    class Attrs(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.extend(v for k, v in attrs if k == name and v is not None)

    Attrs().feed(html)
    return found


@pytest.mark.parametrize("path", ["/api/arenas/{}", "/api/arenas/{}/rewards",
                                  "/api/arenas/{}/controls", "/api/arenas/{}/fees"])
def test_an_unknown_arena_is_a_problem_naming_it(client: TestClient, path: str) -> None:
    response = client.get(path.format("no-such-arena"))
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["code"] == "not_found" and "no-such-arena" in body["detail"]


def test_an_unknown_arena_page_is_a_404_page(html_page: Any) -> None:
    html = html_page("/arenas/no-such-arena", 404)
    assert 'data-code="not_found"' in html and "no-such-arena" in html


# --- a miner's hotkey on the pages --------------------------------------------------------


@pytest.fixture
def hostile(store_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A ledger (on each backend) with one arena whose PASSes are the hostile hotkey's and
    ``ODD_HOTKEY``'s, the hostile one the faster; and a client of the app over it."""
    ledger: ArenaLedger = S.open_ledger(store_url)
    try:
        event = samples.commissioned("mlp-x", fee_rao=S.FEE_A, emission_share_ppm=S.SHARE_A)
        ledger.commission(event.model_dump(mode="json", exclude_unset=True))
        sids = {"odd": S.intake(ledger, "mlp-x", ODD_HOTKEY, "odd", 1_000, S.FEE_A),
                "hostile": S.intake(ledger, "mlp-x", HOSTILE_HOTKEY, "hk", 1_010, S.FEE_A)}
        S.evaluate(ledger, sids["odd"], "att-odd", 950_000_000)
        S.evaluate(ledger, sids["hostile"], "att-hk", 900_000_000)
    finally:
        ledger.close()
    with TestClient(create_app(store_url), raise_server_exceptions=False) as found:
        yield found, sids


def test_a_hostile_hotkey_is_text_and_one_link_segment(
    hostile: tuple[TestClient, dict[str, str]]
) -> None:
    client, sids = hostile
    rows = client.get("/api/arenas/mlp-x/rewards").json()
    assert [(r["hotkey"], r["status"]) for r in rows] == [
        (ODD_HOTKEY, "rewarded"), (HOSTILE_HOTKEY, "rewarded")]
    overview = client.get("/", headers=HTML)
    page = client.get("/arenas/mlp-x", headers=HTML)
    for response in (overview, page):
        assert response.status_code == 200
        assert HOSTILE_HOTKEY not in response.text and "<h>" not in response.text
        assert "&lt;script&gt;" in response.text
    leader = table(overview.text, "arenas")[0]
    assert HOSTILE_HOTKEY in leader["leader"]
    assert href_segment(leader["leader@"][0], "/hotkeys/") == HOSTILE_HOTKEY
    board = table(page.text, "rewards")
    assert [r["hotkey"] for r in board] == [ODD_HOTKEY, HOSTILE_HOTKEY]
    assert [href_segment(r["hotkey@"][0], "/hotkeys/") for r in board] == [
        ODD_HOTKEY, HOSTILE_HOTKEY]
    assert [href_segment(r["submission_id@"][0], "/submissions/") for r in board] == [
        sids["odd"], sids["hostile"]]
    labels = _attrs(page.text, "data-label")
    assert labels == [f"{HOSTILE_HOTKEY} · {sids['hostile'][:8]}",
                      f"{ODD_HOTKEY} · {sids['odd'][:8]}"]


def test_an_empty_ledger_has_no_arena(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    migrate.upgrade(url)
    with TestClient(create_app(url), raise_server_exceptions=False) as client:
        body = client.get("/api/arenas").json()
        assert body["arenas"] == [] and body["fees_total"]["net_rao"] == 0
        page = client.get("/", headers=HTML)
        assert page.status_code == 200 and "No arena is commissioned yet" in page.text


# --- a leaderboard of many pages -----------------------------------------------------------

#: (candidate ns, live) of each arrival of ``crowded``'s arena, with an IncumbentAdvanced
#: at None: the first group's leader (800M) is faster than any of the second group's PASS;
#: there 850M is rewarded, 845M (faster) lost_potential by the margin; the live arrival
#: makes the 700M PASS after it pending. stock / candidate is the speedup.
CROWD: list[tuple[int, bool] | None] = [
    (950_000_000, False), (800_000_000, False), (790_000_000, False), None,
    (900_000_000, False), (895_000_000, False), (850_000_000, False), (845_000_000, False),
    (0, True), (700_000_000, False),
]


@pytest.fixture
def crowded(store_url: str) -> Iterator[tuple[TestClient, str, dict[int, str]]]:
    """A ledger (on each backend) whose arena ``mlp-x`` has PASSes in two reward groups and
    a live submission (``CROWD``); a client of the app over it, the url, and the
    submissions by their index in ``CROWD``."""
    ledger: ArenaLedger = S.open_ledger(store_url)
    sids: dict[int, str] = {}
    try:
        event = samples.commissioned("mlp-x", fee_rao=S.FEE_A, emission_share_ppm=S.SHARE_A)
        ledger.commission(event.model_dump(mode="json", exclude_unset=True))
        for i, arrival in enumerate(CROWD):
            if arrival is None:
                ledger.append([("arena-mlp-x", IncumbentAdvanced(
                    incumbent_digest="ee" * 32, block=1_000 + 10 * i, reason="operator_reset"))])
                continue
            hotkey = (S.ALICE, S.BOB, S.CAROL)[i % 3]
            sids[i] = S.intake(ledger, "mlp-x", hotkey, f"x{i}", 1_000 + 10 * i, S.FEE_A)
            if not arrival[1]:
                S.evaluate(ledger, sids[i], f"att-x{i}", arrival[0])
    finally:
        ledger.close()
    with TestClient(create_app(store_url), raise_server_exceptions=False) as found:
        yield found, store_url, sids


def test_the_overview_leader_is_the_full_assessments(
    crowded: tuple[TestClient, str, dict[int, str]]
) -> None:
    client, url, sids = crowded
    rows = cli_json(url, "rewards", "--arena", "mlp-x", "--json")
    statuses = {r["submission_id"]: r["status"] for r in rows}
    # Not vacuous: the second group's leader is neither its fastest PASS (lost_potential)
    # nor the arena's fastest (pending), nor the faster leader of the first group.
    assert [statuses[sids[i]] for i in (6, 7, 9)] == ["rewarded", "lost_potential", "pending"]
    assert statuses[sids[1]] == "rewarded"
    summary = by_arena(client.get("/api/arenas").json())["mlp-x"]
    with ArenaLedger(url) as ledger:
        arena = ledger.fold.arena("mlp-x")
        assert arena is not None
        assert summary["incumbent"]["leader"] == leader(arena, rows)
    assert summary["incumbent"]["leader"]["submission_id"] == sids[6]
    assert summary["passes_total"] == len(rows) == 8
    detail = client.get("/api/arenas/mlp-x?limit=3").json()
    assert detail["arena"] == summary


def test_the_leaderboard_pages_are_slices_of_the_cli_rows(
    crowded: tuple[TestClient, str, dict[int, str]]
) -> None:
    client, url, _ = crowded
    rows = cli_json(url, "rewards", "--arena", "mlp-x", "--json")
    counts = Counter(r["status"] for r in rows)
    for offset in range(0, len(rows), 3):
        detail = client.get(f"/api/arenas/mlp-x?limit=3&offset={offset}").json()
        assert detail["rewards"] == rows[offset:offset + 3]
        assert detail["page"]["total"] == len(rows)
        assert detail["passes"] == {**{s: counts[s] for s in ("rewarded", "lost_potential",
                                                              "pending")}, "total": len(rows)}
        response = client.get(f"/api/arenas/mlp-x/rewards?limit=3&offset={offset}")
        assert response.json() == rows[offset:offset + 3]
        assert response.headers["x-total-count"] == str(len(rows))
        more = offset + 3 < len(rows)
        assert ("link" in response.headers) == more
        if more:
            assert response.headers["link"] == (
                f'</api/arenas/mlp-x/rewards?limit=3&offset={offset + 3}>; rel="next"')
    assert client.get("/api/arenas/mlp-x/rewards").json() == rows  # one page of 500


def test_the_pager_links_walk_every_pass_without_javascript(
    crowded: tuple[TestClient, str, dict[int, str]]
) -> None:
    client, url, _ = crowded
    rows = cli_json(url, "rewards", "--arena", "mlp-x", "--json")
    seen: list[dict[str, Any]] = []
    path: str | None = "/arenas/mlp-x?limit=3"
    while path is not None:
        response = client.get(path, headers=HTML)
        assert response.status_code == 200, path
        seen += table(response.text, "rewards")
        nexts = [a for a in _links(response.text) if a[0] == "next"]
        path = nexts[0][1].split("#")[0] if nexts else None
    assert [r["submission_id@"][0].rsplit("/", 1)[1] for r in seen] == [
        r["submission_id"] for r in rows]
    last = client.get("/arenas/mlp-x?limit=3&offset=6", headers=HTML).text
    assert ("prev", "/arenas/mlp-x?limit=3&offset=3#leaderboard") in _links(last)


def _links(html: str) -> list[tuple[str, str]]:
    """Returns (rel, href) of each link with a rel."""
    found: list[tuple[str, str]] = []

    class Links(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            named = dict(attrs)
            if tag == "a" and named.get("rel") and named.get("href"):
                found.append((str(named["rel"]), str(named["href"])))

    Links().feed(html)
    return found


@pytest.mark.parametrize("path", ["/api/arenas/{}?offset=8", "/api/arenas/{}/rewards?offset=9",
                                  "/api/arenas/{}?limit=501", "/api/arenas/{}/rewards?limit=0",
                                  "/api/arenas/{}?offset=-1"])
def test_a_page_out_of_range_is_a_problem_naming_it(
    crowded: tuple[TestClient, str, dict[int, str]], path: str
) -> None:
    client, _, _ = crowded
    response = client.get(path.format("mlp-x"))
    assert response.status_code in (400, 422), response.text
    assert response.headers["content-type"] == PROBLEM
    name = "offset" if "offset" in path else "limit"
    assert name in response.text
