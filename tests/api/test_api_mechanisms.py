"""AIM and MWEM+PGM as budgeted jobs: charged once, spend within it, resume after a crash."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, adult_slice, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, LedgerEntry, MeasurementRecord, RecordAccess
from app.services import measurements as measurement_service
from app.services import mechanisms as mechanism_service
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

COLUMNS = ["marital-status", "relationship", "race", "sex", "income>50K"]
SIZES = {"marital-status": 7, "relationship": 6, "race": 5, "sex": 2, "income>50K": 2}


def small_adult(rows: int = 3000) -> bytes:
    lines = adult_slice(rows).decode().splitlines()
    header = lines[0].split(",")
    keep = [header.index(c) for c in COLUMNS]
    out = [",".join(COLUMNS)]
    for line in lines[1:]:
        cells = line.split(",")
        out.append(",".join(cells[i] for i in keep))
    return ("\n".join(out) + "\n").encode()


@pytest.fixture(scope="module")
def small(api: ApiHelper) -> dict[str, Any]:
    dataset = api.upload_dataset(small_adult(), SIZES)
    return dataset


def new_tenant(api: ApiHelper, dataset_id: str, rho: float | str = 1) -> dict[str, Any]:
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], rho)
    return tenant


def charges(database: Database, job_id: str) -> list[tuple[str, int]]:
    with database.read_only() as session:
        return [(e.kind, e.rho_units) for e in session.query(LedgerEntry).filter_by(job_id=job_id)]


def rounds_spent(database: Database, job_id: str) -> Fraction:
    with database.read_only() as session:
        return mechanism_service.check_spent(
            mechanism_service.stored_rounds(session, job_id), 10**30
        )


@pytest.mark.parametrize("kind", ["aim", "mwem"])
def test_mechanism_job_spends_within_its_charge_and_makes_a_model(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
    kind: str,
) -> None:
    tenant = new_tenant(api, small["id"])
    body: dict[str, Any] = {"rho": 0.3}
    if kind == "mwem":
        body.update(
            rounds=4,
            workload=[["sex", "income>50K"], ["race", "sex"], ["marital-status", "relationship"]],
        )
    response = client.post(
        f"/v1/datasets/{small['id']}/mechanisms/{kind}", json=body, headers=tenant["headers"]
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["rho_charged_exact"] == "0.3"
    assert Worker(database, settings, poll_seconds=0.01).run_until_idle() >= 1
    job = job_row(database, accepted["job_id"])
    assert job.status == "succeeded", job.error
    assert job.model_version is not None
    # One charge, no refund; the rounds' exact cost is within it (and nearly all of it).
    assert charges(database, job.id) == [("charge", 3 * UNITS_PER_RHO // 10)]
    spent = rounds_spent(database, job.id)
    assert spent <= Fraction(3, 10)
    assert spent > Fraction(3, 10) * Fraction(999, 1000)
    assert job.progress["rounds"] >= (4 if kind == "mwem" else len(SIZES) + 1)
    releases = client.get(
        f"/v1/datasets/{small['id']}/measurements", headers=tenant["headers"]
    ).json()
    mine = [r for r in releases if r["job_id"] == job.id]
    assert len(mine) == job.progress["rounds"]
    if kind == "aim":  # AIM starts from every one-way marginal
        assert sorted(r["attributes"][0] for r in mine[: len(SIZES)]) == sorted(SIZES)
        # then selection rounds, and what is left re-measures the one-way marginals
        later = [r["details"]["kind"] for r in mine[len(SIZES) :]]
        selected = later.count("select+measure")
        assert selected >= 1 and later[:selected] == ["select+measure"] * selected
        rest = mine[len(SIZES) + selected :]
        assert all(r["details"]["kind"] == "measure" and len(r["attributes"]) == 1 for r in rest)


def test_a_job_resumes_with_the_schedule_it_was_submitted_with(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schedule is kept in the job: a later build's defaults never meet rounds drawn
    under another (one stored without `rounds_per_attribute` ran 16·d rounds, one
    without `anneal_factor` halved σ, one without `wide_filter_share` never widened its
    noise filter, one without `wide_filter_ramp` narrowed it back at once, one without
    `fitted_noise` scored the raw noise, one without `measure_share_3way` kept α with
    3-way workloads, one without `pair_weight_cap` the paper's weights, the defaults
    then), and a job stored before
    jobs kept one runs the paper's."""
    seen: list[tuple[float | None, ...]] = []
    real = mechanism_service.RUNNERS["aim"]

    def spy(*args: Any, **kwargs: Any) -> Any:
        options = kwargs["options"]
        schedule = (options.init_share, options.noise_filter, options.rounds_per_attribute)
        later = (options.anneal_factor, options.wide_filter_share, options.fitted_noise)
        latest = (options.wide_filter_ramp, options.measure_share_3way, options.pair_weight_cap)
        seen.append((*schedule, *later, *latest))
        return real(*args, **kwargs)

    monkeypatch.setitem(mechanism_service.RUNNERS, "aim", spy)
    tenant = new_tenant(api, small["id"])
    url = f"/v1/datasets/{small['id']}/mechanisms/aim"
    kept = client.post(url, json={"rho": 0.05}, headers=tenant["headers"]).json()["job_id"]
    assert job_row(database, kept).params["schedule"] == mechanism_service.current_schedule()
    with database.unit_of_work() as session:  # another build's schedule, stored with it
        job = session.get(Job, kept)
        assert job is not None
        job.params = {**job.params, "schedule": {"init_share": 0.3, "noise_filter": 0.7}}
    old = client.post(url, json={"rho": 0.05}, headers=tenant["headers"]).json()["job_id"]
    with database.unit_of_work() as session:  # a job from before jobs kept a schedule
        job = session.get(Job, old)
        assert job is not None
        job.params = {k: v for k, v in job.params.items() if k != "schedule"}
    assert Worker(database, settings, poll_seconds=0.01).run_until_idle() == 2
    assert job_row(database, kept).status == "succeeded"
    assert job_row(database, old).status == "succeeded"
    assert seen == [
        (0.3, 0.7, 16, 2.0, None, False, 0.0, None, False),
        (None, None, 16, 2.0, None, False, 0.0, None, False),
    ]
    current = mechanism_service.current_schedule()
    assert current["rounds_per_attribute"] == 4 and current["anneal_factor"] == math.sqrt(2.0)
    assert current["wide_filter_share"] == 0.2 and current["fitted_noise"] is True
    assert current["wide_filter_ramp"] == 0.05 and current["measure_share_3way"] == 0.8
    assert current["pair_weight_cap"] is True


def test_an_aim_dry_run_quotes_the_selection_share_of_its_workload(
    client: TestClient, api: ApiHelper, small: dict[str, Any]
) -> None:
    """A workload with a marginal of three attributes selects at α = 0.8: its dry run
    quotes √2 times the ε of a pairs-only workload for each selection, from the same ρ."""
    tenant = new_tenant(api, small["id"])
    url = f"/v1/datasets/{small['id']}/mechanisms/aim"
    pairs = [["race", "sex"], ["sex", "income>50K"]]
    quotes = []
    for workload in (pairs, [*pairs, ["race", "sex", "income>50K"]]):
        response = client.post(
            url,
            params={"dry_run": True},
            json={"rho": 0.2, "workload": workload},
            headers=tenant["headers"],
        )
        assert response.status_code == 200, response.text
        quotes.append(response.json()["epsilon_per_selection"])
    assert quotes[1] == pytest.approx(math.sqrt(2.0) * quotes[0], rel=1e-9)


def test_mechanism_requests_are_validated_before_charging(
    client: TestClient, api: ApiHelper, small: dict[str, Any], database: Database
) -> None:
    tenant = new_tenant(api, small["id"])
    url = f"/v1/datasets/{small['id']}/mechanisms"
    bad = [
        ("aim", {"rho": 0.1, "workload": [["nope", "sex"]]}),
        ("aim", {"rho": 0.1, "workload": []}),
        ("aim", {"rho": 0.1, "rounds": 3}),
        ("aim", {"rho": 0.1, "max_model_cells": 10**12}),
        ("aim", {"rho": 0.1, "max_model_cells": 3}),
        ("aim", {"rho": -1}),
        ("aim", {"rho": 0.1, "colour": "red"}),
        ("mwem", {"rho": 0.1, "rounds": 0}),
    ]
    for kind, body in bad:
        response = client.post(f"{url}/{kind}", json=body, headers=tenant["headers"])
        assert response.status_code == 422, (kind, body, response.text)
        assert response.json()["error"]["message"]
    with database.read_only() as session:
        assert session.query(LedgerEntry).filter_by(tenant_id=tenant["id"]).count() == 0
    too_much = client.post(f"{url}/aim", json={"rho": 5}, headers=tenant["headers"])
    assert too_much.status_code == 409
    assert too_much.json()["error"]["code"] == "insufficient_budget"


def test_a_crashed_mechanism_resumes_from_its_stored_rounds_without_new_noise(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.privacy import noise

    tenant = new_tenant(api, small["id"])
    job_id = client.post(
        f"/v1/datasets/{small['id']}/mechanisms/mwem",
        json={
            "rho": 0.2,
            "rounds": 5,
            "workload": [["sex", "income>50K"], ["race", "sex"], ["relationship", "sex"]],
        },
        headers=tenant["headers"],
    ).json()["job_id"]

    draws: list[int] = []
    sampler = noise.discrete_gaussian

    def counted(counts: np.ndarray, sigma: float) -> np.ndarray:
        draws.append(counts.size)
        return sampler(counts, sigma)

    monkeypatch.setattr(noise, "discrete_gaussian", counted)
    store = measurement_service.store
    stored_calls = {"n": 0}

    def crashing_store(session: Any, **kwargs: Any) -> Any:
        stored_calls["n"] += 1
        if stored_calls["n"] == 3:
            raise KeyboardInterrupt  # the process dies while storing round 2
        return store(session, **kwargs)

    monkeypatch.setattr(measurement_service, "store", crashing_store)
    worker = Worker(database, settings, poll_seconds=0.01)
    with pytest.raises(KeyboardInterrupt):
        worker.run_once()
    assert job_row(database, job_id).status == "queued"  # given back
    with database.read_only() as session:
        before = [
            r.values
            for r in session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
        ]
    assert len(before) == 2 and len(draws) == 3  # round 2's draw never reached storage

    monkeypatch.setattr(measurement_service, "store", store)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    # Round 2 passed the gate and drew, then was lost: it stays spent and takes its slot
    # of the 5, so the resumed run draws 2 more rounds; rounds 0, 1 are never drawn again.
    assert job.progress["rounds"] == 4
    assert len(draws) == 3 + 2
    with database.read_only() as session:
        after = [
            r.values
            for r in session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
        ]
    assert after[:2] == before
    with database.read_only() as session:
        accessed = sum(
            (Fraction(a.exact_rho) for a in session.query(RecordAccess).filter_by(job_id=job_id)),
            Fraction(0),
        )
    assert rounds_spent(database, job_id) < accessed <= Fraction(2, 10)
    assert charges(database, job_id) == [("charge", 2 * UNITS_PER_RHO // 10)]


def test_a_far_apart_pair_is_answered_where_the_plain_plan_exceeds_the_inference_cap(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.services.answers import marginals

    small = api.upload_dataset(small_adult(), SIZES)  # its own: nothing else measured
    tenant = new_tenant(api, small["id"])
    # A chain of pairs: marital-status and income>50K end up in cliques at either end.
    chain = [
        ["marital-status", "relationship"],
        ["relationship", "race"],
        ["race", "sex"],
        ["sex", "income>50K"],
    ]
    response = client.post(
        f"/v1/datasets/{small['id']}/measurements",
        json={"marginals": chain, "rho": 0.2},
        headers=tenant["headers"],
    )
    assert response.status_code == 202
    assert Worker(database, settings, poll_seconds=0.01).run_until_idle() >= 1
    # Carrying marital-status (7) through relationship (6) needs 42 cells; conditioning
    # on it needs at most relationship × race = 30.
    monkeypatch.setattr(marginals, "MAX_INFERENCE_CELLS", 41)
    answer = client.get(
        f"/v1/datasets/{small['id']}/marginals",
        params={"attrs": "marital-status,income>50K"},
        headers=tenant["headers"],
    )
    assert answer.status_code == 200, answer.text
    counts = np.asarray(answer.json()["counts"])
    assert counts.size == 14 and counts.sum() > 0
    monkeypatch.setattr(marginals, "MAX_INFERENCE_CELLS", 13)  # below the answer itself
    refused = client.get(
        f"/v1/datasets/{small['id']}/marginals",
        params={"attrs": "marital-status,income>50K"},
        headers=tenant["headers"],
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "query_too_large"
