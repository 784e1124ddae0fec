"""The privq command: migrate, admin create-tenant, argument parsing of serve."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.orm import Session

from app.cli import build_parser, main
from app.config import get_settings
from app.db import ApiKey, Tenant


@pytest.fixture
def env_database(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/cli.db"
    monkeypatch.setenv("PRIVQ_DATABASE_URL", url)
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def test_migrate_creates_the_schema(env_database, capsys) -> None:
    assert main(["migrate"]) == 0
    assert "up to date" in capsys.readouterr().out
    engine = create_engine(env_database)
    try:
        assert {"tenants", "ledger_entries", "jobs", "alembic_version"} <= set(
            inspect(engine).get_table_names()
        )
    finally:
        engine.dispose()


def test_admin_create_tenant_prints_id_and_key(env_database, capsys) -> None:
    assert main(["migrate"]) == 0
    assert main(["admin", "create-tenant", "cli-team"]) == 0
    lines = dict(
        line.split(":", 1) for line in capsys.readouterr().out.splitlines() if ": " in line
    )
    tenant_id, api_key = lines["tenant_id"].strip(), lines["api_key"].strip()
    engine = create_engine(env_database)
    try:
        with Session(engine) as session:
            tenant = session.scalars(select(Tenant).where(Tenant.id == tenant_id)).one()
            key = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant_id)).one()
    finally:
        engine.dispose()
    assert tenant.name == "cli-team"
    assert key.key_hash == hashlib.sha256(api_key.encode()).hexdigest()
    # A second tenant with the same name is refused with a message, not a traceback.
    assert main(["admin", "create-tenant", "cli-team"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_serve_and_worker_arguments() -> None:
    args = build_parser().parse_args(["serve", "--port", "9000", "--workers-in-process", "2"])
    assert (args.host, args.port, args.workers_in_process) == ("127.0.0.1", 9000, 2)
    assert build_parser().parse_args(["serve"]).workers_in_process is None
    assert build_parser().parse_args(["worker"]).command == "worker"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["admin"])


def test_worker_metrics_bind_to_this_machine_unless_told_otherwise() -> None:
    from inspect import signature

    from app.metrics_server import start_metrics_server
    from app.worker import run_worker

    assert build_parser().parse_args(["worker"]).metrics_host == "127.0.0.1"
    assert signature(run_worker).parameters["metrics_host"].default == "127.0.0.1"
    assert signature(start_metrics_server).parameters["host"].default == "127.0.0.1"
    told = build_parser().parse_args(["worker", "--metrics-port", "9100", "--metrics-host", "::"])
    assert (told.metrics_port, told.metrics_host) == (9100, "::")


def test_invalid_configuration_is_reported(monkeypatch, capsys) -> None:
    monkeypatch.setenv("PRIVQ_ENV", "production")
    monkeypatch.delenv("PRIVQ_ADMIN_KEY", raising=False)
    get_settings.cache_clear()
    try:
        assert main(["migrate"]) == 2
    finally:
        get_settings.cache_clear()
    assert "PRIVQ_ADMIN_KEY" in capsys.readouterr().err


def test_serve_starts_the_embedded_workers_through_the_api_lifespan(
    env_database, monkeypatch
) -> None:
    from fastapi.testclient import TestClient

    events: list[object] = []

    class Workers:
        def signal(self) -> None:
            events.append("signalled")

        def __call__(self) -> None:
            events.append("stopped")

    def start_workers(count: int, _settings: object) -> Workers:
        events.append(count)
        return Workers()

    def run(server, *_args) -> None:
        config = server.config
        # Graceful shutdown and keep-alive come from the settings.
        assert config.timeout_graceful_shutdown == 30 and config.timeout_keep_alive == 75
        with TestClient(config.app):
            assert events == [2]  # started by the lifespan, before any request
            server.handle_exit(15, None)  # SIGTERM reaches the workers at once
            assert events == [2, "signalled"]

    monkeypatch.setattr("app.worker.start_embedded_workers", start_workers)
    monkeypatch.setattr("uvicorn.Server.run", run)
    assert main(["serve", "--workers-in-process", "2"]) == 0
    assert events == [2, "signalled", "stopped"]
