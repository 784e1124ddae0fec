"""Dual averaging: Private-PGM Algorithm 2, for smooth (all-Gaussian) losses.

Accelerated dual averaging on the clique marginals: each iteration evaluates the
gradient at a mix of the averaged iterate and the latest belief-propagation marginals
and moves θ by the averaged gradients, with a step from the Lipschitz constant of the
gradient. It needs a smooth loss, so it refuses Laplace measurements (ValueError).

The averaged iterate is a convex combination of consistent clique marginals, hence
consistent itself; `max_entropy` turns it into the model. It stops when the loss
changes by less than tolerance·max(loss, 1) between iterations.
"""

from __future__ import annotations

import numpy as np

from app.pgm.estimators import FitRun
from app.pgm.estimators.max_entropy import maximum_entropy
from app.pgm.model import GraphicalModel


def estimate(run: FitRun, theta: np.ndarray, *, warm: bool = False) -> GraphicalModel:
    """Private-PGM Algorithm 2 (accelerated dual averaging) for smooth losses."""
    problem, total = run.problem, run.problem.total
    if not problem.all_gaussian:
        raise ValueError("dual_averaging needs a smooth loss: Gaussian measurements only")
    lipschitz = total * total * max(problem.lipschitz_unit, 1e-12)
    offset = theta.copy()  # warm start: the averaged gradients move θ away from here
    w = v = problem.probabilities(theta)
    g_bar = np.zeros_like(theta)
    for t in range(1, run.max_iterations + 1):
        c = 2.0 / (t + 1)
        u = (1 - c) * w + c * v
        _, g = problem.loss_and_gradient(total * u)
        g_bar = (1 - c) * g_bar + c * (total * g)
        theta = offset - (t * (t + 1) / (4.0 * lipschitz)) * g_bar
        v = problem.probabilities(theta)
        w = (1 - c) * w + c * v
        run.report(problem.loss(total * w))
        if run.stalled():
            run.converged = True
            break
    # w is a convex combination of consistent clique marginals, hence consistent itself.
    return maximum_entropy(run, w)
