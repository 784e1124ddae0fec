"""A real `privq serve` (SQLite, its embedded worker): it starts without a warning, keeps an
idle keep-alive connection open longer than common client pools keep theirs, and on
SIGTERM lets a request in flight finish before it exits (0), its worker stopped too."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import ADMIN_KEY

STARTUP_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_up(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, "privq serve exited at start"
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                connection.close()
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("privq serve did not come up")


def test_serve_starts_quietly_keeps_idle_connections_and_drains_on_sigterm(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PRIVQ_DATABASE_URL": f"sqlite:///{tmp_path}/serve.db",
        "PRIVQ_ADMIN_KEY": ADMIN_KEY,
        "PRIVQ_WORKER_POLL_SECONDS": "0.1",
    }
    process = subprocess.Popen(
        [sys.executable, "-W", "default", "-m", "app.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_up(port, process)
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}

        # Idle for longer than uvicorn's default 5 s keep-alive: still the same connection.
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        kept.request("GET", "/v1/tenants", headers=headers)
        assert kept.getresponse().read() is not None
        local = kept.sock.getsockname()
        time.sleep(7)
        kept.request("GET", "/v1/tenants", headers=headers)
        assert kept.getresponse().status == 200
        assert kept.sock.getsockname() == local  # not reopened: the server kept it
        kept.close()

        # A request in flight when SIGTERM arrives: its body is half sent.
        body = json.dumps({"name": "drained"}).encode()
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        raw.sendall(
            (
                f"POST /v1/tenants HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {ADMIN_KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            + body[:5]
        )
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        raw.sendall(body[5:])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = raw.recv(65536)
            if not chunk:
                break
            answer += chunk
        raw.close()
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]

        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    log = err.decode(errors="replace")
    # uvicorn re-raises the signal it handled once it has shut down (status 143 in a shell).
    assert process.returncode in (0, -signal.SIGTERM), log
    assert "Warning" not in log, log  # no DeprecationWarning (or any other) at start
    assert "Application shutdown complete" in log
    assert "worker stopped" in log  # the embedded worker stopped at once, not killed
