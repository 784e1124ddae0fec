"""Factored queries (Q₁ ⊗ … ⊗ Q_k) against Q·p on the materialised joint."""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
from pgm_inference_fixtures import KINDS, chain_model, random_model

from app.pgm import queries as q
from app.pgm.domain import Domain
from app.pgm.elimination import InferenceTooLarge
from app.pgm.model import GraphicalModel
from app.pgm.queries import FactoredQuery, QueryError


def kron_answer(model: GraphicalModel, query: FactoredQuery) -> np.ndarray:
    """N̂ · (Q₁ ⊗ … ⊗ Q_k ⊗ 1ᵀ) vec(p), with p's axes moved to the query's order."""
    domain = model.domain
    listed = [f.attribute for f in query.factors]
    rest = [a for a in domain.attributes if a not in listed]
    joint = np.transpose(model.joint_probabilities(), [domain.index(a) for a in listed + rest])
    matrices = [f.matrix for f in query.factors] + [np.ones((1, domain.size_of(a))) for a in rest]
    full = reduce(np.kron, matrices, np.ones((1, 1)))
    flat = full @ joint.ravel() * model.total
    return flat.reshape(query.shape)


def random_factor(
    domain: Domain, attribute: str, kind: str, rng: np.random.Generator
) -> q.QueryFactor:
    size = domain.size_of(attribute)
    if kind == "identity":
        return q.identity(domain, attribute)
    if kind == "ones":
        return q.ones(domain, attribute)
    if kind == "indicator":
        codes = rng.choice(size, size=int(rng.integers(1, size + 1)), replace=False)
        return q.indicator(domain, attribute, [int(c) for c in codes])
    if kind == "prefix":
        return q.prefix(domain, attribute)
    if kind == "groups":
        cut = int(rng.integers(1, size)) if size > 1 else 1
        return q.groups(
            domain, attribute, {"low": range(cut), "high": range(cut, size), "all": range(size)}
        )
    if kind == "weights":
        return q.weights(domain, attribute, rng.normal(size=size))
    if kind == "moments":
        return q.moments(domain, attribute, np.arange(size) + 0.5, order=3)
    raise ValueError(kind)


def random_query(model: GraphicalModel, rng: np.random.Generator) -> FactoredQuery:
    attrs = [str(a) for a in rng.permutation(model.domain.attributes)]
    chosen = attrs[: int(rng.integers(1, len(attrs) + 1))]
    kinds = [str(k) for k in rng.choice(q.KINDS, size=len(chosen))]
    return FactoredQuery.of(
        model.domain,
        *[random_factor(model.domain, a, k, rng) for a, k in zip(chosen, kinds, strict=True)],
    )


def test_builders_make_the_table_2_matrices() -> None:
    domain = Domain(("x", "y"), (4, 3))
    np.testing.assert_array_equal(q.identity(domain, "x").matrix, np.eye(4))
    np.testing.assert_array_equal(q.ones(domain, "y").matrix, [[1, 1, 1]])
    np.testing.assert_array_equal(q.indicator(domain, "x", [0, 2]).matrix, [[1, 0, 1, 0]])
    np.testing.assert_array_equal(q.prefix(domain, "y").matrix, [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    grouping = q.groups(domain, "x", {"lo": [0, 1], "hi": [2, 3]})
    np.testing.assert_array_equal(grouping.matrix, [[1, 1, 0, 0], [0, 0, 1, 1]])
    assert grouping.labels == ("lo", "hi")
    np.testing.assert_array_equal(q.weights(domain, "y", [0.5, -1, 2]).matrix, [[0.5, -1, 2]])
    np.testing.assert_array_equal(
        q.moments(domain, "y", [1.0, 2.0, 3.0], order=2).matrix, [[1, 2, 3], [1, 4, 9]]
    )
    assert q.identity(domain, "x").matrix.flags.writeable is False


def test_queries_are_checked_when_built() -> None:
    domain = Domain(("x", "y"), (4, 3))
    with pytest.raises(QueryError):
        q.identity(domain, "nope")
    with pytest.raises(QueryError):
        q.indicator(domain, "x", [4])
    with pytest.raises(QueryError):
        q.weights(domain, "x", [1.0, 2.0])
    with pytest.raises(QueryError):
        q.moments(domain, "x", [1.0, 2.0, 3.0, 4.0], order=0)
    with pytest.raises(QueryError):
        FactoredQuery.of(domain, q.identity(domain, "x"), q.ones(domain, "x"))
    wrong_columns = q.QueryFactor("y", np.ones((2, 4)), "weights", ("a", "b"))
    with pytest.raises(QueryError):
        FactoredQuery.of(domain, wrong_columns)
    with pytest.raises(QueryError):
        q.QueryFactor("y", np.full((1, 3), np.nan), "weights", ("w",))
    with pytest.raises(QueryError):
        q.QueryFactor("y", np.ones((1, 3)), "mystery", ("w",))
    other = Domain(("x", "y"), (5, 3))
    model = chain_model(length=3, size=2, seed=0)
    with pytest.raises(QueryError):
        model.answer(FactoredQuery.of(other, q.identity(other, "x")))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_random_queries_match_kronecker_brute_force(kind: str, seed: int) -> None:
    model = random_model(kind, seed)
    rng = np.random.default_rng(seed)
    for _ in range(25):
        query = random_query(model, rng)
        got = model.answer(query)
        assert got.shape == query.shape
        np.testing.assert_allclose(got, kron_answer(model, query), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("factor_kind", q.KINDS)
def test_every_factor_kind_beside_others(factor_kind: str) -> None:
    model = random_model("cyclic", 11)
    rng = np.random.default_rng(5)
    domain = model.domain
    query = FactoredQuery.of(
        domain,
        random_factor(domain, "e", "identity", rng),
        random_factor(domain, "a", factor_kind, rng),
        random_factor(domain, "c", "indicator", rng),
    )
    np.testing.assert_allclose(model.answer(query), kron_answer(model, query), rtol=1e-9)


def test_where_only_query_is_one_count_and_identity_is_the_marginal() -> None:
    model = random_model("tree", 4)
    domain = model.domain
    count = model.answer(
        FactoredQuery.of(domain, q.indicator(domain, "b", [0]), q.indicator(domain, "f", [1]))
    )
    assert count.shape == ()
    expected = model.marginal(("b", "f"))[0, 1]
    assert float(count) == pytest.approx(expected)
    table = model.answer(FactoredQuery.of(domain, q.identity(domain, "d"), q.identity(domain, "a")))
    np.testing.assert_allclose(table, model.marginal(("d", "a")))
    everything = model.answer(FactoredQuery.of(domain))
    assert float(everything) == pytest.approx(model.total)


def test_cdf_and_moments_give_cumulative_counts_and_means() -> None:
    model = random_model("cyclic", 8)
    domain = model.domain
    counts = model.marginal(("c",))
    cdf = model.answer(FactoredQuery.of(domain, q.prefix(domain, "c")))
    np.testing.assert_allclose(cdf, np.cumsum(counts))
    values = np.linspace(10.0, 40.0, domain.size_of("c"))
    sums = model.answer(FactoredQuery.of(domain, q.moments(domain, "c", values, order=2)))
    np.testing.assert_allclose(sums, [counts @ values, counts @ values**2])


def test_batch_answers_equal_single_answers() -> None:
    model = random_model("cyclic", 2)
    domain = model.domain
    rng = np.random.default_rng(9)
    batch = [random_query(model, rng) for _ in range(20)]
    # Same-shaped queries that differ only in their matrices are stacked together.
    for codes in ([0], [1], [0, 1]):
        batch.append(
            FactoredQuery.of(domain, q.identity(domain, "a"), q.indicator(domain, "f", codes))
        )
        batch.append(
            FactoredQuery.of(domain, q.weights(domain, "b", rng.normal(size=domain.size_of("b"))))
        )
    batch.append(FactoredQuery.of(domain, q.identity(domain, "c")))
    batch.append(FactoredQuery.of(domain, q.identity(domain, "c")))
    answers = model.answer_many(batch)
    assert len(answers) == len(batch)
    for query, got in zip(batch, answers, strict=True):
        np.testing.assert_allclose(got, model.answer(query), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got, kron_answer(model, query), rtol=1e-9, atol=1e-9)


def test_query_over_many_attributes_never_builds_the_joint() -> None:
    model = chain_model(length=14, size=3, seed=4)  # 3^14 ≈ 4.8M joint cells
    domain = model.domain
    factors = [q.indicator(domain, f"x{i}", [i % 3]) for i in range(14)]
    factors[3] = q.identity(domain, "x3")
    factors[10] = q.prefix(domain, "x10")
    query = FactoredQuery.of(domain, *factors)
    answer = model.answer(query, max_cells=200)
    assert answer.shape == (3, 3)
    # Brute force on the chain: the same sum by a forward recursion over exp(θ), whose
    # first axis accumulates the answer's rows (x3's outer, x10's inner).
    pair = {
        tuple(sorted(c, key=lambda a: int(a[1:]))): np.exp(v)
        for c, v in model.log_potentials.items()
    }
    forward = np.ones((1, 3))  # (answer rows so far, value of the current variable)
    for i, factor in enumerate(factors):
        forward = (forward[:, None, :] * factor.matrix[None, :, :]).reshape(-1, 3)
        if i < 13:
            forward = forward @ pair[(f"x{i}", f"x{i + 1}")]
    unnormalised = forward.sum(axis=1).reshape(3, 3)
    expected = unnormalised * np.exp(-model.log_partition) * model.total
    np.testing.assert_allclose(answer, expected, rtol=1e-9)


def test_query_width_cap_refuses() -> None:
    model = chain_model(length=6, size=4, seed=5)
    domain = model.domain
    query = FactoredQuery.of(
        domain,
        q.identity(domain, "x0"),
        q.prefix(domain, "x5"),
        q.groups(domain, "x2", [[0], [1, 2]]),
    )
    answer_cells = 4 * 4 * 2  # x0 values × x5 prefixes × 2 groups
    assert model.query_plan(query).max_intermediate_cells >= answer_cells
    # Slicing may bring a plan down to the answer's own size, never below it.
    with pytest.raises(InferenceTooLarge):
        model.query_plan(query, max_cells=answer_cells - 1)
    with pytest.raises(InferenceTooLarge):
        model.answer(query, max_cells=10)
    with pytest.raises(InferenceTooLarge):
        model.answer_many([query], max_cells=10)
    np.testing.assert_allclose(model.answer(query), kron_answer(model, query), rtol=1e-9)


def dense_answer(model: GraphicalModel, query: FactoredQuery) -> np.ndarray:
    """N̂ · Q p by contracting the dense joint with each Q_i in turn (no Kronecker matrix)."""
    domain = model.domain
    table = model.joint_probabilities(max_cells=10**6)
    names = list(domain.attributes)
    for factor in query.factors:
        axis = names.index(factor.attribute)
        table = np.moveaxis(np.tensordot(factor.matrix, table, axes=([1], [axis])), 0, axis)
    # Sum out unmentioned attributes; keep the row axes in query order.
    mentioned = [names.index(f.attribute) for f in query.factors]
    table = table.sum(axis=tuple(i for i in range(len(names)) if i not in mentioned))
    order = sorted(mentioned)
    table = np.transpose(table, [order.index(i) for i in mentioned])
    return table.reshape(query.shape) * model.total


@pytest.mark.parametrize("kind", ["tree", "cyclic"])
def test_queries_on_wide_attributes_use_blas_and_match_brute_force(kind: str) -> None:
    # Attributes of 12-16 values: joint tables large enough for the matmul path.
    model = random_model(kind, seed=31, attributes=5, max_size=16)
    rng = np.random.default_rng(31)
    plans_with_matmul = 0
    for _ in range(12):
        query = random_query(model, rng)
        np.testing.assert_allclose(
            model.answer(query), dense_answer(model, query), rtol=1e-9, atol=1e-9
        )
    for attrs in [("a", "c", "e"), ("e", "b", "d"), ("d", "a")]:
        plan = model.plan(attrs)
        plans_with_matmul += any(op[0] == "matmul" for op in plan.elimination.operations)
        np.testing.assert_allclose(
            model.probabilities(attrs), dense_answer_marginal(model, attrs), rtol=1e-9
        )
    assert plans_with_matmul > 0


def dense_answer_marginal(model: GraphicalModel, attrs: tuple[str, ...]) -> np.ndarray:
    domain = model.domain
    query = FactoredQuery.of(domain, *[q.identity(domain, a) for a in attrs])
    return dense_answer(model, query) / model.total
