"""Tenants see only their own metadata: every release's values, but not who bought it or how.

A grantee reads every noisy measurement of a dataset (a release is a release), but
another tenant's job id and its mechanism's round details are null. And nothing shows
what other tenants have queued but not yet received: a dry run's `model_cells` and a
`model_too_large` refusal count the released measurements and the caller's own queued
jobs only.

The size tests use four attributes of 100 values: any pair is a 10,000-cell marginal,
three pairs along a path make a chain of 10,000-cell cliques, and all six pairs one
clique of 100⁴ = 10⁸ cells, over the service's cap of 10⁷.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from conftest import ADMIN_HEADERS, ApiHelper, job_row
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.config import Settings
from app.db import Database, Job, LedgerEntry, RecordAccess
from app.pgm.domain import Domain
from app.pgm.junction_tree import model_cells
from app.worker import Worker

WIDE = {f"a{i}": 100 for i in range(4)}
PAIRS = [list(pair) for pair in combinations(WIDE, 2)]
PATH = [PAIRS[0], PAIRS[3], PAIRS[5]]  # a0-a1, a1-a2, a2-a3
REST = [PAIRS[1], PAIRS[2], PAIRS[4]]  # a0-a2, a0-a3, a1-a3: with PATH, every pair


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def wide_dataset(api: ApiHelper, *tenants: dict[str, Any]) -> dict[str, Any]:
    rows = "\n".join(",".join(str(r) for _ in WIDE) for r in range(5))
    dataset = api.upload_dataset(",".join(WIDE) + "\n" + rows + "\n", WIDE)
    for tenant in tenants:
        api.grant(dataset["id"], tenant["id"], 1)
    return dataset


def cells(*marginals: list[str]) -> int:
    return model_cells(Domain.from_sizes(WIDE), [tuple(m) for m in marginals])


def charges_and_jobs(database: Database, tenant_id: str) -> tuple[int, int]:
    with database.read_only() as session:
        lines = session.query(LedgerEntry).filter_by(tenant_id=tenant_id).count()
        jobs = session.query(Job).filter_by(tenant_id=tenant_id).count()
    return lines, jobs


# -- the listing ------------------------------------------------------------------------


def test_a_grantee_sees_every_release_but_not_another_tenants_job_or_details(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    owner, other = api.create_tenant(), api.create_tenant()
    dataset = api.upload_dataset()
    for tenant in (owner, other):
        api.grant(dataset["id"], tenant["id"], 1)
    base = f"/v1/datasets/{dataset['id']}"
    measured = client.post(
        f"{base}/measurements",
        json={"marginals": [["sex"], ["age"]], "rho": 0.2},
        headers=owner["headers"],
    ).json()["job_id"]
    mechanism = client.post(
        f"{base}/mechanisms/mwem",
        json={"rho": 0.2, "workload": [["sex", "age"]], "rounds": 2},
        headers=owner["headers"],
    ).json()["job_id"]
    own = client.post(
        f"{base}/measurements", json={"marginals": [["sex"]], "rho": 0.1}, headers=other["headers"]
    ).json()["job_id"]
    run_jobs(database, settings)
    for job_id in (measured, mechanism, own):
        assert job_row(database, job_id).status == "succeeded", job_row(database, job_id).error

    def listing(headers: dict[str, str]) -> list[dict[str, Any]]:
        response = client.get(f"{base}/measurements", headers=headers)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    as_admin, as_owner, as_other = (
        listing(ADMIN_HEADERS),
        listing(owner["headers"]),
        listing(other["headers"]),
    )
    owners_ids = {r["id"] for r in as_admin if r["job_id"] in (measured, mechanism)}
    rounds = [r for r in as_admin if r["job_id"] == mechanism]
    assert len(owners_ids) == 2 + len(rounds) and rounds
    assert all(isinstance(r["details"], dict) and r["details"] for r in rounds)
    # Everyone sees every release, with the same values, noise and ρ.
    for seen in (as_owner, as_other):
        assert [r["id"] for r in seen] == [r["id"] for r in as_admin]
        for row, full in zip(seen, as_admin, strict=True):
            for field in ("attributes", "noise", "sigma", "scale", "rho", "values", "status"):
                assert row[field] == full[field], field
    # The owner sees its jobs and round details as the admin does; the other tenant sees
    # neither for them, and its own job for its own measurement (hidden from the owner).
    for row, full in zip(as_owner, as_admin, strict=True):
        if full["id"] in owners_ids:
            assert (row["job_id"], row["details"]) == (full["job_id"], full["details"])
        else:
            assert full["job_id"] == own and (row["job_id"], row["details"]) == (None, None)
    for row, full in zip(as_other, as_admin, strict=True):
        if full["id"] in owners_ids:
            assert (row["job_id"], row["details"]) == (None, None), row
        else:
            assert row["job_id"] == own


# -- dry runs and refusals count releases and the caller's own queue ---------------------


def test_another_tenants_queued_job_changes_no_dry_run(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    first, second = api.create_tenant(), api.create_tenant()
    dataset = wide_dataset(api, first, second)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    queued = client.post(url, json={"marginals": PATH, "rho": 0.1}, headers=first["headers"])
    assert queued.status_code == 202, queued.text
    before = charges_and_jobs(database, second["id"])

    def dry_run(marginals: list[list[str]]) -> Any:
        return client.post(
            url,
            params={"dry_run": True},
            json={"marginals": marginals, "rho": 0.1},
            headers=second["headers"],
        )

    # The model size is that of the second tenant's marginals alone: the first tenant's
    # queued (unreleased) path counts for nothing ...
    one_way = dry_run([["a0"]])
    assert one_way.status_code == 200, one_way.text
    assert one_way.json()["model_cells"] == cells(["a0"]) < cells(*PATH, ["a0"])
    # ... and does not close the graph for marginals that would with it.
    rest = dry_run(REST)
    assert rest.status_code == 200, rest.text
    assert rest.json()["model_cells"] == cells(*REST)
    # A mechanism's dry run neither: every workload marginal fits a 50,000-cell cap alone,
    # none with the first tenant's path.
    aim = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        params={"dry_run": True},
        json={"rho": 0.1, "workload": REST, "max_model_cells": 50_000},
        headers=second["headers"],
    )
    assert aim.status_code == 200, aim.text
    assert charges_and_jobs(database, second["id"]) == before

    # Once the first tenant's job has run, its path is a release: it counts for everyone.
    run_jobs(database, settings)
    assert job_row(database, queued.json()["job_id"]).status == "succeeded"
    assert dry_run([["a0"]]).json()["model_cells"] == cells(*PATH, ["a0"])
    refused = dry_run(REST)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "model_too_large"
    assert refused.json()["error"]["model_cells"] == cells(*PATH, *REST)
    assert charges_and_jobs(database, second["id"]) == before


def test_the_callers_own_queued_job_counts(client: TestClient, api: ApiHelper) -> None:
    tenant = api.create_tenant()
    dataset = wide_dataset(api, tenant)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    queued = client.post(url, json={"marginals": PATH, "rho": 0.1}, headers=tenant["headers"])
    assert queued.status_code == 202, queued.text
    dry = client.post(
        url,
        params={"dry_run": True},
        json={"marginals": [["a0"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert dry.status_code == 200 and dry.json()["model_cells"] == cells(*PATH, ["a0"])
    for params in ({"dry_run": True}, {}):
        refused = client.post(
            url, params=params, json={"marginals": REST, "rho": 0.1}, headers=tenant["headers"]
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "model_too_large"
    aim = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        params={"dry_run": True},
        json={"rho": 0.1, "workload": REST, "max_model_cells": 50_000},
        headers=tenant["headers"],
    )
    assert aim.status_code == 422 and aim.json()["error"]["code"] == "model_too_large"


def test_a_request_is_not_refused_for_another_tenants_queue(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    """The real request counts what its dry run counts. Two tenants' queued jobs may then
    together exceed the cap: the worker refuses the one that would at its gate, before
    drawing anything (the job fails saying so, refunded whole), and the model stays as
    it was."""
    first, second = api.create_tenant(), api.create_tenant()
    dataset = wide_dataset(api, first, second)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    path = client.post(url, json={"marginals": PATH, "rho": 0.1}, headers=first["headers"])
    assert path.status_code == 202, path.text
    rest = client.post(url, json={"marginals": REST, "rho": 0.1}, headers=second["headers"])
    assert rest.status_code == 202, rest.text
    aim = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        json={"rho": 0.1, "workload": REST, "max_model_cells": 50_000},
        headers=second["headers"],
    )
    assert aim.status_code == 202, aim.text
    client.post(f"/v1/jobs/{aim.json()['job_id']}/cancel", headers=second["headers"])
    run_jobs(database, settings)
    assert job_row(database, path.json()["job_id"]).status == "succeeded"
    refused = job_row(database, rest.json()["job_id"])
    assert refused.status == "failed"
    assert "cells" in (refused.error or "")
    with database.read_only() as session:
        lines = session.scalars(
            select(LedgerEntry.rho_units).where(LedgerEntry.job_id == refused.id)
        ).all()
        accesses = session.scalars(
            select(RecordAccess.id).where(RecordAccess.job_id == refused.id)
        ).all()
    assert sum(lines) == 0 and accesses == []  # nothing read, nothing kept
    model = client.get(f"/v1/datasets/{dataset['id']}/model", headers=first["headers"])
    assert model.status_code == 200 and model.json()["version"] == 1


def test_a_job_that_would_overflow_with_another_tenants_draw_waits_and_reveals_nothing(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    """While another tenant's job is past its gate and drawing, a job that would make the
    model too large with it waits, unrecorded, instead of being refused (a refusal would
    tell what the other is drawing); once that draw ends, it goes on."""
    import threading
    import time
    from fractions import Fraction

    from app.services import jobs

    first, second = api.create_tenant(), api.create_tenant()
    dataset = wide_dataset(api, first, second)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    drawing = client.post(url, json={"marginals": PATH, "rho": 0.1}, headers=first["headers"])
    waiting = client.post(url, json={"marginals": REST, "rho": 0.1}, headers=second["headers"])
    drawing_id, waiting_id = drawing.json()["job_id"], waiting.json()["job_id"]
    with database.unit_of_work() as session:  # another worker holds the first job, past its gate
        claimed = jobs.claim(session, owner="busy", lease_seconds=60, is_sqlite=database.is_sqlite)
        assert claimed is not None and claimed.id == drawing_id
        session.add(
            RecordAccess(
                job_id=drawing_id,
                dataset_id=dataset["id"],
                sequence=0,
                purpose="measure",
                exact_rho=str(Fraction(1, 10)),
                rho_units=10**11,
            )
        )
    worker = Worker(database, settings, poll_seconds=0.01)
    runner = threading.Thread(target=worker.run_once)
    runner.start()
    try:
        time.sleep(1.5)
        assert runner.is_alive()  # waiting: neither refused nor drawn
        assert job_row(database, waiting_id).status == "running"
        with database.read_only() as session:
            recorded = session.scalars(
                select(RecordAccess.id).where(RecordAccess.job_id == waiting_id)
            ).all()
        assert recorded == []
        with database.unit_of_work() as session:  # the other draw ends (its worker failed it)
            jobs.fail(session, jobs.get(session, drawing_id, for_update=True), "gone")
    finally:
        runner.join(timeout=60)
    assert not runner.is_alive()
    assert job_row(database, waiting_id).status == "succeeded"
