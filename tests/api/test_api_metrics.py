"""`/metrics`: who may read it, what it names, and worker metrics from other processes."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from conftest import ADMIN_HEADERS, ADMIN_KEY
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app import metrics
from app.api import create_app
from app.db import Database, Job
from app.metrics_server import start_metrics_server
from app.worker import Worker

REPO = Path(__file__).resolve().parents[2]


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels`."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_metrics_need_the_admin_key_unless_public(client, api, settings, database) -> None:
    tenant = api.create_tenant()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    refused = client.get("/metrics", headers=tenant["headers"])
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    allowed = client.get("/metrics", headers=ADMIN_HEADERS)
    assert allowed.status_code == 200 and "privq_http_requests_total" in allowed.text

    public = settings.model_copy(update={"metrics_public": True})
    with TestClient(create_app(public, database=database)) as open_client:
        response = open_client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")


def test_metric_names_follow_prometheus_conventions(client, api, database, settings) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    dataset_id = dataset["id"]
    accepted = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": [["sex"], ["age"], ["sex", "age"]], "rho": 0.3},
        headers=tenant["headers"],
    )
    assert accepted.status_code == 202, accepted.text
    queued = client.get("/metrics", headers=ADMIN_HEADERS).text
    assert sample_value(queued, "privq_jobs", status="queued") >= 1
    assert sample_value(queued, "privq_job_queue_oldest_age_seconds") >= 0
    assert sample_value(queued, "privq_rho_charged_total", dataset_id=dataset_id) == 0.3

    # A job that fails before any noise is drawn is refunded: a refund by dataset.
    doomed = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    with database.unit_of_work() as session:
        job = session.get(Job, doomed.json()["job_id"])
        assert job is not None
        job.params = {**job.params, "marginals": [["no-such-attribute"]]}

    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    text = client.get("/metrics", headers=ADMIN_HEADERS).text
    assert sample_value(text, "privq_jobs", status="queued") == 0
    assert sample_value(text, "privq_jobs", status="running") == 0
    assert (
        sample_value(text, "privq_job_duration_seconds_count", kind="measure", status="succeeded")
        >= 1
    )
    assert sample_value(text, "privq_job_duration_seconds_count", status="failed") >= 1
    assert sample_value(text, "privq_job_queue_wait_seconds_count", kind="measure") >= 2
    assert sample_value(text, "privq_fit_duration_seconds_count") >= 1
    assert sample_value(text, "privq_fit_iterations_count") >= 1
    assert sample_value(text, "privq_measurements_total", dataset_id=dataset_id) == 3
    assert sample_value(text, "privq_rho_refunded_total", dataset_id=dataset_id) == 0.1
    # sex (2) × age (5 bins) is the one clique of the model: 10 cells.
    assert sample_value(text, "privq_model_cells", dataset_id=dataset_id) == 10

    parsed = families(text)
    assert all(name.startswith("privq_") for name in parsed)
    for name, family in parsed.items():
        kind = family.type  # type: ignore[attr-defined]
        if kind == "counter":
            assert all(
                s.name.endswith(("_total", "_created"))
                for s in family.samples  # type: ignore[attr-defined]
            ), name
        else:
            assert not name.endswith("_total"), name
        if "duration" in name or "wait" in name or "age" in name:
            assert name.endswith("_seconds"), name


def test_server_errors_are_counted_by_route(settings, database) -> None:
    app = create_app(settings, database=database)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("deliberate")

    with TestClient(app, raise_server_exceptions=False) as test_client:
        before = sample_value(
            test_client.get("/metrics", headers=ADMIN_HEADERS).text,
            "privq_http_server_errors_total",
            route="/boom",
        )
        assert test_client.get("/boom").status_code == 500
        after = test_client.get("/metrics", headers=ADMIN_HEADERS).text
    assert sample_value(after, "privq_http_server_errors_total", route="/boom") == before + 1


def test_metrics_of_worker_child_processes_are_merged(tmp_path) -> None:
    # A process started with the multiprocess directory (as `privq serve` starts its
    # embedded workers) records a fit; this process's exposition adds it to its own.
    directory = tmp_path / "worker-metrics"
    directory.mkdir()
    before = sample_value(metrics.render_latest().decode(), "privq_fit_iterations_sum")
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from app import metrics; metrics.observe_fit('admm', 0.5, 40); "
            "metrics.observe_job_finished('measure', 'succeeded', 2.0)",
        ],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)},
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    assert child.returncode == 0
    metrics.observe_fit("admm", 0.25, 2)
    metrics.add_child_directory(str(directory))
    try:
        text = metrics.render_latest().decode()
    finally:
        metrics.remove_child_directory(str(directory))
    assert sample_value(text, "privq_fit_iterations_sum") == before + 42
    assert sample_value(text, "privq_job_duration_seconds_sum", kind="measure") >= 2.0
    # Each family is exposed once, however many processes contributed to it.
    assert text.count("# TYPE privq_fit_iterations histogram") == 1


def test_standalone_worker_serves_its_metrics_behind_the_admin_key(settings) -> None:
    database = Database(settings.database_url)
    server, stop = start_metrics_server(settings, database, port=0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        try:
            urllib.request.urlopen(url, timeout=5)
            raise AssertionError("served without a key")
        except urllib.error.HTTPError as error:
            assert error.code == 401
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read().decode()
        assert "privq_fit_duration_seconds" in body
    finally:
        stop()
        database.dispose()
