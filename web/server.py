"""Runs the app on uvicorn: the one place the server is configured."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from vocabulary.errors import InvalidInput
from web.app import create_app
from web.cache import BUDGET

__all__ = ["LOOPBACK", "background", "require_free", "serve"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: Seconds a stopping server lets open responses finish before it cancels them (a backstop:
#: the live event stream ends by itself within a second of ``app.state.stopping``).
shutdown_grace_s = 5


class _Server(uvicorn.Server):
    """Is uvicorn's server, telling the app as it begins to stop (``app.state.stopping``):
    uvicorn waits for every open response to finish, and a live event stream would never
    finish by itself, so Ctrl-C would wait for every open page to go."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.app.state.stopping.set()
        await super().shutdown(sockets)


def serve(url: str, host: str, port: int, ready: Callable[[], None] | None = None,
          cache_bytes: int = BUDGET) -> None:
    """Serves the ledger at ``url`` until interrupted. The port and the ledger are checked
    first (a busy port or a missing ledger is a clear error, not a server that starts and
    dies), then ``ready`` is called, then the server runs."""
    require_free(host, port)
    app = create_app(url, cache_bytes=cache_bytes)
    if ready is not None:
        ready()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            server_header=False, proxy_headers=False, access_log=False,
                            timeout_graceful_shutdown=shutdown_grace_s)
    _Server(config, app).run()


def require_free(host: str, port: int) -> None:
    """Raises InvalidInput naming the option when ``host:port`` cannot be listened on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidInput(f"port {port} on {host} is already in use; pick another "
                                   "with --port", path="--port") from None
            raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}",
                               path="--host") from None


@contextmanager
def background(url: str, host: str = "127.0.0.1") -> Iterator[str]:
    """Serves the ledger at ``url`` on a free port of ``host`` in a thread of this process;
    yields the base URL and stops the server on exit (the browser suites and
    tools/screenshots.py use it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = int(probe.getsockname()[1])
    app = create_app(url)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=shutdown_grace_s)
    server = _Server(config, app)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
