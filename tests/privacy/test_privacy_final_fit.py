"""AIM's final fit: its plan from public sizes only, its stop at a stated tolerance, its
progress, and the memory-lean measurement operator it runs on."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp
from privacy_fixtures import ALL_PAIRS, DOMAIN, synthetic

from app.pgm.domain import Domain
from app.pgm.estimation import ADMM_MAX_CELLS
from app.pgm.junction_tree import build_junction_tree, model_cells
from app.pgm.measurement import Measurement
from app.pgm.problem import FitProblem
from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms.fitting import FitPlan, final_fit_plan, fit_model, fit_plan


def test_the_final_fit_s_plan_follows_from_the_model_s_cells_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Accelerated mirror descent above ADMM's size: final_fit_work / cells iterations,
    within [final_min_iterations, final_fit_iterations], at final_fit_tolerance; ADMM
    below, to fit_tolerance. No clock is read: the same plan on a quiet or a busy machine."""

    def no_clock() -> float:
        raise AssertionError("the plan read a clock")

    monkeypatch.setattr(time, "perf_counter", no_clock)
    monkeypatch.setattr(time, "monotonic", no_clock)
    monkeypatch.setattr(time, "time", no_clock)
    options = MechanismOptions()
    large = final_fit_plan(10**7, options)
    assert large == FitPlan("accelerated", 100, options.final_fit_tolerance)  # the minimum
    assert final_fit_plan(10**7, MechanismOptions(final_fit_solver="auto")) == large
    assert final_fit_plan(2_400_000, options).max_iterations == 100
    assert final_fit_plan(480_000, options).max_iterations == 156
    assert final_fit_plan(270_000, options).max_iterations == 277
    assert final_fit_plan(10**9, options).max_iterations == options.final_min_iterations
    capped = MechanismOptions(final_fit_iterations=3)  # the cap wins over the minimum
    assert final_fit_plan(10**9, capped).max_iterations == 3
    assert final_fit_plan(ADMM_MAX_CELLS + 1, options).max_iterations == 374
    assert (
        final_fit_plan(ADMM_MAX_CELLS + 1, MechanismOptions(final_fit_work=10**9)).max_iterations
        == 500
    )  # the cap
    small = final_fit_plan(ADMM_MAX_CELLS, options)  # "auto" is ADMM here: to convergence
    assert small == FitPlan(None, options.final_fit_iterations, options.fit_tolerance)
    named = MechanismOptions(final_fit_solver="mirror_descent", final_fit_work=1000)
    assert final_fit_plan(100, named) == FitPlan("mirror_descent", 100, 1e-6)
    # fit_plan(final=True) is this plan of the measured sets' model
    sets = [("a", "b"), ("b", "c"), ("d",)]
    cells = model_cells(DOMAIN, sets)
    assert fit_plan(DOMAIN, sets, named, final=True) == final_fit_plan(cells, named)


@pytest.mark.parametrize(
    "field,value",
    [
        ("final_fit_work", 0),
        ("final_min_iterations", 0),
        ("final_fit_iterations", 0),
        ("final_fit_tolerance", -1.0),
        ("final_fit_tolerance", float("nan")),
    ],
)
def test_bad_final_fit_options_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        MechanismOptions(**{field: value})


def _measurements(rng: np.random.Generator) -> list[Measurement]:
    truth = synthetic(11)
    sets = [("a",), ("b",), ("c",), ("d",), ("e",), ("a", "b"), ("b", "c"), ("c", "d")]
    sets += [("d", "c"), ("a", "e")]  # c-d twice (in the other order): summed once
    out = [
        Measurement(s, truth(s) + rng.normal(0, 5.0, DOMAIN.cells(s)), "gaussian", 5.0)
        for s in sets
    ]
    query = rng.integers(0, 2, (3, DOMAIN.cells(("b", "c")))).astype(float)
    noisy = query @ truth(("b", "c")) + rng.normal(0, 2.0, 3)
    out.append(Measurement(("b", "c"), noisy, "gaussian", 2.0, query=query))
    out.append(Measurement(("e",), truth(("e",)) + rng.laplace(0, 3.0, 3), "laplace", 3.0))
    return out


def test_the_measurement_operator_is_the_sparse_matrix_without_building_it() -> None:
    """answers(x) = M·x and adjoint(g) = Mᵀ·g to rounding (identity and query
    measurements, attributes in any order, a marginal measured twice), and the loss and
    gradient a mirror-descent fit uses never build M (gigabytes on a 10⁷-cell model)."""
    rng = np.random.default_rng(3)
    measurements = _measurements(rng)
    tree = build_junction_tree(DOMAIN, [m.attributes for m in measurements])
    problem = FitProblem(tree, measurements, 2000.0, sparse_max_entries=0)
    assert not problem.sparse  # (a model this small would use the matrix by default)
    assert FitProblem(tree, measurements, 2000.0).sparse
    x = rng.random(problem.n)
    value, gradient = problem.loss_and_gradient(x)
    assert "M" not in vars(problem)  # the lean path: no sparse matrix so far
    g = rng.normal(size=problem.rows)
    assert isinstance(problem.M, sp.csr_matrix)
    assert problem.M.shape == (problem.rows, problem.n)
    np.testing.assert_allclose(problem.answers(x), problem.M @ x, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(problem.adjoint(g), problem.MT @ g, rtol=1e-12, atol=1e-9)
    r = problem.M @ x - problem.y
    weighted = problem.w * np.where(problem.is_gaussian, r, np.sign(r))
    np.testing.assert_allclose(gradient, problem.MT @ weighted, rtol=1e-12, atol=1e-9)
    expected = float(problem.w @ np.where(problem.is_gaussian, 0.5 * r * r, np.abs(r)))
    assert value == pytest.approx(expected, rel=1e-12)


def test_the_final_fit_stops_at_its_tolerance_and_its_record_says_so() -> None:
    rng = np.random.default_rng(5)
    measurements = [m for m in _measurements(rng) if m.noise == "gaussian"]
    sets = [m.attributes for m in measurements]
    loose = MechanismOptions(
        final_fit_solver="mirror_descent", final_fit_tolerance=1e-3, final_fit_iterations=400
    )
    plan = fit_plan(DOMAIN, sets, loose, final=True)
    assert plan == FitPlan("mirror_descent", 400, 1e-3)
    _, record = fit_model(DOMAIN, measurements, loose, None, plan)
    assert record.converged and record.iterations < plan.max_iterations
    assert (record.max_iterations, record.tolerance) == (400, 1e-3)
    a, b = record.losses[-2:]
    assert abs(a - b) <= 1e-3 * max(abs(b), 1.0)  # the stated rule, met at the last one
    # a tighter tolerance runs longer and ends at a loss at least as low
    tight = MechanismOptions(
        final_fit_solver="mirror_descent", final_fit_tolerance=1e-8, final_fit_iterations=400
    )
    _, longer = fit_model(DOMAIN, measurements, tight, None, fit_plan(DOMAIN, sets, tight, True))
    assert longer.iterations > record.iterations
    assert longer.final_loss <= record.final_loss * (1 + 1e-9)
    # bounded by work: one iteration's worth of cells × iterations gives the minimum
    bounded = MechanismOptions(
        final_fit_solver="mirror_descent",
        final_fit_work=1,
        final_min_iterations=4,
        final_fit_tolerance=0.0,
    )
    plan = fit_plan(DOMAIN, sets, bounded, final=True)
    _, short = fit_model(DOMAIN, measurements, bounded, None, plan)
    assert short.iterations == 4 and not short.converged


def test_aim_s_final_fit_reports_its_iterations_and_losses_up_to_its_plan() -> None:
    """Progress through the final fit: stage "final fit", iterations 1, 2, … with finite
    losses and the plan's cap (from the model's cells), then "done" with its record."""
    seen = []
    options = MechanismOptions(
        rounds=6, final_fit_solver="mirror_descent", final_fit_work=2_000, fit_iterations=50
    )
    result = run_aim(
        DOMAIN, synthetic(2), 0.3, ALL_PAIRS[:5], options=options, on_progress=seen.append
    )
    final = [p for p in seen if p.stage == "final fit"]
    cells = result.fit.model_cells
    cap = max(options.final_min_iterations, min(500, 2_000 // cells))
    assert final and {p.max_iterations for p in final} == {cap}
    # every iteration in order (heartbeats between steps repeat the last one, 0 at first)
    iterations = [p.iteration for p in final]
    assert iterations == sorted(iterations)
    assert sorted(set(iterations) - {0}) == list(range(1, result.fit.iterations + 1))
    assert all(p.loss is not None and np.isfinite(p.loss) for p in final if p.iteration)
    assert seen[-1].stage == "done" and seen[-1].fit is result.fit
    assert 0 < result.fit.iterations <= cap
    assert result.fit.solver == "mirror_descent" and result.fit.max_iterations == cap


def test_the_lean_operator_fits_the_same_model_as_the_sparse_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mirror-descent fit on the lean operator (as on a large model) and one on the
    explicit sparse matrix end at the same model, within rounding."""
    import app.pgm.problem as problem_module

    rng = np.random.default_rng(8)
    measurements = [m for m in _measurements(rng) if m.noise == "gaussian"]
    options = MechanismOptions(
        final_fit_solver="mirror_descent", final_fit_tolerance=0.0, final_fit_iterations=60
    )
    sets = [m.attributes for m in measurements]
    plan = fit_plan(DOMAIN, sets, options, final=True)
    monkeypatch.setattr(problem_module, "SPARSE_MAX_ENTRIES", 0)
    lean, _ = fit_model(DOMAIN, measurements, options, None, plan)

    class Sparse(FitProblem):
        def answers(self, x: np.ndarray) -> np.ndarray:
            return np.asarray(self.M @ x)

        def adjoint(self, g: np.ndarray) -> np.ndarray:
            return np.asarray(self.MT @ g)

    import app.pgm.estimation as estimation

    original = estimation.FitProblem
    estimation.FitProblem = Sparse  # type: ignore[misc]
    try:
        explicit, _ = fit_model(DOMAIN, measurements, options, None, plan)
    finally:
        estimation.FitProblem = original  # type: ignore[misc]
    for attrs in [("a", "b"), ("c", "d"), ("b", "e")]:
        np.testing.assert_allclose(lean.marginal(attrs), explicit.marginal(attrs), rtol=1e-9)


def test_the_operator_handles_a_measurement_over_a_whole_clique() -> None:
    domain = Domain(("x", "y", "z"), (2, 3, 4))
    rng = np.random.default_rng(1)
    sets = [("z", "x", "y"), ("y",), ("y", "x")]
    measurements = [Measurement(s, rng.random(domain.cells(s)), "gaussian", 1.0) for s in sets]
    problem = FitProblem(build_junction_tree(domain, sets), measurements, 1.0, 0)
    x, g = rng.random(problem.n), rng.random(problem.rows)
    np.testing.assert_allclose(problem.answers(x), problem.M @ x, atol=1e-12)
    np.testing.assert_allclose(problem.adjoint(g), problem.MT @ g, atol=1e-12)


def test_the_dry_run_s_estimate_of_a_large_final_fit_follows_its_plan() -> None:
    """Above ADMM's size the estimate is the model's cells × the plan's iterations (so a
    smaller final_fit_work is a shorter expected run), from public sizes only."""
    from app.services import run_time

    domain = Domain(("p", "q", "r", "s"), (300, 300, 300, 300))
    workload = [("p", "q"), ("q", "r"), ("r", "s")]  # a chain: 270,000 cells at most
    estimates = {}
    for work in (400_000_000, 2_700_000):
        options = MechanismOptions(final_fit_work=work)
        answer = run_time.expected_run_time(
            domain, workload, rho=50.0, max_model_cells=10**7, selection_rounds=10, options=options
        )
        basis = answer["run_time"]
        cells = basis["expected_model_cells"]
        assert cells == basis["model_cells_at_most"] == 270_000 > ADMM_MAX_CELLS
        iterations = final_fit_plan(cells, options).max_iterations
        expected = cells * iterations * run_time.FINAL_SECONDS_PER_CELL_ITERATION
        assert basis["final_fit_seconds"] == pytest.approx(expected, abs=0.05)
        estimates[work] = basis["final_fit_seconds"]
    assert estimates[2_700_000] < estimates[400_000_000]  # 100 iterations (the minimum), not 500
