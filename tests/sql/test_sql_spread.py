"""Where within-bin means are measured, SQL spreads a bin's records by the linear
density of its mean (`app.sql.spread`): in the part of a bin a WHERE clause keeps, and
in where a quantile lies inside its bin. Without them the spread stays uniform."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sql_fixtures import answer
from test_sql_cut_bounds import AGE_EDGES, _world

from app.limits import COUNT_DECIMALS
from app.services.within_bin_means import FractionSums
from app.sql.spread import fraction_at, moment_below, share_below, tilts

# SQL gives counts to thousandths of a record, as GET /marginals does.
TO_THOUSANDTHS = 10.0**-COUNT_DECIMALS


@pytest.mark.parametrize("k", [-2.0, -0.7, 0.0, 1.2, 2.0])
def test_the_spread_is_a_density_whose_quantiles_invert_its_shares(k):
    for t in np.linspace(0, 1, 11):
        assert fraction_at(k, share_below(k, t)) == pytest.approx(t, abs=1e-9)
    assert share_below(k, 1.0) == pytest.approx(1.0)
    assert moment_below(k, 1.0) == pytest.approx(0.5 + k / 12)
    # the slope a mean asks for gives back that mean (within the middle third)
    mean = 10 + 20 * (0.5 + k / 12)
    assert tilts(np.array([10.0]), np.array([30.0]), np.array([mean]))[0] == pytest.approx(k)


def _measured(squeeze: float):
    """Records bunched at one end of their bins, with their exact within-bin means."""
    served, codes, ages = _world(7, 400, squeeze)
    age = codes["age"]
    fractions = (ages - AGE_EDGES[age]) / np.diff(AGE_EDGES)[age]
    sums = np.bincount(age, weights=fractions, minlength=6)[:5]
    released = FractionSums(sums=sums, variance=0.0, rho=1.0, releases=1)
    # Another model version: compiled queries are kept per version and text.
    version = 4 + round(squeeze * 10)
    measured = dataclasses.replace(served, within_bins={"age": released}, version=version)
    return measured, served, age, ages


def test_a_cut_bin_is_spread_by_its_measured_mean():
    measured, uniform, age, ages = _measured(1.0)  # every record near its bin's top
    query = "SELECT COUNT(*), AVG(age) FROM people WHERE age > 37.5"
    spread = answer(measured, query)
    flat = answer(uniform, query)
    in_bin = age == 2  # [30, 45): the cut keeps its top half
    mean = ages[in_bin].mean()
    k = tilts(np.array([30.0]), np.array([45.0]), np.array([mean]))[0]
    kept = 1 - share_below(k, 0.5)
    assert spread["rows"][0][0] == pytest.approx((age > 2).sum() + kept * in_bin.sum())
    assert flat["rows"][0][0] == pytest.approx((age > 2).sum() + 0.5 * in_bin.sum())
    truth = (ages > 37.5).sum()
    assert abs(spread["rows"][0][0] - truth) < abs(flat["rows"][0][0] - truth)
    # the bounds do not rest on the spread: the same either way, and hold the truth
    assert spread["bounds"][0][0] == pytest.approx(flat["bounds"][0][0])
    low, high = spread["bounds"][0][1]
    assert low <= ages[ages > 37.5].mean() <= high
    assert spread["estimates"] == [None, "within-bin means"]


def test_a_quantile_is_placed_by_its_bins_measured_mean():
    query = "SELECT MEDIAN(age), PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age) FROM people"
    for squeeze, sign in ((1.0, 1), (0.0, -1)):
        measured, uniform, _, ages = _measured(squeeze)
        spread, flat = answer(measured, query), answer(uniform, query)
        bins = [column[0] for column in spread["bins"]]
        for value, plain, (low, high) in zip(spread["rows"][0], flat["rows"][0], bins, strict=True):
            assert low <= value <= high
            assert sign * (value - plain) > 0  # pushed towards where the records are
        truth = np.median(ages)
        assert abs(spread["rows"][0][0] - truth) < abs(flat["rows"][0][0] - truth)


def test_the_quantiles_route_places_a_quantile_as_sql_does():
    from app.services.answers.quantiles import quantiles_answer

    measured, uniform, _, _ = _measured(1.0)
    query = "SELECT MEDIAN(age) FROM people"
    for served in (measured, uniform):
        route = quantiles_answer(served, "age", [0.5])
        assert route["quantiles"][0]["value"] == pytest.approx(answer(served, query)["rows"][0][0])


def test_count_and_factored_queries_spread_a_cut_bin_as_sql_does():
    from app.services.answers import count_answer, queries_answer
    from app.services.answers.queries import QuerySpec, ValueRange

    for served in _measured(1.0)[:2]:
        sql = answer(served, "SELECT COUNT(*) FROM people WHERE age >= 37.5 AND age < 50")
        count = count_answer(served, ["age:37.5..50"])
        assert count["approximate"] is True
        assert count["count"] == pytest.approx(sql["rows"][0][0], abs=TO_THOUSANDTHS)
        spec = QuerySpec(where={"age": ValueRange(ge=37.5, lt=50)})
        factored = queries_answer(served, [spec], max_cells=10_000)["answers"][0]
        assert factored["values"][0] == pytest.approx(sql["rows"][0][0])


def test_a_closed_count_range_cuts_as_sql_does():
    from app.services.answers import count_answer

    measured, _, _, _ = _measured(0.0)
    sql = answer(measured, "SELECT COUNT(*) FROM people WHERE age >= 20 AND age <= 37.5")
    for where in (["age:20..=37.5"], ["age:20..=50", "age:..=37.5"], ["age:..=37.5", "age:20.."]):
        count = count_answer(measured, where)
        assert count["approximate"] is True
        assert count["count"] == pytest.approx(sql["rows"][0][0], abs=TO_THOUSANDTHS)
    empty = count_answer(measured, ["age:40..=50", "age:..=30"])
    assert empty["count"] == 0
