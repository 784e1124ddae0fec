"""The "stein" estimator: λ's formula, pooling an attribute's one-way measurements toward
N̂/k, what it leaves alone, a lower squared error than the pooled measurement where the marginal is
near uniform for its noise and no change where it is far from it, and
`fit(estimator="stein")` fitting the shrunk values."""

from __future__ import annotations

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement, estimate_total
from app.pgm.shrinkage import ESTIMATOR, shrink_factor, shrink_oneway

DOMAIN = Domain(("a", "b", "c", "d"), (6, 3, 4, 2))


def test_the_factor_is_positive_part_james_stein_toward_a_fixed_point() -> None:
    pooled = np.array([10.0, 20.0, 30.0, 40.0])  # about 25: deviations ±5, ±15, ‖d‖² = 500
    assert shrink_factor(pooled, 100.0, 25.0) == pytest.approx(1.0 - 2 * 100.0 / 500.0)
    assert shrink_factor(pooled, 300.0, 25.0) == 0.0  # positive part
    assert shrink_factor(np.full(6, 7.0), 1.0, 7.0) == 0.0  # already the target
    three = np.array([0.0, 10.0, 20.0])  # three values shrink too: (k − 2) = 1
    assert shrink_factor(three, 10.0, 10.0) == pytest.approx(1.0 - 10.0 / 200.0)


def test_an_attributes_one_way_measurements_are_pooled_and_given_one_shrunk_value() -> None:
    first = Measurement(("a",), [30.0, 10.0, 25.0, 5.0, 20.0, 10.0], "gaussian", 4.0)
    second = Measurement(("a",), [26.0, 14.0, 21.0, 9.0, 16.0, 14.0], "laplace", 2.0)
    pair = Measurement(("a", "b"), np.arange(18.0), "gaussian", 1.0)
    binary = Measurement(("d",), [1.0, 50.0], "gaussian", 30.0)  # k = 2: left alone
    halves = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    query = Measurement(("c",), [40.0, 2.0], "gaussian", 30.0, halves)
    measurements = [first, pair, second, binary, query]
    out = shrink_oneway(measurements)
    assert out[1] is pair and out[3] is binary and out[4] is query
    # inverse-variance pooling: σ² = 16 and 2b² = 8; the target is N̂/k, N̂ the fit's own
    pooled = (first.values / 16.0 + second.values / 8.0) / (1 / 16.0 + 1 / 8.0)
    target = estimate_total(measurements) / 6
    factor = shrink_factor(pooled, 1.0 / (1 / 16.0 + 1 / 8.0), target)
    assert 0.0 < factor < 1.0
    expected = target + factor * (pooled - target)
    for shrunk, original in ((out[0], first), (out[2], second)):
        np.testing.assert_allclose(shrunk.values, expected)
        assert (shrunk.noise, shrunk.scale) == (original.noise, original.scale)


def _squared_errors(truth: np.ndarray, sigma: float, draws: int) -> tuple[float, float]:
    rng = np.random.default_rng(11)
    raw, shrunk = [], []
    for _ in range(draws):
        m = Measurement(("a",), truth + rng.normal(0.0, sigma, truth.size), "gaussian", sigma)
        raw.append(float(np.sum((m.values - truth) ** 2)))
        shrunk.append(float(np.sum((shrink_oneway([m])[0].values - truth) ** 2)))
    return float(np.mean(raw)), float(np.mean(shrunk))


def test_near_uniform_marginals_measured_noisily_get_a_lower_squared_error() -> None:
    raw, shrunk = _squared_errors(np.array([22.0, 18.0, 25.0, 15.0, 20.0, 20.0]), 8.0, 400)
    assert shrunk < 0.6 * raw


def test_marginals_far_from_uniform_for_their_noise_are_left_almost_as_measured() -> None:
    truth = np.array([900.0, 50.0, 10.0, 400.0, 5.0, 135.0])
    raw, shrunk = _squared_errors(truth, 3.0, 200)
    assert shrunk == pytest.approx(raw, rel=0.01)
    m = Measurement(("a",), truth + 1.0, "gaussian", 3.0)
    assert np.abs(shrink_oneway([m])[0].values - m.values).max() < 0.2


def test_fit_with_stein_fits_the_shrunk_values_and_records_the_estimator() -> None:
    rng = np.random.default_rng(5)
    truth = np.array([60.0, 55.0, 70.0, 65.0, 50.0, 60.0])
    noisy = Measurement(("a",), truth + rng.normal(0, 12.0, 6), "gaussian", 12.0)
    others = [
        Measurement(("b",), [120.0, 130.0, 110.0], "gaussian", 1.0),
        Measurement(("c",), [90.0, 95.0, 85.0, 90.0], "gaussian", 1.0),
    ]
    mle, mle_record = fit(DOMAIN, [noisy, *others])
    stein, record = fit(DOMAIN, [noisy, *others], estimator=ESTIMATOR)
    assert (mle_record.estimator, record.estimator) == ("mle", ESTIMATOR)
    expected = shrink_oneway([noisy, *others])[0].values
    fitted = np.asarray(stein.marginal(("a",)), dtype=float).ravel()
    # the model's total is N̂ from every measurement: least squares under that total moves
    # every cell of the shrunk values by the same amount
    shift = fitted - expected
    assert np.ptp(shift) < 0.05 * np.ptp(expected)
    unshrunk = np.asarray(mle.marginal(("a",)), dtype=float).ravel()
    assert np.std(fitted / fitted.sum()) < np.std(unshrunk / unshrunk.sum())
    # the precisely measured attributes barely move
    for attrs in (("b",), ("c",)):
        np.testing.assert_allclose(stein.marginal(attrs), mle.marginal(attrs), rtol=5e-3)
