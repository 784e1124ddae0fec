"""Variable elimination (generic and on the calibrated tree) against brute force."""

from __future__ import annotations

import itertools
import string

import numpy as np
import pytest
from pgm_inference_fixtures import KINDS, brute_marginal, chain_model, random_model

from app.pgm.domain import DomainError
from app.pgm.elimination import InferenceTooLarge, eliminate, plan_elimination


@pytest.mark.parametrize("seed", range(5))
def test_generic_elimination_matches_full_product(seed: int) -> None:
    rng = np.random.default_rng(seed)
    variables = list("pqrstuv")
    sizes = {v: int(rng.integers(1, 4)) for v in variables}
    factors = []
    for _ in range(6):
        scope = tuple(
            str(v) for v in rng.choice(variables, size=int(rng.integers(0, 4)), replace=False)
        )
        factors.append((scope, rng.random(tuple(sizes[v] for v in scope))))
    present = sorted({v for scope, _ in factors for v in scope})
    keep = tuple(str(v) for v in rng.permutation(present)[: int(rng.integers(0, len(present) + 1))])
    letters = {v: string.ascii_letters[i] for i, v in enumerate(variables)}
    spec = ",".join("".join(letters[v] for v in s) for s, _ in factors)
    expected = np.einsum(spec + "->" + "".join(letters[v] for v in keep), *[t for _, t in factors])
    got = eliminate(factors, keep)
    assert got.shape == tuple(sizes[v] for v in keep)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_large_pairwise_contractions_match_einsum(seed: int) -> None:
    # Tables big enough for the BLAS (matmul) path, with shared kept variables (batch
    # axes), shared summed ones, and private ones summed before the product.
    rng = np.random.default_rng(seed)
    sizes = {"p": 16, "q": 12, "r": 16, "s": 8, "t": 6, "u": 16}
    scopes = [("p", "q", "s"), ("s", "r", "t", "q"), ("u", "r"), ("t", "p")]
    factors = [(scope, rng.random(tuple(sizes[v] for v in scope))) for scope in scopes]
    keep = tuple(str(v) for v in rng.permutation(["p", "q", "r", "u"])[: 2 + seed % 3])
    plan = plan_elimination(scopes, sizes, keep)
    assert any(op[0] == "matmul" for op in plan.operations)
    spec = ",".join("".join(s) for s in scopes) + "->" + "".join(keep)
    expected = np.einsum(spec, *[t for _, t in factors])
    np.testing.assert_allclose(plan.execute([t for _, t in factors]), expected, rtol=1e-12)


def test_eliminate_does_not_alias_its_inputs() -> None:
    table = np.arange(6.0).reshape(2, 3)
    result = eliminate([(("a", "b"), table)], ("a", "b"))
    result[...] = 0
    assert table.sum() == 15.0


def test_generic_plan_picks_a_narrow_order_on_a_chain() -> None:
    # Eliminating a chain from its ends keeps every table at two variables (9 cells);
    # a bad order (middle first) would join three.
    names = [f"v{i}" for i in range(10)]
    scopes = [(names[i], names[i + 1]) for i in range(9)]
    plan = plan_elimination(scopes, {v: 3 for v in names}, (names[0], names[-1]))
    assert plan.max_intermediate_cells <= 27
    assert set(plan.order) == set(names[1:-1])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_marginals_of_every_subset_match_brute_force(kind: str, seed: int) -> None:
    model = random_model(kind, seed)
    rng = np.random.default_rng(100 + seed)
    for size in range(0, len(model.domain) + 1):
        subsets = list(itertools.combinations(model.domain.attributes, size))
        for subset in subsets:
            attrs = tuple(str(a) for a in rng.permutation(subset))  # axes in a random order
            got = model.probabilities(attrs)
            assert got.shape == model.domain.shape(attrs)
            np.testing.assert_allclose(got, brute_marginal(model, attrs), rtol=1e-9, atol=1e-12)


def test_far_apart_attributes_on_a_chain() -> None:
    model = chain_model(length=9, size=3, seed=7)
    for attrs in [("x0", "x8"), ("x8", "x4", "x0"), ("x1", "x7"), ("x3", "x5")]:
        np.testing.assert_allclose(
            model.probabilities(attrs), brute_marginal(model, attrs), rtol=1e-9
        )
        plan = model.plan(attrs)
        # The pruned subtree is the path between the outermost attributes, no more.
        positions = sorted(int(a[1:]) for a in attrs)
        assert len(plan.subtree) == positions[-1] - positions[0]
        # Eliminating along the path never joins more than the kept attributes and one pair.
        assert plan.max_intermediate_cells <= 3 ** (len(attrs) + 1)


def test_query_inside_one_clique_is_a_projection_of_its_marginal() -> None:
    model = chain_model(length=6, size=3, seed=1)
    plan = model.plan(("x3", "x2"))
    assert len(plan.subtree) == 1
    assert len(plan.elimination.operations) == 1  # one projection (or transpose)
    np.testing.assert_allclose(
        model.probabilities(("x3", "x2")), brute_marginal(model, ("x3", "x2"))
    )
    np.testing.assert_allclose(model.probabilities(("x4",)), brute_marginal(model, ("x4",)))


def test_empty_query_is_one_and_total() -> None:
    model = random_model("cyclic", 3)
    assert float(model.probabilities(())) == pytest.approx(1.0)
    assert float(model.marginal(())) == pytest.approx(model.total)


def test_results_do_not_alias_cached_tables() -> None:
    model = chain_model(length=4, size=2, seed=2)
    clique = model.calibrated_tree.cliques[0]
    first = model.probabilities(clique)
    assert first.flags.writeable
    first[...] = -1.0
    np.testing.assert_allclose(model.probabilities(clique), brute_marginal(model, clique))


def test_width_cap_refuses_and_reports() -> None:
    model = chain_model(length=8, size=4, seed=3)
    attrs = ("x0", "x3", "x7")
    width = model.plan(attrs).max_intermediate_cells
    assert width >= 4**3  # at least the answer itself
    with pytest.raises(InferenceTooLarge) as refused:
        model.probabilities(attrs, max_cells=width - 1)
    assert refused.value.cells == width and refused.value.max_cells == width - 1
    # The cap is checked again for a cached plan.
    with pytest.raises(InferenceTooLarge):
        model.probabilities(attrs, max_cells=width - 1)
    np.testing.assert_allclose(
        model.probabilities(attrs, max_cells=width), brute_marginal(model, attrs)
    )


def test_unknown_and_duplicate_attributes_are_refused() -> None:
    model = random_model("tree", 0)
    with pytest.raises(DomainError):
        model.probabilities(("a", "nope"))
    with pytest.raises(DomainError):
        model.probabilities(("a", "a"))
