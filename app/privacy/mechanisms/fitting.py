"""A run's model fits and what it reports: the fit between rounds or at the end, and `Progress`.

A fit reads no records and spends nothing, but it is most of a run's time (the final
fit of a large model can take minutes), so it reports as it goes: the estimator calls
back after every iteration with (iteration, loss), and the run passes that up as a
`Progress` of stage "fitting" (between rounds) or "final fit". Throttling is the
receiver's business (the service writes at most one report a second); a loss that is
not a finite number is passed as None, so nothing that reaches JSON is NaN or ∞.

Every choice a fit makes — solver, iterations, tolerance — comes from public sizes (the
model's cells), counts that follow from the noisy releases alone (an earlier fit's
iterations) and the options, never from how long an earlier fit took: the same seed
gives the same run on a quiet or a busy machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.pgm.domain import Domain
from app.pgm.estimation import ADMM_MAX_CELLS, FitRecord, fit
from app.pgm.junction_tree import model_cells
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import Attrs

# The final fit's solver above ADMM's size: mirror descent with momentum and restarts.
FINAL_FIT_SOLVER = "accelerated"

Stage = Literal["measured", "fitting", "fitted", "final fit", "done"]


@dataclass(frozen=True)
class Progress:
    """Reported after each round is stored, during and after each fit, and at the end.

    During a fit ("fitting", "final fit"): `iteration` of at most `max_iterations`, and
    `loss` when it is a finite number. After one ("fitted", and "done" for the final
    fit): `fit`, its record (solver, iterations, seconds, model cells)."""

    mechanism: str
    round_index: int
    stage: Stage
    attributes: Attrs
    rho_used: float
    rho_total: float
    rounds_done: int
    iteration: int | None = None
    max_iterations: int | None = None
    loss: float | None = None
    fit: FitRecord | None = None
    # After a stored round: the run may stop here and resume from its stored rounds losing
    # nothing but time (another selection round follows; after the last one, the
    # estimates its Theorem 4 bounds need are only in memory).
    pause_point: bool = False


def finite_or_none(value: float) -> float | None:
    """`value` as a float if it is finite, else None (JSON has no NaN or ∞)."""
    number = float(value)
    return number if math.isfinite(number) else None


def admm_work(record: FitRecord) -> int:
    """A fit's work as a count: the model's cells × the iterations it ran. A between-round
    ADMM fit's time is about 0.3 µs of it (2 cores), but unlike the time it is the same on
    a quiet or a busy machine: the cells are public and the iterations follow from the
    noisy releases alone."""
    return record.model_cells * record.iterations


def keeps_admm(record: FitRecord, options: MechanismOptions) -> bool:
    """Whether later between-round fits may still use ADMM after this one: while an ADMM
    fit's `admm_work` is at most `round_admm_max_work` (models only grow within a run,
    so once it is more, it stays more)."""
    return record.solver != "admm" or admm_work(record) <= options.round_admm_max_work


@dataclass(frozen=True)
class FitPlan:
    """How a fit runs: its solver (None: app.pgm's default), iteration cap and tolerance."""

    solver: str | None
    max_iterations: int
    tolerance: float


def final_fit_plan(cells: int, options: MechanismOptions) -> FitPlan:
    """The plan of the run's last fit on a model of `cells` cells.

    Up to `ADMM_MAX_CELLS` cells "auto" (or None) is ADMM, to `fit_tolerance` within
    `final_fit_iterations`. Above, it is accelerated mirror descent
    (`app.pgm.estimators.accelerated`), warm-started from the last between-round model:
    at most `final_fit_work` cells × iterations (but at least `final_min_iterations`),
    never more than `final_fit_iterations`, stopped once the loss changes by less than
    `final_fit_tolerance` of itself in an iteration: a model of 2.7·10⁵ cells gets 277
    iterations, one of 4.8·10⁵ cells 156, one of 7.5·10⁵ cells or more 100 (the
    minimum: on one run's 475k-cell model, 150 accelerated iterations reached a lower
    workload error than 500 of plain mirror descent, 50 a higher one). A named iterative solver
    gets the same bounds.
    From the cells and the options only, so the same on a quiet or a busy machine."""
    solver = options.final_fit_solver
    named = "auto" if solver is None else solver
    if named == "auto":
        if cells <= ADMM_MAX_CELLS:
            return FitPlan(solver, options.final_fit_iterations, options.fit_tolerance)
        named = FINAL_FIT_SOLVER
    if named == "admm":
        return FitPlan(named, options.final_fit_iterations, options.fit_tolerance)
    by_work = options.final_fit_work // max(cells, 1)
    iterations = min(options.final_fit_iterations, max(options.final_min_iterations, by_work))
    return FitPlan(named, iterations, options.final_fit_tolerance)


def fit_plan(
    domain: Domain,
    attribute_sets: Sequence[Attrs],
    options: MechanismOptions,
    final: bool,
    admm: bool = True,
) -> FitPlan:
    """The plan of a between-round fit, or (`final`) of the run's last one.

    Between rounds, "auto" is ADMM to convergence while the model is at most
    `round_admm_max_cells` cells and `admm` (no earlier fit of the run was more work
    than `round_admm_max_work`: `keeps_admm`), else mirror descent of at most
    `round_fit_work` cells × iterations (at least `round_min_iterations`) stopped early
    at `round_fit_tolerance`. ADMM between rounds runs to the final fit's tolerance (it
    converges in a few hundred cheap iterations). The final fit: `final_fit_plan`.
    Public sizes and counts only."""
    cells = model_cells(domain, attribute_sets)
    if final:
        return final_fit_plan(cells, options)
    solver = options.fit_solver
    iterations = options.fit_iterations
    if solver == "auto":
        small = cells <= options.round_admm_max_cells
        solver = "admm" if admm and small else "mirror_descent"
    if solver == "mirror_descent":
        by_work = options.round_fit_work // max(cells, 1)
        iterations = max(options.round_min_iterations, min(iterations, by_work))
        return FitPlan(solver, iterations, options.round_fit_tolerance)
    return FitPlan(solver, iterations, options.fit_tolerance)


class FitReports:
    """What one fit calls back: after every iteration, and after every other step that
    may take seconds (as the last iteration again), a stop asked for is honoured
    (`checkpoint`: a fit spends nothing) and `report(stage, iteration=…,
    max_iterations=…, loss=…)` hears of it, the loss None unless finite."""

    def __init__(
        self,
        stage: Stage,
        plan: FitPlan,
        checkpoint: Callable[[], None] | None,
        report: Callable[..., None],
    ) -> None:
        self.stage = stage
        self.plan = plan
        self.checkpoint = checkpoint
        self.report = report
        self.last_iteration = 0
        self.last_loss: float | None = None

    def iteration(self, iteration: int, loss: float) -> None:
        self.last_iteration, self.last_loss = iteration, finite_or_none(loss)
        self.heartbeat()

    def heartbeat(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint()
        self.report(
            self.stage,
            iteration=self.last_iteration,
            max_iterations=self.plan.max_iterations,
            loss=self.last_loss,
        )


def fit_model(
    domain: Domain,
    measurements: Sequence[Measurement],
    options: MechanismOptions,
    warm_start: GraphicalModel | None,
    plan: FitPlan,
    reports: FitReports | None = None,
) -> tuple[GraphicalModel, FitRecord]:
    """Fit the run's model by `plan`, calling `reports` back as it goes."""
    kwargs: dict[str, Any] = {}
    if plan.solver is not None:
        kwargs["solver"] = plan.solver
    if reports is not None:
        kwargs["callback"] = reports.iteration
        kwargs["heartbeat"] = reports.heartbeat
    return fit(
        domain,
        measurements,
        warm_start=warm_start,
        max_iterations=plan.max_iterations,
        tolerance=plan.tolerance,
        max_model_cells=options.max_model_cells,
        **kwargs,
    )
