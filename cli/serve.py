"""``arena-ledger serve``: the read-only dashboard, JSON API and tlog tiles over HTTP."""

from __future__ import annotations

import typer

from cli.common import err_console, handle_errors, state
from ledger.store import safe_url


@handle_errors
def serve_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on. Loopback by "
                             "default: another address exposes the ledger to that network."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="TCP port to listen on."),
    cache_mb: int = typer.Option(64, "--cache-mb", min=0, max=4096, help="Memory for pages "
                                 "kept per head position (a page at an unchanged head is "
                                 "sent again from memory); 0 computes every request."),
) -> None:
    """Serves a read-only web dashboard, its JSON API (with an OpenAPI document) and C2SP
    tlog-tiles over the ledger, until Ctrl-C. Nothing it serves can change the ledger."""
    # Imported here, not at the top: FastAPI and uvicorn stay off every other command's start.
    from web.server import LOOPBACK, serve

    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        if host not in LOOPBACK:
            err_console.print(f"warning: listening on {host}, not loopback: anyone who "
                              "reaches that address can read the whole ledger")
        err_console.print(f"serving {safe_url(state.db_url)} at http://{shown}:{port}/ "
                          "(Ctrl-C stops)")

    serve(state.db_url, host, port, ready, cache_bytes=cache_mb * 1024 * 1024)


def register(app: typer.Typer) -> None:
    """Adds ``serve`` to ``app``."""
    app.command("serve")(serve_command)
