"""CGM-EM: the MAP E-step against a generic convex solver, EM against brute-force EM,
monotone loss, recovery without noise, fixed points = the mle optimum, the selection
among equally likely Laplace solutions, and `fit(estimator="cgm-em")` running EM after
the solver (its iterations recorded, its result an EM fixed point, `refine` called once)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp

from app.pgm import cgm
from app.pgm.cgm import ESTIMATOR, LatentProblem, expectation_maximisation
from app.pgm.cgm_map import map_marginals
from app.pgm.cgm_starts import fit_from_start, gaussian_approximation
from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.junction_tree import build_junction_tree
from app.pgm.measurement import Measurement, estimate_total
from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem

TINY = Domain(("a", "b", "c"), (2, 3, 2))


def _latent(domain: Domain, measurements: list[Measurement]) -> LatentProblem:
    tree = build_junction_tree(domain, [m.attributes for m in measurements])
    return LatentProblem(FitProblem(tree, measurements, estimate_total(measurements)))


def _joint_marginal(joint: np.ndarray, domain: Domain, attrs: tuple[str, ...]) -> np.ndarray:
    axes = tuple(i for i, a in enumerate(domain.attributes) if a not in attrs)
    kept = [a for a in domain.attributes if a in attrs]
    return np.transpose(joint.sum(axis=axes), [kept.index(a) for a in attrs])


def _tiny_measurements(rng: np.random.Generator, total: int) -> list[Measurement]:
    """Laplace on (a, b), Gaussian on (b, c), Laplace prefix sums on c: noisy, overlapping."""
    counts = rng.multinomial(total, rng.dirichlet(np.ones(TINY.cells()))).reshape(TINY.sizes)
    prefix = np.tril(np.ones((2, 2)))
    return [
        Measurement(
            ("a", "b"),
            _joint_marginal(counts, TINY, ("a", "b")).ravel() + rng.laplace(0, 4.0, 6),
            "laplace",
            4.0,
        ),
        Measurement(
            ("b", "c"),
            _joint_marginal(counts, TINY, ("b", "c")).ravel() + rng.normal(0, 3.0, 6),
            "gaussian",
            3.0,
        ),
        Measurement(
            ("c",),
            prefix @ _joint_marginal(counts, TINY, ("c",)) + rng.laplace(0, 2.0, 2),
            "laplace",
            2.0,
            query=sp.csr_matrix(prefix),
        ),
    ]


def _answer_matrix(domain: Domain, measurements: list[Measurement]) -> np.ndarray:
    """Rows: every measured answer as a linear function of the dense joint (probabilities)."""
    rows = []
    for m in measurements:
        cells = domain.cells(m.attributes)
        for k in range(cells):
            indicator = np.zeros(cells)
            indicator[k] = 1.0
            one_hot = indicator if m.query is None else np.asarray(m.query.toarray())[k]
            table = one_hot.reshape(domain.shape(m.attributes))
            # Broadcast the table over the joint (axes into domain order).
            order = [m.attributes.index(a) for a in domain.attributes if a in m.attributes]
            shape = [domain.size_of(a) if a in m.attributes else 1 for a in domain.attributes]
            rows.append(
                np.broadcast_to(table.transpose(order).reshape(shape), domain.sizes).ravel()
            )
    return np.array(rows)


def _brute_force_map(
    domain: Domain, measurements: list[Measurement], prior: np.ndarray, total: float
) -> tuple[np.ndarray, float]:
    """The CGM MAP over the dense joint q by SLSQP, Laplace terms through slack variables."""
    A = total * _answer_matrix(domain, measurements)
    y = np.concatenate([m.values for m in measurements])
    w = np.concatenate([np.full(m.values.size, m.weight) for m in measurements])
    gauss = np.concatenate([np.full(m.values.size, m.noise == "gaussian") for m in measurements])
    laplace = np.flatnonzero(~gauss)
    p = prior.ravel()
    n = p.size

    def objective(v: np.ndarray) -> tuple[float, np.ndarray]:
        q, t = v[:n], v[n:]
        r = A @ q - y
        value = 0.5 * float(np.sum(w[gauss] * r[gauss] ** 2)) + float(w[laplace] @ t)
        value += total * float(q @ np.log(q / p))
        grad_q = A[gauss].T @ (w[gauss] * r[gauss]) + total * (np.log(q / p) + 1.0)
        return value, np.concatenate([grad_q, w[laplace]])

    A_lap, y_lap = A[laplace], y[laplace]
    slack = np.eye(laplace.size)
    constraints = [
        {
            "type": "eq",
            "fun": lambda v: v[:n].sum() - 1.0,
            "jac": lambda v: np.concatenate([np.ones(n), np.zeros(laplace.size)]),
        },
        {
            "type": "ineq",
            "fun": lambda v: v[n:] - (A_lap @ v[:n] - y_lap),
            "jac": lambda v: np.hstack([-A_lap, slack]),
        },
        {
            "type": "ineq",
            "fun": lambda v: v[n:] + (A_lap @ v[:n] - y_lap),
            "jac": lambda v: np.hstack([A_lap, slack]),
        },
    ]
    start = np.concatenate([p, np.abs(A_lap @ p - y_lap) + 1.0])
    bounds = [(1e-12, 1.0)] * n + [(0.0, None)] * laplace.size
    result = so.minimize(
        objective,
        start,
        jac=True,
        method="SLSQP",
        bounds=bounds,
        constraints=constraints,
        options={"ftol": 1e-13, "maxiter": 2000},
    )
    # SLSQP may end on 'positive directional derivative' once at float precision.
    assert result.success or result.status == 8, result.message
    return result.x[:n].reshape(domain.sizes), float(result.fun)


def _model_joint(latent: LatentProblem, theta: np.ndarray) -> np.ndarray:
    problem = latent.problem
    return problem.model(problem.split(theta)).joint_probabilities()


def test_map_step_matches_a_generic_convex_solver() -> None:
    rng = np.random.default_rng(1)
    measurements = _tiny_measurements(rng, 150)
    latent = _latent(TINY, measurements)
    theta = rng.normal(0.0, 1.0, latent.problem.n)  # some current model, far from the data
    step = map_marginals(latent, theta)
    prior = _model_joint(latent, theta)
    expected, optimum = _brute_force_map(TINY, measurements, prior, latent.total)
    found = _model_joint(latent, step.theta)
    assert np.abs(found - expected).max() < 1e-5
    # The certificate: the primal value is within the gap of the true optimum.
    assert step.gap >= 0.0
    assert optimum - 1e-6 <= step.primal <= optimum + step.gap + 1e-6
    assert step.gap <= 1e-6 * max(step.primal, 1.0)


def test_map_step_warm_started_from_its_dual_needs_fewer_passes() -> None:
    rng = np.random.default_rng(2)
    latent = _latent(TINY, _tiny_measurements(rng, 400))
    first = map_marginals(latent, np.zeros(latent.problem.n))
    again = map_marginals(latent, np.zeros(latent.problem.n), dual_start=first.dual)
    assert again.evaluations < first.evaluations
    assert np.allclose(again.marginals, first.marginals, atol=1e-6)


def test_em_agrees_with_brute_force_em_on_a_tiny_domain() -> None:
    rng = np.random.default_rng(3)
    measurements = _tiny_measurements(rng, 120)
    latent = _latent(TINY, measurements)
    run = expectation_maximisation(
        latent, np.zeros(latent.problem.n), max_iterations=3, tolerance=0.0
    )
    joint = np.full(TINY.sizes, 1.0 / TINY.cells())
    for _ in range(3):  # E-step over the dense joint; M-step: the model is the MAP itself
        joint, _ = _brute_force_map(TINY, measurements, joint, latent.total)
    assert np.abs(_model_joint(latent, run.theta) - joint).max() < 1e-5


@pytest.mark.parametrize("noise", ["laplace", "mixed"])
def test_em_loss_never_increases(noise: str) -> None:
    rng = np.random.default_rng(4)
    domain = Domain(("a", "b", "c", "d"), (3, 4, 2, 3))
    data = rng.integers(0, domain.sizes, size=(600, 4))
    sets = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    measurements = []
    for k, s in enumerate(sets):
        true = _joint_marginal(_counts(data, domain), domain, s).ravel()
        kind = "gaussian" if noise == "mixed" and k % 2 else "laplace"
        measurements.append(Measurement(s, true + rng.laplace(0, 4.0, true.size), kind, 4.0))
    latent = _latent(domain, measurements)
    run = expectation_maximisation(
        latent, np.zeros(latent.problem.n), max_iterations=25, tolerance=0.0
    )
    assert len(run.losses) == 26
    for before, after, gap in zip(run.losses[:-1], run.losses[1:], run.gaps, strict=True):
        assert after <= before + gap + 1e-9
    assert run.losses[-1] < 0.5 * run.losses[0]


def _counts(data: np.ndarray, domain: Domain) -> np.ndarray:
    flat = np.ravel_multi_index(tuple(data.T), domain.sizes)
    return np.bincount(flat, minlength=domain.cells()).reshape(domain.sizes).astype(float)


def test_noise_free_measurements_are_recovered_from_the_uniform_model() -> None:
    rng = np.random.default_rng(5)
    domain = Domain(("a", "b", "c", "d"), (3, 4, 2, 3))
    # A tree-structured population: every measured table positive, strongly dependent.
    data = rng.integers(0, domain.sizes, size=(3000, 4))
    copy = rng.random(3000) < 0.6
    data[copy, 1] = data[copy, 0]
    copy = rng.random(3000) < 0.6
    data[copy, 3] = data[copy, 2]
    counts = _counts(data, domain)
    sets = [("a", "b"), ("b", "c"), ("c", "d")]
    measurements = [
        Measurement(s, _joint_marginal(counts, domain, s).ravel(), "laplace", 1.0) for s in sets
    ]
    latent = _latent(domain, measurements)
    run = expectation_maximisation(latent, np.zeros(latent.problem.n))
    assert run.converged
    model = latent.problem.model(latent.problem.split(run.theta))
    for m in measurements:
        assert np.abs(model.marginal(m.attributes).ravel() - m.values).max() < 0.05
    fitted, record = fit(domain, measurements, estimator=ESTIMATOR)
    assert record.estimator == ESTIMATOR
    for m in measurements:
        assert np.abs(fitted.marginal(m.attributes).ravel() - m.values).max() < 0.05


def _noisy_cycle(seed: int, scale: float, records: int = 5000) -> tuple[Domain, list[Measurement]]:
    rng = np.random.default_rng(seed)
    domain = Domain(("a", "b", "c", "d"), (3, 4, 2, 3))
    data = rng.integers(0, domain.sizes, size=(records, 4))
    copy = rng.random(records) < 0.5
    data[copy, 2] = data[copy, 1] % 2
    counts = _counts(data, domain)
    sets = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    return domain, [
        Measurement(
            s,
            _joint_marginal(counts, domain, s).ravel() + rng.laplace(0, scale, domain.cells(s)),
            "laplace",
            scale,
        )
        for s in sets
    ]


def test_the_mle_optimum_is_a_fixed_point_and_cgm_em_reaches_its_loss() -> None:
    domain, measurements = _noisy_cycle(6, scale=5.0)
    mle, mle_record = fit(domain, measurements, tolerance=1e-10, max_iterations=20000)
    latent = _latent(domain, measurements)
    start = latent.problem.warm_theta(mle)
    run = expectation_maximisation(latent, start, max_iterations=5)
    moved = latent.log_partition_and_marginals(run.theta)[1]
    assert np.abs(moved - latent.log_partition_and_marginals(start)[1]).max() < 1e-4
    _, record = fit(domain, measurements, estimator=ESTIMATOR)
    assert record.final_loss == pytest.approx(mle_record.final_loss, rel=1e-3)


def test_gaussian_em_from_uniform_converges_to_the_least_squares_fit() -> None:
    """The shortcut fit_cgm_em takes: the Gaussian EM's fixed point is the L2 mle fit."""
    domain, laplace = _noisy_cycle(7, scale=3.0, records=2000)
    measurements = gaussian_approximation(laplace)
    assert all(m.noise == "gaussian" for m in measurements)
    assert measurements[0].scale == pytest.approx(np.sqrt(2.0) * 3.0)
    mle, _ = fit(domain, measurements, tolerance=1e-12, max_iterations=20000)
    latent = _latent(domain, measurements)
    run = expectation_maximisation(latent, np.zeros(latent.problem.n), tolerance=1e-12)
    em = latent.problem.model(latent.problem.split(run.theta))
    # Measured sets and an unmeasured pair (fixed by maximum entropy on the cycle's chord).
    for attrs in [("a", "b"), ("c", "d"), ("a", "c"), ("b", "d")]:
        assert np.abs(em.probabilities(attrs) - mle.probabilities(attrs)).max() < 1e-4, attrs


def test_on_a_flat_l1_face_the_start_selects_the_solution() -> None:
    """One Laplace table with negative answers: all of {0 ≤ x ≤ y⁺, Σx = N̂} is optimal.

    From uniform, EM ends at the point of that face nearest uniform — the largest cells cut
    to one level; from the Gaussian fit it keeps their differences; from mle's fit it stays
    at mle's. The same loss every time.
    """
    domain = Domain(("a",), (6,))
    y = np.array([400.0, 380.0, 60.0, 20.0, -100.0, -100.0])
    measurements = [Measurement(("a",), y, "laplace", 20.0)]
    latent = _latent(domain, measurements)
    run = expectation_maximisation(latent, np.zeros(latent.problem.n), tolerance=1e-12)
    uniform_start = latent.total * latent.log_partition_and_marginals(run.theta)[1]
    model, record = fit_from_start(domain, measurements, "gaussian", tolerance=1e-12)
    gaussian_start = model.marginal(("a",))
    mle, mle_record = fit(domain, measurements)
    shipped, shipped_record = fit(domain, measurements, estimator=ESTIMATOR)
    assert np.abs(shipped.marginal(("a",)) - mle.marginal(("a",))).max() < 0.01
    assert shipped_record.final_loss == pytest.approx(mle_record.final_loss, rel=1e-6)
    optimum = float(np.abs(np.maximum(y, 0) - y).sum() + (np.maximum(y, 0).sum() - y.sum())) / 20
    assert run.losses[-1] == pytest.approx(optimum, rel=1e-4)
    assert record.final_loss == pytest.approx(optimum, rel=1e-4)
    # From uniform: both large cells cut to one level (290), the small ones kept whole.
    assert uniform_start[:4] == pytest.approx([290.0, 290.0, 60.0, 20.0], abs=0.5)
    # From the Gaussian fit (the projection max(y − 60, 0)): the large cells keep their gap.
    # (Cells the start has at zero only start from START_FLOOR, so they end near zero.)
    assert gaussian_start[:4] == pytest.approx([340.0, 320.0, 0.0, 0.0], abs=1.0)


def test_unknown_estimators_and_starts_are_refused() -> None:
    measurements = [Measurement(("a",), np.ones(2), "laplace", 1.0)]
    with pytest.raises(ValueError, match="estimator"):
        fit(TINY, measurements, estimator="median")
    with pytest.raises(ValueError, match="start"):
        fit_from_start(TINY, measurements, start="median")
    with pytest.raises(ValueError, match="cells"):
        fit(TINY, [Measurement(("a",), np.ones(3), "laplace", 1.0)])


def test_warm_start_and_callback() -> None:
    domain, measurements = _noisy_cycle(8, scale=5.0)
    seen: list[tuple[int, float]] = []
    model, record = fit(
        domain, measurements, estimator=ESTIMATOR, callback=lambda i, v: seen.append((i, v))
    )
    # The solver's iterations, then EM's: one callback each, numbered on.
    assert [i for i, _ in seen] == list(range(1, record.iterations + 1))
    assert record.losses[-1] == pytest.approx(record.final_loss, rel=1e-9)
    assert isinstance(model, GraphicalModel)
    again, _ = fit(domain, measurements, estimator=ESTIMATOR, warm_start=model)
    assert np.abs(again.probabilities(("a", "b")) - model.probabilities(("a", "b"))).max() < 1e-3


@pytest.mark.parametrize("solver", ["admm", "mirror_descent"])
def test_a_cgm_em_fit_runs_em_after_the_solver_and_ends_at_an_em_fixed_point(
    solver: str,
) -> None:
    """Capped at 5 iterations, the solver stops short of the optimum; cgm-em's EM goes on.

    The record is the solver's trace (the same as mle's) followed by EM's, the one
    `expectation_maximisation` runs from mle's model under the same cap and tolerance; the
    model is a fixed point of the EM map, at the optimum's loss.
    """
    domain, measurements = _noisy_cycle(6, scale=5.0)
    latent = _latent(domain, measurements)
    _, optimum = fit(domain, measurements, tolerance=1e-10, max_iterations=20000)
    mle, mle_record = fit(domain, measurements, solver=solver, max_iterations=5)
    model, record = fit(domain, measurements, solver=solver, estimator=ESTIMATOR, max_iterations=5)
    assert record.estimator == ESTIMATOR and record.solver == solver
    solver_iterations = mle_record.iterations
    assert record.iterations > solver_iterations
    assert record.losses[:solver_iterations] == mle_record.losses
    em = expectation_maximisation(latent, latent.problem.warm_theta(mle), max_iterations=5)
    assert record.iterations == solver_iterations + len(em.losses) - 1
    assert record.losses[solver_iterations:] == pytest.approx(em.losses[1:], rel=1e-9)
    assert record.converged == em.converged
    assert record.converged
    # EM only lowers the loss, here down to the optimum's.
    assert record.final_loss <= mle_record.final_loss * (1 + 1e-9)
    assert record.final_loss == pytest.approx(optimum.final_loss, rel=1e-6)
    # A fixed point of the EM map: one more E-step (the M-step takes its marginals as the
    # model) moves no marginal by more than the tolerance, nor lowers the loss.
    theta = latent.problem.warm_theta(model)
    marginals = latent.log_partition_and_marginals(theta)[1]
    step = map_marginals(latent, theta)
    assert np.abs(step.marginals - marginals).max() <= 1e-6
    assert latent.loss(step.marginals) >= latent.loss(marginals) * (1 - 1e-6)


def test_fit_calls_refine_once_for_cgm_em_from_the_solvers_model_and_never_for_mle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, GraphicalModel, list[float]]] = []
    refine = cgm.refine

    def spy(run, model: GraphicalModel) -> GraphicalModel:
        calls.append((len(run.losses), model, run.losses))
        return refine(run, model)

    monkeypatch.setattr(cgm, "refine", spy)
    domain, measurements = _noisy_cycle(9, scale=5.0, records=1000)
    mle, mle_record = fit(domain, measurements)
    assert calls == []
    model, record = fit(domain, measurements, estimator=ESTIMATOR)
    assert len(calls) == 1
    reported, start, losses = calls[0]
    # refine starts from the solver's model (mle's), after the solver's iterations, and
    # adds its own to the same run, which is what the record holds.
    assert reported == mle_record.iterations
    assert np.array_equal(start.probabilities(("a", "b")), mle.probabilities(("a", "b")))
    assert losses is record.losses and record.iterations == len(losses) > reported
    assert isinstance(model, GraphicalModel)
