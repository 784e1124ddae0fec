"""SQL SUM/AVG/VAR/STDDEV carry guaranteed bounds: on a random model, for any values the
records hold inside their bins, the model's own exact answer lies within the bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_fixtures import Joint, answer, loaded, random_model
from test_sql_property import _code_of, conditions

from app.services.answers.sql import sql_csv

AGE_EDGES = np.array([0, 18, 30, 45, 65, 120], dtype=float)
FUNCTIONS = ("SUM", "AVG", "VAR_POP", "VAR_SAMP", "STDDEV_POP", "STDDEV_SAMP")


@pytest.fixture(scope="module")
def world():
    schema, model = random_model(seed=9, total=300.0)
    return loaded(schema, model), Joint(model)


def _exact(function: str, counts: np.ndarray, values: np.ndarray) -> float:
    n = counts.sum()
    s1 = (counts * values).sum()
    s2 = (counts * values**2).sum()
    if function == "SUM":
        return float(s1)
    if function == "AVG":
        return float(s1 / n)
    variance = max(s2 / n - (s1 / n) ** 2, 0.0)
    if function.endswith("_SAMP"):
        variance *= n / (n - 1)
    return math.sqrt(variance) if function.startswith("STDDEV") else float(variance)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    condition=conditions(),
    group=st.sampled_from([(), ("sex",), ("race",), ("age",), ("sex", "hours")]),
    seed=st.integers(0, 2**16),
)
def test_bounds_contain_the_models_exact_answer(world, condition, group, seed):
    loaded_model, joint = world
    text, truth = condition
    selected = ", ".join(group)
    head = f"{selected}, " if group else ""
    query = f"SELECT {head}{', '.join(f'{f}(age)' for f in FUNCTIONS)} FROM people WHERE {text}" + (
        f" GROUP BY {selected}" if group else ""
    )
    try:
        result = answer(loaded_model, query)
    except Exception as error:
        assert getattr(error, "code", None) == "query_too_large", (query, error)
        return
    # Every cell of the joint holds its own true age, somewhere inside its bin.
    rng = np.random.default_rng(seed)
    code = joint.code("age")
    ages = AGE_EDGES[code] + rng.uniform(0, 1, code.shape) * np.diff(AGE_EDGES)[code]
    where = truth(joint) == 1.0
    width = len(group)
    age_labels = loaded_model.schema.attribute("age").labels()
    assert result["estimates"] == [None] * width + ["midpoint"] * len(FUNCTIONS)
    for row, bounds in zip(result["rows"], result["bounds"], strict=True):
        assert bounds[:width] == [None] * width
        key = [
            age_labels.index(label) if name == "age" else _code_of(name, label)
            for name, label in zip(group, row[:width], strict=True)
        ]
        mask = where.copy()
        for name, value in zip(group, key, strict=True):
            mask &= joint.code(name) == value
        counts = joint.counts[mask]
        for function, value, pair in zip(FUNCTIONS, row[width:], bounds[width:], strict=True):
            if value is None:
                assert pair is None
                continue
            low, high = pair
            assert math.isfinite(low) and math.isfinite(high)
            assert low <= value <= high, (query, function)
            if function.endswith("_SAMP") and counts.sum() <= 1:
                continue
            exact = _exact(function, counts, ages[mask])
            slack = 1e-6 * (abs(exact) + 1.0)
            assert low - slack <= exact <= high + slack, (query, function, exact, pair)


def test_exact_attributes_have_bounds_equal_to_their_values(world):
    loaded_model, _ = world
    result = answer(
        loaded_model, "SELECT sex, AVG(hours), SUM(hours), COUNT(*) FROM people GROUP BY sex"
    )
    assert result["estimates"] == [None, "exact", "exact", None]
    for row, bounds in zip(result["rows"], result["bounds"], strict=True):
        assert bounds[0] is None and bounds[3] is None
        for value, (low, high) in zip(row[1:3], bounds[1:3], strict=True):
            assert low == pytest.approx(value) and high == pytest.approx(value)


def test_csv_puts_the_bounds_after_the_columns(world):
    loaded_model, _ = world
    result = answer(loaded_model, "SELECT sex, AVG(age) AS mean_age FROM people GROUP BY sex")
    lines = sql_csv(result).splitlines()
    assert lines[0] == "sex,mean_age,mean_age_low,mean_age_high"
    for line, row, bounds in zip(lines[1:], result["rows"], result["bounds"], strict=True):
        cells = line.split(",")
        assert cells[0] == row[0] and float(cells[1]) == pytest.approx(row[1])
        assert [float(cells[2]), float(cells[3])] == pytest.approx(bounds[1])


def test_cli_table_shows_bounds_and_estimates(world):
    from app.commands.sql import table_text

    loaded_model, _ = world
    result = answer(
        loaded_model, "SELECT sex, AVG(age) AS mean_age, COUNT(*) AS n FROM people GROUP BY sex"
    )
    result["unmeasured"] = []
    lines = table_text(result).splitlines()
    assert lines[0].split() == ["sex", "mean_age", "mean_age", "bounds", "n"]
    low, high = result["bounds"][0][1]
    assert f"[{low:.6g}, {high:.6g}]" in lines[1]
    assert lines[-1].endswith("; estimates mean_age: midpoint)")


def test_moments_skip_missing_values_and_bound_the_rest(world):
    from app.services.answers.queries import QuerySpec, queries_answer

    loaded_model, joint = world
    specs = [
        QuerySpec(moments={"age": 2}, by={"region": "value"}),
        QuerySpec(moments={"hours": 1}),
    ]
    ages, hours = queries_answer(loaded_model, specs, max_cells=10_000)["answers"]
    assert ages["estimates"] == {"age": "midpoint"} and hours["estimates"] == {"hours": "exact"}
    region = joint.code("region")
    age_code = joint.code("age")
    for index, (low, high) in enumerate(ages["bounds"]):
        group, power = divmod(index, 2)
        counts = joint.counts[region == group]
        codes = age_code[region == group]
        least = (counts * AGE_EDGES[codes] ** (power + 1)).sum()
        greatest = (counts * AGE_EDGES[codes + 1] ** (power + 1)).sum()
        assert low == pytest.approx(least, rel=1e-6) and high == pytest.approx(greatest, rel=1e-6)
    # hours' missing code adds nothing; every other code is its own value
    present = joint.code("hours") < 4
    exact = float((joint.counts * np.where(present, joint.code("hours"), 0)).sum())
    assert hours["values"][0] == pytest.approx(exact, rel=1e-9)
    assert hours["bounds"][0] == pytest.approx([exact, exact], rel=1e-6)


def test_each_aggregate_alone_has_the_bounds_it_has_beside_the_others(world):
    loaded_model, _ = world
    together = answer(
        loaded_model, "SELECT race, SUM(age), AVG(age), VAR_POP(age) FROM people GROUP BY race"
    )
    for position, function in enumerate(("SUM", "AVG", "VAR_POP"), start=1):
        alone = answer(loaded_model, f"SELECT race, {function}(age) FROM people GROUP BY race")
        for row_alone, row_together in zip(alone["bounds"], together["bounds"], strict=True):
            assert row_alone[1] == pytest.approx(row_together[position], rel=1e-9)


def test_grouped_by_the_attribute_an_average_lies_in_its_own_bin(world):
    loaded_model, _ = world
    result = answer(loaded_model, "SELECT age, AVG(age), VAR_POP(age) FROM people GROUP BY age")
    labels = loaded_model.schema.attribute("age").labels()
    for row, bounds in zip(result["rows"], result["bounds"], strict=True):
        code = labels.index(row[0])
        assert bounds[1] == pytest.approx([AGE_EDGES[code], AGE_EDGES[code + 1]], rel=1e-6)
        # one bin: the least spread is 0, the greatest puts half at each edge
        width = AGE_EDGES[code + 1] - AGE_EDGES[code]
        assert bounds[2] == pytest.approx([0.0, width**2 / 4], rel=1e-6, abs=1e-9)


def test_bounds_follow_their_rows_through_having_order_and_limit(world):
    loaded_model, _ = world
    plain = answer(loaded_model, "SELECT race, AVG(age) AS m FROM people GROUP BY race")
    by_race = {
        row[0]: bounds[1] for row, bounds in zip(plain["rows"], plain["bounds"], strict=True)
    }
    sorted_ = answer(
        loaded_model,
        "SELECT race, AVG(age) AS m FROM people GROUP BY race "
        "HAVING COUNT(*) > 0 ORDER BY m DESC LIMIT 2",
    )
    assert len(sorted_["rows"]) == len(sorted_["bounds"]) == 2
    for row, bounds in zip(sorted_["rows"], sorted_["bounds"], strict=True):
        assert bounds[1] == pytest.approx(by_race[row[0]])
