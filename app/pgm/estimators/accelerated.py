"""Accelerated mirror descent: Private-PGM Algorithm 1 with momentum and adaptive restart.

Each iteration takes mirror descent's step (`mirror_descent`: the loss gradient with
respect to the clique marginals as a step on the log-potentials θ, its size set by a
backtracking Armijo search, doubled first) from an extrapolated point
θ̄ = θ + β_k (θ − θ_prev), β_k = (k − 1)/(k + 2), as in Nesterov's method, instead of
from θ. Whenever that step would raise the loss, the momentum is dropped (k = 0; the
function-value restart of O'Donoghue and Candès, 2015) and the iteration takes the
plain step from θ instead, so the loss never rises and the method does at least what
mirror descent does. On the noisy marginals of a large AIM run (a 475k-cell model,
warm-started from its last between-round fit) it reached in 150 iterations a loss a
fifth of what plain mirror descent reached in 500 (docs/mechanisms.md).

An iteration costs one belief-propagation pass more than mirror descent's (at θ̄),
linear in the model's cells, and holds two more vectors of the model's size (θ_prev,
and the marginals at θ̄). It stops, like mirror descent, when the loss changes by less
than tolerance·max(loss, 1) between iterations.
"""

from __future__ import annotations

import numpy as np

from app.pgm.estimators import FitRun
from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem, dot

LINE_SEARCH_STEPS = 40


def _descend(
    problem: FitProblem, base: np.ndarray, p_base: np.ndarray, value_base: float, step: float
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """One mirror-descent step from θ = `base` (marginals `p_base`, loss `value_base`):
    (θ', its marginals, its loss, the step used); θ' = base if no step decreases it."""
    total = problem.total
    _, grad = problem.loss_and_gradient(total * p_base)
    grad *= total  # gradient with respect to probabilities
    step *= 2.0
    for _ in range(LINE_SEARCH_STEPS):
        candidate = base - step * grad
        p_new = problem.probabilities(candidate)
        value_new = problem.loss(total * p_new)
        if value_base - value_new >= 0.5 * dot(grad, p_base - p_new):
            return candidate, p_new, value_new, step
        step *= 0.5
    return base, p_base, value_base, step


def estimate(run: FitRun, theta: np.ndarray, *, warm: bool = False) -> GraphicalModel:
    """Mirror descent from Nesterov's extrapolated point, restarted when the loss rises."""
    problem, total = run.problem, run.problem.total
    p = problem.probabilities(theta)
    value = problem.loss(total * p)
    step = 1.0 / (total * total * max(problem.lipschitz_unit, 1e-12))
    if not problem.any_gaussian:
        _, grad = problem.loss_and_gradient(total * p)
        step = 1.0 / (total * max(float(np.abs(grad).max()) * total, 1e-12))
        del grad
    previous: np.ndarray | None = None
    k = 0
    for _ in range(run.max_iterations):
        k += 1
        moved = False
        if k > 1 and previous is not None:
            base = theta + ((k - 1) / (k + 2)) * (theta - previous)
            p_base = problem.probabilities(base)
            value_base = problem.loss(total * p_base)
            candidate, p_new, value_new, step = _descend(problem, base, p_base, value_base, step)
            del base, p_base
            if value_new <= value:
                previous, theta, p, value = theta, candidate, p_new, value_new
                moved = True
            else:
                k = 1  # restart: the momentum raised the loss
            del candidate, p_new
        if not moved:
            candidate, p_new, value_new, step = _descend(problem, theta, p, value, step)
            if candidate is theta:  # no decrease found: θ is where the search can go
                run.report(value)
                run.converged = True
                break
            previous, theta, p, value = theta, candidate, p_new, value_new
            del candidate, p_new
        run.report(value)
        if run.stalled():
            run.converged = True
            break
    return problem.model(problem.split(theta))
