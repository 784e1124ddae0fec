"""A mechanism job's progress updates: throttled fit iterations, finite numbers, and its ETA."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.pgm.estimation import FitRecord
from app.privacy.mechanisms import Progress
from app.services.job_progress import MechanismProgress, eta_now


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def event(stage: str, rounds: int, rho_used: float, **details: Any) -> Progress:
    return Progress(
        mechanism="aim",
        round_index=rounds - 1,
        stage=stage,  # type: ignore[arg-type]
        attributes=("a", "b"),
        rho_used=rho_used,
        rho_total=1.0,
        rounds_done=rounds,
        **details,
    )


def fitted(seconds: float, iterations: int, cells: int, solver: str = "admm") -> FitRecord:
    return FitRecord(
        solver=solver, iterations=iterations, seconds=seconds, model_cells=cells, losses=[2.0]
    )


def test_eta_is_mean_round_time_times_rounds_left_plus_the_final_fit() -> None:
    clock = Clock()
    reports = MechanismProgress(
        rho_total=1.0, final_fit_solver="auto", final_fit_iterations=500, clock=clock
    )
    # One-way rounds, back to back: nothing to time yet.
    first = reports.update(event("measured", 1, 0.05))
    assert first is not None and first["eta_seconds"] is None
    clock.now = 1.0
    assert reports.update(event("fitted", 1, 0.05, fit=fitted(0.5, 100, 1000)))
    # A selection round of ρ 0.1, stored 4 s after the round before it (its fit, its
    # selection and its draw).
    clock.now = 4.0
    update = reports.update(event("measured", 2, 0.15))
    assert update is not None
    # rounds left: (1 − 0.15) / 0.1 = 8.5, at 4 s each; the final fit (ADMM at 1,000
    # cells): as many iterations as its last fit, at its 5 µs a cell-iteration: 0.5 s.
    assert update["eta_seconds"] == pytest.approx(8.5 * 4.0 + 0.5)
    assert update["stage"] == "round measured" and update["rounds_done"] == 2


def test_fit_iterations_are_written_at_most_once_a_second_and_rounds_always() -> None:
    clock = Clock()
    reports = MechanismProgress(
        rho_total=1.0, final_fit_solver="mirror_descent", final_fit_iterations=500, clock=clock
    )
    assert reports.update(event("measured", 1, 0.1)) is not None
    written = []
    for iteration in range(1, 41):
        clock.now += 0.1
        update = reports.update(
            event("final fit", 1, 0.1, iteration=iteration, max_iterations=500, loss=1.0)
        )
        if update is not None:
            written.append(update)
    assert 3 <= len(written) <= 4  # 4 s of iterations
    assert all(u["stage"] == "final fit" for u in written)
    last = written[-1]
    # during the final fit: its iterations left × its own time an iteration (0.1 s)
    assert last["eta_seconds"] == pytest.approx((500 - last["iteration"]) * 0.1)
    assert last["max_iterations"] == 500
    # a round is never held back, whatever the time since the last write
    assert reports.update(event("measured", 2, 0.2)) is not None


def test_every_number_written_is_finite() -> None:
    clock = Clock()
    reports = MechanismProgress(
        rho_total=1.0, final_fit_solver=None, final_fit_iterations=500, clock=clock
    )
    reports.update(event("measured", 1, 0.1))
    clock.now = 5.0
    update = reports.update(event("final fit", 1, 0.1, iteration=0, max_iterations=500, loss=None))
    assert update is not None and update["loss"] is None and update["eta_seconds"] is None
    nan_fit = FitRecord(solver="admm", iterations=0, seconds=float("nan"), losses=[])
    done = reports.update(event("done", 1, float("inf"), fit=nan_fit))
    assert done is not None
    assert done["eta_seconds"] is None and done["rho_used"] is None and done["loss"] is None
    json.dumps(done, allow_nan=False)


def test_the_api_s_eta_counts_down_from_when_it_was_written() -> None:
    written = datetime(2026, 1, 1, tzinfo=UTC)
    progress = {"eta_seconds": 30.0, "updated_at": written.isoformat()}
    assert eta_now("running", progress, written + timedelta(seconds=10)) == pytest.approx(20.0)
    assert eta_now("running", progress, written + timedelta(seconds=45)) == 0.0
    assert eta_now("succeeded", progress, written) is None
    assert eta_now("running", {"eta_seconds": None}, written) is None
    assert eta_now("running", {"eta_seconds": 3.0, "updated_at": "garbage"}, written) is None


def test_an_admm_final_fit_is_expected_to_run_as_long_as_the_last_admm_fit() -> None:
    clock = Clock()
    reports = MechanismProgress(
        rho_total=1.0, final_fit_solver="auto", final_fit_iterations=500, clock=clock
    )
    reports.update(event("fitted", 1, 0.5, fit=fitted(0.6, 120, 1000)))  # ADMM: 120 its
    reports.update(event("measured", 2, 1.0))
    clock.now = 6.0
    update = reports.update(event("final fit", 2, 1.0, iteration=60, max_iterations=500, loss=3.0))
    assert update is not None
    # 0.1 s an iteration so far; ADMM converges: to 120 iterations, not to the cap of 500
    assert update["eta_seconds"] == pytest.approx((120 - 60) * 0.1)
    clock.now = 20.0
    # past 120 it converges more slowly than the last ADMM fit: as many again (to the cap)
    late = reports.update(event("final fit", 2, 1.0, iteration=200, max_iterations=500))
    assert late is not None and late["eta_seconds"] == pytest.approx(200 * 0.1)


def test_a_large_model_s_final_fit_is_expected_at_its_plan_s_iterations() -> None:
    """Above ADMM's size the final fit is accelerated mirror descent: expected at the
    plan's iterations for the model's cells, at the rate of the run's last mirror-descent
    fit (the final fit's solver never runs between rounds)."""
    from app.privacy.mechanisms import MechanismOptions
    from app.privacy.mechanisms.fitting import final_fit_plan

    clock = Clock()
    options = MechanismOptions()
    reports = MechanismProgress(
        rho_total=1.0,
        final_fit_solver="auto",
        final_fit_iterations=lambda cells: final_fit_plan(cells, options).max_iterations,
        clock=clock,
    )
    reports.update(event("measured", 1, 0.05))
    clock.now = 1.0
    cells = 500_000  # 7.5·10⁷ / 5·10⁵: 150 iterations
    rate = 2.0 / (10 * cells)  # its last fit: 10 iterations in 2 s
    reports.update(event("fitted", 1, 0.05, fit=fitted(2.0, 10, cells, "mirror_descent")))
    clock.now = 4.0
    update = reports.update(event("measured", 2, 0.15))
    assert update is not None
    assert final_fit_plan(cells, options).max_iterations == 150
    assert update["eta_seconds"] == pytest.approx(8.5 * 4.0 + 150 * cells * rate)
