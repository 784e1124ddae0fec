"""Marginals by slicing: conditioning on a kept attribute when carrying it would be costly.

A mechanism's model (AIM's, say) is a band of overlapping cliques; a 2-way marginal of
two attributes at the ends of the band, computed by carrying one of them through every
clique in between, needs a table of (its size × a clique); slicing on it needs one
clique at a time. Answers must equal the plain elimination (and brute force where the
joint is small), and a marginal must be answered under a cap the plain plan exceeds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pgm_inference_fixtures import brute_marginal

from app.pgm import calibrated_tree
from app.pgm.domain import Domain
from app.pgm.elimination import InferenceTooLarge, plan_elimination
from app.pgm.junction_tree import build_junction_tree
from app.pgm.model import GraphicalModel


def band_model(length: int, size: int, width: int = 3, seed: int = 0) -> GraphicalModel:
    """Cliques (x_i, …, x_{i+width−1}): a triangulated band, as a mechanism's model is."""
    rng = np.random.default_rng(seed)
    names = tuple(f"x{i}" for i in range(length))
    domain = Domain(names, (size,) * length)
    sets = [names[i : i + width] for i in range(length - width + 1)]
    tree = build_junction_tree(domain, sets)
    potentials = {c: rng.normal(scale=1.5, size=domain.shape(c)) for c in tree.cliques}
    return GraphicalModel(domain, tree.cliques, potentials, total=1000.0)


def test_sliced_plans_equal_brute_force_for_every_pair_and_triple(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(calibrated_tree, "_SLICE_ABOVE", 0)  # slice whenever it is cheaper
    model = band_model(length=7, size=4)
    sliced = 0
    for k in (2, 3):
        for attrs in itertools.combinations(model.domain.attributes, k):
            order = attrs[::-1]  # answers come in the order asked
            plan = model.plan(order)
            sliced += bool(plan.sliced)
            np.testing.assert_allclose(
                model.probabilities(order), brute_marginal(model, order), atol=1e-12
            )
    assert sliced > 0


def test_a_far_apart_pair_is_answered_under_a_cap_the_plain_plan_exceeds() -> None:
    model = band_model(length=10, size=12)
    tree = model.calibrated_tree
    pair = ("x0", "x9")
    clique_cells = 12**3
    plain = tree.plan(pair)
    unsliced = plan_elimination(plain.scopes, dict(tree._sizes), pair)
    assert unsliced.max_intermediate_cells > 4 * clique_cells  # the blow-up being avoided
    capped = model.plan(pair, max_cells=clique_cells)
    assert capped.sliced and capped.max_intermediate_cells <= clique_cells
    answer = model.marginal(pair, max_cells=clique_cells)
    tables = [tree._reduced(s, a) for s, a in zip(plain.sources, plain.summed, strict=True)]
    np.testing.assert_allclose(answer, 1000.0 * unsliced.execute(tables), rtol=1e-10)
    assert answer.shape == (12, 12) and answer.sum() == pytest.approx(1000.0)


def test_every_pair_of_a_band_model_fits_within_one_clique_times_an_attribute() -> None:
    model = band_model(length=9, size=6, width=4)
    cap = 6**4 * 6
    for pair in itertools.combinations(model.domain.attributes, 2):
        assert model.plan(pair, max_cells=cap).max_intermediate_cells <= cap


def test_a_single_attribute_that_does_not_fit_is_still_refused() -> None:
    model = band_model(length=5, size=12)
    with pytest.raises(InferenceTooLarge):
        model.plan(("x0",), max_cells=10)
