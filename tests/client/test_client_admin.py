"""The curator's client against a real `privq serve` (SQLite, embedded worker).

Every `AdminClient` method runs here: tenants (listed across pages, detail, disable and
enable, keys added and revoked), uploads from a path, file objects and a DataFrame,
grants (create, list, change, revoke), budgets, the ledger, jobs, purging records,
deleting a dataset, health and metrics. The admin routes are the same code on both
databases; `test_client_analyst.py` runs the client on PostgreSQL too.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ADMIN_KEY, unique_name
from privq_service import SCHEMA, Service, running_service, table

from privq_client import AdminClient, ApiError, Client


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("service")
    url = f"sqlite:///{folder / 'privq.db'}"
    with running_service("sqlite", url, folder, ADMIN_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def admin(service: Service) -> Iterator[AdminClient]:
    with AdminClient(service.url, service.admin_key) as client:
        yield client


@pytest.fixture(scope="module")
def dataset(admin: AdminClient) -> dict[str, Any]:
    return admin.upload_dataset(unique_name("people"), table(), SCHEMA, rho_total=1.5)


def tenant_client(service: Service, tenant: dict[str, Any]) -> Client:
    return Client(service.url, tenant["api_key"])


def counting_admin(service: Service, requests: list[httpx.Request]) -> AdminClient:
    http = httpx.Client(event_hooks={"request": [requests.append]})
    return AdminClient(service.url, service.admin_key, http_client=http)


def test_tenants_are_listed_across_pages(admin: AdminClient, service: Service) -> None:
    made = [admin.create_tenant(unique_name("paged"))["id"] for _ in range(5)]
    requests: list[httpx.Request] = []
    listed = counting_admin(service, requests).tenants(page_size=2)
    assert [t["id"] for t in listed] == [t["id"] for t in admin.tenants()]
    assert set(made) <= {t["id"] for t in listed}
    assert len(requests) == math.ceil(len(listed) / 2) and len(requests) >= 3
    assert "api_key" not in listed[0]


def test_a_disabled_tenant_is_refused_until_enabled(
    admin: AdminClient, service: Service, dataset: dict[str, Any]
) -> None:
    tenant = admin.create_tenant(unique_name("sometimes"))
    admin.grant(dataset["id"], tenant["id"], 0.1)
    detail = admin.tenant(tenant["id"])
    assert [key["key_prefix"] for key in detail["keys"]] == [tenant["key_prefix"]]
    assert [grant["dataset_id"] for grant in detail["grants"]] == [dataset["id"]]
    analyst = tenant_client(service, tenant)
    assert admin.disable_tenant(tenant["id"])["disabled"] is True
    with pytest.raises(ApiError) as refused:
        analyst.datasets()
    assert (refused.value.status, refused.value.code) == (401, "tenant_disabled")
    assert admin.enable_tenant(tenant["id"])["disabled"] is False
    assert [d["id"] for d in analyst.datasets()] == [dataset["id"]]


def test_a_key_is_rotated_by_adding_one_and_revoking_the_old(
    admin: AdminClient, service: Service
) -> None:
    tenant = admin.create_tenant(unique_name("rotating"))
    new = admin.add_key(tenant["id"])
    assert new["api_key"] != tenant["api_key"]
    old_client, new_client = tenant_client(service, tenant), tenant_client(service, new)
    assert old_client.datasets() == new_client.datasets() == []
    admin.revoke_key(tenant["id"], tenant["key_id"])
    with pytest.raises(ApiError) as revoked:
        old_client.datasets()
    assert (revoked.value.status, revoked.value.code) == (401, "key_revoked")
    assert new_client.datasets() == []
    keys = {key["id"]: key["active"] for key in admin.tenant(tenant["id"])["keys"]}
    assert keys == {tenant["key_id"]: False, new["id"]: True}


def test_uploads_from_a_path_file_objects_and_a_data_frame(
    admin: AdminClient, service: Service, dataset: dict[str, Any], tmp_path: Path
) -> None:
    rows = len(table())
    assert dataset["rows"] == rows and dataset["rho_total"] == pytest.approx(1.5)
    csv_text = table().to_csv(index=False)
    csv_path, schema_path = tmp_path / "people.csv", tmp_path / "schema.json"
    csv_path.write_text(csv_text)
    schema_path.write_text(json.dumps(SCHEMA))
    from_path = admin.upload_dataset(unique_name("path"), csv_path, schema_path)
    from_bytes = admin.upload_dataset(
        unique_name("bytes"), io.BytesIO(csv_text.encode()), json.dumps(SCHEMA)
    )
    with open(csv_path, encoding="utf-8") as text_file:
        from_text = admin.upload_dataset(unique_name("text"), text_file, SCHEMA)
    for uploaded in (from_path, from_bytes, from_text):
        assert uploaded["rows"] == rows
        assert admin.dataset(uploaded["id"])["attributes"] == dataset["attributes"]
    assert "rho_total" not in from_path
    # A value outside the schema refuses the whole upload, and stores nothing.
    before = len(admin.datasets())
    bad = csv_text.replace("north", "moon", 1)
    with pytest.raises(ApiError) as refused:
        admin.upload_dataset(unique_name("bad"), io.StringIO(bad), SCHEMA)
    assert refused.value.status == 422 and "region" in refused.value.message
    requests: list[httpx.Request] = []
    everything = counting_admin(service, requests).datasets(page_size=1)
    assert len(everything) == before and len(requests) == before


def test_grants_are_made_listed_changed_and_revoked(
    admin: AdminClient, service: Service, dataset: dict[str, Any]
) -> None:
    tenant = admin.create_tenant(unique_name("granted"))
    grant = admin.grant(dataset["id"], tenant["id"], 0.2)
    assert grant["rho_limit"] == pytest.approx(0.2)
    with pytest.raises(ApiError) as twice:
        admin.grant(dataset["id"], tenant["id"], 0.1)
    assert twice.value.status == 409
    listed = {g["id"]: g for g in admin.grants(dataset["id"], page_size=1)}
    assert listed[grant["id"]]["tenant_id"] == tenant["id"]
    raised = admin.set_grant(dataset["id"], grant["id"], 0.3)
    assert raised["rho_limit_exact"] == "0.3"
    by_epsilon = admin.set_grant(dataset["id"], grant["id"], epsilon=3.0, delta=1e-6)
    assert 0.1 < by_epsilon["rho_limit"] < 0.3
    admin.set_grant(dataset["id"], grant["id"], rho=0.3)
    with pytest.raises(ApiError) as past_total:
        admin.set_grant(dataset["id"], grant["id"], 5)
    assert past_total.value.code == "rho_total_exceeded"

    analyst = tenant_client(service, tenant)
    analyst.measure(dataset["id"], [["sex"], ["age"]], rho=0.25).wait(timeout=120, progress=False)
    with pytest.raises(ApiError) as below:
        admin.set_grant(dataset["id"], grant["id"], 0.1)
    assert (below.value.status, below.value.code) == (409, "rho_below_spent")
    budget = admin.budget(dataset["id"], tenant["id"], delta=1e-7)
    assert budget["rho_spent"] == pytest.approx(0.25) and budget["delta"] == pytest.approx(1e-7)

    admin.revoke_grant(dataset["id"], grant["id"])
    with pytest.raises(ApiError) as gone:
        analyst.dataset(dataset["id"])
    assert gone.value.status == 404
    lines = admin.ledger(tenant_id=tenant["id"])
    assert [line["rho"] for line in lines] == [pytest.approx(0.25)]
    revoked = {g["id"]: g["revoked_at"] for g in admin.grants(dataset["id"])}
    assert revoked[grant["id"]] is not None


def test_the_ledger_and_jobs_of_every_tenant(
    admin: AdminClient, service: Service, dataset: dict[str, Any]
) -> None:
    tenants = [admin.create_tenant(unique_name("spender")) for _ in range(2)]
    jobs = []
    admin.grant(dataset["id"], tenants[0]["id"], 0.1)
    by_epsilon = admin.grant(dataset["id"], tenants[1]["id"], epsilon=2.0, delta=1e-6)
    assert 0.05 < by_epsilon["rho_limit"] < 0.1  # ε = 2 at δ = 1e-6 is ρ ≈ 0.09
    for tenant in tenants:
        job = tenant_client(service, tenant).measure(dataset["id"], [["grade"]], rho=0.05)
        jobs.append(job.wait(timeout=120, progress=False))
    whole = admin.ledger(dataset_id=dataset["id"])
    assert admin.ledger(dataset_id=dataset["id"], page_size=1) == whole
    lazily = admin.paginate("/v1/ledger", {"dataset_id": dataset["id"]}, page_size=1)
    assert next(lazily) == whole[0] and list(lazily) == whole[1:]
    assert {job.id for job in jobs} <= {line["job_id"] for line in whole}
    assert {line["tenant_id"] for line in admin.ledger(tenant_id=tenants[0]["id"])} == {
        tenants[0]["id"]
    }
    listed = admin.jobs(dataset_id=dataset["id"], kind="measure", status="succeeded")
    assert {job.id for job in jobs} <= {job["id"] for job in listed}
    assert admin.job(jobs[0].id).model_version == jobs[0].model_version
    with pytest.raises(ApiError) as finished:
        admin.cancel_job(jobs[1].id)
    assert finished.value.code == "job_finished"


def test_purged_records_keep_the_model_and_a_deleted_dataset_keeps_its_ledger(
    admin: AdminClient, service: Service
) -> None:
    uploaded = admin.upload_dataset(unique_name("retired"), table(rows=120, seed=3), SCHEMA)
    tenant = admin.create_tenant(unique_name("retiree"))
    admin.grant(uploaded["id"], tenant["id"], 0.5)
    analyst = tenant_client(service, tenant)
    analyst.measure(uploaded["id"], [["sex", "grade"]], rho=0.1).wait(timeout=120, progress=False)
    before = analyst.marginal(uploaded["id"], ["sex", "grade"])

    admin.purge_records(uploaded["id"])
    assert admin.dataset(uploaded["id"])["records_purged_at"] is not None
    with pytest.raises(ApiError) as purged:
        analyst.measure(uploaded["id"], [["sex"]], rho=0.1)
    assert (purged.value.status, purged.value.code) == (409, "records_purged")
    after = analyst.marginal(uploaded["id"], ["sex", "grade"])
    assert after["count"].tolist() == before["count"].tolist()

    admin.delete_dataset(uploaded["id"])
    with pytest.raises(ApiError) as deleted:
        admin.dataset(uploaded["id"])
    assert deleted.value.status == 404
    assert [line["rho"] for line in admin.ledger(dataset_id=uploaded["id"])] == [pytest.approx(0.1)]


def test_changing_the_estimator_refits_the_model_for_free(
    admin: AdminClient, service: Service, dataset: dict[str, Any]
) -> None:
    tenant = admin.create_tenant(unique_name("estimating"))
    admin.grant(dataset["id"], tenant["id"], 0.1)
    analyst = tenant_client(service, tenant)
    job = analyst.measure(dataset["id"], [["region"]], noise="laplace", scale=20)
    job.wait(timeout=120, progress=False)
    spent = admin.budget(dataset["id"], tenant["id"])["rho_spent"]
    changed = admin.set_estimator(dataset["id"], "cgm-em")
    assert changed["estimator"] == "cgm-em" and changed["refit_job_id"]
    refit = admin.job(changed["refit_job_id"]).wait(timeout=120, progress=False)
    model = admin.model(dataset["id"])
    assert model["estimator"] == "cgm-em" and model["version"] == refit.model_version
    assert admin.dataset(dataset["id"])["estimator"] == "cgm-em"
    assert admin.budget(dataset["id"], tenant["id"])["rho_spent"] == spent
    with pytest.raises(ApiError) as unknown:
        admin.set_estimator(dataset["id"], "median")  # type: ignore[arg-type]
    assert (unknown.value.status, unknown.value.code) == (422, "invalid_request")


def test_health_readiness_and_metrics(admin: AdminClient) -> None:
    assert admin.health()["status"] == "ok"
    assert admin.ready()["status"] == "ready"
    assert "privq_http_requests_total" in admin.metrics()
