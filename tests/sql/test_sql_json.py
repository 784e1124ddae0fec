"""The HTTP answer's JSON, encoded column by column (`answer_sql(…, encoded=True)`), says
exactly what the table of Python values says: every query shape — groups, labels of each
kind, NULLs, standard errors, quantiles and their bins, cut bins and their bounds,
HAVING, ORDER BY, LIMIT, no rows at all."""

from __future__ import annotations

import orjson
import pytest
from sql_fixtures import NAMES, loaded, random_model

from app.services.answers import answer_sql, prepare_text, sql_json

QUERIES = [
    "SELECT COUNT(*) FROM people",
    "SELECT sex, age, COUNT(*) FROM people GROUP BY sex, age",
    "SELECT hours, region, COUNT(*), AVG(age), SUM(hours) FROM people GROUP BY hours, region",
    "SELECT race, COUNT(region), VAR(hours), STDDEV_POP(age) FROM people GROUP BY race",
    "SELECT region, MEDIAN(age), MIN(hours), MAX(hours), "
    "PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY hours) FROM people GROUP BY region",
    "SELECT sex, COUNT(*) FROM people WHERE age > 37 OR race = 'asian' GROUP BY sex",
    "SELECT age, COUNT(*) AS n FROM people WHERE age BETWEEN 20 AND 50 GROUP BY age "
    "HAVING COUNT(*) > 1 ORDER BY n DESC LIMIT 3",
    "SELECT sex, AVG(hours) FROM people WHERE hours IS NULL GROUP BY sex",
    "SELECT sex, COUNT(*) FROM people WHERE sex = 'F' AND sex = 'M' GROUP BY sex",
    "SELECT race, COUNT(*) FROM people GROUP BY race LIMIT 0",
]


@pytest.fixture(scope="module")
def model():
    schema, fitted = random_model(seed=21)
    return loaded(schema, fitted, measured=(("sex", "age"), ("hours",)))


@pytest.mark.parametrize("text", QUERIES)
def test_encoded_json_equals_the_tables_json(model, text):
    prepared = prepare_text(model, text, table_names=NAMES, max_cells=1_000_000)
    plain = answer_sql(model, prepared)
    encoded = sql_json(answer_sql(model, prepared, encoded=True))
    assert orjson.loads(encoded) == orjson.loads(orjson.dumps(plain))
    assert encoded == orjson.dumps(plain)
    # again: the rows' labels now come from the plan's cache
    assert sql_json(answer_sql(model, prepared, encoded=True)) == encoded


def test_count_of_a_categorical_attribute_counts_its_values(model):
    from sql_fixtures import answer

    counted = answer(model, "SELECT COUNT(region) FROM people")["rows"][0][0]
    present = answer(model, "SELECT COUNT(*) FROM people WHERE region IS NOT NULL")["rows"][0][0]
    assert counted == pytest.approx(present)


@pytest.mark.parametrize("text", QUERIES[1:4])
def test_what_is_kept_per_plan_is_bounded_by_its_bytes_and_changes_nothing(
    model, text, monkeypatch
):
    from cachetools import LRUCache

    from app.services.answers import sql as sql_service
    from app.sql import rows

    prepared = prepare_text(model, text, table_names=NAMES, max_cells=1_000_000)
    first = sql_json(answer_sql(model, prepared, encoded=True))
    layout = rows._LAYOUTS.get(prepared.plan.token)
    assert layout is not None and layout.nbytes > 0
    assert prepared.plan.token in sql_service._errors
    # caches too small to hold any of it: nothing is kept, the answer is the same
    for name, cache in (("_LAYOUTS", rows), ("_TEMPLATES", rows), ("_errors", sql_service)):
        monkeypatch.setattr(cache, name, LRUCache(maxsize=1, getsizeof=lambda _: 2))
    again = prepare_text(model, text + " ", table_names=NAMES, max_cells=1_000_000)
    assert again.plan.token is not prepared.plan.token
    assert sql_json(answer_sql(model, again, encoded=True)) == first
    assert len(rows._LAYOUTS) == len(rows._TEMPLATES) == len(sql_service._errors) == 0
