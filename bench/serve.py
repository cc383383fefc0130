"""Benchmarks ``arena-ledger serve``: latency of each page and API route under a bounded
loopback load, requests per second, and the server's memory over the run.

The ledger is ``bench/queries.py``'s (``bench/replay.py``'s generator, read models rebuilt),
with one checkpoint signed for the tlog-tiles routes. The console script serves it in a
process of its own; ``--clients`` threads of this process (keep-alive connections, one per
thread) cycle through every route for ``--seconds``, each starting at its own offset, and
every request's latency is kept. Each backend is measured twice: with the server's page
cache (a page at an unchanged head sent from memory: what a dashboard over a ledger that
grows a few events a second mostly serves) and with ``--cache-mb 0`` (every request
computed: what each page costs the first time at a head). The peer, measured in the same
run, is ``/api/head``: the server's own floor (routing, middleware, one indexed read, one
socket round trip), so each route's ratio to it is what its query and rendering add.
Server memory is read from /proc (VmRSS) once a second: start, peak and end of the load.

Not a test: nothing gates on the figures.

    python bench/serve.py --events 100000
    python bench/serve.py --events 1000000 --db /tmp/q1m.db   # kept, reused next time
    python bench/serve.py --db /tmp/q1m.db --postgres postgresql+psycopg://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from bench import replay as replay_bench  # noqa: E402
from bench._common import describe_machine, render_markdown_table  # noqa: E402
from bench.queries import _busiest, _copy_to  # noqa: E402
from ledger.checkpoint import load_signer, sign_tree, write_key_files  # noqa: E402
from ledger.store import EventStore  # noqa: E402
from services import projections  # noqa: E402

SCRIPT = Path(sys.executable).with_name("arena-ledger")
FLOOR = "head (API): the floor"


def routes(url: str) -> list[tuple[str, str]]:
    """Returns (name, path) of every page and API route measured, with ids taken from the
    ledger: the busiest hotkey and arena, a submission in the middle, the last settlement."""
    hotkey, arena, sids = _busiest(url)
    sid = sids[len(sids) // 2]
    with EventStore(url) as store:
        head = store.head().position
        settlement = None
        for recorded in store.read_all(types=["SettlementComputed"]):
            settlement = recorded.position
    hk = quote(hotkey, safe="")
    found = [
        (FLOOR, "/api/head"), ("static stylesheet", "/static/site.css"),
        ("arenas", "/"), ("arenas (API)", "/api/arenas"),
        ("arena leaderboard", f"/arenas/{arena}"), ("arena (API)", f"/api/arenas/{arena}"),
        ("submission", f"/submissions/{sid}"), ("submission (API)", f"/api/submissions/{sid}"),
        ("hotkey (busiest)", f"/hotkeys/{hk}"), ("hotkey (API)", f"/api/hotkeys/{hk}"),
        ("settlements", "/settlements"), ("settlements (API)", "/api/settlements"),
        ("checkpoints", "/checkpoints"),
        ("events (50)", "/events?limit=50"), ("events (API, 50)", "/api/events?limit=50"),
        ("event", f"/events/{head // 2}"),
        ("tlog checkpoint", "/checkpoint"), ("tlog tile 0/000", "/tile/0/000"),
        ("tlog entries 000", "/tile/entries/000"),
    ]
    if settlement is not None:
        found += [("settlement", f"/settlements/{settlement}"),
                  ("settlement (API)", f"/api/settlements/{settlement}")]
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _start(url: str, port: int, cache_mb: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([str(SCRIPT), "--db", url, "serve", "--port", str(port),
                               "--cache-mb", str(cache_mb)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/head")
            json.loads(conn.getresponse().read())
            conn.close()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {server.stderr.read()!r}"
                                   if server.stderr else "the server did not start") from None
            time.sleep(0.2)


def _load(port: int, paths: list[tuple[str, str]], clients: int, seconds: float
          ) -> tuple[dict[str, list[float]], int, list[str]]:
    """Runs ``clients`` keep-alive clients for ``seconds``; returns latencies (s) by route,
    the requests answered and any unexpected statuses."""
    latencies: dict[str, list[float]] = {name: [] for name, _ in paths}
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[tuple[str, float]] = []
        i = offset
        while time.monotonic() < stop:
            name, path = paths[i % len(paths)]
            i += 1
            started = time.perf_counter()
            conn.request("GET", path, headers={"accept": "text/html" if not
                                               path.startswith("/api") else "application/json"})
            response = conn.getresponse()
            response.read()
            mine.append((name, time.perf_counter() - started))
            if response.status != 200:
                with lock:
                    errors.append(f"{path}: {response.status}")
        conn.close()
        with lock:
            for name, seconds_taken in mine:
                latencies[name].append(seconds_taken)

    threads = [threading.Thread(target=client, args=(k * len(paths) // clients,))
               for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, sum(len(v) for v in latencies.values()), errors


def measure(url: str, clients: int, seconds: float, label: str, cache_mb: int) -> None:
    """Serves ``url``, warms every route, loads it and prints the table."""
    paths = routes(url)
    port = _free_port()
    server = _start(url, port, cache_mb)
    samples: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(1.0):
            samples.append(_rss_kib(server.pid))

    try:
        _load(port, paths, clients, 3.0)  # warm: every thread's ledger opened, caches filled
        start_rss = _rss_kib(server.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        latencies, answered, errors = _load(port, paths, clients, seconds)
        elapsed = time.perf_counter() - started
        sampling.set()
        end_rss = _rss_kib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    floor = statistics.median(latencies[FLOOR])
    rows = []
    for name, path in paths:
        found = sorted(latencies[name])
        if not found:
            continue
        p50 = statistics.median(found) * 1000
        p99 = found[min(len(found) - 1, int(len(found) * 0.99))] * 1000
        rows.append([name, path if len(path) < 48 else path[:45] + "…", f"{len(found):,}",
                     f"{p50:.1f}", f"{p99:.1f}", f"{p50 / (floor * 1000):.1f}×"])
    kept = f"pages kept per head ({cache_mb} MiB)" if cache_mb else "every request computed"
    print(f"\n{label}, {kept}: {clients} clients for {seconds:.0f} s, {answered:,} requests, "
          f"{answered / elapsed:,.0f} requests/s")
    print(render_markdown_table(["route", "path", "requests", "p50 ms", "p99 ms", "vs floor"],
                                rows, numeric=[2, 3, 4, 5]))
    print(f"server RSS: {start_rss / 1024:.0f} MiB after warm-up, peak "
          f"{max(samples or [end_rss]) / 1024:.0f} MiB, {end_rss / 1024:.0f} MiB at the end")
    if errors:
        print(f"unexpected statuses ({len(errors)}): {sorted(set(errors))[:10]}")


def _head(url: str) -> int | None:
    """Returns the ledger's head at ``url``, or None where there is no ledger yet."""
    from ledger import migrate

    if migrate.current(url) is None:
        return None
    with EventStore(url) as store:
        return store.head().position


def _sign(url: str, keys: Path) -> None:
    files = write_key_files("bench-serve", keys / "bench.key", force=True)
    with EventStore(url) as store:
        sign_tree(store, load_signer(files.private_path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--postgres", metavar="URL",
                        help="also measure on this PostgreSQL database: the ledger is copied "
                        "into it (empty) unless it already holds a ledger of the same head")
    args = parser.parse_args(argv)
    print(describe_machine())
    scratch = tempfile.mkdtemp(prefix="bench-serve-")
    path = args.db or Path(scratch) / "ledger.db"
    url = f"sqlite:///{path}"
    try:
        if not path.exists():
            meta = replay_bench.build(path, args.events, 1, 64, 360)
            print(f"built {meta['events']:,} events in {meta['build_seconds']:.0f} s")
            projections.rebuild_ledger(url)
        _sign(url, Path(scratch))
        for cache_mb in (64, 0):
            measure(url, args.clients, args.seconds, "SQLite", cache_mb)
        if args.postgres:
            if _head(args.postgres) != _head(url):  # a copy from an earlier run is reused
                _copy_to(url, args.postgres)
            _sign(args.postgres, Path(scratch))
            for cache_mb in (64, 0):
                measure(args.postgres, args.clients, args.seconds, "PostgreSQL", cache_mb)
    finally:
        # A ledger built at --db is the caller's to keep; the scratch folder (keys, and the
        # ledger when no --db was given) goes.
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
