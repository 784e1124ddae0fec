"""Each construct of the grammar equals its factored query or marginal on the same model,
and brute force over the model's full joint (Private-PGM appendix B)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_fixtures import AGE_MIDPOINTS, Joint, answer, loaded, random_model, var_samp

from app.limits import COUNT_DECIMALS
from app.pgm import queries as q
from app.pgm.queries import FactoredQuery

# SQL gives counts to thousandths of a record, as GET /marginals does.
TO_THOUSANDTHS = 10.0**-COUNT_DECIMALS


@pytest.fixture(scope="module")
def world():
    schema, model = random_model(seed=11)
    return loaded(schema, model, (("sex", "age"), ("race",))), model, Joint(model)


def one(result):
    assert len(result["rows"]) == 1
    return result["rows"][0]


def test_count_star_is_the_models_total(world):
    loaded_model, model, _joint = world
    (value,) = one(answer(loaded_model, "SELECT COUNT(*) FROM people"))
    assert value == pytest.approx(model.total)


def test_group_by_counts_equal_the_marginal(world):
    loaded_model, model, _ = world
    result = answer(loaded_model, "SELECT sex, age, COUNT(*) AS n FROM people GROUP BY sex, age")
    marginal = model.marginal(("sex", "age")).ravel()
    assert [row[2] for row in result["rows"]] == pytest.approx(
        marginal.tolist(), abs=TO_THOUSANDTHS
    )
    assert result["rows"][0][:2] == ["F", "[0, 18)"]
    assert result["columns"] == ["sex", "age", "n"]
    assert result["model_version"] == 3


def test_conjunction_equals_one_factored_query(world):
    loaded_model, model, _joint = world
    text = (
        "SELECT race, COUNT(*), SUM(age), AVG(age), VAR(age), STDDEV(age), VAR_POP(age) "
        "FROM people WHERE sex = 'F' AND hours IN (1, 2) AND age >= 18 GROUP BY race"
    )
    result = answer(loaded_model, text)
    assert result["terms"] == 1
    domain = model.domain
    where = [q.indicator(domain, "sex", [0]), q.indicator(domain, "hours", [1, 2])]
    age_in = q.indicator(domain, "age", [1, 2, 3, 4])
    counts = model.answer(FactoredQuery.of(domain, q.identity(domain, "race"), age_in, *where))
    moments = model.answer(
        FactoredQuery.of(
            domain,
            q.identity(domain, "race"),
            q.weights(domain, "age", (AGE_MIDPOINTS * [0, 1, 1, 1, 1]).tolist()),
            *where,
        )
    )
    squares = model.answer(
        FactoredQuery.of(
            domain,
            q.identity(domain, "race"),
            q.weights(domain, "age", (AGE_MIDPOINTS**2 * [0, 1, 1, 1, 1]).tolist()),
            *where,
        )
    )
    for row, n, s1, s2 in zip(result["rows"], counts, moments, squares, strict=True):
        _, count, total, mean, variance, deviation, population = row
        assert count == pytest.approx(n, abs=TO_THOUSANDTHS)
        assert total == pytest.approx(s1)
        assert mean == pytest.approx(s1 / n)
        assert variance == pytest.approx(var_samp(n, s1, s2))
        assert deviation == pytest.approx(math.sqrt(var_samp(n, s1, s2)))
        assert population == pytest.approx(s2 / n - (s1 / n) ** 2)


BRUTE_WHERE = {
    "sex = 'M'": lambda j: j.code("sex") == 1,
    "sex <> 'M'": lambda j: j.code("sex") != 1,
    "race IN ('asian', 'white')": lambda j: np.isin(j.code("race"), [0, 2]),
    "race NOT IN ('asian', 'white')": lambda j: j.code("race") == 1,
    "hours BETWEEN 1 AND 2": lambda j: np.isin(j.code("hours"), [1, 2]),
    "hours NOT BETWEEN 1 AND 2": lambda j: np.isin(j.code("hours"), [0, 3]),
    "hours IS NULL": lambda j: j.code("hours") == 4,
    "hours IS NOT NULL AND hours <> 0": lambda j: np.isin(j.code("hours"), [1, 2, 3]),
    "NOT (hours < 2)": lambda j: np.isin(j.code("hours"), [2, 3]),
    "hours < 2": lambda j: j.code("hours") < 2,
    "hours <= 2": lambda j: j.code("hours") <= 2,
    "hours > 2": lambda j: j.code("hours") == 3,
    "2 < hours": lambda j: j.code("hours") == 3,
    "hours >= 2.5": lambda j: j.code("hours") == 3,
    "age < 30": lambda j: j.code("age") < 2,
    "age >= 45": lambda j: j.code("age") >= 3,
    "age BETWEEN 18 AND 120": lambda j: j.code("age") >= 1,
    "age = '[18, 30)'": lambda j: j.code("age") == 1,
    "age IN ('[18,30)', '[65, 120]')": lambda j: np.isin(j.code("age"), [1, 4]),
    "race LIKE '%i%'": lambda j: np.isin(j.code("race"), [0, 2]),
    "race LIKE 'a_ian'": lambda j: j.code("race") == 0,
    "race NOT LIKE 'b%'": lambda j: j.code("race") != 1,
    "race ILIKE 'WHITE'": lambda j: j.code("race") == 2,
    "race > 'b'": lambda j: j.code("race") >= 1,
    "region IS NULL": lambda j: j.code("region") == 3,
    "region IS NOT NULL": lambda j: j.code("region") != 3,
    "region = 'north'": lambda j: j.code("region") == 0,
    "region <> 'north'": lambda j: np.isin(j.code("region"), [1, 2]),  # NULL is unknown
    "NOT (region = 'north')": lambda j: np.isin(j.code("region"), [1, 2]),
    "NOT (region IN ('north', NULL))": lambda j: np.zeros_like(j.code("region"), dtype=bool),
    "region IN ('north', NULL)": lambda j: j.code("region") == 0,
    "sex = 'F' OR hours = 3": lambda j: (j.code("sex") == 0) | (j.code("hours") == 3),
    "sex = 'F' OR race = 'black' OR age < 18": lambda j: (
        (j.code("sex") == 0) | (j.code("race") == 1) | (j.code("age") == 0)
    ),
    "NOT (sex = 'F' AND hours = 3)": lambda j: (
        (j.code("sex") == 1) | np.isin(j.code("hours"), [0, 1, 2])
    ),
    "(sex = 'F' AND age < 30) OR (sex = 'M' AND age >= 65)": lambda j: (
        ((j.code("sex") == 0) & (j.code("age") < 2)) | ((j.code("sex") == 1) & (j.code("age") == 4))
    ),
    "region = 'east' OR hours = 0": lambda j: (j.code("region") == 2) | (j.code("hours") == 0),
    "NOT (region = 'east' OR hours = 0)": lambda j: (
        np.isin(j.code("region"), [0, 1]) & np.isin(j.code("hours"), [1, 2, 3])
    ),
    "TRUE": lambda j: np.ones_like(j.code("sex"), dtype=bool),
    "FALSE OR sex = 'F'": lambda j: j.code("sex") == 0,
}


@pytest.mark.parametrize("where", list(BRUTE_WHERE))
def test_where_equals_brute_force(world, where):
    loaded_model, _, joint = world
    mask = BRUTE_WHERE[where](joint)
    text = f"SELECT COUNT(*), SUM(hours), AVG(age) FROM people WHERE {where}"
    result = answer(loaded_model, text)
    (count, total, mean) = one(result)
    assert count == pytest.approx(joint.count(mask), abs=TO_THOUSANDTHS)
    n = joint.count(mask)
    if n > 0:
        assert mean == pytest.approx(joint.total(mask, joint.value("age")) / n)
    else:
        assert mean is None
    if joint.moments(mask, "hours")[0] > 0:
        assert total == pytest.approx(joint.total(mask, joint.value("hours")), abs=1e-6)
    else:
        assert total is None


def test_disjunction_is_inclusion_exclusion_of_factored_queries(world):
    loaded_model, model, _ = world
    domain = model.domain
    result = answer(loaded_model, "SELECT COUNT(*) FROM people WHERE sex = 'F' OR hours = 3")
    assert result["terms"] == 3 and result["factored_queries"] == 3

    def count(*factors):
        return float(model.answer(FactoredQuery.of(domain, *factors)))

    female, three = q.indicator(domain, "sex", [0]), q.indicator(domain, "hours", [3])
    expected = count(female) + count(three) - count(female, three)
    assert one(result)[0] == pytest.approx(expected)


def test_null_aggregates_skip_rows_without_a_value(world):
    loaded_model, _, joint = world
    result = answer(
        loaded_model,
        "SELECT sex, COUNT(*), COUNT(hours), SUM(hours), AVG(hours), VAR_POP(hours) "
        "FROM people GROUP BY sex",
    )
    for row in result["rows"]:
        sex = 0 if row[0] == "F" else 1
        mask = joint.code("sex") == sex
        n, s1, s2 = joint.moments(mask, "hours")
        assert row[1] == pytest.approx(joint.count(mask), abs=TO_THOUSANDTHS)
        assert row[2] == pytest.approx(n, abs=TO_THOUSANDTHS)
        assert row[3] == pytest.approx(s1)
        assert row[4] == pytest.approx(s1 / n)
        assert row[5] == pytest.approx(s2 / n - (s1 / n) ** 2)
    only_null = answer(
        loaded_model, "SELECT SUM(hours), COUNT(hours), COUNT(*) FROM people WHERE hours IS NULL"
    )
    total, present, count = one(only_null)
    assert total is None and present == 0 and count > 0


def test_group_by_null_code_and_groups_where_excludes_are_left_out(world):
    loaded_model, _, joint = world
    result = answer(
        loaded_model, "SELECT region, COUNT(*) FROM people WHERE region <> 'south' GROUP BY region"
    )
    assert [row[0] for row in result["rows"]] == ["north", "east"]
    grouped = answer(loaded_model, "SELECT region, COUNT(*) FROM people GROUP BY region")
    assert [row[0] for row in grouped["rows"]] == ["north", "south", "east", None]
    assert grouped["rows"][3][1] == pytest.approx(joint.count(joint.code("region") == 3))


def test_group_by_an_aggregated_attribute(world):
    loaded_model, _, joint = world
    result = answer(
        loaded_model, "SELECT age, AVG(age), SUM(hours) FROM people WHERE age < 65 GROUP BY 1"
    )
    assert [row[0] for row in result["rows"]] == ["[0, 18)", "[18, 30)", "[30, 45)", "[45, 65)"]
    for code, row in enumerate(result["rows"]):
        assert row[1] == pytest.approx(AGE_MIDPOINTS[code])
        mask = joint.code("age") == code
        assert row[2] == pytest.approx(joint.total(mask, joint.value("hours")))


def test_having_order_limit_offset(world):
    loaded_model, _, joint = world
    base = answer(
        loaded_model, "SELECT race, hours, COUNT(*) AS n FROM people GROUP BY race, hours"
    )
    rows = [r for r in base["rows"] if r[2] > 50]
    rows.sort(key=lambda r: -r[2])
    result = answer(
        loaded_model,
        "SELECT race, hours, COUNT(*) AS n FROM people GROUP BY race, hours "
        "HAVING COUNT(*) > 50 ORDER BY n DESC LIMIT 3 OFFSET 1",
    )
    assert result["rows"] == rows[1:4]
    by_group = answer(
        loaded_model,
        "SELECT race, AVG(hours) FROM people GROUP BY race "
        "HAVING race <> 'black' AND AVG(hours) BETWEEN 0 AND 3 ORDER BY race DESC",
    )
    assert [r[0] for r in by_group["rows"]] == ["white", "asian"]
    by_position = answer(
        loaded_model, "SELECT hours, COUNT(*) FROM people GROUP BY hours ORDER BY 1 DESC"
    )
    assert [r[0] for r in by_position["rows"]] == [None, 3, 2, 1, 0]  # NULL is largest
    nulls_first = answer(
        loaded_model,
        "SELECT region, COUNT(*) FROM people GROUP BY region ORDER BY region NULLS FIRST",
    )
    assert [r[0] for r in nulls_first["rows"]] == [None, "east", "north", "south"]
    hidden = answer(
        loaded_model, "SELECT sex FROM people GROUP BY sex ORDER BY SUM(hours) DESC LIMIT 1"
    )
    sums = {
        s: joint.total(joint.code("sex") == k, joint.value("hours")) for k, s in enumerate("FM")
    }
    assert hidden["rows"] == [[max(sums, key=lambda s: sums[s])]]


def test_names_quoting_aliases_and_table_forms(world):
    loaded_model, _, _ = world
    plain = one(answer(loaded_model, "SELECT COUNT(*) FROM people WHERE sex = 'F'"))
    for text in (
        'SELECT count(*) AS "N" FROM "people" p WHERE p.SEX = \'F\'',
        "select COUNT(*) from PEOPLE where people.sex = 'F'",
        'SELECT COUNT(*) FROM "ds-1" WHERE "sex" = \'F\';',
    ):
        assert one(answer(loaded_model, text)) == pytest.approx(plain)


def test_unmeasured_and_standard_errors(world):
    loaded_model, _, _ = world
    result = answer(
        loaded_model, "SELECT sex, COUNT(*), SUM(age), AVG(age) FROM people GROUP BY sex"
    )
    assert result["unmeasured"] == []
    # sex × age measured with σ = 2: a count over 5 age bins has σ·√5; a sum Σ x² σ².
    for row in result["standard_errors"]:
        assert row[0] is None and row[3] is None
        assert row[1] == pytest.approx(2.0 * math.sqrt(5))
        assert row[2] == pytest.approx(2.0 * math.sqrt(float((AGE_MIDPOINTS**2).sum())))
    other = answer(loaded_model, "SELECT hours, COUNT(*) FROM people GROUP BY hours")
    assert other["unmeasured"] == ["hours"]
    assert other["note"] and "hours" in other["note"]
    assert other["standard_errors"] is None  # no value has one: null as a whole
