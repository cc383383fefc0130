"""Runs the app on uvicorn: the one place the server is configured."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from vocabulary.errors import InvalidInput
from web.app import create_app

__all__ = ["LOOPBACK", "background", "require_free", "serve"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def serve(url: str, host: str, port: int, ready: Callable[[], None] | None = None) -> None:
    """Serves the ledger at ``url`` until interrupted. The port and the ledger are checked
    first (a busy port or a missing ledger is a clear error, not a server that starts and
    dies), then ``ready`` is called, then the server runs."""
    require_free(host, port)
    app = create_app(url)
    if ready is not None:
        ready()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            server_header=False, proxy_headers=False, access_log=False)
    uvicorn.Server(config).run()


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
    config = uvicorn.Config(create_app(url), host=host, port=port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
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
