"""Start-up: `serve`, `worker` and the admin CLI check the schema first; /readyz tells why not.

On an unmigrated (or out-of-date) database each command exits 1 with one line naming
`privq migrate` — no traceback — instead of serving 500s or crashing. The embedded
SQLite default migrates itself. `/healthz` is liveness only; `/readyz` answers 503 with
the reason until the database is reachable and current.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from conftest import ADMIN_KEY, bearer
from fastapi.testclient import TestClient

from app.api import create_app
from app.config import Settings
from app.db import Database
from app.migrations import alembic_config, head_revision, upgrade_to_head

ROOT = Path(__file__).resolve().parents[2]


def run_privq(*args: str, database_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "PRIVQ_DATABASE_URL": database_url,
            "PRIVQ_ADMIN_KEY": ADMIN_KEY,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_refused_with_one_line(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("privq: ") and fragment in lines[0]
    assert "privq migrate" in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--port", "8459"),
        ("worker",),
        ("admin", "create-tenant", "team"),
        ("tenants", "list"),
        ("ledger",),
    ],
)
def test_an_unmigrated_database_is_a_one_line_error(
    empty_database_url: str, backend: str, args: tuple[str, ...]
) -> None:
    # PostgreSQL is never migrated by default; SQLite is, unless told not to.
    env = {"PRIVQ_AUTO_MIGRATE": "false"} if backend == "sqlite" else {}
    result = run_privq(*args, database_url=empty_database_url, **env)
    assert_refused_with_one_line(result, "has no privq schema")


def test_an_out_of_date_schema_names_both_revisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0002")
    result = run_privq("worker", database_url=url, PRIVQ_AUTO_MIGRATE="false")
    assert_refused_with_one_line(
        result, f"is at revision 0002; this privq needs revision {head_revision()}"
    )


def test_an_unreachable_database_is_a_one_line_error_for_the_admin_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'no-such-dir' / 'privq.db'}"
    result = run_privq("admin", "create-tenant", "team", database_url=url)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("privq: cannot reach the database")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_embedded_sqlite_default_migrates_itself(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = run_privq("admin", "create-tenant", "team", database_url=url)
    assert result.returncode == 0, result.stderr
    assert "api_key" in result.stdout


def test_readyz_reports_why_until_the_database_is_current(
    empty_database_url: str, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=empty_database_url,
        admin_key=ADMIN_KEY,
        env="test",
        workers_in_process=0,
        auto_migrate=False,
    )
    database = Database(empty_database_url)
    with TestClient(create_app(settings, database=database)) as client:
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json()["error"]["code"] == "schema_not_current"
        assert "privq migrate" in not_ready.json()["error"]["message"]
        assert client.get("/healthz").json() == {"status": "ok"}
        upgrade_to_head(empty_database_url)
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {
            "status": "ready",
            "database": "ok",
            "schema_revision": head_revision(),
        }
        assert client.get("/v1/tenants", headers=bearer(ADMIN_KEY)).status_code == 200

    unreachable = Database(f"sqlite:///{tmp_path / 'no-such-dir' / 'privq.db'}")
    broken = settings.model_copy(update={"database_url": unreachable.url})
    with TestClient(create_app(broken, database=unreachable)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
        assert response.headers["Retry-After"]
        assert client.get("/healthz").status_code == 200  # liveness: the process answers
        # Requests that need the database are 503 too, not 500.
        tenants = client.get("/v1/tenants", headers=bearer(ADMIN_KEY))
        assert tenants.status_code == 503, tenants.text
