"""Shared fixtures: a migrated database on SQLite and PostgreSQL, an API client, helpers.

Backends: every fixture that depends on `database_url` runs once per backend —
SQLite (a temporary file) and PostgreSQL (from `PRIVQ_TEST_DATABASE_URL`; skipped
when it is unset, as on a laptop without PostgreSQL; CI sets it). Each test module
gets a fresh database: a new SQLite file, or a new PostgreSQL schema (dropped
afterwards), so runs are isolated from each other and repeatable, even when several
test runs share one PostgreSQL database.

Fixtures (module scope unless noted):
- `database_url` — a freshly migrated database's URL (param ids "sqlite", "postgresql").
- `database` — `app.db.Database` on it.
- `session` (function) — a read-write session, rolled back and closed after the test.
- `settings` — `Settings` for that database with admin key `ADMIN_KEY`, no in-process
  workers and no auto-migration.
- `client` — a `TestClient` of `create_app(settings, database=database)` (lifespan run).
- `api` — `ApiHelper` around the client: create tenants, upload datasets, grant ρ.
- `seed` — `SeedHelper`: the same objects written through the services directly.

Every test runs with one BLAS thread, as privq's own processes do (app/cli.py): small
dense operations (L-BFGS-B's in the CGM E-step above all) were 18× slower with BLAS
threads spinning on a busy 2-core host. The CLI's environment variables only act before
numpy is loaded, so the limit is set at run time (threadpoolctl).
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from threadpoolctl import threadpool_limits

from app.config import Settings, normalise_database_url
from app.db import Database, Dataset, Grant, Job, Tenant
from app.migrations import upgrade_to_head

ADMIN_KEY = "test-admin-key-" + "x" * 32
POSTGRES_ENV = "PRIVQ_TEST_DATABASE_URL"
# Everything the tests read lives in tests/data (a slice of UCI Adult; see its README).
DATA_DIR = Path(__file__).resolve().parent / "data"

requires_postgres = pytest.mark.skipif(
    not os.environ.get(POSTGRES_ENV), reason=f"{POSTGRES_ENV} is not set"
)
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=requires_postgres),
]


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def with_search_path(url: str, schema: str) -> str:
    """The URL with libpq `options` making `schema` the only schema on the search path."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def empty_database_url(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL to an empty database (no tables), removed after the module."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'privq.db'}"
        return
    server_url = normalise_database_url(os.environ[POSTGRES_ENV])
    schema = f"privq_test_{uuid.uuid4().hex[:12]}"
    admin_engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield with_search_path(server_url, schema)
    finally:
        with admin_engine.connect() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin_engine.dispose()


@pytest.fixture(scope="module")
def database_url(empty_database_url: str) -> str:
    upgrade_to_head(empty_database_url)
    return empty_database_url


@pytest.fixture(scope="module")
def database(database_url: str) -> Iterator[Database]:
    # Enough pooled connections for the concurrency tests' threads to run in parallel.
    extra = {} if database_url.startswith("sqlite") else {"pool_size": 20, "max_overflow": 50}
    db = Database(database_url, **extra)
    yield db
    db.dispose()


@pytest.fixture
def session(database: Database) -> Iterator[Session]:
    with database.session() as db_session:
        try:
            yield db_session
        finally:
            db_session.rollback()


@pytest.fixture(scope="module")
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        admin_key=ADMIN_KEY,
        env="test",
        workers_in_process=0,
        auto_migrate=False,
    )


@pytest.fixture(scope="module")
def client(settings: Settings, database: Database) -> Iterator[TestClient]:
    from app.api import create_app

    with TestClient(create_app(settings, database=database)) as test_client:
        yield test_client


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


ADMIN_HEADERS = bearer(ADMIN_KEY)

# A tiny dataset in the schema's original values, and its schema.
TINY_SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
    ]
}
TINY_CSV = "sex,age\nF,23\nM,41\nF,67\nM,17\nF,30\n"


def adult_slice(rows: int) -> bytes:
    """The header and first `rows` records of tests/data/adult.csv (at most 6,000)."""
    lines = (DATA_DIR / "adult.csv").read_text().splitlines()
    if rows + 1 > len(lines):
        raise ValueError(f"tests/data/adult.csv has {len(lines) - 1} records, not {rows}")
    lines = lines[: rows + 1]
    return ("\n".join(lines) + "\n").encode()


def adult_domain() -> dict[str, int]:
    return json.loads((DATA_DIR / "adult-domain.json").read_text())


def job_row(database: Database, job_id: str) -> Job:
    """The job as stored now, detached from its session."""
    with database.read_only() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


class ApiHelper:
    """Shortcuts for the admin-side setup most API tests need."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.admin = ADMIN_HEADERS

    def create_tenant(self, name: str | None = None) -> dict[str, Any]:
        response = self.client.post(
            "/v1/tenants", json={"name": name or unique_name("tenant")}, headers=self.admin
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        body["headers"] = bearer(body["api_key"])
        return body

    def upload_dataset(
        self,
        csv: str | bytes = TINY_CSV,
        schema: dict[str, Any] | None = None,
        *,
        name: str | None = None,
        rho_total: str | None = None,
        expect: int = 201,
    ) -> dict[str, Any]:
        data = {"schema": json.dumps(schema or TINY_SCHEMA), "name": name or unique_name("ds")}
        if rho_total is not None:
            data["rho_total"] = rho_total
        content = csv.encode() if isinstance(csv, str) else csv
        response = self.client.post(
            "/v1/datasets",
            data=data,
            files={"file": ("data.csv", io.BytesIO(content), "text/csv")},
            headers=self.admin,
        )
        assert response.status_code == expect, response.text
        return response.json()  # type: ignore[no-any-return]

    def grant(self, dataset_id: str, tenant_id: str, rho: float | str) -> dict[str, Any]:
        response = self.client.post(
            f"/v1/datasets/{dataset_id}/grants",
            json={"tenant_id": tenant_id, "rho": rho},
            headers=self.admin,
        )
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    def tenant_with_grant(self, rho: float | str = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
        """A new tenant holding a grant of `rho` on a new tiny dataset: (tenant, dataset)."""
        tenant = self.create_tenant()
        dataset = self.upload_dataset()
        self.grant(dataset["id"], tenant["id"], rho)
        return tenant, dataset


@pytest.fixture(scope="module")
def api(client: TestClient) -> ApiHelper:
    return ApiHelper(client)


class SeedHelper:
    """Rows written through the ORM, committed, for service-level tests.

    Datasets made here have a schema but no stored columns (no CSV is parsed).
    """

    def __init__(self, database: Database) -> None:
        self.database = database

    def tenant(self) -> Tenant:
        from app.services.tenants import create_tenant

        with self.database.unit_of_work() as session:
            tenant, _row, _key = create_tenant(session, name=unique_name("tenant"))
        return tenant

    def dataset(self, *, rows: int = 10, rho_total_units: int | None = None) -> Dataset:
        with self.database.unit_of_work() as session:
            dataset = Dataset(
                name=unique_name("ds"),
                rows=rows,
                schema_json={"attributes": []},
                rho_total_units=rho_total_units,
            )
            session.add(dataset)
        return dataset

    def grant(self, *, rho_limit_units: int) -> Grant:
        """A new tenant with a grant of `rho_limit_units` on a new dataset."""
        tenant, dataset = self.tenant(), self.dataset()
        with self.database.unit_of_work() as session:
            grant = Grant(
                tenant_id=tenant.id, dataset_id=dataset.id, rho_limit_units=rho_limit_units
            )
            session.add(grant)
        return grant


@pytest.fixture(scope="module")
def seed(database: Database) -> SeedHelper:
    return SeedHelper(database)
