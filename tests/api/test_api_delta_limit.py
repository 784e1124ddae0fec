"""δ means what it says: above the service's maximum (PRIVQ_MAX_DELTA, default 1e-3) it is refused.

(ε, δ)-DP allows a release to fail outright with probability δ, so a δ of 0.01 or 0.5
is no guarantee at all. Wherever a δ is given — a grant's or a request's `epsilon` with
`delta`, the `delta` of GET /budget and of dry runs, `privq grants --delta` — a larger
one is a 422 naming `delta` and the allowed range, and changes nothing. A deployment
that really wants more configures it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ApiHelper
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.config import Settings, get_settings
from app.db import Database, Grant, Job, LedgerEntry
from app.limits import DEFAULT_MAX_DELTA
from app.services.rho import rho_units_from_epsilon

TOO_LARGE = 0.01  # ten times the default maximum
ALLOWED_RANGE = "1e-300 ≤ delta ≤ 1e-3"


def refused_for_delta(response: Any) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["field"] == "delta" and error["range"] == ALLOWED_RANGE
    assert "delta" in error["message"] and "1e-3" in error["message"]


def state(database: Database, dataset_id: str) -> tuple[list[tuple[str, int]], int, int]:
    """(grants as (tenant, limit), ledger lines, jobs) of a dataset."""
    with database.read_only() as session:
        grants = sorted(
            (g.tenant_id, g.rho_limit_units)
            for g in session.query(Grant).filter_by(dataset_id=dataset_id)
        )
        lines = session.query(LedgerEntry).filter_by(dataset_id=dataset_id).count()
        jobs = session.query(Job).filter_by(dataset_id=dataset_id).count()
    return grants, lines, jobs


def test_the_default_maximum_is_1e_minus_3() -> None:
    assert Settings().max_delta == DEFAULT_MAX_DELTA == 1e-3


@pytest.mark.parametrize("value", [0, -1e-6, 1, 1.5])
def test_the_configured_maximum_is_within_zero_and_one(value: float) -> None:
    with pytest.raises(ValidationError, match="max_delta"):
        Settings(max_delta=value)


def test_the_maximum_is_read_from_privq_max_delta(monkeypatch) -> None:
    monkeypatch.setenv("PRIVQ_MAX_DELTA", "0.05")
    assert Settings().max_delta == 0.05


def test_grants_refuse_a_delta_above_the_maximum_and_change_nothing(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.create_tenant(), api.upload_dataset()
    url = f"/v1/datasets/{dataset['id']}/grants"
    body = {"tenant_id": tenant["id"], "epsilon": 1.0, "delta": TOO_LARGE}
    refused_for_delta(client.post(url, json=body, headers=ADMIN_HEADERS))
    assert state(database, dataset["id"]) == ([], 0, 0)
    # At the maximum itself: granted, the tight conversion at that δ.
    at_most = client.post(url, json={**body, "delta": 1e-3}, headers=ADMIN_HEADERS)
    assert at_most.status_code == 201, at_most.text
    grant = at_most.json()
    expected = rho_units_from_epsilon(1.0, 1e-3)
    assert state(database, dataset["id"]) == ([(tenant["id"], expected)], 0, 0)
    patch = client.patch(
        f"{url}/{grant['id']}", json={"epsilon": 2.0, "delta": TOO_LARGE}, headers=ADMIN_HEADERS
    )
    refused_for_delta(patch)
    assert state(database, dataset["id"]) == ([(tenant["id"], expected)], 0, 0)


def test_measurements_and_mechanisms_refuse_it_and_charge_nothing(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    base = f"/v1/datasets/{dataset['id']}"
    before = state(database, dataset["id"])
    amount = {"epsilon": 1.0, "delta": TOO_LARGE}
    measure = {"marginals": [["sex"]], **amount}
    for params in ({}, {"dry_run": True}):
        refused_for_delta(
            client.post(
                f"{base}/measurements", params=params, json=measure, headers=tenant["headers"]
            )
        )
        for kind in ("aim", "mwem"):
            refused_for_delta(
                client.post(
                    f"{base}/mechanisms/{kind}",
                    params=params,
                    json=amount,
                    headers=tenant["headers"],
                )
            )
    # The δ of a dry run's ε report, and of the budget's.
    small = {"marginals": [["sex"]], "rho": 0.1}
    for kind, body in (("measurements", small), ("mechanisms/aim", {"rho": 0.1})):
        refused_for_delta(
            client.post(
                f"{base}/{kind}",
                params={"dry_run": True, "delta": TOO_LARGE},
                json=body,
                headers=tenant["headers"],
            )
        )
    refused_for_delta(
        client.get(f"{base}/budget", params={"delta": TOO_LARGE}, headers=tenant["headers"])
    )
    assert state(database, dataset["id"]) == before
    # Within the maximum, all of it works as before.
    budget = client.get(f"{base}/budget", params={"delta": 1e-3}, headers=tenant["headers"])
    assert budget.status_code == 200 and budget.json()["delta"] == 1e-3
    accepted = client.post(
        f"{base}/measurements",
        json={"marginals": [["sex"]], "epsilon": 1.0, "delta": 1e-3},
        headers=tenant["headers"],
    )
    assert accepted.status_code == 202, accepted.text


@pytest.fixture(scope="module")
def generous(settings: Settings, database: Database) -> Iterator[TestClient]:
    """The same database served by an app configured with PRIVQ_MAX_DELTA=0.05."""
    from app.api import create_app

    configured = settings.model_copy(update={"max_delta": 0.05})
    with TestClient(create_app(configured, database=database)) as test_client:
        yield test_client


def test_a_configured_larger_maximum_accepts_it(
    generous: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.create_tenant(), api.upload_dataset()
    base = f"/v1/datasets/{dataset['id']}"
    granted = generous.post(
        f"{base}/grants",
        json={"tenant_id": tenant["id"], "epsilon": 8.0, "delta": TOO_LARGE},
        headers=ADMIN_HEADERS,
    )
    assert granted.status_code == 201, granted.text
    expected = rho_units_from_epsilon(8.0, TOO_LARGE, max_delta=0.05)
    assert state(database, dataset["id"]) == ([(tenant["id"], expected)], 0, 0)
    budget = generous.get(f"{base}/budget", params={"delta": TOO_LARGE}, headers=tenant["headers"])
    assert budget.status_code == 200 and budget.json()["delta"] == TOO_LARGE
    measured = generous.post(
        f"{base}/measurements",
        json={"marginals": [["sex"]], "epsilon": 0.5, "delta": TOO_LARGE},
        headers=tenant["headers"],
    )
    assert measured.status_code == 202, measured.text
    # Beyond the configured maximum: refused all the same, naming the configured range.
    refused = generous.get(f"{base}/budget", params={"delta": 0.1}, headers=tenant["headers"])
    assert refused.status_code == 422
    assert refused.json()["error"]["range"] == "1e-300 ≤ delta ≤ 5e-2"


def test_the_cli_refuses_it_too(tmp_path, monkeypatch, capsys) -> None:
    import json

    from conftest import TINY_CSV, TINY_SCHEMA

    from app.cli import main

    monkeypatch.setenv("PRIVQ_DATABASE_URL", f"sqlite:///{tmp_path}/delta.db")
    get_settings.cache_clear()
    try:

        def run(*argv: str) -> tuple[int, str, str]:
            capsys.readouterr()
            status = main(list(argv))
            captured = capsys.readouterr()
            return status, captured.out, captured.err

        assert run("migrate")[0] == 0
        (tmp_path / "tiny.csv").write_text(TINY_CSV)
        (tmp_path / "schema.json").write_text(json.dumps(TINY_SCHEMA))
        upload = ("datasets", "upload", str(tmp_path / "tiny.csv"), "--schema")
        schema = str(tmp_path / "schema.json")
        dataset = json.loads(run(*upload, schema, "--name", "delta", "--json")[1])
        tenant = json.loads(run("tenants", "create", "delta", "--json")[1])
        create = ("grants", "create", dataset["id"], tenant["id"], "--epsilon", "1", "--delta")
        status, _out, err = run(*create, str(TOO_LARGE))
        assert status == 1 and "--delta" in err and ALLOWED_RANGE in err, err
        assert json.loads(run("grants", "list", dataset["id"], "--json")[1]) == []
        # Configured larger, the same command grants it.
        monkeypatch.setenv("PRIVQ_MAX_DELTA", "0.05")
        get_settings.cache_clear()
        status, out, err = run(*create, str(TOO_LARGE), "--json")
        assert status == 0, err
        expected = rho_units_from_epsilon(1.0, TOO_LARGE, max_delta=0.05)
        assert json.loads(out)["rho_limit"] == pytest.approx(expected / 10**12)
    finally:
        get_settings.cache_clear()
