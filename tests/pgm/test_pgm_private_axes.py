"""Private axes: an attribute only one clique of a query's subtree holds, and the answer
does not keep, is summed out of that clique's table before the elimination, and the
sum is kept for the next query through that clique.

The answers must not change (brute force on small models), the sums must be shared
between queries, and what is kept must stay within its bound.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from pgm_inference_fixtures import brute_marginal

from app.pgm.domain import Domain
from app.pgm.junction_tree import build_junction_tree
from app.pgm.model import GraphicalModel


def comb_model(length: int, size: int = 3, seed: int = 0) -> GraphicalModel:
    """A chain x0 - x1 - … whose cliques (x_i, x_{i+1}, y_i) each hold a private y_i."""
    rng = np.random.default_rng(seed)
    xs = [f"x{i}" for i in range(length)]
    ys = [f"y{i}" for i in range(length - 1)]
    names = (*xs, *ys)
    domain = Domain(names, tuple(size + (i % 2) for i in range(len(names))))
    sets = [(xs[i], xs[i + 1], ys[i]) for i in range(length - 1)]
    tree = build_junction_tree(domain, sets)
    potentials = {c: rng.normal(scale=1.5, size=domain.shape(c)) for c in tree.cliques}
    return GraphicalModel(domain, tree.cliques, potentials, total=500.0)


def test_a_far_apart_pair_sums_the_private_axes_of_the_cliques_between_first() -> None:
    model = comb_model(6)
    plan = model.plan(("x0", "x5"))
    # Every clique on the path holds a y_i no other clique holds: one axis summed each.
    assert len(plan.sources) == 5
    assert all(len(axes) == 1 for axes in plan.summed)
    assert all(not any(v.startswith("y") for v in scope) for scope in plan.scopes)
    np.testing.assert_allclose(
        model.probabilities(("x0", "x5")), brute_marginal(model, ("x0", "x5")), atol=1e-12
    )


@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_marginal_equals_brute_force(k: int) -> None:
    model = comb_model(5, seed=k)
    for attrs in itertools.combinations(model.domain.attributes, k):
        order = attrs[::-1]
        np.testing.assert_allclose(
            model.probabilities(order), brute_marginal(model, order), atol=1e-12
        )


def test_a_clique_with_nothing_the_query_needs_is_summed_to_a_number() -> None:
    # Three components joined by empty separators: the middle clique shares nothing.
    domain = Domain(("a", "b", "c", "d", "e", "f"), (2, 3, 2, 3, 2, 4))
    tree = build_junction_tree(domain, [("a", "b"), ("c", "d"), ("e", "f")])
    rng = np.random.default_rng(4)
    potentials = {c: rng.normal(size=domain.shape(c)) for c in tree.cliques}
    model = GraphicalModel(domain, tree.cliques, potentials, total=10.0)
    for attrs in itertools.combinations(domain.attributes, 2):
        np.testing.assert_allclose(
            model.probabilities(attrs), brute_marginal(model, attrs), atol=1e-12
        )


def test_queries_through_a_clique_share_its_sum() -> None:
    model = comb_model(6)
    tree = model.calibrated_tree
    model.probabilities(("x0", "x5"))
    held = dict(tree._reductions)
    assert len(held) == 5
    # Another pair over the same path, asked the other way round and with a third
    # attribute of the end cliques: the same sums of the cliques in between.
    model.probabilities(("x5", "x0"))
    model.probabilities(("x0", "x1", "x5"))
    for key, table in held.items():
        assert tree._reductions[key] is table


def test_the_kept_sums_stay_within_their_bound_and_answers_stay_right() -> None:
    model = comb_model(5)
    tree = model.calibrated_tree
    tree._reduction_limit = 40  # a few tables' worth
    for attrs in itertools.combinations(model.domain.attributes, 2):
        np.testing.assert_allclose(
            model.probabilities(attrs), brute_marginal(model, attrs), atol=1e-12
        )
        assert tree._reduction_cells <= 40
        assert tree._reduction_cells == sum(t.size for t in tree._reductions.values())


def test_a_sum_two_threads_make_at_once_is_kept_and_counted_once() -> None:
    model = comb_model(4)
    tree = model.calibrated_tree
    plan = tree.plan(("x0", "x3"))
    source, axes = next((s, a) for s, a in zip(plan.sources, plan.summed, strict=True) if a)
    both_summing = threading.Barrier(2)
    table = tree._table

    def table_after_both_missed(wanted):
        both_summing.wait(timeout=5)  # each thread has looked and found no kept sum
        return table(wanted)

    tree._table = table_after_both_missed  # type: ignore[method-assign]
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(tree._reduced(source, axes)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2
    np.testing.assert_array_equal(results[0], results[1])
    assert list(tree._reductions) == [(source, axes)]
    assert tree._reduction_cells == results[0].size
