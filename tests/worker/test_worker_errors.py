"""The worker tells a refusal from a bug, and neither leaks a private value.

A `PrivqError` below 500 is the job's own problem: the job fails with its message. Any
other exception — a `ValueError` from deep inside numpy included — is a bug: its
traceback goes to the log, and the job's error (which the tenant reads) names only
the kind of failure and the stage, never the exception's text, which may quote
private values such as a row count; nor does the log line, whose traceback keeps its
frames but withholds the message of any exception that is not a `PrivqError`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, LedgerEntry
from app.errors import InvalidRequest
from app.logs import JsonFormatter
from app.services import gate as gate_service
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

SECRET_ROWS = "48842"


def measure(client: TestClient, api: ApiHelper) -> tuple[str, str]:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    return response.json()["job_id"], dataset["id"]


def net_units(database: Database, job_id: str) -> int:
    with database.read_only() as session:
        return sum(e.rho_units for e in session.query(LedgerEntry).filter_by(job_id=job_id))


def test_an_unexpected_error_is_logged_with_its_traceback_and_quoted_nowhere(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id, _dataset_id = measure(client, api)

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError(f"cannot reshape an array of {SECRET_ROWS} rows")

    monkeypatch.setattr(gate_service, "true_marginal", broken)
    with caplog.at_level(logging.INFO, logger="privq"):
        Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert job.error is not None
    assert job.error.startswith("internal error (ValueError) while measuring")
    assert SECRET_ROWS not in job.error
    failures = [r for r in caplog.records if r.getMessage() == "job failed on an internal error"]
    assert len(failures) == 1 and failures[0].exc_info is not None
    # What the log handler writes: the JSON line with its traceback, not just the message.
    lines = [JsonFormatter().format(r) for r in caplog.records]
    assert all(SECRET_ROWS not in line for line in lines)
    traceback = json.loads(JsonFormatter().format(failures[0]))["exc"]
    assert "Traceback (most recent call last)" in traceback
    assert "in broken" in traceback and "in run_measurement" in traceback
    assert traceback.endswith("ValueError: (message withheld: may quote data)")
    # It failed after the gate recorded its access to the records: that stays charged.
    assert net_units(database, job_id) == UNITS_PER_RHO // 10


def test_a_refusal_fails_the_job_with_its_own_message(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job_id, _dataset_id = measure(client, api)

    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise InvalidRequest("marginals[0] names an attribute the dataset no longer has")

    monkeypatch.setattr(gate_service, "true_marginal", refused)
    with caplog.at_level(logging.INFO, logger="privq"):
        Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert job.error == "marginals[0] names an attribute the dataset no longer has"
    assert not any(r.exc_info for r in caplog.records)
    assert net_units(database, job_id) == UNITS_PER_RHO // 10  # refused inside the gate
