"""CGM-EM from other starts than `mle`'s fit: what the benchmark compares and tests show.

`app.pgm.cgm` explains why the shipped estimator starts at `mle`'s fit: CGM-EM's fixed
points are `mle`'s optimal set, and from anywhere else its KL path selects, on a flat L1
face, a point that measured worse. This module runs the same EM from

- "gaussian": the unique fixed point of the EM with each Laplace measurement's noise
  replaced by the Gaussian of equal variance 2b², i.e. the `mle` fit of those Gaussian
  measurements (least squares, maximum entropy where nothing is measured);
- "uniform": θ = 0 (or the warm start's potentials);
- "mle": `mle`'s fit, the shipped estimator (`fit(..., estimator="cgm-em")`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from app.pgm.cgm import ESTIMATOR, LatentProblem, expectation_maximisation
from app.pgm.cgm_map import DEFAULT_GAP_TOLERANCE
from app.pgm.domain import Domain
from app.pgm.estimation import FitRecord, fit
from app.pgm.estimators import Callback
from app.pgm.junction_tree import build_junction_tree
from app.pgm.measurement import Measurement, estimate_total
from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem, potentials_from_marginals

STARTS = ("mle", "gaussian", "uniform")
# A start off the optimal face gets this much uniform mass in every clique, so that cells
# it has at exactly zero can still grow (a Laplace step moves a log-potential by ≤ 1/b).
START_FLOOR = 1e-3


def gaussian_approximation(measurements: Sequence[Measurement]) -> list[Measurement]:
    """The measurements with each Laplace noise (scale b) replaced by a Gaussian of std √2·b."""
    return [
        m
        if m.noise == "gaussian"
        else Measurement(m.attributes, m.values, "gaussian", float(np.sqrt(2.0)) * m.scale, m.query)
        for m in measurements
    ]


def _floored(problem: FitProblem, theta: np.ndarray) -> np.ndarray:
    """θ's clique marginals mixed with START_FLOOR of the uniform, as potentials again."""
    mixed = [
        (1.0 - START_FLOOR) * p + START_FLOOR / p.size
        for p in problem.split(problem.probabilities(theta))
    ]
    return np.concatenate([t.ravel() for t in potentials_from_marginals(problem.tree, mixed)])


def fit_from_start(
    domain: Domain,
    measurements: Sequence[Measurement],
    start: str,
    *,
    warm_start: GraphicalModel | None = None,
    max_iterations: int = 5000,
    tolerance: float = 1e-6,
    gap_tolerance: float = DEFAULT_GAP_TOLERANCE,
    callback: Callback | None = None,
) -> tuple[GraphicalModel, FitRecord]:
    """CGM-EM from `start` (one of STARTS); the record's losses are EM's alone."""
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, not {start!r}")
    if start == "mle":
        return fit(
            domain,
            measurements,
            estimator=ESTIMATOR,
            warm_start=warm_start,
            max_iterations=max_iterations,
            tolerance=tolerance,
            callback=callback,
        )
    started = time.perf_counter()
    measurements = list(measurements)
    for m in measurements:
        m.check(domain)
    tree = build_junction_tree(domain, [m.attributes for m in measurements])
    total = estimate_total(measurements)
    problem = FitProblem(tree, measurements, total)
    if start == "uniform":
        theta = problem.warm_theta(warm_start)
    else:
        first, _ = fit(domain, gaussian_approximation(measurements), warm_start=warm_start)
        theta = _floored(problem, problem.warm_theta(first))
    run = expectation_maximisation(
        LatentProblem(problem),
        theta,
        max_iterations=max_iterations,
        tolerance=tolerance,
        gap_tolerance=gap_tolerance,
        callback=callback,
    )
    record = FitRecord(
        solver=ESTIMATOR,
        estimator=ESTIMATOR,
        iterations=len(run.gaps),
        losses=run.losses[1:],
        seconds=time.perf_counter() - started,
        converged=run.converged,
        total=total,
        model_cells=tree.total_cells,
        final_loss=run.losses[-1],
    )
    return problem.model(problem.split(run.theta)), record
