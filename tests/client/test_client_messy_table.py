"""A real messy table end to end, through the client against a live `privq serve` (SQLite
with its embedded worker; PostgreSQL with a separate worker): `tests/data/messy_visits.parquet`
(missing values in four columns, about two visits per person) gets a drafted schema, is
uploaded as Parquet with the person as the privacy unit, measured with AIM, answered
and synthesised."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import ADMIN_KEY, unique_name
from privq_service import Service, running_service

from privq_client import AdminClient, Client, SchemaDraftWarning, draft_schema

DATA = Path(__file__).parents[1] / "data" / "messy_visits.parquet"
K = 2


@pytest.fixture(scope="module")
def service(
    backend: str, empty_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("service")
    with running_service(backend, empty_database_url, folder, ADMIN_KEY) as running:
        yield running


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_parquet(DATA)


@pytest.fixture(scope="module")
def schema(frame: pd.DataFrame) -> dict[str, Any]:
    with pytest.warns(SchemaDraftWarning, match="PUBLIC"):
        return draft_schema(frame, exclude=["person_id"])


@pytest.fixture(scope="module")
def world(service: Service, frame: pd.DataFrame, schema: dict[str, Any]) -> dict[str, Any]:
    with AdminClient(service.url, service.admin_key) as admin:
        unit = {"column": "person_id", "max_rows": K}
        dataset = admin.upload(frame, schema, unique_name("visits"), privacy_unit=unit)
        from_path = admin.upload(DATA, schema, unique_name("visits-file"), privacy_unit=unit)
        tenant = admin.create_tenant(unique_name("epidemiologist"))
        admin.grant(dataset["id"], tenant["id"], 2.0)
    return {"dataset": dataset, "from_path": from_path, "key": tenant["api_key"]}


@pytest.fixture(scope="module")
def analyst(service: Service, world: dict[str, Any]) -> Iterator[Client]:
    with Client(service.url, world["key"]) as client:
        yield client


@pytest.fixture(scope="module")
def fitted(analyst: Client, world: dict[str, Any]) -> str:
    dataset_id = str(world["dataset"]["id"])
    # A small workload keeps AIM's rounds few: the test is about the data, not AIM.
    workload = [["smoker", "age"], ["income", "children"], ["visit", "age"], ["region"]]
    job = analyst.aim(dataset_id, 1.0, workload=workload, max_model_cells=20_000)
    job.wait(timeout=300, progress=False)
    return dataset_id


def test_the_table_is_messy(frame: pd.DataFrame) -> None:
    per_person = frame.groupby("person_id").size()
    assert 1.8 <= per_person.mean() <= 2.3 and per_person.max() > K
    assert frame["age"].isna().any() and frame["income"].isna().any()
    assert frame["children"].isna().any() and (frame["smoker"] == "").any()


def test_the_draft_marks_every_messy_column(schema: dict[str, Any]) -> None:
    by_name = {a["name"]: a for a in schema["attributes"]}
    assert "person_id" not in by_name
    assert {n for n, a in by_name.items() if a.get("missing")} == {
        "age",
        "income",
        "smoker",
        "children",
    }
    assert by_name["smoker"]["missing_values"] == ["", "NA"]


def test_the_upload_keeps_at_most_k_visits_per_person(
    frame: pd.DataFrame, world: dict[str, Any]
) -> None:
    expected = int(frame.groupby("person_id").size().clip(upper=K).sum())
    for dataset in (world["dataset"], world["from_path"]):
        assert dataset["rows"] == expected < len(frame)
        assert dataset["privacy_unit"] == {"column": "person_id", "max_rows": K}
        assert "person_id" not in [a["name"] for a in dataset["attributes"]]


def test_marginals_show_missing_values(analyst: Client, fitted: str, frame: pd.DataFrame) -> None:
    smoker = analyst.marginal(fitted, "smoker")
    assert list(smoker["smoker"].cat.categories) == ["no", "yes"]
    assert smoker["smoker"].isna().sum() == 1  # the missing row
    total = float(smoker["count"].sum())
    share = float(smoker.loc[smoker["smoker"].isna(), "count"].iloc[0]) / total
    truth = float(frame["smoker"].isin(["", "NA"]).mean())
    assert share == pytest.approx(truth, abs=0.08)


def test_where_null_and_moments(analyst: Client, fitted: str) -> None:
    no_age = analyst.query(fitted, where={"age": [None]})
    assert float(no_age["count"].iloc[0]) >= 0
    counted = analyst.count(fitted, {"age": None})
    assert float(counted["count"].iloc[0]) == pytest.approx(float(no_age["count"].iloc[0]))
    moments = analyst.query(fitted, moments={"age": 1})
    assert "skip its missing values" in moments.attrs["note"]
    # Mean age of those with an age: Σ age / count with a value, within the bins.
    with_age = analyst.query(fitted, where={"age": {"ge": 10}})
    mean = float(moments["value"].iloc[0]) / float(with_age["count"].iloc[0])
    assert 30 < mean < 80


def test_synthetic_records_have_missing_values(
    analyst: Client, fitted: str, schema: dict[str, Any]
) -> None:
    synthetic = analyst.synthetic(fitted, rows=800, seed=3)
    assert len(synthetic) == 800
    assert synthetic["income"].isna().any() and synthetic["smoker"].isna().any()
    assert set(synthetic["smoker"].dropna()) <= {"no", "yes"}
    ages = synthetic["age"].dropna()
    # Whole-number ages are a drafted integer attribute: synthetic ages are integers
    # within its range.
    age = next(a for a in schema["attributes"] if a["name"] == "age")
    assert age["type"] == "integer"
    assert ages.between(age["min"], age["max"]).all() and (ages == ages.round()).all()
    assert np.isfinite(synthetic["children"].dropna()).all()
