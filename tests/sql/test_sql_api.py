"""POST /v1/datasets/{id}/sql on both backends: the same numbers as POST /queries and
GET /marginals from the same model version, CSV on request, refusals as 422 JSON, free
(the ledger is untouched); `Client.sql` and `privq sql` give the same table."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from conftest import ADMIN_HEADERS, unique_name
from sqlalchemy import func, select

from app.cli import main
from app.config import get_settings
from app.db import Job, LedgerEntry, MeasurementRecord
from app.ingest import pack_column
from app.limits import COUNT_DECIMALS
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.schema import parse_schema
from app.services import models as model_service
from app.services.columns import load_columns
from privq_client import Client, UnmeasuredAttributesWarning
from privq_client.errors import ApiError

# SQL gives counts to thousandths of a record, as GET /marginals does.
TO_THOUSANDTHS = 10.0**-COUNT_DECIMALS

SCHEMA = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "race", "type": "categorical", "values": ["a", "b", "c"]},
        {"name": "hours-per-week", "type": "integer", "size": 4},
    ]
}
MEASURED = [(("sex", "age"), 2.0), (("race", "sex"), 3.0), (("hours-per-week",), 1.0)]


def _csv(rows: int = 400, seed: int = 4) -> str:
    rng = np.random.default_rng(seed)
    lines = ["sex,age,race,hours-per-week"]
    for _ in range(rows):
        sex = int(rng.integers(0, 2))
        lines.append(
            f"{'FM'[sex]},{int(rng.uniform(0, 100))},{'abc'[(sex + int(rng.integers(0, 2))) % 3]},"
            f"{int(rng.integers(0, 4))}"
        )
    return "\n".join(lines) + "\n"


def _fit(database, dataset_id: str, schema=SCHEMA, measured=MEASURED) -> int:
    """Noisy true marginals (numpy noise: test only, never a release), fitted and saved."""
    rng = np.random.default_rng(0)
    with database.read_only() as session:
        columns = load_columns(session, dataset_id)
    domain = parse_schema(schema).domain()
    measurements = []
    with database.unit_of_work() as session:
        job = Job(dataset_id=dataset_id, kind="measure", params={}, status="succeeded")
        session.add(job)
        session.flush()
        high_water = 0
        numbered = session.scalar(  # measurements the dataset has already
            select(func.count())
            .select_from(MeasurementRecord)
            .where(MeasurementRecord.dataset_id == dataset_id)
        )
        for position, (attrs, sigma) in enumerate(measured):
            flat = np.ravel_multi_index([columns[a] for a in attrs], domain.shape(attrs))
            truth = np.bincount(flat, minlength=domain.cells(attrs))
            noisy = (truth + np.round(rng.normal(0, sigma, truth.size))).astype(np.int64)
            record = MeasurementRecord(
                number=numbered + position + 1,
                dataset_id=dataset_id,
                job_id=job.id,
                position=position,
                attributes=list(attrs),
                noise="gaussian",
                scale=sigma,
                rho_units=1,
                values=pack_column(noisy),
            )
            session.add(record)
            session.flush()
            high_water = record.id
            measurements.append(Measurement(attrs, noisy, "gaussian", sigma))
        model, fitted = fit(domain, measurements, max_iterations=300)
        row = model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=fitted,
            high_water=high_water,
            measurement_count=len(measurements),
        )
    return row.version


@pytest.fixture(scope="module")
def world(api, database):
    tenant, stranger = api.create_tenant(), api.create_tenant()
    name = unique_name("census")
    dataset = api.upload_dataset(_csv(), SCHEMA, name=name)
    api.grant(dataset["id"], tenant["id"], 1.0)
    version = _fit(database, dataset["id"])
    return {
        "tenant": tenant,
        "stranger": stranger,
        "dataset": dataset,
        "name": name,
        "version": version,
        "url": f"/v1/datasets/{dataset['id']}",
    }


def _sql(client, world, query, headers=None, **kwargs):
    return client.post(
        world["url"] + "/sql",
        json={"query": query},
        headers={**(headers or world["tenant"]["headers"]), **kwargs.pop("extra", {})},
        **kwargs,
    )


def _ledger_lines(database) -> int:
    with database.read_only() as session:
        return int(session.execute(select(func.count()).select_from(LedgerEntry)).scalar_one())


def test_answers_equal_queries_and_marginals_and_spend_nothing(client, world, database):
    before = _ledger_lines(database)
    query = (
        'SELECT race, COUNT(*) AS n, AVG(age) AS mean_age FROM "{name}" '
        "WHERE sex = 'F' AND \"hours-per-week\" >= 2 GROUP BY race"
    ).format(name=world["name"])
    body = _sql(client, world, query).json()
    assert body["columns"] == ["race", "n", "mean_age"]
    assert body["model_version"] == world["version"]
    assert body["unmeasured"] == []
    where = {"sex": ["F"], "hours-per-week": {"ge": 2}}
    answers = client.post(
        world["url"] + "/queries",
        json={
            "queries": [
                {"where": where, "by": {"race": "value"}},
                {"where": where, "by": {"race": "value"}, "moments": {"age": 1}},
            ]
        },
        headers=world["tenant"]["headers"],
    ).json()
    counts = answers["answers"][0]["values"]
    sums = answers["answers"][1]["values"]
    assert [row[0] for row in body["rows"]] == ["a", "b", "c"]
    assert [row[1] for row in body["rows"]] == pytest.approx(counts, abs=TO_THOUSANDTHS)
    assert [row[2] for row in body["rows"]] == pytest.approx(
        [s / n for s, n in zip(sums, counts, strict=True)]
    )
    marginal = client.get(
        world["url"] + "/marginals", params={"attrs": "sex,age"}, headers=world["tenant"]["headers"]
    ).json()
    grouped = _sql(
        client, world, f'SELECT sex, age, COUNT(*) FROM "{world["dataset"]["id"]}" GROUP BY 1, 2'
    ).json()
    assert [row[2] for row in grouped["rows"]] == pytest.approx(marginal["counts"], abs=1e-3)
    assert [row[:2] for row in grouped["rows"]] == marginal["values"]
    # COUNT over sex × age cells, measured with σ = 2: the per-cell standard error.
    assert grouped["standard_errors"][0] == [None, None, pytest.approx(marginal["standard_error"])]
    assert _ledger_lines(database) == before


def test_csv_on_accept(client, world):
    response = _sql(
        client,
        world,
        f'SELECT sex, COUNT(*) AS n FROM "{world["name"]}" GROUP BY sex ORDER BY sex',
        extra={"Accept": "text/csv"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["x-model-version"] == str(world["version"])
    rows = list(csv.reader(io.StringIO(response.text)))
    assert rows[0] == ["sex", "n"] and [r[0] for r in rows[1:]] == ["F", "M"]
    assert all(float(r[1]) > 0 for r in rows[1:])


def test_refusals_are_422_json_with_code_and_position(client, world):
    name = world["name"]
    cases = [
        (f'SELECT COUNT(*) FROM "{name}" a JOIN "{name}" b ON a.sex = b.sex', "unsupported_sql"),
        (f'SELECT COUNT(*) FROM "{name}" WHERE', "bad_sql"),
        ("SELECT COUNT(*) FROM somewhere_else", "bad_sql"),
        (
            f'SELECT COUNT(*) FROM "{name}" WHERE ' + "(" * 50 + "sex='F'" + ")" * 50,
            "sql_too_complex",
        ),
    ]
    for query, code in cases:
        response = _sql(client, world, query)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == code, error
        assert "line" in error and "column" in error, error
    too_long = _sql(client, world, "SELECT " + "x" * 20_000)
    assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "sql_too_complex"


def test_only_grantees_and_the_admin_see_it(client, world):
    query = f'SELECT COUNT(*) FROM "{world["name"]}"'
    assert _sql(client, world, query, headers=world["stranger"]["headers"]).status_code == 404
    assert _sql(client, world, query, headers=ADMIN_HEADERS).status_code == 200


def test_no_model_is_404(client, api):
    tenant, dataset = api.tenant_with_grant(1.0)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/sql",
        json={"query": f'SELECT COUNT(*) FROM "{dataset["id"]}"'},
        headers=tenant["headers"],
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "no_model"


MISSING_SCHEMA = {
    "attributes": [
        {**a, "missing": True} if a["name"] == "hours-per-week" else a for a in SCHEMA["attributes"]
    ]
}


def test_is_null_reaches_the_missing_code(client, api, database):
    tenant = api.create_tenant()
    lines = _csv().splitlines()
    # Every fifth record has no hours: an empty cell.
    lines = [lines[0]] + [
        line.rsplit(",", 1)[0] + "," if i % 5 == 0 else line for i, line in enumerate(lines[1:])
    ]
    name = unique_name("missing")
    dataset = api.upload_dataset("\n".join(lines) + "\n", MISSING_SCHEMA, name=name)
    api.grant(dataset["id"], tenant["id"], 1.0)
    _fit(database, dataset["id"], MISSING_SCHEMA)
    url = f"/v1/datasets/{dataset['id']}"

    def sql(query):
        response = client.post(url + "/sql", json={"query": query}, headers=tenant["headers"])
        assert response.status_code == 200, response.text
        return response.json()

    def count(where):
        body = client.post(
            url + "/queries", json={"queries": [{"where": where}]}, headers=tenant["headers"]
        ).json()
        return body["answers"][0]["values"][0]

    null = sql(f'SELECT COUNT(*) FROM "{name}" WHERE "hours-per-week" IS NULL')["rows"][0][0]
    assert null == pytest.approx(count({"hours-per-week": [None]}), abs=TO_THOUSANDTHS)
    present = sql(f'SELECT COUNT(*) FROM "{name}" WHERE "hours-per-week" IS NOT NULL')
    assert present["rows"][0][0] == pytest.approx(
        count({"hours-per-week": [0, 1, 2, 3]}), abs=TO_THOUSANDTHS
    )
    grouped = sql(f'SELECT "hours-per-week", COUNT(*) FROM "{name}" GROUP BY 1')
    assert [row[0] for row in grouped["rows"]] == [0, 1, 2, 3, None]
    assert grouped["rows"][-1][1] == pytest.approx(null)


def test_unmeasured_attributes_are_named_in_the_body_and_the_header(client, api, database):
    tenant = api.create_tenant()
    name = unique_name("unmeasured")
    dataset = api.upload_dataset(_csv(), SCHEMA, name=name)
    api.grant(dataset["id"], tenant["id"], 1.0)
    _fit(database, dataset["id"], measured=[(("sex", "age"), 2.0)])
    url = f"/v1/datasets/{dataset['id']}/sql"
    query = f"SELECT race, COUNT(*) FROM \"{name}\" WHERE sex = 'F' GROUP BY race"
    for accept in ("application/json", "text/csv"):
        response = client.post(
            url, json={"query": query}, headers={**tenant["headers"], "Accept": accept}
        )
        assert response.status_code == 200, response.text
        assert response.headers["Privq-Unmeasured"] == "race"
    assert client.post(url, json={"query": query}, headers=tenant["headers"]).json()[
        "unmeasured"
    ] == ["race"]
    measured = client.post(
        url,
        json={"query": f'SELECT sex, COUNT(*) FROM "{name}" GROUP BY sex'},
        headers=tenant["headers"],
    )
    assert "Privq-Unmeasured" not in measured.headers
    analyst = Client("http://testserver", tenant["api_key"], http_client=client)
    with pytest.warns(UnmeasuredAttributesWarning, match="race") as caught:
        analyst.sql(dataset["id"], query)
    assert caught[0].filename == __file__


def test_client_sql_returns_a_frame(client, world):
    analyst = Client("http://testserver", world["tenant"]["api_key"], http_client=client)
    frame = analyst.sql(
        world["dataset"]["id"],
        f'SELECT race, COUNT(*) AS n FROM "{world["name"]}" GROUP BY race ORDER BY n DESC',
    )
    assert list(frame.columns) == ["race", "n"]
    assert frame["n"].is_monotonic_decreasing and len(frame) == 3
    assert frame.attrs["model_version"] == world["version"]
    with pytest.raises(ApiError) as refused:
        analyst.sql(world["dataset"]["id"], "SELECT DISTINCT race FROM x")
    assert refused.value.code == "unsupported_sql"


def test_cli_prints_a_table_json_and_csv(world, database_url, monkeypatch, capsys):
    monkeypatch.setenv("PRIVQ_DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        query = f'SELECT sex, COUNT(*) AS n FROM "{world["name"]}" GROUP BY sex'
        assert main(["sql", world["name"], query]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == ["sex", "n"] and table[1].startswith("F")
        assert f"model version {world['version']}" in table[-1]
        assert main(["sql", world["dataset"]["id"], query, "--json"]) == 0
        body = json.loads(capsys.readouterr().out)
        assert body["columns"] == ["sex", "n"] and len(body["rows"]) == 2
        assert main(["sql", world["name"], query, "--csv"]) == 0
        assert capsys.readouterr().out.splitlines()[0] == "sex,n"
        assert main(["sql", world["name"], "SELECT * FROM t"]) == 1
        assert "SELECT * at line 1, column 8 is not supported" in capsys.readouterr().err
        assert main(["sql", "no-such-dataset", query]) == 1
    finally:
        get_settings.cache_clear()
