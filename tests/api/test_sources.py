"""Registering a dataset by reference over HTTP: `POST /v1/datasets` with a JSON body.

The source is a small Parquet folder generated under a temporary root that the
service's PRIVQ_SOURCE_ROOTS allows; the registration job scans it with the default
engine (`app.records.local.LocalEngine`), end to end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ADMIN_KEY, ApiHelper, unique_name
from fastapi.testclient import TestClient
from source_fixtures import ROWS_PER_FILE, SCHEMA, write_lake, write_part
from sqlalchemy import func, select

from app.config import Settings
from app.db import Database, Dataset, Job, LedgerEntry
from app.records.engine import Validation
from app.services import gate
from app.worker import Worker


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The allowed root: a hive-partitioned folder of two files with a _SUCCESS marker."""
    return write_lake(tmp_path_factory.mktemp("lake"))


@pytest.fixture(scope="module")
def settings(database_url: str, lake: Path) -> Settings:
    return Settings(
        database_url=database_url,
        admin_key=ADMIN_KEY,
        env="test",
        workers_in_process=0,
        auto_migrate=False,
        source_roots=f"{lake.as_uri()}/",
    )


def register(client: TestClient, uri: str, *, expect: int = 202, **extra: Any) -> dict[str, Any]:
    body = {
        "name": unique_name("visits"),
        "schema": SCHEMA,
        "source": {"format": "parquet", "uri": uri},
        **extra,
    }
    response = client.post("/v1/datasets", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == expect, response.text
    return response.json()  # type: ignore[no-any-return]


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def dataset_count(database: Database) -> int:
    with database.read_only() as session:
        return int(session.scalar(select(func.count()).select_from(Dataset)) or 0)


def stored(database: Database, dataset_id: str) -> Dataset:
    with database.read_only() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        session.expunge(dataset)
        return dataset


def job_of(client: TestClient, job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_registered_source_becomes_ready_with_its_rows_and_fingerprint(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    answer = register(
        client,
        f"{lake.as_uri()}/visits/",
        rho_total=2.5,
        privacy_unit={"column": "person_id", "max_rows": 2},
    )
    assert answer["status"] == "registering" and set(answer) == {"id", "name", "status", "job_id"}
    seen = client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()
    assert seen["status"] == "registering"
    assert seen["source"] == {"format": "parquet", "uri": f"{lake.as_uri()}/visits"}

    assert run_jobs(database, settings) == 1
    job = job_of(client, answer["job_id"])
    assert job["status"] == "succeeded" and job["kind"] == "register" and job["tenant_id"] is None
    seen = client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()
    assert seen["status"] == "ready"
    assert seen["rows"] == 2 * ROWS_PER_FILE
    assert seen["rho_total"] == 2.5
    assert seen["privacy_unit"] == {"column": "person_id", "max_rows": 2}
    assert "error" not in seen

    dataset = stored(database, answer["id"])
    paths = [f["path"] for f in (dataset.source_fingerprint or {})["files"]]
    assert [Path(p).relative_to(lake).as_posix() for p in paths] == [
        "visits/year=2024/part-0.parquet",
        "visits/year=2025/part-0.parquet",
    ]
    assert dataset.source_secret is not None and -(2**63) <= dataset.source_secret < 2**63
    # No row of the source is stored: no packed columns.
    with database.read_only() as session:
        from app.db import DatasetColumn

        assert not session.scalars(
            select(DatasetColumn).where(DatasetColumn.dataset_id == answer["id"])
        ).all()

    # A tenant sees the status, never the source, the rows or an error.
    tenant = api.create_tenant()
    api.grant(answer["id"], tenant["id"], 1.0)
    as_tenant = client.get(f"/v1/datasets/{answer['id']}", headers=tenant["headers"]).json()
    assert as_tenant["status"] == "ready"
    assert not {"source", "rows", "error"} & set(as_tenant)
    listed = client.get("/v1/datasets", headers=tenant["headers"]).json()
    assert [d["status"] for d in listed if d["id"] == answer["id"]] == ["ready"]


def test_the_upload_keeps_working_on_the_same_path(api: ApiHelper) -> None:
    uploaded = api.upload_dataset()
    assert uploaded["status"] == "ready" and uploaded["rows"] == 5 and "source" not in uploaded


def test_a_value_outside_the_schema_rejects_the_source_naming_the_column(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    ages = [20.0] * 9 + [150.0]
    write_part(lake / "bad-ages" / "part-0.parquet", rows=10, age=ages)
    answer = register(client, f"{lake.as_uri()}/bad-ages")
    run_jobs(database, settings)
    job = job_of(client, answer["job_id"])
    assert job["status"] == "failed" and "age" in job["error"]
    seen = client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()
    assert seen["status"] == "rejected"
    assert "'age'" in seen["error"]
    assert "150" in seen["error"]  # the curator sees examples
    # A tenant granted the dataset sees it rejected, but not why (values are quoted there).
    tenant = api.create_tenant()
    api.grant(answer["id"], tenant["id"], 1.0)
    as_tenant = client.get(f"/v1/datasets/{answer['id']}", headers=tenant["headers"]).json()
    assert as_tenant["status"] == "rejected" and "error" not in as_tenant
    refused = client.post(
        f"/v1/datasets/{answer['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "dataset_not_ready"


def test_a_source_without_the_unit_column_is_rejected(
    client: TestClient, database: Database, settings: Settings, lake: Path
) -> None:
    answer = register(
        client, f"{lake.as_uri()}/visits", privacy_unit={"column": "household", "max_rows": 1}
    )
    run_jobs(database, settings)
    seen = client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()
    assert seen["status"] == "rejected" and "household" in seen["error"]


def test_a_file_that_is_not_parquet_is_rejected_by_the_job(
    client: TestClient, database: Database, settings: Settings, lake: Path
) -> None:
    folder = lake / "not-parquet"
    write_part(folder / "part-0.parquet", rows=10)
    (folder / "part-1.parquet").write_text("sex,age\nF,20\n")
    answer = register(client, f"{lake.as_uri()}/not-parquet")
    run_jobs(database, settings)
    seen = client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()
    assert seen["status"] == "rejected"
    assert "part-1.parquet" in seen["error"] and "not a Parquet file" in seen["error"]
    assert job_of(client, answer["job_id"])["status"] == "failed"


def refused(client: TestClient, database: Database, uri: str, code: str, **extra: Any) -> str:
    """The request's 422 error message, after checking its code and that nothing was written."""
    before = dataset_count(database)
    body = register(client, uri, expect=422, **extra)
    assert body["error"]["code"] == code, body
    assert dataset_count(database) == before
    return str(body["error"]["message"])


def test_refusals_write_nothing(
    client: TestClient, database: Database, lake: Path, tmp_path: Path
) -> None:
    inside = f"{lake.as_uri()}/visits"
    outside = tmp_path / "elsewhere"
    write_part(outside / "part-0.parquet", rows=10)
    assert "outside the allowed roots" in refused(
        client, database, outside.as_uri(), "source_not_allowed"
    )
    assert "'..'" in refused(
        client, database, f"{lake.as_uri()}/visits/../../etc", "source_not_allowed"
    )
    assert "'..'" in refused(client, database, f"{lake.as_uri()}/%2e%2e/x", "source_not_allowed")
    # A sibling whose name starts like the root is not inside it.
    assert "outside" in refused(
        client, database, f"{lake.as_uri()}-sibling/x", "source_not_allowed"
    )
    refused(client, database, "http://example.org/visits.parquet", "source_not_allowed")
    refused(client, database, "visits/part-0.parquet", "source_not_allowed")
    assert "environment" in refused(
        client, database, f"{inside}?access_key=x&secret_key=y", "source_not_allowed"
    )
    assert "does not exist" in refused(
        client, database, f"{lake.as_uri()}/no-such-folder", "source_not_found"
    )
    (lake / "empty").mkdir(exist_ok=True)
    (lake / "empty" / "_SUCCESS").write_text("")
    assert "no data file" in refused(client, database, f"{lake.as_uri()}/empty", "source_not_found")
    # Bad request fields, each named.
    bad_format = client.post(
        "/v1/datasets",
        json={"name": "x", "schema": SCHEMA, "source": {"format": "csv", "uri": inside}},
        headers=ADMIN_HEADERS,
    )
    assert bad_format.status_code == 422 and "format" in bad_format.text
    assert "invalid schema" in refused(client, database, inside, "invalid_request", schema={})
    unit = refused(client, database, inside, "bad_privacy_unit", privacy_unit={"column": "sex"})
    assert "schema attribute" in unit
    rho = client.post(
        "/v1/datasets",
        json={
            "name": "x",
            "schema": SCHEMA,
            "source": {"format": "parquet", "uri": inside},
            "rho_total": -1,
        },
        headers=ADMIN_HEADERS,
    )
    assert rho.status_code == 422 and "rho_total" in rho.text


def test_a_link_out_of_the_root_is_refused(
    client: TestClient, database: Database, lake: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secret"
    write_part(outside / "part-0.parquet", rows=10)
    linked = lake / unique_name("linked")  # the lake is shared by both backends' runs
    linked.mkdir()
    os.symlink(outside, linked / "to-secret")
    # The link named directly, and a folder holding it.
    assert "link" in refused(client, database, f"{linked.as_uri()}/to-secret", "source_not_allowed")
    assert "link" in refused(client, database, linked.as_uri(), "source_not_allowed")


def test_only_tenants_with_an_admin_key_register(
    client: TestClient, api: ApiHelper, lake: Path
) -> None:
    tenant = api.create_tenant()
    response = client.post(
        "/v1/datasets",
        json={
            "name": "x",
            "schema": SCHEMA,
            "source": {"format": "parquet", "uri": f"{lake.as_uri()}/visits"},
        },
        headers=tenant["headers"],
    )
    assert response.status_code == 403


def test_measuring_while_registering_is_refused_and_charges_nothing(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    answer = register(client, f"{lake.as_uri()}/visits")
    tenant = api.create_tenant()
    api.grant(answer["id"], tenant["id"], 1.0)  # a grant while registering is allowed
    requests: Sequence[tuple[str, dict[str, Any]]] = [
        ("measurements", {"marginals": [["sex"]], "rho": 0.1}),
        ("measurements?dry_run=true", {"marginals": [["sex"]], "rho": 0.1}),
        ("mechanisms/aim", {"rho": 0.1}),
        ("mechanisms/aim?dry_run=true", {"rho": 0.1}),
    ]
    for path, body in requests:
        response = client.post(
            f"/v1/datasets/{answer['id']}/{path}", json=body, headers=tenant["headers"]
        )
        assert response.status_code == 409, (path, response.text)
        assert response.json()["error"]["code"] == "dataset_not_ready"
    with database.read_only() as session:
        assert not session.scalars(
            select(LedgerEntry).where(LedgerEntry.dataset_id == answer["id"])
        ).all()
        kinds = session.scalars(select(Job.kind).where(Job.dataset_id == answer["id"])).all()
    assert kinds == ["register"]
    run_jobs(database, settings)
    assert (
        client.get(f"/v1/datasets/{answer['id']}", headers=ADMIN_HEADERS).json()["status"]
        == "ready"
    )


def test_within_bin_means_of_a_registered_source_pass_the_gate_and_its_engine(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    from app.db import MeasurementRecord, RecordAccess
    from app.ingest import unpack_column
    from app.schema.within_bins import GRID

    answer = register(client, f"{lake.as_uri()}/visits")
    run_jobs(database, settings)
    tenant = api.create_tenant()
    api.grant(answer["id"], tenant["id"], 1.0)
    response = client.post(
        f"/v1/datasets/{answer['id']}/measurements",
        json={"within_bin_means": ["age"], "sigma": 1.0},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    run_jobs(database, settings)
    assert job_of(client, job_id)["status"] == "succeeded"
    edges = np.array(SCHEMA["attributes"][1]["bins"], dtype=float)
    ages = np.concatenate(
        [
            pq.read_table(path).column("age").to_numpy()
            for path in sorted((lake / "visits").rglob("*.parquet"))
        ]
    )
    codes = np.clip(np.searchsorted(edges, ages, side="right") - 1, 0, len(edges) - 2)
    places = np.floor((ages - edges[codes]) / np.diff(edges)[codes] * GRID + 0.5)
    exact = np.bincount(codes, weights=places, minlength=len(edges) - 1)
    with database.read_only() as session:
        (release,) = session.scalars(
            select(MeasurementRecord).where(MeasurementRecord.job_id == job_id)
        ).all()
        (access,) = session.scalars(select(RecordAccess).where(RecordAccess.job_id == job_id))
        assert release.kind == "within_bin_means" and release.access_id == access.id
        noisy = unpack_column(release.values)
    # σ = one place: 2¹⁶ grid steps; six σ covers every bin but once in 10⁸.
    assert np.all(np.abs(noisy - exact) < 6 * GRID)


def test_purge_and_delete_forget_the_reference_and_leave_the_source(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    purged = register(client, f"{lake.as_uri()}/visits")
    deleted = register(client, f"{lake.as_uri()}/visits")
    # Not while the registration job is pending.
    busy = client.delete(f"/v1/datasets/{purged['id']}/records", headers=ADMIN_HEADERS)
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "jobs_pending"
    run_jobs(database, settings)
    files_before = sorted(p.name for p in (lake / "visits").rglob("*"))

    tenant = api.create_tenant()
    api.grant(purged["id"], tenant["id"], 1.0)
    assert (
        client.delete(f"/v1/datasets/{purged['id']}/records", headers=ADMIN_HEADERS).status_code
        == 204
    )
    assert client.delete(f"/v1/datasets/{deleted['id']}", headers=ADMIN_HEADERS).status_code == 204
    for dataset_id in (purged["id"], deleted["id"]):
        dataset = stored(database, dataset_id)
        assert dataset.source_uri is None
        assert dataset.source_fingerprint is None
        assert dataset.source_secret is None
        assert dataset.records_purged_at is not None
    seen = client.get(f"/v1/datasets/{purged['id']}", headers=ADMIN_HEADERS).json()
    assert "source" not in seen and seen["records_purged_at"]
    measuring = client.post(
        f"/v1/datasets/{purged['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert measuring.status_code == 409 and measuring.json()["error"]["code"] == "records_purged"
    assert client.get(f"/v1/datasets/{deleted['id']}", headers=ADMIN_HEADERS).status_code == 404
    # The source is the curator's: untouched.
    assert sorted(p.name for p in (lake / "visits").rglob("*")) == files_before


def test_a_cancelled_registration_leaves_the_dataset_rejected(
    client: TestClient, database: Database, lake: Path
) -> None:
    answer = register(client, f"{lake.as_uri()}/visits")
    cancelled = client.post(f"/v1/jobs/{answer['job_id']}/cancel", headers=ADMIN_HEADERS)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    dataset = stored(database, answer["id"])
    assert dataset.status == "rejected" and "cancelled" in (dataset.source_error or "")


def test_an_internal_failure_of_the_scan_rejects_without_quoting_it(
    client: TestClient,
    database: Database,
    settings: Settings,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_scan(*args: Any) -> Validation:
        raise RuntimeError("secret value 12345")

    monkeypatch.setattr(gate, "validate_source", broken_scan)
    answer = register(client, f"{lake.as_uri()}/visits")
    run_jobs(database, settings)
    dataset = stored(database, answer["id"])
    assert dataset.status == "rejected"
    assert "internal error" in (dataset.source_error or "")
    assert "12345" not in (dataset.source_error or "")


def test_a_source_written_to_during_its_scan_is_rejected(
    client: TestClient,
    database: Database,
    settings: Settings,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = lake / unique_name("growing")
    write_part(folder / "part-0.parquet", rows=20)
    scan = gate.validate_source

    def scan_then_append(*args: Any) -> Validation:
        validation = scan(*args)
        write_part(folder / "part-1.parquet", rows=20)  # a writer adds a file meanwhile
        return validation

    monkeypatch.setattr(gate, "validate_source", scan_then_append)
    answer = register(client, folder.as_uri())
    run_jobs(database, settings)
    dataset = stored(database, answer["id"])
    assert dataset.status == "rejected" and dataset.source_fingerprint is None
    assert "changed while it was scanned" in (dataset.source_error or "")


def test_the_openapi_documents_both_bodies(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/datasets"]["post"]
    content = operation["requestBody"]["content"]
    assert {"multipart/form-data", "application/json"} <= set(content)
    registration = content["application/json"]["schema"]
    assert {"name", "schema", "source"} <= set(registration["required"])
    assert "$defs" not in registration and "$ref" not in str(registration)
    assert "202" in operation["responses"] and "201" in operation["responses"]


@pytest.fixture
def no_roots(database_url: str) -> Iterator[Settings]:
    yield Settings(database_url=database_url, admin_key=ADMIN_KEY, env="test", auto_migrate=False)


def test_with_no_roots_every_registration_is_refused(
    database: Database, no_roots: Settings, lake: Path
) -> None:
    from app.errors import SourceNotAllowed
    from app.schema import parse_schema
    from app.services import sources as source_service

    with database.session() as session:
        with pytest.raises(SourceNotAllowed, match="PRIVQ_SOURCE_ROOTS is empty"):
            source_service.register(
                session,
                name="visits",
                schema=parse_schema(SCHEMA),
                source_format="parquet",
                uri=f"{lake.as_uri()}/visits",
                roots=no_roots.source_root_list,
            )
        session.rollback()
