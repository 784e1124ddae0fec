"""Estimation: exact recovery, L1 vs L2 under Laplace noise, warm starts, totals, losses."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from app.pgm.belief_propagation import calibrate
from app.pgm.domain import Domain
from app.pgm.estimation import SOLVERS, fit
from app.pgm.junction_tree import ModelTooLarge, build_junction_tree
from app.pgm.measurement import Measurement, estimate_total, loss
from app.pgm.model import GraphicalModel
from app.pgm.problem import potentials_from_marginals

DOMAIN = Domain(("a", "b", "c", "d", "e"), (3, 4, 2, 3, 4))
CYCLE = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("e",)]
CONCRETE_SOLVERS = tuple(s for s in SOLVERS if s != "auto")  # "auto" picks one of these


def _records(rng: np.random.Generator, n: int, domain: Domain = DOMAIN) -> np.ndarray:
    """Correlated records in which every cell of every measured pair still occurs."""
    data = np.stack([rng.integers(0, s, size=n) for s in domain.sizes], axis=1)
    copy = rng.random(n) < 0.5
    data[copy, 1] = (data[copy, 0] + rng.integers(0, 2, copy.sum())) % domain.sizes[1]
    copy = rng.random(n) < 0.5
    data[copy, 3] = (data[copy, 1] + data[copy, 2]) % domain.sizes[3]
    return data


def _marginal(data: np.ndarray, attrs: tuple[str, ...], domain: Domain = DOMAIN) -> np.ndarray:
    columns = [data[:, domain.index(a)] for a in attrs]
    flat = np.ravel_multi_index(columns, domain.shape(attrs))
    return np.bincount(flat, minlength=domain.cells(attrs)).astype(float)


def _exact_measurements(data: np.ndarray, sets=CYCLE) -> list[Measurement]:
    return [Measurement(s, _marginal(data, s), "gaussian", 1.0) for s in sets]


# Iterations each solver needs on the small exact problem (dual averaging is O(1/t²)).
RECOVERY_ITERATIONS = {
    "admm": 3000,
    "mirror_descent": 3000,
    "accelerated": 3000,
    "dual_averaging": 2500,
}


@pytest.mark.parametrize("solver", CONCRETE_SOLVERS)
def test_noise_free_measurements_are_recovered(solver: str) -> None:
    rng = np.random.default_rng(0)
    data = _records(rng, 2000)
    # Measured with the axes in a non-canonical order, plus a range query on one attribute.
    sets = [("b", "a"), ("b", "c"), ("d", "c"), ("d", "a"), ("e",)]
    measurements = _exact_measurements(data, sets)
    prefix_sums = np.tril(np.ones((4, 4)))  # cumulative counts of e ≤ k
    measurements.append(
        Measurement(
            ("e",),
            prefix_sums @ _marginal(data, ("e",)),
            "gaussian",
            2.0,
            query=sp.csr_matrix(prefix_sums),
        )
    )
    model, record = fit(
        DOMAIN,
        measurements,
        solver=solver,
        max_iterations=RECOVERY_ITERATIONS[solver],
        tolerance=1e-14,
    )
    assert record.solver == solver
    assert record.total == pytest.approx(2000.0, rel=1e-12)
    assert model.total == pytest.approx(2000.0, rel=1e-12)
    for m in measurements[:-1]:
        estimate = model.marginal(m.attributes).ravel()
        assert np.abs(estimate - m.values).max() / len(data) < 1e-6, m.attributes
    assert record.final_loss == pytest.approx(
        loss(measurements, model.marginal), rel=1e-6, abs=1e-9
    )


def test_solvers_agree_on_the_maximum_entropy_optimum() -> None:
    # The loss is flat along the 3-way interactions of the chord cliques of this 4-cycle;
    # mirror descent from θ = 0 ends at the maximum-entropy optimum, and ADMM and dual
    # averaging must end at the same distribution (their maximum-entropy step).
    rng = np.random.default_rng(1)
    data = _records(rng, 500)
    measurements = [
        Measurement(
            s, _marginal(data, s) + rng.normal(scale=4.0, size=DOMAIN.cells(s)), "gaussian", 4.0
        )
        for s in CYCLE
    ]
    reference, md_record = fit(
        DOMAIN, measurements, solver="mirror_descent", max_iterations=3000, tolerance=1e-12
    )
    assert md_record.final_loss > 1.0  # noise made the measurements inconsistent
    for solver, tolerance in (("admm", 1e-6), ("dual_averaging", 1e-12)):
        model, record = fit(
            DOMAIN, measurements, solver=solver, max_iterations=3000, tolerance=tolerance
        )
        assert record.final_loss == pytest.approx(md_record.final_loss, rel=1e-6)
        difference = np.abs(model.joint_probabilities() - reference.joint_probabilities()).max()
        assert difference < 1e-6, (solver, difference)


def _l1_error(model: GraphicalModel, data: np.ndarray, sets, domain: Domain) -> float:
    return sum(
        float(np.abs(model.marginal(s).ravel() - _marginal(data, s, domain)).sum()) for s in sets
    )


def test_l1_estimate_beats_l2_under_laplace_noise() -> None:
    # Lee, Wang, Kifer (KDD 2015): with Laplace noise the MLE minimises the L1 distance and
    # beats least squares. The gain shows where answers overlap (each table measured three
    # times, tables sharing attributes) and counts are sparse (300 records, ≤ 64 cells).
    domain = Domain(("a", "b", "c", "d", "e"), (6, 8, 2, 5, 8))
    sets = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("e", "a")]
    wins, l1_total, l2_total = 0, 0.0, 0.0
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        data = _records(rng, 300, domain)
        as_laplace, as_gaussian = [], []
        for s in sets:
            for _ in range(3):
                noisy = _marginal(data, s, domain) + rng.laplace(scale=8.0, size=domain.cells(s))
                as_laplace.append(Measurement(s, noisy, "laplace", 8.0))
                as_gaussian.append(
                    Measurement(s, noisy, "gaussian", 8.0 * np.sqrt(2))
                )  # same variance
        l1_error = _l1_error(fit(domain, as_laplace)[0], data, sets, domain)
        l2_error = _l1_error(fit(domain, as_gaussian)[0], data, sets, domain)
        wins += l1_error < l2_error
        l1_total += l1_error
        l2_total += l2_error
    assert wins >= 4, (wins, l1_total, l2_total)
    assert l1_total < 0.97 * l2_total


def test_mixed_gaussian_and_laplace_losses_add() -> None:
    rng = np.random.default_rng(5)
    data = _records(rng, 1000)
    measurements = [
        Measurement(
            ("a", "b"), _marginal(data, ("a", "b")) + rng.normal(scale=3, size=12), "gaussian", 3.0
        ),
        Measurement(
            ("b", "c"), _marginal(data, ("b", "c")) + rng.laplace(scale=3, size=8), "laplace", 3.0
        ),
        Measurement(("c", "d"), _marginal(data, ("c", "d")), "laplace", 1.0),
        Measurement(("d", "a", "e"), _marginal(data, ("d", "a", "e")), "gaussian", 5.0),
    ]
    model, record = fit(DOMAIN, measurements)
    marginals = {m.attributes: model.marginal(m.attributes) for m in measurements}
    expected = 0.0
    for m in measurements:
        residual = marginals[m.attributes].ravel() - m.values
        expected += (
            0.5 * (residual @ residual) / m.scale**2
            if m.noise == "gaussian"
            else np.abs(residual).sum() / m.scale
        )
    assert loss(measurements, marginals) == pytest.approx(expected, rel=1e-12)
    assert record.final_loss == pytest.approx(expected, rel=1e-6)
    # Mirror descent on the same (non-smooth) objective does no better than ADMM.
    _, md_record = fit(DOMAIN, measurements, solver="mirror_descent", max_iterations=1000)
    assert record.final_loss <= md_record.final_loss * (1 + 1e-4)
    with pytest.raises(ValueError, match="smooth"):
        fit(DOMAIN, measurements, solver="dual_averaging")


WARM_DOMAIN = Domain(("a", "b", "c", "d", "e"), (6, 8, 2, 5, 8))


@pytest.mark.parametrize(
    ("solver", "new_set", "cliques_change"),
    [
        ("mirror_descent", ("b", "e"), True),
        ("mirror_descent", ("a",), False),
        ("admm", ("a",), False),
    ],
)
def test_warm_start_needs_fewer_iterations(
    solver: str, new_set: tuple[str, ...], cliques_change: bool
) -> None:
    for seed in range(2):
        rng = np.random.default_rng(seed)
        data = _records(rng, 4000, WARM_DOMAIN)
        measurements = [
            Measurement(
                s,
                _marginal(data, s, WARM_DOMAIN) + rng.normal(scale=5.0, size=WARM_DOMAIN.cells(s)),
                "gaussian",
                5.0,
            )
            for s in [*CYCLE, new_set]
        ]
        # The previous model saw all but the last measurement.
        previous, _ = fit(WARM_DOMAIN, measurements[:-1], solver=solver, tolerance=1e-7)
        _, cold = fit(WARM_DOMAIN, measurements, solver=solver, tolerance=1e-7)
        warm_model, warm = fit(
            WARM_DOMAIN, measurements, solver=solver, tolerance=1e-7, warm_start=previous
        )
        assert (set(previous.cliques) != set(warm_model.cliques)) == cliques_change
        assert cold.converged and warm.converged
        assert warm.iterations < cold.iterations, (warm.iterations, cold.iterations)
        assert warm.final_loss == pytest.approx(cold.final_loss, rel=1e-3)


def test_estimate_total_weights_by_inverse_variance() -> None:
    one_way = Measurement(("a",), np.array([10.0, 20.0, 30.0]), "gaussian", 2.0)  # 60, var 3·4
    two_way = Measurement(("a", "c"), np.full(6, 15.0), "laplace", 1.0)  # 90, var 6·2
    totals_row = np.vstack([np.eye(4), np.ones((1, 4))])
    queried = Measurement(
        ("b",), np.array([1.0, 1.0, 1.0, 1.0, 45.0]), "gaussian", 1.0, query=totals_row
    )
    expected = (60 / 12 + 90 / 12) / (1 / 12 + 1 / 12)
    assert estimate_total([one_way, two_way]) == pytest.approx(expected)
    # Through Q: the least-variance a with Qᵀa = 1 puts 1/5 on each identity row and 4/5
    # on the total row: 4/5 + 45·4/5 = 36.8, with variance 4/25 + 16/25 = 0.8.
    assert estimate_total([queried]) == pytest.approx(36.8)
    combined = estimate_total([one_way, queried])
    assert combined == pytest.approx((60 / 12 + 36.8 / 0.8) / (1 / 12 + 1 / 0.8))
    hidden = Measurement(
        ("b",), np.array([1.0]), "gaussian", 1.0, query=np.array([[1.0, -1.0, 0.0, 0.0]])
    )
    with pytest.raises(ValueError, match="total"):
        estimate_total([hidden])


def test_callback_sees_every_iteration_and_cap_refuses_first() -> None:
    rng = np.random.default_rng(4)
    measurements = _exact_measurements(_records(rng, 300))
    seen: list[tuple[int, float]] = []
    _, record = fit(
        DOMAIN,
        measurements,
        solver="mirror_descent",
        max_iterations=40,
        tolerance=0.0,
        callback=lambda i, v: seen.append((i, v)),
    )
    assert [i for i, _ in seen] == list(range(1, record.iterations + 1))
    assert [v for _, v in seen] == record.losses
    assert record.iterations == 40 and record.seconds > 0
    calls: list[int] = []
    with pytest.raises(ModelTooLarge):
        fit(DOMAIN, measurements, max_model_cells=20, callback=lambda i, v: calls.append(i))
    assert calls == []


def test_measurement_validation() -> None:
    with pytest.raises(ValueError):
        Measurement(("a",), np.zeros(3), "poisson", 1.0)
    with pytest.raises(ValueError):
        Measurement(("a",), np.zeros(3), "gaussian", 0.0)
    with pytest.raises(ValueError, match="cells"):
        fit(DOMAIN, [Measurement(("a",), np.zeros(4), "gaussian", 1.0)])


def test_potentials_from_marginals_reproduce_consistent_marginals_with_zeros() -> None:
    rng = np.random.default_rng(6)
    data = _records(rng, 200)
    data[data[:, 0] == 2, 1] = 0  # a = 2 forces b = 0: zero cells in (a, b)
    tree = build_junction_tree(DOMAIN, CYCLE)
    tables = []
    for clique in tree.cliques:
        counts = _marginal(data, clique).reshape(DOMAIN.shape(clique))
        tables.append(counts / counts.sum())
    thetas = potentials_from_marginals(tree, tables)
    assert all(np.isfinite(t).all() for t in thetas)
    marginals, _ = calibrate(tree, dict(zip(tree.cliques, thetas, strict=True)))
    for clique, table in zip(tree.cliques, tables, strict=True):
        np.testing.assert_allclose(marginals[clique], table, atol=1e-14)


def test_auto_solver_is_admm_for_small_models_and_mirror_descent_for_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.pgm import estimation

    data = _records(np.random.default_rng(3), 500)
    measurements = _exact_measurements(data)
    _model, small = fit(DOMAIN, measurements, max_iterations=50)
    assert small.solver == "admm"
    monkeypatch.setattr(estimation, "ADMM_MAX_CELLS", 10)
    _model, large = fit(DOMAIN, measurements, max_iterations=50)
    assert large.solver == "mirror_descent"
