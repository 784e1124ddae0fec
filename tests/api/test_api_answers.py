"""Free answers over HTTP: model, marginals, count, queries, synthetic — on both backends.

A model is fitted in the test (no worker): measurements are the dataset's true
marginals plus numpy noise (test-only, never a release), stored as measurement rows of
a job, fitted with `app.pgm.estimation.fit` and saved with `save_version`.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import threading

import numpy as np
import pytest
from conftest import ADMIN_HEADERS, unique_name
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from app.api import create_app
from app.db import Job, LedgerEntry, MeasurementRecord
from app.ingest import pack_column
from app.pgm import queries as q
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.pgm.queries import FactoredQuery
from app.schema import parse_schema
from app.services import models as model_service
from app.services.columns import load_columns

SCHEMA = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "race", "type": "categorical", "values": ["a", "b", "c"]},
        {"name": "hours", "type": "integer", "size": 4},
        {"name": "region", "type": "categorical", "values": ["n", "s", "e", "w"]},
    ]
}
AGE_MIDPOINTS = np.array([9.0, 24.0, 37.5, 55.0, 92.5])
AGE_LABELS = ["[0, 18)", "[18, 30)", "[30, 45)", "[45, 65)", "[65, 120]"]
# (attributes, noise, scale); region is never measured.
MEASURED = [
    (("sex", "age"), "gaussian", 2.0),
    (("age",), "laplace", 1.5),
    (("race", "sex"), "gaussian", 3.0),
    (("hours",), "gaussian", 1.0),
]


def _csv(rows: int, seed: int = 7) -> str:
    rng = np.random.default_rng(seed)
    sex = rng.integers(0, 2, rows)
    ages = np.where(sex == 0, rng.uniform(0, 70, rows), rng.uniform(10, 119, rows)).round()
    race = (sex + rng.integers(0, 2, rows)) % 3
    hours = rng.integers(0, 4, rows)
    region = rng.integers(0, 4, rows)
    lines = ["sex,age,race,hours,region"]
    for i in range(rows):
        lines.append(
            f"{'FM'[sex[i]]},{int(ages[i])},{'abc'[race[i]]},{hours[i]},{'nsew'[region[i]]}"
        )
    return "\n".join(lines) + "\n"


def fit_test_model(database, dataset_id: str, measured=MEASURED, seed: int = 0):
    """Store noisy true marginals as measurements of a job, fit, save; the new version."""
    rng = np.random.default_rng(seed)
    with database.read_only() as session:
        columns = load_columns(session, dataset_id)
    domain = parse_schema(SCHEMA).domain()
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
        for position, (attrs, noise, scale) in enumerate(measured):
            flat = np.ravel_multi_index([columns[a] for a in attrs], domain.shape(attrs))
            truth = np.bincount(flat, minlength=domain.cells(attrs))
            draw = (
                rng.normal(0, scale, truth.size)
                if noise == "gaussian"
                else rng.laplace(0, scale, truth.size)
            )
            noisy = (truth + np.round(draw)).astype(np.int64)
            record = MeasurementRecord(
                number=numbered + position + 1,
                dataset_id=dataset_id,
                job_id=job.id,
                position=position,
                attributes=list(attrs),
                noise=noise,
                scale=scale,
                rho_units=1,
                values=pack_column(noisy),
            )
            session.add(record)
            session.flush()
            high_water = record.id
            measurements.append(Measurement(attrs, noisy, noise, scale))
        model, record = fit(domain, measurements, max_iterations=500)
        row = model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=record,
            high_water=high_water,
            measurement_count=len(measurements),
        )
    return row.version, model


@pytest.fixture(scope="module")
def world(api, database):
    """A tenant with a grant on a dataset that has a fitted model; another tenant without."""
    tenant = api.create_tenant()
    stranger = api.create_tenant()
    dataset = api.upload_dataset(_csv(600), SCHEMA, name=unique_name("answers"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    version, model = fit_test_model(database, dataset["id"])
    return {
        "tenant": tenant,
        "stranger": stranger,
        "dataset": dataset,
        "version": version,
        "model": model,
        "base": f"/v1/datasets/{dataset['id']}",
    }


def _get(client, world, path: str, headers=None, **params):
    return client.get(
        world["base"] + path, params=params, headers=headers or world["tenant"]["headers"]
    )


def _post_queries(client, world, queries, headers=None):
    return client.post(
        world["base"] + "/queries",
        json={"queries": queries},
        headers=headers or world["tenant"]["headers"],
    )


def _error(response, status: int, code: str = "invalid_request") -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    return error["message"]


# ---- model --------------------------------------------------------------------------


def test_no_model_before_the_first_fit_is_404_no_model(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    base = f"/v1/datasets/{dataset['id']}"
    for path in ("/model", "/marginals?attrs=sex", "/count", "/synthetic"):
        message = _error(client.get(base + path, headers=tenant["headers"]), 404, "no_model")
        assert message == "no model yet: measure something first"
    response = client.post(base + "/queries", json={"queries": [{}]}, headers=tenant["headers"])
    _error(response, 404, "no_model")


def test_model_describes_version_cliques_and_covered_measurements(client, world) -> None:
    body = _get(client, world, "/model").json()
    assert body["version"] == world["version"] == 1
    assert {tuple(c) for c in body["cliques"]} == set(world["model"].cliques)
    assert body["iterations"] >= 1 and math.isfinite(body["loss"]) and body["fitted_at"]
    assert [m["attributes"] for m in body["measurements"]] == [list(a) for a, _, _ in MEASURED]
    first, second = body["measurements"][:2]
    assert first["noise"] == "gaussian" and first["sigma"] == 2.0 and "scale" not in first
    assert second["noise"] == "laplace" and second["scale"] == 1.5 and "sigma" not in second
    assert all("values" not in m for m in body["measurements"])


# ---- marginals ----------------------------------------------------------------------


def test_marginal_equals_the_models_own_marginal_with_row_major_labels(client, world) -> None:
    body = _get(client, world, "/marginals", attrs="age,sex").json()
    expected = world["model"].marginal(("age", "sex"))
    assert body["attributes"] == ["age", "sex"] and body["model_version"] == 1
    # Counts are rounded to thousandths of a record.
    np.testing.assert_allclose(body["counts"], expected.ravel(), rtol=0, atol=5e-4 + 1e-9)
    assert body["counts"] == [round(c, 3) for c in body["counts"]]
    assert body["values"] == [[a, s] for a in AGE_LABELS for s in ("F", "M")]
    assert min(body["counts"]) >= 0
    assert sum(body["counts"]) == pytest.approx(world["model"].total, abs=10 * 5e-4)


def test_marginal_standard_error_is_the_inverse_variance_combination(client, world) -> None:
    # age: (sex, age) σ=2 sums 2 cells → 2·4 = 8; (age) Laplace b=1.5 → 2·1.5² = 4.5.
    age = _get(client, world, "/marginals", attrs="age").json()
    assert age["covered_by"] == 2 and age["measured"] is True
    assert age["standard_error"] == pytest.approx(math.sqrt(1 / (1 / 8 + 1 / 4.5)), rel=1e-12)
    # sex: (sex, age) sums 5 cells → 5·4 = 20; (race, sex) σ=3 sums 3 → 3·9 = 27.
    sex = _get(client, world, "/marginals", attrs="sex").json()
    assert sex["covered_by"] == 2
    assert sex["standard_error"] == pytest.approx(math.sqrt(1 / (1 / 20 + 1 / 27)), rel=1e-12)
    both = _get(client, world, "/marginals", attrs="sex,age").json()
    assert both["covered_by"] == 1 and both["standard_error"] == pytest.approx(2.0)
    assert both["error_bound"]["method"] == "AIM theorem 2" and both["note"] is None
    # race × age is touched but covered by no single measurement.
    mixed = _get(client, world, "/marginals", attrs="race,age").json()
    assert mixed["covered_by"] == 0 and mixed["standard_error"] is None
    assert mixed["measured"] is False and mixed["note"] is None


def test_marginal_over_unmeasured_attribute_says_so(client, world) -> None:
    body = _get(client, world, "/marginals", attrs="region").json()
    assert body["measured"] is False and body["standard_error"] is None
    assert body["unmeasured_attributes"] == ["region"]
    assert "no measurement touched region" in body["note"]
    assert "maximum-entropy" in body["note"]
    # Maximum entropy: uniform over the unmeasured attribute.
    np.testing.assert_allclose(body["counts"], [world["model"].total / 4] * 4, atol=5e-4)
    partly = _get(client, world, "/marginals", attrs="sex,region").json()
    assert partly["unmeasured_attributes"] == ["region"] and "region" in partly["note"]


@pytest.mark.parametrize(
    ("attrs", "needle"),
    [
        ("height", "unknown attribute 'height'"),
        ("sex,sex", "named twice: sex"),
        ("sex,", "one or more attribute names"),
        ("", "one or more attribute names"),
    ],
)
def test_marginal_refuses_bad_attribute_lists(client, world, attrs, needle) -> None:
    message = _error(_get(client, world, "/marginals", attrs=attrs), 422)
    assert message.startswith("attrs:") and needle in message


def test_marginal_without_attrs_parameter_is_422(client, world) -> None:
    _error(_get(client, world, "/marginals"), 422)


def test_marginal_over_the_cell_limit_is_422(settings, database, world) -> None:
    small = settings.model_copy(update={"max_marginal_cells": 20})
    with TestClient(create_app(small, database=database)) as capped:
        assert _get(capped, world, "/marginals", attrs="age,race").status_code == 200  # 15
        response = _get(capped, world, "/marginals", attrs="age,hours")  # 20
        assert response.status_code == 200
        response = _get(capped, world, "/marginals", attrs="age,hours,sex")  # 40
        message = _error(response, 422, "too_many_cells")
        assert "40 cells" in message and response.json()["error"]["max_cells"] == 20


# ---- count --------------------------------------------------------------------------


def _model_count(model, **codes) -> float:
    factors = [q.indicator(model.domain, a, c) for a, c in codes.items()]
    return float(model.answer(FactoredQuery(model.domain, tuple(factors))))


@pytest.mark.parametrize(
    ("where", "codes"),
    [
        (["sex:F"], {"sex": [0]}),
        (["sex:F,M"], {"sex": [0, 1]}),
        (["age:30..65"], {"age": [2, 3]}),
        (["age:..30", "sex:M"], {"age": [0, 1], "sex": [1]}),
        (["age:45.."], {"age": [3, 4]}),
        (["age:[18, 30),[65, 120]"], {"age": [1, 4]}),
        (["hours:1,3", "race:b"], {"hours": [1, 3], "race": [1]}),
        (["hours:1..3"], {"hours": [1, 2]}),
        (["sex:F,M", "sex:M"], {"sex": [1]}),  # repeated filters intersect
    ],
)
def test_count_equals_the_models_answer_on_the_same_codes(client, world, where, codes) -> None:
    body = _get(client, world, "/count", where=where).json()
    assert body["model_version"] == 1
    assert body["count"] == pytest.approx(_model_count(world["model"], **codes), rel=1e-9)


def test_count_without_filters_is_the_models_total(client, world) -> None:
    body = _get(client, world, "/count").json()
    assert body["count"] == pytest.approx(world["model"].total, rel=1e-9)


def test_count_of_unmeasured_attribute_says_so(client, world) -> None:
    body = _get(client, world, "/count", where=["region:n"]).json()
    assert "region" in body["note"]


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        ("sex", "expected attr:value1,value2 or attr:lo..hi"),
        ("height:1", "unknown attribute 'height'"),
        ("sex:X", "unknown value(s) 'X'"),
        ("sex:", "at least one value"),
        ("sex:F,,M", "empty value"),
        ("age:abc..30", "is not a number"),
        ("age:..", "needs a lower or upper bound"),
        ("hours:7", "unknown value(s) '7'"),
    ],
)
def test_count_refuses_bad_filters_naming_the_parameter(client, world, where, needle) -> None:
    response = _get(client, world, "/count", where=[where])
    message = _error(response, 422)
    assert message.startswith("where:") and needle in message
    assert response.json()["error"]["parameter"] == "where"


# ---- factored queries ---------------------------------------------------------------


def test_factored_queries_match_the_models_marginals(client, world) -> None:
    model = world["model"]
    queries = [
        {"where": {"sex": ["F"], "age": {"ge": 30, "lt": 65}}},
        {"by": {"race": "value"}, "where": {"sex": ["M"]}},
        {"by": {"age": "cdf"}},
        {"by": {"race": {"groups": {"ab": ["a", "b"], "c": ["c"]}}, "sex": "value"}},
        {"weights": {"hours": [0, 1, 2, 3]}},
        {"moments": {"age": 2}, "by": {"sex": "value"}},
        {"by": {"hours": "value"}},
    ]
    body = _post_queries(client, world, queries).json()
    assert body["model_version"] == 1 and len(body["answers"]) == len(queries)
    only_where, by_race, cdf, grouped, weighted, moments, hours = body["answers"]

    sex_age = model.marginal(("sex", "age"))
    assert only_where["attributes"] == [] and only_where["labels"] == [[]]
    assert only_where["values"] == pytest.approx([sex_age[0, 2:4].sum()], rel=1e-9)

    race_sex = model.marginal(("race", "sex"))
    assert by_race["attributes"] == ["race"] and by_race["labels"] == [["a"], ["b"], ["c"]]
    np.testing.assert_allclose(by_race["values"], race_sex[:, 1], rtol=1e-9)

    age = model.marginal(("age",))
    assert cdf["labels"] == [["< 18"], ["< 30"], ["< 45"], ["< 65"], ["<= 120"]]
    np.testing.assert_allclose(cdf["values"], np.cumsum(age), rtol=1e-9)

    assert grouped["attributes"] == ["race", "sex"]
    assert grouped["labels"] == [["ab", "F"], ["ab", "M"], ["c", "F"], ["c", "M"]]
    expected = np.stack([race_sex[:2].sum(axis=0), race_sex[2]]).ravel()
    np.testing.assert_allclose(grouped["values"], expected, rtol=1e-9)

    hours_marginal = model.marginal(("hours",))
    assert weighted["values"] == pytest.approx([hours_marginal @ np.arange(4)], rel=1e-9)

    assert moments["attributes"] == ["sex", "age"]
    assert moments["labels"] == [["F", "^1"], ["F", "^2"], ["M", "^1"], ["M", "^2"]]
    expected = np.stack([sex_age @ AGE_MIDPOINTS, sex_age @ AGE_MIDPOINTS**2], axis=1).ravel()
    np.testing.assert_allclose(moments["values"], expected, rtol=1e-9)

    assert hours["labels"] == [[0], [1], [2], [3]]  # an integer attribute's values
    np.testing.assert_allclose(hours["values"], hours_marginal, rtol=1e-9)
    assert all(a["note"] is None for a in body["answers"])


def test_single_row_axes_keep_their_place_in_the_labels(client, world) -> None:
    body = _post_queries(
        client,
        world,
        [
            {
                "by": {"race": {"groups": {"all": ["a", "b", "c"]}}, "sex": "value"},
                "moments": {"age": 1},
            }
        ],
    ).json()
    answer = body["answers"][0]
    assert answer["attributes"] == ["race", "sex", "age"]
    assert answer["labels"] == [["all", "F", "^1"], ["all", "M", "^1"]]
    sex_age = world["model"].marginal(("sex", "age"))
    np.testing.assert_allclose(answer["values"], sex_age @ AGE_MIDPOINTS, rtol=1e-9)


def test_query_over_unmeasured_attribute_says_so(client, world) -> None:
    body = _post_queries(client, world, [{"by": {"region": "value"}}]).json()
    assert "no measurement touched region" in body["answers"][0]["note"]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ({"moments": {"sex": 2}}, "sex' is categorical"),
        ({"where": {"height": ["1"]}}, "unknown attribute 'height'"),
        ({"where": {"sex": ["F"]}, "by": {"sex": "value"}}, "already appears in where"),
        ({"weights": {"hours": [1, 2]}}, "need 4 entries"),
        ({"where": {"sex": {"ge": 0}}}, "categorical"),
        ({"where": {"age": {}}}, "needs a lower or upper bound"),
        ({"by": {"race": {"groups": {"x": ["z"]}}}}, "unknown value(s) 'z'"),
        ({"where": {"race": []}}, "at least one value"),
    ],
)
def test_queries_refuse_what_the_schema_does_not_admit(client, world, query, needle) -> None:
    message = _error(_post_queries(client, world, [{}, query]), 422)
    assert message.startswith("queries[1].") and needle in message


@pytest.mark.parametrize(
    "body",
    [
        {"queries": [{"wher": {"sex": ["F"]}}]},
        {"queries": [{"where": {"age": {"ge": 30, "lt": 40, "le": 45}}}]},
        {"queries": [{"by": {"sex": "values"}}]},
        {"queries": [{"moments": {"age": 0}}]},
        {"queries": [{"moments": {"age": 99}}]},
        {"queries": []},
        {"queries": [{}], "extra": 1},
        {"queries": [{}] * 1001},
    ],
)
def test_queries_refuse_malformed_bodies(client, world, body) -> None:
    response = client.post(
        world["base"] + "/queries", json=body, headers=world["tenant"]["headers"]
    )
    _error(response, 422)


def test_queries_too_wide_for_inference_are_422_with_cells_needed(
    client, world, monkeypatch
) -> None:
    from app.services.answers import queries

    monkeypatch.setattr(queries, "MAX_INFERENCE_CELLS", 12)
    response = _post_queries(client, world, [{}, {"by": {"age": "value", "race": "value"}}])
    error = response.json()["error"]
    assert response.status_code == 422 and error["code"] == "query_too_large"
    assert error["cells_needed"] > 12 and error["max_cells"] == 12
    assert error["parameter"] == "queries[1]"


# ---- synthetic ----------------------------------------------------------------------


def test_synthetic_csv_has_header_rows_and_schema_values(client, world) -> None:
    response = _get(client, world, "/synthetic", rows=500, seed=3)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.headers["x-model-version"] == "1"
    assert response.headers["x-synthetic-method"] == "round"
    records = list(csv.reader(io.StringIO(response.text)))
    assert records[0] == ["sex", "age", "race", "hours", "region"]
    body = records[1:]
    assert len(body) == 500
    allowed = [{"F", "M"}, None, {"a", "b", "c"}, {"0", "1", "2", "3"}, {"n", "s", "e", "w"}]
    for column, values in enumerate(allowed):
        if values is not None:
            assert {r[column] for r in body} <= values
    # Numeric attributes are numbers of the original scale (tests/api/test_api_synthetic.py
    # checks they fall in their bins), never bin labels.
    ages = [float(r[1]) for r in body]
    assert min(ages) >= 0 and max(ages) <= 120 and not set(AGE_LABELS) & {r[1] for r in body}
    again = _get(client, world, "/synthetic", rows=500, seed=3)
    assert again.text == response.text
    # The sample follows the model: the share of F is close to the model's.
    share = sum(r[0] == "F" for r in body) / 500
    model_share = world["model"].marginal(("sex",))[0] / world["model"].total
    assert abs(share - model_share) < 0.1


def test_synthetic_default_rows_is_the_models_total(client, world) -> None:
    response = _get(client, world, "/synthetic", seed=1)
    rows = response.text.count("\n") - 1
    assert rows == round(world["model"].total)
    assert response.headers["x-rows"] == str(rows)


def test_synthetic_refuses_too_many_rows(client, world) -> None:
    message = _error(_get(client, world, "/synthetic", rows=10_000_001), 422)
    assert message.startswith("query.rows:") and "rows ≤ 1e7" in message
    _error(_get(client, world, "/synthetic", rows=-1), 422)


# ---- access, ledger, locking, cache -------------------------------------------------


def test_other_tenant_gets_404_exactly_like_a_missing_dataset(client, world) -> None:
    headers = world["stranger"]["headers"]
    missing = f"/v1/datasets/{'0' * 8}-0000-0000-0000-{'0' * 12}"
    for path in ("/model", "/marginals?attrs=sex", "/count?where=sex:F", "/synthetic?rows=5"):
        theirs = client.get(world["base"] + path, headers=headers)
        nothing = client.get(missing + path, headers=headers)
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json() == nothing.json()
    response = _post_queries(client, world, [{}], headers=headers)
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_admin_may_read_answers_and_no_key_may_not(client, world) -> None:
    assert _get(client, world, "/marginals", headers=ADMIN_HEADERS, attrs="sex").status_code == 200
    response = client.get(world["base"] + "/marginals", params={"attrs": "sex"})
    assert response.status_code == 401


def test_a_hundred_free_queries_leave_the_ledger_untouched(client, world, database) -> None:
    def ledger_state():
        with database.read_only() as session:
            count = session.scalar(select(func.count()).select_from(LedgerEntry))
        budget = _get(client, world, "/budget").json()
        return count, budget["rho_spent_exact"], budget["rho_remaining_exact"]

    before = ledger_state()
    rng = np.random.default_rng(1)
    names = ["sex", "age", "race", "hours", "region"]
    for i in range(100):
        kind = i % 4
        if kind == 0:
            attrs = rng.choice(names, size=rng.integers(1, 4), replace=False)
            response = _get(client, world, "/marginals", attrs=",".join(attrs))
        elif kind == 1:
            response = _get(client, world, "/count", where=[f"sex:{'FM'[i % 2]}"])
        elif kind == 2:
            response = _post_queries(client, world, [{"by": {"race": "value"}}])
        else:
            response = _get(client, world, "/synthetic", rows=10, seed=i)
        assert response.status_code == 200, response.text
    assert ledger_state() == before


def test_free_queries_do_not_wait_for_the_write_lock(client, world, database, backend) -> None:
    """A writer holding the lock (on SQLite: the whole database) does not stall reads."""
    writer = database.session()
    writer.execute(
        text("UPDATE datasets SET name = name WHERE id = :id"), {"id": world["dataset"]["id"]}
    )
    results: list[int] = []

    def ask() -> None:
        results.append(_get(client, world, "/marginals", attrs="sex,age").status_code)

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join(timeout=5)
    answered_while_locked = list(results)
    writer.rollback()
    writer.close()
    thread.join()
    assert answered_while_locked == [200]


def test_new_version_is_served_and_cached_once_per_version(client, api, database, world) -> None:
    cache = model_service.process_model_cache()
    with database.read_only() as session:
        first = model_service.current_model(session, world["dataset"]["id"])
        again = model_service.current_model(session, world["dataset"]["id"])
    assert first is again and cache.get(world["dataset"]["id"], 1) is first

    tenant = world["tenant"]
    other = api.upload_dataset(_csv(300, seed=11), SCHEMA)
    api.grant(other["id"], tenant["id"], 1.0)
    base = f"/v1/datasets/{other['id']}"
    fit_test_model(database, other["id"], MEASURED[2:], seed=4)  # age not measured yet
    body = client.get(base + "/marginals", params={"attrs": "age"}, headers=tenant["headers"])
    assert body.json()["model_version"] == 1 and body.json()["covered_by"] == 0
    served_first = cache.get(other["id"], 1)

    version_two, model_two = fit_test_model(database, other["id"], MEASURED[:2], seed=5)
    assert version_two == 2
    body = client.get(base + "/marginals", params={"attrs": "age"}, headers=tenant["headers"])
    assert body.json()["model_version"] == 2 and body.json()["covered_by"] == 2
    np.testing.assert_allclose(body.json()["counts"], model_two.marginal(("age",)), atol=5e-4)
    served_second = cache.get(other["id"], 2)
    assert served_second is not None and served_second is not served_first
    assert len(served_second.measurements) == 4  # every measurement up to its high water
    assert client.get(base + "/model", headers=tenant["headers"]).json()["version"] == 2


def test_labels_cover_every_cell_in_row_major_order(client, world) -> None:
    body = _get(client, world, "/marginals", attrs="race,hours,sex").json()
    expected = [list(t) for t in itertools.product("abc", range(4), "FM")]
    assert body["values"] == expected and len(body["counts"]) == 24
    np.testing.assert_allclose(
        body["counts"], world["model"].marginal(("race", "hours", "sex")).ravel(), atol=5e-4
    )


def test_marginal_bytes_equal_the_plain_answer(client, world, database) -> None:
    from app.services import answers

    with database.read_only() as session:
        loaded = answers.visible_model(session, world["dataset"]["id"], tenant_id=None)
    for attrs in (("age",), ("race", "hours", "sex"), ("region", "age")):
        plain = answers.marginal_answer(loaded, attrs, max_cells=1000)
        plain["values"] = [list(v) for v in plain["values"]]
        for _ in range(2):  # the second time, the labels come from the cache
            assert json.loads(answers.marginal_json(loaded, attrs, max_cells=1000)) == plain
