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
