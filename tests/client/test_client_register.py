"""`AdminClient.register`: a Parquet source by reference, waited for (ready, or the
rejection raised) or not. The client talks to the app in process (`TestClient` as its
`http_client`); a worker thread runs the registration jobs with the local engine."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ADMIN_KEY, unique_name
from fastapi.testclient import TestClient
from source_fixtures import ROWS_PER_FILE, SCHEMA, write_lake, write_part

from app.config import Settings
from app.db import Database
from app.worker import Worker
from privq_client import AdminClient, ApiError, JobFailed


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_lake(tmp_path_factory.mktemp("lake"))


@pytest.fixture(scope="module")
def settings(database_url: str, lake: Path) -> Settings:
    return Settings(
        database_url=database_url,
        admin_key=ADMIN_KEY,
        env="test",
        workers_in_process=0,
        auto_migrate=False,
        source_roots=lake.as_uri(),
        worker_poll_seconds=0.02,
    )


@pytest.fixture(scope="module")
def worker(database: Database, settings: Settings) -> Iterator[None]:
    stop = threading.Event()
    running = Worker(database, settings, poll_seconds=0.02)
    thread = threading.Thread(target=running.run_forever, args=(stop,), daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def admin(client: TestClient, worker: None) -> AdminClient:
    return AdminClient("http://testserver", ADMIN_KEY, http_client=client)


def test_register_waits_until_the_dataset_is_ready(admin: AdminClient, lake: Path) -> None:
    dataset = admin.register(
        unique_name("visits"),
        SCHEMA,
        f"{lake.as_uri()}/visits/",
        privacy_unit={"column": "person_id", "max_rows": 2},
        rho_total=1.5,
        timeout=60,
    )
    assert dataset["status"] == "ready"
    assert dataset["rows"] == 2 * ROWS_PER_FILE
    assert dataset["source"] == {"format": "parquet", "uri": f"{lake.as_uri()}/visits"}
    assert dataset["privacy_unit"] == {"column": "person_id", "max_rows": 2}


def test_register_without_waiting_returns_the_job(admin: AdminClient, lake: Path) -> None:
    answer = admin.register(unique_name("visits"), SCHEMA, f"{lake.as_uri()}/visits", wait=False)
    assert answer["status"] == "registering" and answer["job_id"]
    assert admin.job(answer["job_id"]).wait(60, progress=False).status == "succeeded"
    assert admin.dataset(answer["id"])["status"] == "ready"


def test_a_rejected_source_raises_with_the_reason(admin: AdminClient, lake: Path) -> None:
    write_part(lake / "bad" / "part-0.parquet", rows=5, sex=["F", "M", "X", "F", "M"])
    with pytest.raises(JobFailed, match="'sex'") as failed:
        admin.register(unique_name("bad"), SCHEMA, f"{lake.as_uri()}/bad", timeout=60)
    dataset_id = failed.value.job.info["dataset_id"]
    assert admin.dataset(dataset_id)["status"] == "rejected"


def test_a_refused_uri_is_an_api_error(admin: AdminClient, tmp_path: Path) -> None:
    with pytest.raises(ApiError) as refused:
        admin.register("elsewhere", SCHEMA, tmp_path.as_uri())
    assert refused.value.status == 422 and refused.value.code == "source_not_allowed"
