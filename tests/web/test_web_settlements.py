"""The settlement pages: every recorded settlement newest first and paged, one settlement's
recorded payload with its weights charted, its rules versions, and a reproduce command that
reproduces it; unknown positions and positions of other events are 404 problems."""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest
from dashboard_ledger import DashboardLedger, build
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from cli.app import app as cli_app
from ledger.records import EventDraft
from ledger.store import EventStore
from machines.settlement_rules import RULES_VERSION
from services.arena_ledger import ArenaLedger
from services.settlement_board import settlement_detail, settlement_page
from vocabulary.events import CreditGranted
from web.deps import MAX_PAGE
from web.pages import PROBLEM

SVG = "{http://www.w3.org/2000/svg}"


def recorded(dashboard: DashboardLedger) -> dict[int, dict[str, Any]]:
    """The settlements the builder recorded: {position: SettlementComputed payload}."""
    return {position: payload for payload, position in dashboard.settlements}


def chart_of(html: str) -> ET.Element:
    """The page's bar chart (the one SVG of class "chart bars")."""
    found = re.search(r'<svg class="chart bars".*?</svg>', html, re.S)
    assert found is not None, "the page has no bar chart"
    return ET.fromstring(found.group(0))


def decision_versions(url: str, payload: dict[str, Any]) -> list[str]:
    """The rules versions of the AttemptDecided of each claim's submission, read through
    ``explain`` (the fold's path, not the dashboard's query)."""
    with ArenaLedger(url) as ledger:
        return sorted({
            ledger.explain_submission(claim["submission_id"])["attempts"][-1]["recorded"]
            ["rules_version"] for claim in payload["claims"]})


def run_cli(url: str, command: str) -> Any:
    """Runs a command shown on a page (``arena-ledger …``) against ``url``; returns its
    exit code and its output."""
    words = shlex.split(command)
    assert words[0] == "arena-ledger"
    done = CliRunner().invoke(cli_app, ["--db", url, *words[1:]])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return done.exit_code, done.output


# --- the list -------------------------------------------------------------------------------


def test_the_list_holds_every_recorded_settlement_newest_first(
        client: TestClient, dashboard: DashboardLedger) -> None:
    body = client.get("/api/settlements").json()
    expected = recorded(dashboard)
    assert [row["position"] for row in body["settlements"]] == sorted(expected, reverse=True)
    assert body["recorded"] == len(expected) and body["next_before"] is None
    for row in body["settlements"]:
        payload = expected[row["position"]]
        assert {k: row[k] for k in ("block", "as_of_position", "settlement_digest")} == {
            k: payload[k] for k in ("block", "as_of_position", "settlement_digest")}
        assert row["totals"] == {
            "claims": len(payload["claims"]),
            "credit": sum(c["credit"] for c in payload["claims"]),
            "hotkeys": len(payload["weights_ppm"]),
            "weight_ppm": sum(payload["weights_ppm"].values()),
            "fees": payload["fees"]["total"],
        }
        assert row["rules"]["settlement_rules_version"] == RULES_VERSION
        assert row["rules"]["decision_rules_versions"] == decision_versions(dashboard.url, payload)


def test_paging_walks_every_settlement_once(client: TestClient,
                                            dashboard: DashboardLedger) -> None:
    seen, before = [], None
    for _ in range(len(dashboard.settlements) + 1):
        params = {"limit": 2} if before is None else {"limit": 2, "before": before}
        body = client.get("/api/settlements", params=params).json()
        assert len(body["settlements"]) <= 2
        seen += [row["position"] for row in body["settlements"]]
        before = body["next_before"]
        if before is None:
            break
    assert seen == sorted(recorded(dashboard), reverse=True)


def test_a_limit_above_the_maximum_is_refused_not_cut(client: TestClient) -> None:
    response = client.get("/api/settlements", params={"limit": MAX_PAGE + 1})
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["path"] == "query.limit"


def test_the_list_page_links_each_settlement_and_pages_on(
        client: TestClient, dashboard: DashboardLedger, html_page: Any) -> None:
    newest, *older = sorted(recorded(dashboard), reverse=True)
    html = html_page("/settlements?limit=1")
    assert f'href="/settlements/{newest}"' in html
    assert re.findall(r'<tr data-position="(\d+)">', html) == [str(newest)]
    assert f'rel="next" href="/settlements?limit=1&amp;before={newest}"' in html
    assert 'href="/api/settlements?limit=1"' in html  # the JSON twin
    html = html_page(f"/settlements?limit=1&before={older[-1]}")
    assert "No settlement before position" in html and 'rel="next"' not in html


# --- one settlement -------------------------------------------------------------------------


def test_a_settlement_is_its_recorded_payload(client: TestClient,
                                              dashboard: DashboardLedger) -> None:
    for position, payload in recorded(dashboard).items():
        body = client.get(f"/api/settlements/{position}").json()
        assert body["payload"] == payload
        assert body["position"] == position
        assert {w["hotkey"]: w["weight_ppm"] for w in body["weights"]} == payload["weights_ppm"]
        ppm = [w["weight_ppm"] for w in body["weights"]]
        assert ppm == sorted(ppm, reverse=True)
        claims = [c for arena in body["arenas"] for c in arena["claims"]]
        assert claims == payload["claims"]  # recorded order: by arena, then block
        for arena in body["arenas"]:
            assert arena["fees"] == payload["fees"]["arenas"][arena["arena_id"]]
            assert arena["credit"] == sum(c["credit"] for c in arena["claims"])
            assert {c["arena_id"] for c in arena["claims"]} <= {arena["arena_id"]}
        assert {a["arena_id"] for a in body["arenas"]} == set(payload["fees"]["arenas"])


def test_a_settlement_names_the_rules_versions_it_used(client: TestClient,
                                                       dashboard: DashboardLedger) -> None:
    for position, payload in recorded(dashboard).items():
        rules = client.get(f"/api/settlements/{position}").json()["rules"]
        assert rules == {"settlement_rules_version": RULES_VERSION, "digest_matches": True,
                         "decision_rules_versions": decision_versions(dashboard.url, payload)}
        assert rules["decision_rules_versions"]  # every settlement here has claims


def test_the_chart_marks_are_the_weights(client: TestClient, dashboard: DashboardLedger,
                                         html_page: Any) -> None:
    for position, payload in recorded(dashboard).items():
        html = html_page(f"/settlements/{position}")
        bars = chart_of(html).findall(f"{SVG}g")
        marks = {g.get("data-label"): int(g.get("data-value") or "") for g in bars}
        assert marks == payload["weights_ppm"]
        assert payload["settlement_digest"] in html
        for hotkey, ppm in payload["weights_ppm"].items():
            assert f"<tr><td><code>{hotkey}</code></td><td class=\"num\">{ppm:,}</td></tr>" in html


def test_the_reproduce_commands_reproduce_the_settlement(
        client: TestClient, dashboard: DashboardLedger, html_page: Any) -> None:
    positions = sorted(recorded(dashboard))
    for position in positions:
        payload = recorded(dashboard)[position]
        html = html_page(f"/settlements/{position}")
        shown = dict(re.findall(r'<pre class="reproduce" data-command="(\w+)">([^<]*)</pre>',
                                html))
        reproduce = client.get(f"/api/settlements/{position}").json()["reproduce"]
        assert shown == reproduce
        code, out = run_cli(dashboard.url, reproduce["replay"] + " --json")
        assert code == 0, out
        assert orjson.loads(out)["settlement_digest"] == payload["settlement_digest"]
        code, out = run_cli(dashboard.url, reproduce["weights"])
        assert code == 0, out
        assert orjson.loads(out)["settlement_digest"] == payload["settlement_digest"]
    # The command checks what it claims: another settlement's digest is a divergence (exit 4).
    other = recorded(dashboard)[positions[0]]["settlement_digest"]
    replay = client.get(f"/api/settlements/{positions[-1]}").json()["reproduce"]["replay"]
    code, _ = run_cli(dashboard.url, replay.rsplit(" ", 1)[0] + f" {other}")
    assert code == 4


# --- what is not a settlement ---------------------------------------------------------------


def test_a_position_past_the_head_is_a_404_problem(client: TestClient) -> None:
    head = client.get("/api/head").json()["position"]
    response = client.get(f"/api/settlements/{head + 1}")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["code"] == "not_found"
    assert f"no event at position {head + 1}" in response.json()["detail"]
    assert f"head is {head}" in response.json()["detail"]


def test_a_position_of_another_event_is_a_404_naming_that_event(
        client: TestClient, dashboard: DashboardLedger, html_page: Any) -> None:
    position = min(recorded(dashboard)) - 1  # the EmissionPolicySet just before
    with EventStore(dashboard.url) as store:
        there = store.get(position).type
    assert there != "SettlementComputed"
    response = client.get(f"/api/settlements/{position}")
    assert response.status_code == 404
    assert f"position {position} holds {there}" in response.json()["detail"]
    html = html_page(f"/settlements/{position}", 404)
    assert 'data-code="not_found"' in html and there in html


@pytest.mark.parametrize("bad", ["0", "-3", "x"])
def test_a_position_that_is_no_position_is_a_400_naming_it(client: TestClient, bad: str) -> None:
    response = client.get(f"/api/settlements/{bad}")
    assert response.status_code == 400
    assert response.json()["path"] == "path.position"


# --- both backends, and read models behind the head ------------------------------------------


def test_the_answers_are_the_same_on_each_backend_and_when_the_read_models_lag(
        store_url: str, tmp_path: Path) -> None:
    built = build(store_url, tmp_path)
    with EventStore(store_url) as store:
        listed = settlement_page(store, 10)
        one = {p: settlement_detail(store, p) for _, p in built.settlements}
        assert [row["position"] for row in listed["settlements"]] == sorted(
            (p for _, p in built.settlements), reverse=True)
        assert all(one[p]["payload"] == payload for payload, p in built.settlements)
        # An append without the machines' guard leaves the read models behind the head.
        late = CreditGranted(credit_id="cr-late", hotkey="5Late", amount_rao=1, note="late")
        store.append([EventDraft.of("credit-cr-late", late)])
        lagging = settlement_page(store, 10)
        again = {p: settlement_detail(store, p) for _, p in built.settlements}

    def unknown_decisions(document: dict[str, Any]) -> dict[str, Any]:
        rules = {**document["rules"], "decision_rules_versions": None}
        return {**document, "rules": rules}

    assert lagging == {**listed, "settlements": [unknown_decisions(row)
                                                 for row in listed["settlements"]]}
    for position, document in one.items():
        arenas = [{**a, "decision_rules_versions": None} for a in document["arenas"]]
        assert again[position] == {**unknown_decisions(document), "arenas": arenas}


# --- in a browser ---------------------------------------------------------------------------


def test_in_a_browser_the_list_leads_to_a_settlement_whose_chart_is_its_weights(
        browser_page: Any, base_url: str, dashboard: DashboardLedger) -> None:
    assert browser_page.goto(f"{base_url}/settlements").status == 200
    newest = max(recorded(dashboard))
    browser_page.locator(f'a[href="/settlements/{newest}"]').click()
    assert browser_page.url == f"{base_url}/settlements/{newest}"
    bars = browser_page.locator("svg.chart g.bar")
    marks = {bars.nth(i).get_attribute("data-label"): int(bars.nth(i).get_attribute("data-value"))
             for i in range(bars.count())}
    assert marks == recorded(dashboard)[newest]["weights_ppm"]
    replay = browser_page.locator('pre[data-command="replay"]').inner_text()
    assert replay.endswith(recorded(dashboard)[newest]["settlement_digest"])
    assert browser_page.console_errors == []
