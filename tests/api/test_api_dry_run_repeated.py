"""A repeated or conflicting `dry_run` is a 422 naming it, and nothing is charged.

`?dry_run=true&dry_run=false` used to be read as its last value and charged. Now any
`dry_run` given more than once — conflicting or not — is refused before the route
runs, on measurements and on the mechanisms: no ledger line, no job.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.db import Job, LedgerEntry


def lines_and_jobs(database, dataset_id: str) -> tuple[int, int]:
    with database.read_only() as session:
        entries = session.scalar(
            select(func.count())
            .select_from(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset_id)
        )
        jobs = session.scalar(
            select(func.count()).select_from(Job).where(Job.dataset_id == dataset_id)
        )
    return int(entries or 0), int(jobs or 0)


@pytest.mark.parametrize(
    "flags",
    [
        [("dry_run", "true"), ("dry_run", "false")],
        [("dry_run", "false"), ("dry_run", "true")],
        [("dry_run", "true"), ("dry_run", "true")],
    ],
)
@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("measurements", {"marginals": [["sex"]], "noise": "gaussian", "rho": 0.25}),
        ("mechanisms/aim", {"rho": 0.25}),
    ],
)
def test_a_repeated_dry_run_is_refused_and_charges_nothing(
    client, api, database, flags: list[tuple[str, str]], route: str, body: dict
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}/{route}"
    response = client.post(url, params=flags, json=body, headers=tenant["headers"])
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert "dry_run" in error["message"] and "2 times" in error["message"]
    assert lines_and_jobs(database, dataset["id"]) == (0, 0)
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"])
    assert budget.json()["rho_spent_exact"] == "0"


def test_one_dry_run_flag_still_works_both_ways(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    body = {"marginals": [["sex"]], "noise": "gaussian", "rho": 0.25}
    dry = client.post(url, params={"dry_run": "true"}, json=body, headers=tenant["headers"])
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    assert lines_and_jobs(database, dataset["id"]) == (0, 0)
    real = client.post(url, params={"dry_run": "false"}, json=body, headers=tenant["headers"])
    assert real.status_code == 202, real.text
    assert lines_and_jobs(database, dataset["id"]) == (1, 1)
