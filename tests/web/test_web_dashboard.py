"""The dashboard's ledgers: one per worker thread, and a thread that ended does not keep
its ledger (and its connection pool) open."""

from __future__ import annotations

import threading

from dashboard_ledger import DashboardLedger

from services.dashboard import Dashboard


def test_each_thread_gets_its_own_ledger_and_ended_threads_release_theirs(
        dashboard: DashboardLedger) -> None:
    board = Dashboard(dashboard.url)
    try:
        main = board.ledger()
        assert board.ledger() is main  # the same thread, the same ledger
        seen: list[object] = []
        for _ in range(5):  # worker threads that come and go, as under a bursty load
            worker = threading.Thread(target=lambda: seen.append(board.ledger()))
            worker.start()
            worker.join()
        assert len({id(ledger) for ledger in seen}) == 5
        assert main not in seen
        # Only this thread's and the last worker's: each new thread closed the ended ones'.
        assert len(board.ledgers()) == 2
        assert board.ledgers()[0] is main
    finally:
        board.close()
    assert board.ledgers() == []
