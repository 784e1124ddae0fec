"""Belief propagation against brute-force enumeration of the joint distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from app.pgm.belief_propagation import CalibrationPlan, IncrementalCalibration, calibrate
from app.pgm.domain import Domain
from app.pgm.junction_tree import build_junction_tree

CLIQUE_SETS = {
    "tree": [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e"), ("f",)],
    "cycle": [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "e", "f")],
    "cyclic_triples": [("a", "b", "c"), ("c", "d"), ("d", "e"), ("a", "e"), ("b", "f"), ("f", "e")],
    "singletons": [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)],
    "disconnected": [("e", "a"), ("c", "d", "b")],
}


def _random_domain(rng: np.random.Generator) -> Domain:
    return Domain(("a", "b", "c", "d", "e", "f"), tuple(int(s) for s in rng.integers(2, 5, size=6)))


def _brute_force(domain: Domain, potentials: dict) -> tuple[np.ndarray, float]:
    """Log of the unnormalised joint over the whole domain, and log Z."""
    joint = np.zeros(domain.sizes)
    for attrs, values in potentials.items():
        order = sorted(attrs, key=domain.index)
        aligned = np.transpose(values, [attrs.index(a) for a in order])
        shape = [domain.size_of(a) if a in attrs else 1 for a in domain.attributes]
        joint = joint + aligned.reshape(shape)
    return joint, float(logsumexp(joint))


def _marginal(domain: Domain, log_joint: np.ndarray, log_z: float, clique) -> np.ndarray:
    p = np.exp(log_joint - log_z)
    drop = tuple(i for i, a in enumerate(domain.attributes) if a not in clique)
    return p.sum(axis=drop)


@pytest.mark.parametrize("name", sorted(CLIQUE_SETS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bp_matches_brute_force(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    domain = _random_domain(rng)
    sets = CLIQUE_SETS[name]
    # Potentials keyed by the measured sets in a shuffled (non-canonical) axis order.
    potentials = {}
    for s in sets:
        attrs = tuple(rng.permutation(s))
        potentials[attrs] = rng.normal(scale=2.0, size=domain.shape(attrs))
    tree = build_junction_tree(domain, sets)
    marginals, log_z = calibrate(tree, potentials)
    log_joint, expected_log_z = _brute_force(domain, potentials)
    assert log_z == pytest.approx(expected_log_z, abs=1e-10)
    assert set(marginals) == set(tree.cliques)
    for clique, table in marginals.items():
        assert table.shape == domain.shape(clique)
        assert table.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(table, _marginal(domain, log_joint, log_z, clique), atol=1e-12)


def test_bp_handles_structural_zeros() -> None:
    rng = np.random.default_rng(7)
    domain = Domain(("a", "b", "c", "d", "e", "f"), (3, 3, 3, 2, 2, 2))
    sets = CLIQUE_SETS["cycle"]
    potentials = {s: rng.normal(size=domain.shape(s)) for s in sets}
    potentials[("a", "b")][0, :] = -np.inf  # a = 0 impossible
    potentials[("c", "d")][:, 1] = -np.inf  # d = 1 impossible
    tree = build_junction_tree(domain, sets)
    marginals, log_z = calibrate(tree, potentials)
    log_joint, expected_log_z = _brute_force(domain, potentials)
    assert np.isfinite(log_z) and log_z == pytest.approx(expected_log_z, abs=1e-10)
    for clique, table in marginals.items():
        assert not np.isnan(table).any()
        np.testing.assert_allclose(table, _marginal(domain, log_joint, log_z, clique), atol=1e-12)


def test_bp_sums_potentials_sharing_a_clique() -> None:
    rng = np.random.default_rng(3)
    domain = Domain(("a", "b", "c"), (2, 3, 4))
    potentials = {
        ("a", "b", "c"): rng.normal(size=(2, 3, 4)),
        ("c", "a"): rng.normal(size=(4, 2)),
        ("b",): rng.normal(size=3),
    }
    tree = build_junction_tree(domain, [("a", "b", "c")])
    marginals, log_z = calibrate(tree, potentials)
    log_joint, expected_log_z = _brute_force(domain, potentials)
    assert log_z == pytest.approx(expected_log_z, abs=1e-10)
    np.testing.assert_allclose(marginals[("a", "b", "c")], np.exp(log_joint - log_z), atol=1e-12)


@pytest.mark.parametrize("name", sorted(CLIQUE_SETS))
def test_incremental_calibration_tracks_every_change_like_a_full_calibration(name: str) -> None:
    """After each one-clique change (in any order, not only along the walk), every
    clique's marginal equals a fresh two-pass calibration's and the brute-force joint's."""
    rng = np.random.default_rng(5)
    domain = _random_domain(rng)
    tree = build_junction_tree(domain, CLIQUE_SETS[name])
    plan = CalibrationPlan(tree)
    thetas = [rng.normal(size=shape) for shape in plan.shapes]
    incremental = IncrementalCalibration(plan, thetas)
    assert sorted(incremental.walk()) == list(range(len(tree.cliques)))
    for step in range(3 * len(tree.cliques)):
        k = int(rng.integers(len(tree.cliques)))
        incremental.add(k, rng.normal(size=plan.shapes[k]))
        look = [int(rng.integers(len(tree.cliques))), k]
        expected, _ = plan.marginals([t.copy() for t in thetas])
        potentials = dict(zip(tree.cliques, thetas, strict=True))
        log_joint, log_z = _brute_force(domain, potentials)
        for j in look:
            table = incremental.marginal(j)
            np.testing.assert_allclose(table, expected[j], atol=1e-12, err_msg=f"step {step}")
            np.testing.assert_allclose(
                table, _marginal(domain, log_joint, log_z, tree.cliques[j]), atol=1e-12
            )
