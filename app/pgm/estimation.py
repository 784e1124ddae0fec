"""Estimation: the fitting loop — fit a graphical model to noisy marginal measurements.

`fit` is Private-PGM's estimation step: it builds the junction tree of the measured
attribute sets (refusing a model above the cell cap before any numerical work),
estimates the total N̂ (`app.pgm.measurement`), compiles the measurements against the
tree (`app.pgm.problem`), runs one estimator (`app.pgm.estimators`) from zero or from a
previous model's potentials, and records what happened in a `FitRecord`.

The estimators all minimise the same loss (`app.pgm.measurement.loss`) and end at the
same maximum-entropy optimum; they differ in speed and in what they accept:

- "admm": a QP over clique marginals with exact equalities; fast up to a few hundred
  thousand cells, where its sparse factorisation starts to dominate.
- "mirror_descent": Private-PGM Algorithm 1; linear in the cells per iteration.
- "accelerated": Algorithm 1 with momentum and adaptive restart; on large models it
  reaches in 150 iterations what Algorithm 1 does not in 500.
- "dual_averaging": Private-PGM Algorithm 2; Gaussian measurements only.
- "auto" (default): ADMM up to `ADMM_MAX_CELLS` model cells, mirror descent above.

On top of the solver, `estimator` names the statistical estimator: "mle" (default) is
the solver's optimum, the maximum-likelihood model; "cgm-em" (Bernstein et al., ICML
2017; `app.pgm.cgm`) treats the true marginals as latent and runs EM from that optimum,
which is one of EM's fixed points, so it ends there up to the solver's tolerance
(`app.pgm.cgm` says why, and what other starts do); "stein" (`app.pgm.shrinkage`) is
"mle" after each attribute's one-way measurements are pooled and shrunk toward the
uniform marginal (positive-part James–Stein), which lowers the error of noisy one-way
marginals and changes nothing where they are precise.

Stopping (`tolerance`): each estimator's own rule (see its module); `FitRecord.converged`
says whether it was met within `max_iterations`. `FitRecord.final_loss` is the returned
model's own loss (an estimator's last reported loss may be at an iterate that is not
exactly a model).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.pgm import cgm, shrinkage
from app.pgm.domain import Domain
from app.pgm.estimators import (
    Callback,
    Estimator,
    FitRun,
    Heartbeat,
    accelerated,
    admm,
    dual_averaging,
    mirror_descent,
)
from app.pgm.junction_tree import build_junction_tree
from app.pgm.measurement import Measurement, estimate_total
from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem

# The estimators by name. To add one: its module in app.pgm.estimators, one line here.
ESTIMATORS: dict[str, Estimator] = {
    "admm": admm.estimate,
    "mirror_descent": mirror_descent.estimate,
    "accelerated": accelerated.estimate,
    "dual_averaging": dual_averaging.estimate,
}
SOLVERS = ("auto", *ESTIMATORS)
DEFAULT_SOLVER = "auto"
# "auto" uses ADMM up to this many model cells and mirror descent above: ADMM's sparse
# factorisation grows faster than linearly (Adult, 4,915 cells: 0.1 s; 143k: 3–10 s;
# 842k: 216 s and 1.6 GB), while a mirror-descent iteration is linear in the cells.
ADMM_MAX_CELLS = 200_000
ESTIMATOR_NAMES = ("mle", cgm.ESTIMATOR, shrinkage.ESTIMATOR)
DEFAULT_ESTIMATOR = "mle"


@dataclass
class FitRecord:
    """What one fit did: which estimator, how many iterations and seconds, with what result."""

    solver: str
    iterations: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    converged: bool = False
    total: float = 0.0  # N̂, estimated from the measurements
    model_cells: int = 0
    final_loss: float = float("nan")  # loss of the returned model's own marginals
    entropy_sweeps: int = 0  # proportional-fitting sweeps of the maximum-entropy step
    estimator: str = DEFAULT_ESTIMATOR  # "mle", "cgm-em" (whose iterations come last), "stein"
    # the fit's own limits: it ran at most max_iterations, and `converged` says whether it
    # met `tolerance` (its estimator's stopping rule) before that (0: not recorded)
    max_iterations: int = 0
    tolerance: float = 0.0


def fit(
    domain: Domain,
    measurements: Sequence[Measurement],
    *,
    solver: str = DEFAULT_SOLVER,
    estimator: str = DEFAULT_ESTIMATOR,
    warm_start: GraphicalModel | None = None,
    max_iterations: int = 5000,
    tolerance: float = 1e-6,
    callback: Callback | None = None,
    max_model_cells: int | None = None,
    heuristic: str = "best",
    heartbeat: Heartbeat | None = None,
) -> tuple[GraphicalModel, FitRecord]:
    """Fit the graphical model that best explains the measurements.

    `warm_start`: a previous model (maybe over other cliques); each of its potentials is
    added onto the smallest new clique containing it, others start from zero. Mirror
    descent and dual averaging start from those potentials, ADMM from their marginals.
    `estimator`: "mle", or "cgm-em" to continue from the solver's optimum with CGM-EM (its
    iterations are reported after the solver's, under the same cap and tolerance), or
    "stein" to fit the measurements with their one-way values shrunk (`app.pgm.shrinkage`).
    `callback(iteration, loss)` is called after every iteration, and `heartbeat()` after
    every other step that may take seconds (building the problem, a factorisation, a
    proportional-fitting sweep, the final model's loss): a caller that reports progress
    or may stop hears from the fit at least that often.
    Raises ModelTooLarge (from the junction tree) when the model would exceed
    `max_model_cells`, before any numerical work; ValueError for bad measurements, an
    unknown solver, or dual averaging with Laplace measurements.
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, not {solver!r}")
    if estimator not in ESTIMATOR_NAMES:
        raise ValueError(f"estimator must be one of {ESTIMATOR_NAMES}, not {estimator!r}")
    measurements = list(measurements)
    if not measurements:
        raise ValueError("fitting needs at least one measurement")
    for m in measurements:
        m.check(domain)
    if estimator == shrinkage.ESTIMATOR:
        measurements = shrinkage.shrink_oneway(measurements)
    started = time.perf_counter()
    tree = build_junction_tree(
        domain, [m.attributes for m in measurements], heuristic=heuristic, max_cells=max_model_cells
    )
    if solver == "auto":
        solver = "admm" if tree.total_cells <= ADMM_MAX_CELLS else "mirror_descent"
    total = estimate_total(measurements)
    problem = FitProblem(tree, measurements, total)
    run = FitRun(problem, max_iterations, tolerance, callback, heartbeat)
    run.tick()  # the tree and the problem are built (seconds on a large model)
    theta = problem.warm_theta(warm_start)
    model = ESTIMATORS[solver](run, theta, warm=warm_start is not None)
    run.tick()
    if estimator == cgm.ESTIMATOR:
        model = cgm.refine(run, model)
        run.tick()
    final_p = problem.probabilities(problem.warm_theta(model))
    record = FitRecord(
        solver=solver,
        iterations=len(run.losses),
        losses=run.losses,
        seconds=time.perf_counter() - started,
        converged=run.converged,
        total=total,
        model_cells=tree.total_cells,
        final_loss=problem.loss(total * final_p),
        entropy_sweeps=run.entropy_sweeps,
        estimator=estimator,
        max_iterations=max_iterations,
        tolerance=tolerance,
    )
    return model, record
