"""Moments with bounds (`bounded_moments`, `signed_rows`, `signed_bounds`): on random
models, the bounds contain the model's own exact answer for any within-bin values, with
weights of either sign, evidence and kept axes beside them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pgm_inference_fixtures import random_model

from app.pgm import queries as q
from app.pgm.bin_bounds import signed_bounds
from app.pgm.queries import FactoredQuery, QueryError, QueryFactor


def _bins(size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    edges = np.cumsum(np.concatenate([[rng.normal(scale=20)], rng.uniform(0.1, 10, size)]))
    return edges[:-1], edges[1:]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["tree", "cyclic", "singletons"]))
def test_bounds_contain_the_models_exact_answer(seed: int, kind: str) -> None:
    model = random_model(kind, seed)
    rng = np.random.default_rng(seed)
    domain = model.domain
    names = list(domain.attributes)
    rng.shuffle(names)
    first, second, weighted, kept = names[:4]
    orders = {first: int(rng.integers(1, 4)), second: int(rng.integers(1, 3))}
    joint = model.joint_probabilities() * model.total
    shape = joint.shape
    # The true values: every cell of the joint has its own value inside its code's bin.
    true_values = {}
    factors: list[QueryFactor] = []
    weights = rng.normal(size=domain.size_of(weighted))
    factors.append(
        QueryFactor(
            weighted,
            q.signed_rows(weights, weights, weights),
            "weights",
            tuple(str(k) for k in range(q.SIGNED_BLOCKS)),
        )
    )
    factors.append(q.identity(domain, kept))
    for name in (first, second):
        low, high = _bins(domain.size_of(name), rng)
        axis = domain.index(name)
        code = np.indices(shape)[axis]
        true_values[name] = low[code] + rng.uniform(0, 1, shape) * (high - low)[code]
        middle = (low + high) / 2
        factors.append(q.bounded_moments(domain, name, middle, low, high, orders[name]))
    query = FactoredQuery(domain, tuple(factors))
    answer = model.answer(query)
    signed_axes = {0: 1, 2: orders[first], 3: orders[second]}
    values, least, greatest = signed_bounds(answer, signed_axes)
    assert (
        values.shape
        == least.shape
        == greatest.shape
        == (1, domain.size_of(kept), orders[first], orders[second])
    )
    assert np.all(np.isfinite(least)) and np.all(np.isfinite(greatest))
    assert np.all(least <= values) and np.all(values <= greatest)
    weight_cells = weights[np.indices(shape)[domain.index(weighted)]]
    kept_code = np.indices(shape)[domain.index(kept)]
    for k1 in range(orders[first]):
        for k2 in range(orders[second]):
            cell = (
                joint
                * weight_cells
                * true_values[first] ** (k1 + 1)
                * true_values[second] ** (k2 + 1)
            )
            exact = np.bincount(kept_code.ravel(), cell.ravel(), minlength=domain.size_of(kept))
            slack = 1e-7 * (np.abs(exact) + 1.0)
            assert np.all(least[0, :, k1, k2] <= exact + slack)
            assert np.all(exact - slack <= greatest[0, :, k1, k2])


def test_one_attribute_bounds_are_the_weighted_power_ranges() -> None:
    model = random_model("tree", 3)
    name = model.domain.attributes[0]
    size = model.domain.size_of(name)
    low = np.linspace(-3, 3, size + 1)[:-1]
    high = np.linspace(-3, 3, size + 1)[1:]
    factor = q.bounded_moments(model.domain, name, (low + high) / 2, low, high, 2)
    values, least, greatest = signed_bounds(
        model.answer(FactoredQuery.of(model.domain, factor)), {0: 2}
    )
    counts = model.marginal((name,))
    square_low = np.where((low < 0) & (high > 0), 0.0, np.minimum(low**2, high**2))
    np.testing.assert_allclose(least, [counts @ low, counts @ square_low], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(
        greatest, [counts @ high, counts @ np.maximum(low**2, high**2)], rtol=1e-6
    )
    np.testing.assert_allclose(
        values, [counts @ ((low + high) / 2), counts @ ((low + high) / 2) ** 2]
    )


def test_signed_rows_refuse_reversed_intervals() -> None:
    with pytest.raises(QueryError):
        q.signed_rows(np.ones(2), np.array([1.0, 0.0]), np.array([0.0, 1.0]))
