"""A submission's page and its JSON twin: explain's document plus the events behind it, each
attempt's window ratios charted against the lines its looks were decided by, the verdict
with its cause and next step, and problems for an id that names no one submission.

The numbers come from the settled ledger's docstring (tests/integration/settled_ledger.py):
policy W = 4, z = {3: 2, 4: 1.5}, sigma_w = sigma_b = 0.01, g = 0; every window of a
submission at one ratio.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from dashboard_ledger import DashboardLedger
from fastapi.testclient import TestClient
from markupsafe import escape
from svg_marks import Chart, charts

from machines.reasons import REASONS
from services.arena_ledger import ArenaLedger
from vocabulary.errors import LedgerError
from web.pages import PROBLEM

#: Each evaluated submission's window ratios (candidate / stock), from the docstring.
RATIOS = {"a1": [0.98] * 3, "b1": [0.97] * 3, "a2": [0.97] * 3, "b2": [0.96] * 3,
          "a3": [0.97] * 3, "a4": [0.95] * 3, "a5": [1.02] * 4}
#: The sealed policy's noise and critical values.
SIGMA_W = SIGMA_B = 0.01
Z = {3: 2.0, 4: 1.5}
WINDOWS = 4


def pass_ratio(window: int) -> float:
    """Returns the look at ``window``'s pass line as a cost ratio: S >= 1 + L, with
    S = 1 / sqrt(R1 R2) and 1 + L = exp(z SE), is sqrt(R1 R2) <= exp(-z SE)."""
    n1 = WINDOWS // 2
    n2 = window - n1
    se = math.sqrt((SIGMA_W ** 2 * (1 / n1 + 1 / n2) + 2 * SIGMA_B ** 2) / 4)
    return math.exp(-Z[window] * se)


def explained(dashboard: DashboardLedger, ident: str) -> dict[str, Any]:
    """Returns what ``arena-ledger explain submission IDENT --json`` prints, as parsed JSON."""
    with ArenaLedger(dashboard.url) as ledger:
        document = ledger.explain_submission(ident)
    parsed: dict[str, Any] = json.loads(json.dumps(document))
    return parsed


def field(page: str, css_class: str) -> str:
    """Returns the HTML inside the first ``<dd class="css_class">`` of ``page``."""
    found = re.search(rf'<dd class="{css_class}">(.*?)</dd>', page, re.DOTALL)
    assert found is not None, css_class
    return found.group(1)


@pytest.mark.parametrize("name", ["a1", "b1", "a2", "b2", "a3", "a4", "a5", "hostile"])
def test_the_api_is_explains_document_plus_a_timeline(
        client: TestClient, dashboard: DashboardLedger, name: str) -> None:
    sid = dashboard.sids[name]
    body = client.get(f"/api/submissions/{sid}").json()
    assert isinstance(body.pop("timeline"), list)
    assert body == explained(dashboard, sid)


def test_a_prefix_or_capitals_name_the_same_submission(
        client: TestClient, dashboard: DashboardLedger) -> None:
    sid = dashboard.sids["a4"]
    whole = client.get(f"/api/submissions/{sid}").json()
    for ident in (sid[:8], sid[:16], sid.upper()):
        assert client.get(f"/api/submissions/{ident}").json() == whole


@pytest.mark.parametrize("name", ["a1", "a2", "a5", "b1", "hostile"])
def test_the_timeline_is_every_event_of_the_submission_its_attempts_and_its_fee(
        client: TestClient, dashboard: DashboardLedger, name: str) -> None:
    sid = dashboard.sids[name]
    timeline = client.get(f"/api/submissions/{sid}").json()["timeline"]
    with ArenaLedger(dashboard.url) as ledger:
        every = list(ledger.store.read_all(1))
    # Its attempts' and payment's streams are those whose events name it; of a credit's
    # stream only the spend names it (the grant was the hotkey's, before any submission).
    naming = {r.stream for r in every if r.payload.get("submission_id") == sid}
    expected = [r for r in every if r.stream == f"submission-{sid}"
                or (r.stream in naming and not r.stream.startswith("credit-"))
                or (r.stream.startswith("credit-") and r.payload.get("submission_id") == sid)]
    assert timeline == [{"position": r.position, "stream": r.stream, "version": r.version,
                         "type": r.type, "recorded_at": r.recorded_at} for r in expected]
    types = [e["type"] for e in timeline]
    assert types[:2] == ["SubmissionArrived", "SubmissionAdmitted"]
    if name == "a2":
        assert types[-1] == "PaymentReleased"  # the refund is part of its story
    if name == "a5":
        assert "CreditSpent" in types and "CreditGranted" not in types


def test_the_page_links_every_event_and_the_latest_ones_inclusion_proof(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    sid = dashboard.sids["b1"]
    page = html_page(f"/submissions/{sid}")
    with ArenaLedger(dashboard.url) as ledger:
        own = ledger.read_stream(f"submission-{sid}")
        attempt = ledger.read_stream("attempt-att-b1")
    for record in (*own, *attempt):
        assert f'<a href="/events/{record.position}">{record.position}</a>' in page
    latest = own[-1].position
    assert own[-1].type == "SubmissionResolved"
    assert f'href="/api/proofs/inclusion?position={latest}&amp;download=1"' in page


@pytest.mark.parametrize("name", list(RATIOS))
def test_the_window_chart_draws_each_windows_ratio_by_orientation(
        html_page: Callable[..., str], dashboard: DashboardLedger, name: str) -> None:
    sid = dashboard.sids[name]
    chart = window_chart(html_page(f"/submissions/{sid}"))
    assert [m.y for m in chart.marks] == RATIOS[name]
    assert [m.x for m in chart.marks] == list(range(1, len(RATIOS[name]) + 1))
    # Windows 1..W/2 are orientation 1, the rest orientation 2.
    assert [m.series for m in chart.marks] == [
        f"orientation {1 if w <= WINDOWS // 2 else 2}" for w in range(1, len(RATIOS[name]) + 1)]
    windows = explained(dashboard, sid)["attempts"][-1]["windows"]
    assert [m.y for m in chart.marks] == [float(w["ratio"]) for w in windows]


def window_chart(page: str) -> Chart:
    found = [c for c in charts(page) if "window cost ratios" in c.title]
    assert len(found) == 1
    return found[0]


def test_a_pass_line_sits_at_one_over_one_plus_l_below_the_passing_windows(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    page = html_page(f"/submissions/{dashboard.sids['a1']}")
    chart = window_chart(page)
    stock, line = chart.line("stock (ratio 1)"), chart.line("pass line, look 3")
    assert stock.y == 1.0
    assert line.y == pytest.approx(pass_ratio(3), rel=1e-12)
    # a1 passed at look 3 with every window at 0.98 < 0.98147: its marks are drawn below
    # the pass line (a larger SVG y), and the line below stock: lower is faster.
    assert all(m.cy > line.drawn_y for m in chart.marks)
    assert line.drawn_y > stock.drawn_y
    assert "below 1 the candidate was faster" in page


def test_a_slower_candidate_is_drawn_above_the_slower_line_of_its_last_look(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    chart = window_chart(html_page(f"/submissions/{dashboard.sids['a5']}"))
    assert chart.line("pass line, look 3").y == pytest.approx(pass_ratio(3), rel=1e-12)
    assert chart.line("pass line, look 4").y == pytest.approx(pass_ratio(4), rel=1e-12)
    # candidate_slower at look 4: S <= 1 / (1 + L), i.e. sqrt(R1 R2) >= 1 + L.
    slower = chart.line("slower line, look 4")
    assert slower.y == pytest.approx(1 / pass_ratio(4), rel=1e-12)
    assert all(m.cy < slower.drawn_y for m in chart.marks)


@pytest.mark.parametrize("name", ["a1", "b1", "a2", "a5", "hostile"])
def test_the_verdict_cause_and_next_step_are_explains(
        html_page: Callable[..., str], dashboard: DashboardLedger, name: str) -> None:
    sid = dashboard.sids[name]
    document = explained(dashboard, sid)
    page = html_page(f"/submissions/{sid}")
    assert field(page, f"status {document['status']}") == document["status"]
    assert field(page, "cause") == str(escape(document["cause"]))
    assert field(page, "next-step") == str(escape(document["next_step"]))
    assert f'<code class="reason">{escape(document["reason"] or "-")}</code>' in page


def test_a_failed_verdict_states_the_reason_tables_cause_and_next_step(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    page = html_page(f"/submissions/{dashboard.sids['a5']}")
    reason = REASONS["candidate_slower"]
    assert field(page, "cause") == str(escape(reason.cause))
    assert field(page, "next-step") == str(escape(reason.next_step))


def test_the_audit_is_shown_per_node_with_its_outcome(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    # b1's one audit violation on its one node failed it slot_audit_failed.
    page = html_page(f"/submissions/{dashboard.sids['b1']}")
    audit = re.search(r'<table class="audit">.*?</table>', page, re.DOTALL)
    assert audit is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", audit.group(0))
    node = next(iter(explained(dashboard, dashboard.sids["b1"])["attempts"][0]["audit"]))
    assert cells[:4] == [f"<code>{node}</code>", "64", "1", "0"]
    assert cells[-1] == "slot_audit_failed"


def test_quality_is_shown_when_it_was_graded(
        html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    quality = explained(dashboard, dashboard.sids["a2"])["attempts"][0]["quality"]
    page = html_page(f"/submissions/{dashboard.sids['a2']}")
    assert quality["drift_within_envelope"] is False  # a2's quality_drift
    for key, value in quality.items():
        assert f'<dt>{key.replace("_", " ")}</dt><dd class="num">{value}</dd>' in page


def test_the_hotkey_link_is_url_encoded_and_the_hotkey_escaped(
        html_page: Callable[..., str], client: TestClient, dashboard: DashboardLedger) -> None:
    page = html_page(f"/submissions/{dashboard.sids['hostile']}")
    assert 'href="/hotkeys/%3Cscript%3Ealert%28%22hk%22%29%3C%2Fscript%3E"' in page
    assert "&lt;script&gt;alert(&#34;hk&#34;)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    assert client.get("/api/hotkeys/%3Cscript%3Ealert%28%22hk%22%29%3C%2Fscript%3E").json()[
        "submissions"][0]["submission_id"] == dashboard.sids["hostile"]


def library_error(dashboard: DashboardLedger, ident: str) -> LedgerError:
    """Returns the error ``explain_submission`` raises for ``ident``."""
    with ArenaLedger(dashboard.url) as ledger, pytest.raises(LedgerError) as raised:
        ledger.explain_submission(ident)
    return raised.value


@pytest.mark.parametrize(("ident", "status"), [
    ("3306a2", 400),  # hex shorter than a prefix may be
    ("0000000000000000", 404),  # a prefix no submission starts with
    ("not-an-id", 404),
    ("f" * 64, 404),
])
def test_an_id_that_names_no_submission_is_a_problem_with_the_librarys_message(
        client: TestClient, dashboard: DashboardLedger, ident: str, status: int) -> None:
    response = client.get(f"/api/submissions/{ident}")
    assert response.status_code == status
    assert response.headers["content-type"] == PROBLEM
    error = library_error(dashboard, ident)
    assert response.json()["detail"] == error.message
    assert response.json()["code"] == error.code


def test_a_browser_gets_the_problem_as_a_page(html_page: Callable[..., str]) -> None:
    page = html_page("/submissions/3306a2", 400)
    assert 'data-code="invalid_input"' in page
    assert "shorter than a submission id prefix may be" in page


def test_the_page_reads_no_fold(client: TestClient, dashboard: DashboardLedger) -> None:
    for name in ("a1", "b1", "hostile"):
        assert client.get(f"/submissions/{dashboard.sids[name]}",
                          headers={"accept": "text/html"}).status_code == 200
    # The dashboard's per-thread ledgers: a fold they caught up would have a position.
    opened = client.app.state.dashboard.ledgers()
    assert opened and all(ledger.guard.fold.position == 0 for ledger in opened)
