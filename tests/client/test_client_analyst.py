"""The tenant's client against a real `privq serve`: SQLite with its embedded worker, and
PostgreSQL with a separate worker process.

Every `Client` method runs here: datasets, budget, dry runs, measurements and the
mechanisms as jobs waited for, jobs listed across pages and cancelled, measurements,
the model, and the free answers — each DataFrame checked against the service's own
JSON for the same question — plus the refusals (404, 409 with `rho_remaining`, 422).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pandas as pd
import pytest
from conftest import ADMIN_KEY, unique_name
from privq_service import SCHEMA, Service, running_service, table

from privq_client import AdminClient, ApiError, Client, Job, JobFailed

GRANT_RHO = 1.0
MEASURED = [["sex"], ["age", "sex"], ["grade"], ["region"], ["age", "grade"]]
MEASURE_RHO = 0.2


@pytest.fixture(scope="module")
def service(
    backend: str, empty_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("service")
    with running_service(backend, empty_database_url, folder, ADMIN_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def admin(service: Service) -> Iterator[AdminClient]:
    with AdminClient(service.url, service.admin_key) as client:
        yield client


@pytest.fixture(scope="module")
def setup(admin: AdminClient) -> dict[str, Any]:
    """A tenant with a grant of ρ = 1 on a dataset uploaded from a DataFrame."""
    tenant = admin.create_tenant(unique_name("analyst"))
    dataset = admin.upload_dataset(unique_name("people"), table(), SCHEMA, rho_total=2)
    admin.grant(dataset["id"], tenant["id"], GRANT_RHO)
    return {"tenant": tenant, "dataset_id": dataset["id"], "key": tenant["api_key"]}


@pytest.fixture(scope="module")
def analyst(service: Service, setup: dict[str, Any]) -> Iterator[Client]:
    with Client(service.url, setup["key"]) as client:
        yield client


@pytest.fixture(scope="module")
def dataset_id(setup: dict[str, Any]) -> str:
    return str(setup["dataset_id"])


@pytest.fixture(scope="module")
def raw(service: Service, setup: dict[str, Any]) -> Iterator[httpx.Client]:
    """Plain HTTP with the tenant's key: the service's own JSON to compare with."""
    headers = {"Authorization": f"Bearer {setup['key']}"}
    with httpx.Client(base_url=service.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def measured(analyst: Client, dataset_id: str) -> Job:
    """The first measurement, waited for."""
    job = analyst.measure(dataset_id, MEASURED, rho=MEASURE_RHO)
    assert job.status == "queued" and job.rho_charged == pytest.approx(MEASURE_RHO)
    return job.wait(timeout=120, progress=False)


def test_datasets_show_the_schema_but_never_the_row_count(
    analyst: Client, admin: AdminClient, dataset_id: str
) -> None:
    assert [d["id"] for d in analyst.datasets()] == [dataset_id]
    seen = analyst.dataset(dataset_id)
    assert [a["name"] for a in seen["attributes"]] == [a["name"] for a in SCHEMA["attributes"]]
    assert "rows" not in seen
    assert admin.dataset(dataset_id)["rows"] == len(table())


def test_a_dry_run_prices_the_request_and_charges_nothing(analyst: Client, dataset_id: str) -> None:
    before = analyst.budget(dataset_id)
    estimate = analyst.measure(dataset_id, [["region", "grade"]], rho=0.05, dry_run=True)
    assert estimate["dry_run"] is True and estimate["rho"] == pytest.approx(0.05)
    assert estimate["marginals"][0]["cells"] == 16
    assert estimate["rho_remaining"] == pytest.approx(before["rho_remaining"] - 0.05)
    laplace = analyst.measure(dataset_id, ["sex"], noise="laplace", scale=10, dry_run=True)
    assert laplace["scale"] == pytest.approx(10) and laplace["noise"] == "laplace"
    aim = analyst.aim(dataset_id, 0.1, dry_run=True, delta=1e-9)
    assert aim["mechanism"] == "aim" and aim["delta"] == pytest.approx(1e-9)
    mwem = analyst.mwem(dataset_id, 0.1, rounds=3, workload=[["age", "sex"]], dry_run=True)
    assert mwem["mechanism"] == "mwem" and mwem["rounds"] == 3
    by_epsilon = analyst.measure(dataset_id, [["sex"]], epsilon=0.5, delta=1e-6, dry_run=True)
    # (ε, δ) becomes the largest ρ whose ε at that δ is at most the ε given.
    assert 0.49 < by_epsilon["epsilon"] <= 0.5 and by_epsilon["delta"] == pytest.approx(1e-6)
    assert analyst.budget(dataset_id) == before


def test_a_measurement_waited_for_is_charged_in_the_budget_and_the_ledger(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    assert measured.status == "succeeded" and measured.done
    assert measured.model_version is not None and measured.model_version >= 1
    budget = analyst.budget(dataset_id, delta=1e-9)
    assert budget["delta"] == pytest.approx(1e-9)
    assert budget["rho_limit"] == pytest.approx(GRANT_RHO)
    charges = [line for line in analyst.ledger(dataset_id) if line["job_id"] == measured.id]
    assert [line["rho"] for line in charges] == [pytest.approx(MEASURE_RHO)]
    stored = [m for m in analyst.measurements(dataset_id) if m["job_id"] == measured.id]
    assert [m["attributes"] for m in stored] == MEASURED
    cells = {"sex": 3, "age": 5, "grade": 4, "region": 4}
    for measurement in stored:
        expected = 1
        for name in measurement["attributes"]:
            expected *= cells[name]
        assert len(measurement["values"]) == expected
    model = analyst.model(dataset_id)
    assert model["version"] >= measured.model_version
    assert analyst.job(measured.id).status == "succeeded"


def test_a_marginal_is_a_frame_of_the_services_cells(
    analyst: Client, raw: httpx.Client, dataset_id: str, measured: Job
) -> None:
    frame = analyst.marginal(dataset_id, ["age", "sex"])
    body = raw.get(f"/v1/datasets/{dataset_id}/marginals", params={"attrs": "age,sex"}).json()
    assert list(frame.columns) == ["age", "sex", "count", "standard_error"]
    assert len(frame) == 5 * 3
    assert [list(row) for row in frame[["age", "sex"]].astype(str).to_numpy()] == body["values"]
    assert frame["count"].tolist() == pytest.approx(body["counts"])
    assert (frame["standard_error"] == body["standard_error"]).all()
    assert frame.attrs["model_version"] == body["model_version"]
    assert frame.attrs["measured"] is True
    # Labels keep the schema's order, not the alphabet's.
    assert list(frame["age"].cat.categories) == [
        "[0, 18)",
        "[18, 30)",
        "[30, 45)",
        "[45, 65)",
        "[65, 120]",
    ]
    assert frame["age"].cat.ordered


def test_a_marginal_no_measurement_covers_has_no_standard_error(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    frame = analyst.marginal(dataset_id, "region,grade")
    assert list(frame.columns) == ["region", "grade", "count"]
    assert frame.attrs["measured"] is False and frame.attrs["standard_error"] is None
    assert len(frame) == 16


def test_a_count_is_one_row_with_the_filters(
    analyst: Client, raw: httpx.Client, dataset_id: str, measured: Job
) -> None:
    where = {"sex": ["F", "NA"], "age": {"ge": 30, "lt": 45}}
    frame = analyst.count(dataset_id, where)
    params = [("where", "sex:F,NA"), ("where", "age:30..45")]
    body = raw.get(f"/v1/datasets/{dataset_id}/count", params=params).json()
    assert frame.to_dict("records") == [
        {"sex": "F,NA", "age": "30..45", "count": pytest.approx(body["count"])}
    ]
    assert frame.attrs["model_version"] == body["model_version"]
    everyone = analyst.count(dataset_id)
    assert list(everyone.columns) == ["count"]
    assert everyone["count"].iloc[0] > frame["count"].iloc[0]


def test_factored_queries_are_frames_of_their_axes(
    analyst: Client, raw: httpx.Client, dataset_id: str, measured: Job
) -> None:
    query: dict[str, Any] = {
        "where": {"sex": ["F"]},
        "by": {"grade": "value"},
        "moments": {"age": 2},
    }
    frame = analyst.query(dataset_id, **query)
    body = raw.post(f"/v1/datasets/{dataset_id}/queries", json={"queries": [query]}).json()
    (answer,) = body["answers"]
    assert list(frame.columns) == ["grade", "age", "value", "low", "high"]
    assert [list(row) for row in frame[["grade", "age"]].astype(str).to_numpy()] == answer["labels"]
    assert frame["value"].tolist() == pytest.approx(answer["values"])
    assert frame["low"].tolist() == pytest.approx([pair[0] for pair in answer["bounds"]])
    assert frame["high"].tolist() == pytest.approx([pair[1] for pair in answer["bounds"]])
    assert frame.attrs["model_version"] == body["model_version"]

    cdf, groups, only_where = analyst.queries(
        dataset_id,
        [
            {"by": {"age": "cdf"}},
            {
                "by": {
                    "region": {"groups": {"coast": ["east", "west"], "inland": ["north", "south"]}}
                }
            },
            {"where": {"age": {"ge": 30}}},
        ],
    )
    assert list(cdf.columns) == ["age", "count"] and len(cdf) == 5
    assert cdf["count"].is_monotonic_increasing
    assert groups["region"].tolist() == ["coast", "inland"]
    assert list(only_where.columns) == ["count"] and len(only_where) == 1
    grouped = analyst.query(dataset_id, by={"region": {"coast": ["east", "west"]}})
    assert grouped["count"].tolist() == pytest.approx(groups["count"].tolist()[:1])


def test_synthetic_data_is_a_typed_frame_and_repeatable_with_a_seed(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    first = analyst.synthetic(dataset_id, rows=60, seed=11)
    again = analyst.synthetic(dataset_id, rows=60, seed=11)
    pd.testing.assert_frame_equal(first, again)
    assert list(first.columns) == ["sex", "age", "grade", "region"]
    assert len(first) == 60 and first.attrs["rows"] == 60
    assert first.attrs["model_version"] == analyst.model(dataset_id)["version"]
    # "NA" is a category of the schema, not a missing value.
    assert list(first["sex"].cat.categories) == ["F", "M", "NA"]
    assert first["sex"].notna().all()
    assert first["grade"].between(0, 3).all() and pd.api.types.is_integer_dtype(first["grade"])
    assert analyst.synthetic(dataset_id, rows=0).empty


def test_synthetic_records_are_rounded_by_default_and_sampled_on_request(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    rounded = analyst.synthetic(dataset_id, seed=5)
    assert rounded.attrs["method"] == "round"
    total = analyst.count(dataset_id)["count"].iloc[0]
    assert abs(len(rounded) - total) <= 1  # rows default to the model's estimated total
    # Numeric attributes come back as numbers of their original scale, inside the bins.
    assert pd.api.types.is_float_dtype(rounded["age"])
    assert rounded["age"].between(0, 120).all()
    sampled = analyst.synthetic(dataset_id, rows=80, method="sample", seed=5)
    assert sampled.attrs["method"] == "sample" and len(sampled) == 80


def test_refusals_raise_api_error_with_the_contracts_code(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    with pytest.raises(ApiError) as missing:
        analyst.budget("no-such-dataset")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    remaining = analyst.budget(dataset_id)["rho_remaining"]
    with pytest.raises(ApiError) as short:
        analyst.measure(dataset_id, [["sex"]], rho=remaining + 1)
    assert (short.value.status, short.value.code) == (409, "insufficient_budget")
    assert short.value.rho_remaining == pytest.approx(remaining)
    assert short.value.details["rho_remaining"] == pytest.approx(remaining)
    assert "insufficient_budget" in str(short.value)
    assert analyst.budget(dataset_id)["rho_remaining"] == pytest.approx(remaining)
    with pytest.raises(ApiError) as unknown:
        analyst.measure(dataset_id, [["height"]], rho=0.01)
    assert (unknown.value.status, unknown.value.code) == (422, "invalid_request")
    assert "height" in unknown.value.message
    with pytest.raises(ApiError) as bad_marginal:
        analyst.marginal(dataset_id, ["height"])
    assert bad_marginal.value.status == 422
    with pytest.raises(ApiError) as no_job:
        analyst.job("no-such-job")
    assert no_job.value.status == 404


def test_a_replayed_idempotency_key_returns_the_first_job_charged_once(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    before = analyst.budget(dataset_id)["rho_spent"]
    key = unique_name("retry")
    first = analyst.measure(
        dataset_id, [["region"]], noise="laplace", scale=20, idempotency_key=key
    )
    second = analyst.measure(
        dataset_id, [["region"]], noise="laplace", scale=20, idempotency_key=key
    )
    assert second.id == first.id and second.accepted is not None and second.accepted["replayed"]
    assert first.accepted is not None and first.accepted["scale"] == pytest.approx(20)
    first.wait(timeout=120, progress=False)
    spent = analyst.budget(dataset_id)["rho_spent"]
    assert spent == pytest.approx(before + (1 / 20) ** 2 / 2)


def test_mechanisms_run_as_jobs_and_are_listed_across_pages(
    analyst: Client, service: Service, setup: dict[str, Any], dataset_id: str, measured: Job
) -> None:
    aim = analyst.aim(dataset_id, 0.05, workload=[["age", "grade"], ["sex", "region"]])
    mwem = analyst.mwem(dataset_id, 0.05, rounds=2, workload=[["age", "sex"], "region"])
    assert aim.wait(timeout=120, progress=False).status == "succeeded"
    assert mwem.wait(timeout=120, progress=False).status == "succeeded"
    assert mwem.accepted is not None
    assert sorted(map(sorted, mwem.accepted["workload"])) == [["age", "sex"], ["region"]]

    requests: list[httpx.Request] = []
    hooks = {"request": [requests.append]}
    with (
        httpx.Client(event_hooks=hooks) as http,
        Client(service.url, setup["key"], http_client=http) as paged,
    ):
        listed = paged.jobs(page_size=1)
    everything = analyst.jobs()
    assert [job["id"] for job in listed] == [job["id"] for job in everything]
    assert len(listed) >= 4 and len(requests) == len(listed)  # a page per job
    assert listed[0]["id"] == mwem.id  # newest first
    assert [job["id"] for job in analyst.jobs(kind="aim")] == [aim.id]
    assert {job["status"] for job in analyst.jobs(status="succeeded", dataset_id=dataset_id)} == {
        "succeeded"
    }


def test_cancelling_a_queued_job_refunds_it_and_wait_reports_the_cancellation(
    analyst: Client, dataset_id: str, measured: Job
) -> None:
    before = analyst.budget(dataset_id)["rho_spent"]
    # One worker: the second job stays queued behind the first (many small rounds).
    running = analyst.mwem(dataset_id, 0.02, rounds=15)
    queued = analyst.measure(dataset_id, [["grade"]], rho=0.01)
    cancelled = analyst.cancel_job(queued.id)
    assert cancelled.status == "cancelled"
    with pytest.raises(JobFailed) as failed:
        queued.wait(timeout=60, progress=False)
    assert failed.value.status == "cancelled"
    assert queued.wait(timeout=60, progress=False, raise_on_failure=False).status == "cancelled"
    running.cancel()
    assert running.wait(timeout=120, raise_on_failure=False, progress=False).status in (
        "cancelled",
        "succeeded",
    )
    refunds = [line for line in analyst.ledger(dataset_id) if line["job_id"] == queued.id]
    assert sorted(line["rho"] for line in refunds) == [pytest.approx(-0.01), pytest.approx(0.01)]
    with pytest.raises(ApiError) as finished:
        measured.cancel()
    assert (finished.value.status, finished.value.code) == (409, "job_finished")
    assert analyst.budget(dataset_id)["rho_spent"] <= before + 0.02 + 1e-9


def test_wait_shows_a_progress_bar_only_when_asked_or_watched(
    analyst: Client, dataset_id: str, measured: Job, capsys: pytest.CaptureFixture[str]
) -> None:
    job = analyst.measure(dataset_id, [["sex", "region"]], rho=0.01)
    job.wait(timeout=120)  # stderr is captured, not a terminal: no bar
    assert capsys.readouterr().err == ""
    analyst.job(job.id).wait(timeout=120, progress=True)
    shown = capsys.readouterr().err
    assert "100%" in shown and job.id[:8] in shown


def test_the_admin_key_holds_no_budget(service: Service, dataset_id: str) -> None:
    with Client(service.url, service.admin_key) as curator, pytest.raises(ApiError) as refused:
        curator.measure(dataset_id, [["sex"]], rho=0.01)
    assert refused.value.status == 403
