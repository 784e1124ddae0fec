"""The image's health check (deploy/healthcheck.py): the right probe for each role.

It runs against small local HTTP servers standing in for the API's /readyz and a
worker's metrics port; nothing here needs a container engine.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_healthcheck() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "privq_healthcheck", REPO / "deploy" / "healthcheck.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = load_healthcheck()


class Answers:
    """What the stand-in server answers, per path; and what it was asked."""

    def __init__(self) -> None:
        self.status: dict[str, int] = {}
        self.authorization: list[str | None] = []


@pytest.fixture
def server() -> Iterator[tuple[int, Answers]]:
    answers = Answers()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answers.authorization.append(self.headers.get("Authorization"))
            self.send_response(answers.status.get(self.path, 404))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_port, answers
    finally:
        httpd.shutdown()
        httpd.server_close()


def serve(port: int) -> list[str]:
    return ["/opt/privq/bin/python", "/opt/privq/bin/privq", "serve", "--port", str(port)]


def worker(port: int) -> list[str]:
    return ["python", "privq", "worker", "--metrics-port", str(port), "--metrics-host", "0.0.0.0"]


def test_the_role_is_read_from_the_command() -> None:
    assert healthcheck.role_of(serve(8000)) == "api"
    assert healthcheck.role_of(worker(9100)) == "worker"
    assert healthcheck.role_of(["privq", "migrate"]) == "migrate"
    assert healthcheck.role_of([]) == "api"  # the image's default command serves
    assert healthcheck.option(worker(9100), "--metrics-port") == "9100"
    assert healthcheck.option(["privq", "serve", "--port=8080"], "--port") == "8080"
    assert healthcheck.option(["privq", "worker"], "--metrics-port") is None


def test_the_api_is_healthy_only_when_readyz_answers_200(server: tuple[int, Answers]) -> None:
    port, answers = server
    answers.status["/readyz"] = 200
    assert healthcheck.check("api", serve(port)) == (True, "api: GET /readyz answered 200")
    answers.status["/readyz"] = 503  # the database is away: not ready
    healthy, reason = healthcheck.check("api", serve(port))
    assert not healthy and "503" in reason


def test_a_worker_is_healthy_while_its_metrics_server_answers(
    server: tuple[int, Answers], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, answers = server
    monkeypatch.setenv("PRIVQ_ADMIN_KEY", "k" * 40)
    answers.status["/metrics"] = 200
    assert healthcheck.check("worker", worker(port))[0]
    assert answers.authorization[-1] == "Bearer " + "k" * 40
    answers.status["/metrics"] = 401  # no admin key: the server still answers
    monkeypatch.delenv("PRIVQ_ADMIN_KEY")
    assert healthcheck.check("worker", worker(port))[0]
    assert answers.authorization[-1] is None
    answers.status["/metrics"] = 500
    assert not healthcheck.check("worker", worker(port))[0]


def test_nothing_listening_is_unhealthy_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_port  # bound, then closed: nothing listens there any more
    monkeypatch.setattr(healthcheck, "command_of_process_1", lambda: serve(port))
    assert healthcheck.main([]) == 1
    assert "api: no answer" in capsys.readouterr().out
    monkeypatch.setattr(healthcheck, "command_of_process_1", lambda: worker(port))
    assert healthcheck.main([]) == 1
    assert "worker: no answer" in capsys.readouterr().out


def test_a_worker_without_metrics_port_and_migrate_are_healthy_while_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(healthcheck, "command_of_process_1", lambda: ["privq", "worker"])
    assert healthcheck.main([]) == 0
    assert healthcheck.main(["migrate"]) == 0
