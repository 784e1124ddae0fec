"""A schema drafted with `--private-bins RHO` records RHO; the upload with it charges
RHO against the dataset's rho_total as the curator's ledger line, in the transaction
that stores the dataset. A bad record, or one past rho_total, is a 422 and nothing is
stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ADMIN_KEY, TINY_SCHEMA, unique_name
from source_fixtures import SCHEMA, write_lake
from sqlalchemy import func, select

from app.config import Settings
from app.db import Dataset, Grant, LedgerEntry, Tenant
from app.services.private_bins import CURATOR_TENANT


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
        source_roots=f"{lake.as_uri()}/",
    )


def private(rho: Any, **extra: Any) -> dict[str, Any]:
    return {**TINY_SCHEMA, "private_bins": {"rho": rho, "attributes": ["age"], **extra}}


def curator_lines(client, dataset_id: str) -> list[dict[str, Any]]:
    lines = client.get(f"/v1/ledger?dataset_id={dataset_id}", headers=ADMIN_HEADERS).json()
    return lines if isinstance(lines, list) else lines["items"]


def test_the_upload_charges_the_drafts_rho_as_the_curators_line(client, api, database) -> None:
    dataset = api.upload_dataset(schema=private(0.25), rho_total="1")
    assert dataset["private_bins"] == {"rho": 0.25, "attributes": ["age"]}
    with database.unit_of_work() as session:
        (line,) = session.scalars(
            select(LedgerEntry).where(LedgerEntry.dataset_id == dataset["id"])
        ).all()
        curator = session.get(Tenant, line.tenant_id)
        assert curator is not None and curator.name == CURATOR_TENANT
        assert curator.disabled_at is not None  # it never signs in
        assert line.kind == "charge" and line.rho_units == 250_000_000_000
        assert "private bins" in line.description and "age" in line.description
        grant = session.get(Grant, line.grant_id)
        assert grant is not None and grant.rho_limit_units == line.rho_units
    # The admin's ledger shows it.
    (shown,) = curator_lines(client, dataset["id"])
    assert (shown["kind"], shown["rho_exact"]) == ("charge", "0.25")
    # Tenants share what is left of the cap: 0.75, not more.
    tenant = api.create_tenant()
    too_much = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": tenant["id"], "rho": 0.75 + 1e-9},
        headers=ADMIN_HEADERS,
    )
    assert too_much.status_code == 409
    assert too_much.json()["error"]["code"] == "rho_total_exceeded"
    api.grant(dataset["id"], tenant["id"], 0.75)
    # A second dataset reuses the one curator tenant.
    again = api.upload_dataset(schema=private(0.5))
    with database.unit_of_work() as session:
        curators = session.scalar(
            select(func.count()).select_from(Tenant).where(Tenant.name == CURATOR_TENANT)
        )
        assert curators == 1
        spent = session.scalar(
            select(func.sum(LedgerEntry.rho_units)).where(LedgerEntry.dataset_id == again["id"])
        )
        assert spent == 500_000_000_000  # recorded without rho_total too


def test_without_private_bins_nothing_is_charged(api, database) -> None:
    dataset = api.upload_dataset(rho_total="1")
    assert "private_bins" not in dataset or dataset["private_bins"] is None
    with database.unit_of_work() as session:
        lines = session.scalar(
            select(func.count())
            .select_from(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset["id"])
        )
        assert lines == 0


@pytest.mark.parametrize(
    ("record", "names"),
    [
        ({"rho": 0}, "rho must be a positive finite number"),
        ({"rho": -1}, "rho must be a positive finite number"),
        ({"rho": "0.5"}, "rho must be a positive finite number"),
        ({"rho": True}, "rho must be a positive finite number"),
        ({"rho": 2e6}, "rho must be at most"),
        ({}, "needs rho"),
        ({"rho": 0.1, "epsilon": 1}, "unknown key(s) 'epsilon'"),
        ({"rho": 0.1, "attributes": "age"}, "attributes must be a list"),
        ({"rho": 0.1, "attributes": ["age", "age"]}, "must not repeat"),
        (0.5, "private_bins must be an object"),
    ],
)
def test_a_bad_record_is_422_and_nothing_is_stored(
    client, database, record: Any, names: str
) -> None:
    name = unique_name("bad-private-bins")
    response = client.post(
        "/v1/datasets",
        data={"schema": json.dumps({**TINY_SCHEMA, "private_bins": record}), "name": name},
        files={"file": ("data.csv", b"sex,age\nF,23\n", "text/csv")},
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == 422, response.text
    assert names in response.json()["error"]["message"]
    with database.unit_of_work() as session:
        assert session.scalar(select(Dataset.id).where(Dataset.name == name)) is None


def test_private_bins_past_rho_total_are_refused(client, database) -> None:
    name = unique_name("over-cap")
    response = client.post(
        "/v1/datasets",
        data={"schema": json.dumps(private(1.5)), "name": name, "rho_total": "1"},
        files={"file": ("data.csv", b"sex,age\nF,23\n", "text/csv")},
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == 422
    assert "more than the dataset's rho_total=1" in response.json()["error"]["message"]
    with database.unit_of_work() as session:
        assert session.scalar(select(Dataset.id).where(Dataset.name == name)) is None
        assert (
            session.scalar(
                select(func.count())
                .select_from(LedgerEntry)
                .join(Dataset, Dataset.id == LedgerEntry.dataset_id)
                .where(Dataset.name == name)
            )
            == 0
        )


def test_a_registration_charges_it_too(client, database, lake: Path) -> None:
    body = {
        "name": unique_name("visits"),
        "schema": {**SCHEMA, "private_bins": {"rho": 0.125, "attributes": ["age"]}},
        "source": {"format": "parquet", "uri": f"{(lake / 'visits').as_uri()}/"},
        "rho_total": 0.5,
    }
    response = client.post("/v1/datasets", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 202, response.text
    with database.unit_of_work() as session:
        (units,) = session.scalars(
            select(LedgerEntry.rho_units).where(LedgerEntry.dataset_id == response.json()["id"])
        ).all()
        assert units == 125_000_000_000
    over = client.post(
        "/v1/datasets",
        json={**body, "name": unique_name("visits"), "rho_total": 0.1},
        headers=ADMIN_HEADERS,
    )
    assert over.status_code == 422 and "rho_total" in over.json()["error"]["message"]
