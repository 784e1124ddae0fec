"""A step that reports nothing for seconds (one sparse factorisation, a long scan) still
leaves the job's progress fresh: the heartbeat rewrites the last report, its ETA counted
down, at least every KEEPALIVE_SECONDS."""

from __future__ import annotations

import time
from datetime import datetime
from itertools import pairwise
from typing import Any

import pytest
from conftest import ApiHelper
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job
from app.worker import Worker
from app.worker.heartbeat import KEEPALIVE_SECONDS
from app.worker.runner import STARTED_STAGE

SILENT_SECONDS = 3 * KEEPALIVE_SECONDS + 1
# The API's promise: a running job's progress is never older than this. The heartbeat
# wakes every KEEPALIVE_SECONDS / 2, so about 3 s is expected; the rest is slack for a
# busy machine.
MAX_GAP_SECONDS = 5.0


class Recording(Worker):
    """A worker that notes every progress write: when, and what was written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[float, dict[str, Any]]] = []

    def _write_progress(self, job_id: str, progress: dict[str, Any]) -> bool:
        held = super()._write_progress(job_id, progress)
        self.writes.append((time.monotonic(), dict(progress)))
        return held


@pytest.mark.parametrize("reports_first", [True, False], ids=["after-a-report", "from-the-claim"])
def test_a_silent_step_keeps_the_progress_fresh_and_the_eta_counting_down(
    reports_first: bool,
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Worker(database, settings, poll_seconds=0.01).run_until_idle()  # earlier tests' jobs
    dataset = api.upload_dataset(b"a,b\n0,1\n1,0\n1,1\n", {"a": 2, "b": 2})
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["a"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    real = Worker.run_measurement

    def silent_then_real(self: Worker, job: Job) -> dict[str, Any]:
        if reports_first:
            self.progress(job, {"stage": "counting", "eta_seconds": 100.0})
        started = time.monotonic()
        time.sleep(SILENT_SECONDS)  # nothing reported meanwhile
        self.silent = (started, time.monotonic())  # type: ignore[attr-defined]
        return real(self, job)

    monkeypatch.setattr(Worker, "run_measurement", silent_then_real)
    worker = Recording(database, settings, poll_seconds=0.01)
    worker.run_until_idle()
    started, ended = worker.silent  # type: ignore[attr-defined]

    during = [(at, p) for at, p in worker.writes if started <= at <= ended]
    assert len(during) >= 2, "the heartbeat rewrote nothing while the step was silent"
    times = [started] + [at for at, _ in during] + [ended]
    assert max(b - a for a, b in pairwise(times)) <= MAX_GAP_SECONDS
    # The same report, kept alive: its stage, an ETA counting down, a later updated_at;
    # before any report of the job's own, the stage it was claimed with.
    stage = "counting" if reports_first else STARTED_STAGE
    assert all(p["stage"] == stage for _, p in during)
    if reports_first:
        etas = [p["eta_seconds"] for _, p in during]
        assert all(b < a for a, b in pairwise(etas)) and etas[0] < 100.0
    stamps = [datetime.fromisoformat(p["updated_at"]) for _, p in during]
    assert all(b > a for a, b in pairwise(stamps))
    status = client.get(f"/v1/jobs/{response.json()['job_id']}", headers=tenant["headers"])
    assert status.json()["status"] == "succeeded"
