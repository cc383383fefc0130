"""Runs ``arena-ledger serve`` as a user would: it serves the ledger on loopback, refuses a
busy port before saying it serves, warns when told to listen beyond loopback, and stops on
Ctrl-C without a traceback."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from typing import Any

import pytest


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str, timeout: float = 30.0) -> Any:
    """GETs ``url`` as JSON, retrying while the server starts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _serve(cli: Any, script: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(script), "serve", *args], cwd=cli.root, env=cli.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_answers_on_loopback_and_stops_quietly_on_ctrl_c(cli: Any, script: Any) -> None:
    cli("init")
    port = _free_port()
    server = _serve(cli, script, "--port", str(port))
    try:
        head = _get(f"http://127.0.0.1:{port}/api/head")
        assert head["position"] == cli.head()
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert "Traceback" not in err, err
    assert f"at http://127.0.0.1:{port}/ (Ctrl-C stops)" in err
    assert "not loopback" not in err
    assert server.returncode in (0, 130), (server.returncode, err)


def test_a_busy_port_is_refused_before_anything_is_served(cli: Any, script: Any) -> None:
    cli("init")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), expect=1)
    assert done.stderr.startswith("error[invalid_input] [path --port]: "), done.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "serving" not in done.stderr


def test_an_uninitialised_ledger_is_refused(cli: Any) -> None:
    done = cli("serve", "--port", str(_free_port()), expect=5)
    assert "error[store_not_initialised]" in done.stderr
    assert "serving" not in done.stderr


@pytest.mark.parametrize("host", ["0.0.0.0"])
def test_listening_beyond_loopback_says_so(cli: Any, script: Any, host: str) -> None:
    cli("init")
    port = _free_port()
    server = _serve(cli, script, "--host", host, "--port", str(port))
    try:
        _get(f"http://127.0.0.1:{port}/api/head")
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert f"warning: listening on {host}, not loopback" in err
