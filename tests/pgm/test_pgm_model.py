"""GraphicalModel: the brute-force joint, lazy calibration, serialisation of answers."""

from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest
from pgm_inference_fixtures import brute_marginal, random_model
from scipy.special import logsumexp

from app.pgm import queries as q
from app.pgm.domain import Domain, DomainError
from app.pgm.model import GraphicalModel
from app.pgm.queries import FactoredQuery


def test_joint_probabilities_is_the_normalised_product_of_potentials() -> None:
    domain = Domain(("a", "b", "c"), (2, 3, 4))
    rng = np.random.default_rng(0)
    theta_ca = rng.normal(size=(4, 2))  # axes in the clique's own (non-domain) order
    theta_b = rng.normal(size=3)
    model = GraphicalModel(
        domain, (("c", "a"), ("b",)), {("c", "a"): theta_ca, ("b",): theta_b}, 10.0
    )
    expected = np.exp(theta_ca.T[:, None, :] + theta_b[None, :, None])
    np.testing.assert_allclose(model.joint_probabilities(), expected / expected.sum())
    with pytest.raises(DomainError):
        model.joint_probabilities(max_cells=23)


def test_log_partition_matches_brute_force() -> None:
    model = random_model("cyclic", 1)
    log_joint = np.zeros(model.domain.sizes)
    for clique, theta in model.log_potentials.items():
        shape = [model.domain.size_of(a) if a in clique else 1 for a in model.domain.attributes]
        log_joint = log_joint + theta.reshape(shape)  # cliques are in domain order here
    assert model.log_partition == pytest.approx(float(logsumexp(log_joint)))


def test_marginal_is_total_times_probabilities_in_the_order_given() -> None:
    model = random_model("tree", 2)
    counts = model.marginal(("e", "a"))
    np.testing.assert_allclose(counts, model.total * brute_marginal(model, ("e", "a")))
    np.testing.assert_allclose(counts.T, model.marginal(("a", "e")))


def test_cliques_that_are_not_a_junction_tree_are_triangulated() -> None:
    # A 4-cycle of pair potentials: inference must add a chord, not treat it as a tree.
    domain = Domain(("a", "b", "c", "d"), (2, 3, 2, 3))
    rng = np.random.default_rng(4)
    cliques = (("a", "b"), ("c", "b"), ("c", "d"), ("a", "d"))
    model = GraphicalModel(
        domain, cliques, {c: rng.normal(scale=2.0, size=domain.shape(c)) for c in cliques}, 50.0
    )
    for attrs in [("a", "c"), ("b", "d"), ("d", "a", "c"), ("b",)]:
        np.testing.assert_allclose(
            model.probabilities(attrs), brute_marginal(model, attrs), rtol=1e-9
        )


def test_calibration_is_computed_once_and_shared_by_threads() -> None:
    model = random_model("cyclic", 3)
    seen: list[object] = []
    answers: list[np.ndarray] = []

    def worker() -> None:
        seen.append(model.calibrated_tree)
        answers.append(model.probabilities(("a", "d", "f")))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in seen}) == 1
    for a in answers:
        np.testing.assert_allclose(a, brute_marginal(model, ("a", "d", "f")))


def test_serialisation_round_trip_preserves_answers() -> None:
    model = random_model("cyclic", 5)
    model.probabilities(("a", "b"))  # warm caches on the original only
    restored = GraphicalModel.from_bytes(model.to_bytes())
    assert restored.cliques == model.cliques and restored.total == model.total
    for attrs in [("a",), ("f", "b"), ("c", "e", "a"), model.domain.attributes]:
        np.testing.assert_allclose(restored.marginal(attrs), model.marginal(attrs), rtol=1e-12)
    domain = model.domain
    query = FactoredQuery.of(
        domain,
        q.prefix(domain, "c"),
        q.indicator(domain, "e", [0]),
        q.moments(domain, "a", np.arange(domain.size_of("a")), 2),
    )
    np.testing.assert_allclose(restored.answer(query), model.answer(query), rtol=1e-12)
    np.testing.assert_array_equal(restored.sample(rows=300, seed=2), model.sample(rows=300, seed=2))


def test_pickled_and_copied_models_answer_alike() -> None:
    model = random_model("tree", 6)
    model.probabilities(("a",))  # the cache holds a lock, which must not be pickled
    for clone in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model), copy.copy(model)):
        np.testing.assert_allclose(clone.marginal(("b", "d")), model.marginal(("b", "d")))
