"""While PostgreSQL is unreachable every request that needs it is a 503
`database_unavailable` with `Retry-After` — never a 500 — and the service recovers by
itself when the database is back.

The API reaches PostgreSQL through a TCP relay the test controls: closing it drops every
connection the service holds (as a server restart does) and refuses new ones; opening it
again brings the database back.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import ADMIN_KEY, TINY_CSV, TINY_SCHEMA, bearer, unique_name
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.engine import make_url

from app.api import create_app
from app.api.errors import is_database_unavailable
from app.config import Settings


class Relay:
    """Forwards 127.0.0.1:port to the database; `close` cuts everything, `open` relays again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def drop_connections(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for end in sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        if self._listener is not None:
            # shutdown wakes the thread blocked in accept(); close alone would not, and
            # the socket would go on listening.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        self.drop_connections()


@pytest.fixture(scope="module")
def relayed(backend: str, database_url: str) -> Iterator[tuple[Relay, TestClient]]:
    if backend != "postgresql":
        pytest.skip("a database that goes away: PostgreSQL (SQLite is a local file)")
    url = make_url(database_url)
    relay = Relay((url.host or "127.0.0.1", url.port or 5432))
    relay.open()
    proxied = url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    settings = Settings(
        database_url=proxied,
        admin_key=ADMIN_KEY,
        workers_in_process=0,
        auto_migrate=False,
        database_pool_timeout_seconds=2,
    )
    try:
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            yield relay, client
    finally:
        relay.close()


def _requests(client: TestClient, tenant_key: str, dataset_id: str) -> list[Response]:
    """One of each kind: admin read, tenant read (its own key look-up), tenant write."""
    tenant = bearer(tenant_key)
    answers = [
        client.get("/v1/tenants", headers=bearer(ADMIN_KEY)),
        client.get(f"/v1/datasets/{dataset_id}", headers=tenant),
        client.get(f"/v1/datasets/{dataset_id}/budget", headers=tenant),
        client.get(f"/v1/datasets/{dataset_id}/marginals?attrs=sex", headers=tenant),
        client.post(
            f"/v1/datasets/{dataset_id}/measurements",
            json={"marginals": [["sex"]], "rho": 0.01},
            headers=tenant,
        ),
    ]
    return answers


def test_an_unreachable_database_is_a_503_and_the_service_recovers(relayed, caplog) -> None:
    relay, client = relayed
    admin = bearer(ADMIN_KEY)
    tenant = client.post("/v1/tenants", json={"name": unique_name("t")}, headers=admin).json()
    dataset = client.post(
        "/v1/datasets",
        data={"name": unique_name("ds"), "schema": json.dumps(TINY_SCHEMA)},
        files={"file": ("data.csv", TINY_CSV.encode(), "text/csv")},
        headers=admin,
    ).json()
    client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": tenant["id"], "rho": 1},
        headers=admin,
    )

    relay.close()  # the server goes away: held connections drop, new ones are refused
    for _ in range(2):  # the held connections first, then fresh ones
        for response in _requests(client, tenant["api_key"], dataset["id"]):
            assert response.status_code == 503, (response.request.url, response.text)
            assert response.json()["error"]["code"] == "database_unavailable"
            assert int(response.headers["Retry-After"]) > 0
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503

    relay.open()  # back: the next requests succeed with no restart of the service
    deadline = time.monotonic() + 30
    while True:
        answers = _requests(client, tenant["api_key"], dataset["id"])
        statuses = [(r.request.url.path, r.status_code) for r in answers]
        codes = [status for _, status in statuses]
        assert 500 not in codes, statuses
        if all(status < 500 for status in codes):
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(0.5)
    assert codes[:3] == [200, 200, 200], statuses
    assert codes[4] == 202, statuses
    # Answered where it was raised, not by the last-resort handler: the request log (and
    # the metrics) say 503 too, and nothing was logged as an unhandled error.
    logged = [getattr(r, "status", None) for r in caplog.records if r.name == "privq.request"]
    assert 503 in logged and 500 not in logged
    assert not [r for r in caplog.records if r.getMessage() == "unhandled error"]


def test_connections_dropped_mid_traffic_are_never_a_500(relayed) -> None:
    relay, client = relayed
    admin = bearer(ADMIN_KEY)
    for _ in range(5):
        relay.drop_connections()  # as pg_terminate_backend or a restart does
        for _ in range(4):
            response = client.get("/v1/tenants", headers=admin)
            assert response.status_code in (200, 503), response.text
    assert client.get("/v1/tenants", headers=admin).status_code == 200


def test_what_counts_as_the_database_being_unavailable() -> None:
    import psycopg
    from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError

    assert is_database_unavailable(OperationalError("SELECT 1", {}, Exception("refused")))
    assert is_database_unavailable(InterfaceError("SELECT 1", {}, Exception("closed")))
    assert is_database_unavailable(psycopg.OperationalError("server closed the connection"))
    dropped = DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True)
    assert is_database_unavailable(dropped)
    try:
        try:
            raise psycopg.InterfaceError("the connection is closed")
        except psycopg.InterfaceError as error:
            raise RuntimeError("while answering") from error
    except RuntimeError as wrapped:
        assert is_database_unavailable(wrapped)
    assert is_database_unavailable(ExceptionGroup("tasks", [InterfaceError("x", {}, None)]))
    assert not is_database_unavailable(IntegrityError("INSERT", {}, Exception("duplicate")))
    assert not is_database_unavailable(ValueError("a bug"))
