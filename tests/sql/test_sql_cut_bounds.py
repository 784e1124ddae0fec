"""When WHERE cuts a bin, the bounds of COUNT, SUM, AVG and VAR still hold: on records
with known values and a model fitted to their exact counts (what a huge ρ gives), the
true answer over the records lies within the bounds, wherever inside its bin each
record's value is — not only where the uniform spread would put it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_fixtures import answer, loaded, small_domain, small_schema

from app.pgm.model import GraphicalModel

AGE_EDGES = np.array([0, 18, 30, 45, 65, 120], dtype=float)
SEXES = ("F", "M")
RACES = ("asian", "black", "white")


def _world(seed: int, size: int, squeeze: float):
    """`size` records: codes for every attribute, a true age (bunched towards one end
    of its bin when `squeeze` is far from 0.5), and the model of their exact counts."""
    schema = small_schema()
    domain = small_domain(schema)
    rng = np.random.default_rng(seed)
    codes = {
        name: rng.integers(0, s, size)
        for name, s in zip(domain.attributes, domain.sizes, strict=True)
    }
    within = rng.beta(max(squeeze, 0.05) * 4, max(1 - squeeze, 0.05) * 4, size)
    age = codes["age"]
    ages = AGE_EDGES[age] + within * np.diff(AGE_EDGES)[age]
    counts = np.zeros(domain.sizes)
    np.add.at(counts, tuple(codes[name] for name in domain.attributes), 1.0)
    clique = tuple(domain.attributes)
    # A single clique over every attribute whose potentials are the log counts: the
    # model's joint is the records' histogram (an empty cell weighs e^-60 of a record).
    potentials = {clique: np.log(np.maximum(counts, 1e-60 * size))}
    model = GraphicalModel(domain, (clique,), potentials, float(size))
    return loaded(schema, model), codes, ages


CUTS = [
    ("age > {a}", lambda age, c, a, b: age > a),
    ("age < {a}", lambda age, c, a, b: age < a),
    ("age >= {a} AND age <= {b}", lambda age, c, a, b: (age >= a) & (age <= b)),
    ("age > {a} OR sex = 'F'", lambda age, c, a, b: (age > a) | (c["sex"] == 0)),
    ("NOT age < {a} AND race = 'white'", lambda age, c, a, b: (age >= a) & (c["race"] == 2)),
    ("age < {a} OR age > {b}", lambda age, c, a, b: (age < a) | (age > b)),
]


def _truth(function: str, values: np.ndarray) -> float | None:
    n = len(values)
    if function == "COUNT(*)":
        return float(n)
    if function.startswith("SUM"):
        return float(values.sum())
    if n == 0 or (function.startswith("VAR_SAMP") and n < 2):
        return None
    if function.startswith("AVG"):
        return float(values.mean())
    variance = float(values.var(ddof=1 if function.startswith("VAR_SAMP") else 0))
    return variance


FUNCTIONS = ("COUNT(*)", "SUM(age)", "AVG(age)", "SUM(hours)", "AVG(hours)", "VAR_POP(age)")
FUNCTIONS += ("VAR_SAMP(hours)",)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    size=st.integers(40, 200),
    squeeze=st.sampled_from([0.0, 0.5, 1.0]),
    cut=st.sampled_from(range(len(CUTS))),
    a=st.integers(1, 118).map(lambda v: v + 0.5 * (v % 3 == 0)),
    width=st.integers(1, 60),
    grouped=st.booleans(),
)
def test_cut_bounds_contain_the_records_true_answer(seed, size, squeeze, cut, a, width, grouped):
    served, codes, ages = _world(seed, size, squeeze)
    text, holds = CUTS[cut]
    b = min(a + width, 119.5)
    where = text.format(a=a, b=b)
    head = "sex, " if grouped else ""
    query = f"SELECT {head}{', '.join(FUNCTIONS)} FROM people WHERE {where}"
    query += " GROUP BY sex" if grouped else ""
    result = answer(served, query)
    kept = holds(ages, codes, a, b)
    hours = codes["hours"].astype(float)
    present = codes["hours"] < 4  # code 4: no value
    offset = 1 if grouped else 0
    for row, bounds in zip(result["rows"], result["bounds"], strict=True):
        mask = kept & (codes["sex"] == SEXES.index(row[0])) if grouped else kept
        for index, function in enumerate(FUNCTIONS):
            value, pair = row[offset + index], bounds[offset + index]
            values = hours[mask & present] if "hours" in function else ages[mask]
            truth = _truth(function, values)
            if value is None or truth is None:
                continue
            if function == "COUNT(*)" and not result["approximate"]:
                assert pair is None and value == pytest.approx(truth, abs=1e-6)  # exact
                continue
            assert pair is not None, (where, function)
            assert all(math.isfinite(end) for end in pair)
            slack = 1e-6 * max(1.0, abs(truth))
            assert pair[0] - slack <= truth <= pair[1] + slack, (where, function, truth, pair)
            assert pair[0] <= value <= pair[1]


def test_a_cut_of_the_summed_attribute_narrows_its_bounds_to_the_kept_part():
    served, _, ages = _world(3, 120, 0.5)
    result = answer(served, "SELECT SUM(age), AVG(age) FROM people WHERE age > 40")
    (total, mean), ((low, high), (least, greatest)) = result["rows"][0], result["bounds"][0]
    kept = ages > 40
    assert low <= ages[kept].sum() <= high and least <= ages[kept].mean() <= greatest
    assert low <= total <= high and least <= mean <= greatest
    # Every record kept is above 40: the least average cannot be below it, while the
    # cut bin [30, 45) counted at its low edge would allow 30.
    assert least >= 40 - 1e-6
    assert greatest <= 120 + 1e-6
    assert result["approximate"] is True and result["estimates"] == ["midpoint", "midpoint"]


def test_a_cut_answer_with_sums_has_bounds_on_every_route_alike():
    from app.services.answers.sql import sql_csv

    served, _, _ = _world(5, 80, 0.0)
    result = answer(
        served, "SELECT sex, COUNT(*), SUM(age) FROM people WHERE age < 50 GROUP BY sex"
    )
    header = sql_csv(result).splitlines()[0].split(",")
    assert header == [
        "sex",
        "count(*)",
        "sum(age)",
        "count(*)_low",
        "count(*)_high",
        "sum(age)_low",
        "sum(age)_high",
    ]
    for row in sql_csv(result).splitlines()[1:]:
        cells = row.split(",")
        count, low, high = float(cells[1]), float(cells[3]), float(cells[4])
        assert low <= count <= high


def test_bounds_are_null_as_a_whole_only_when_no_column_has_them():
    served, _, _ = _world(9, 60, 0.5)
    exact = answer(served, "SELECT sex, COUNT(*) FROM people WHERE age >= 30 GROUP BY sex")
    assert exact["bounds"] is None and exact["approximate"] is False
    cut = answer(served, "SELECT sex, COUNT(*) FROM people WHERE age >= 31 GROUP BY sex")
    assert cut["approximate"] is True
    assert [bounds[0] for bounds in cut["bounds"]] == [None, None]  # the grouped column
    assert all(
        low <= row[1] <= high
        for row, (_, (low, high)) in zip(cut["rows"], cut["bounds"], strict=True)
    )
