"""Mirror descent: Private-PGM Algorithm 1 (McKenna, Sheldon, Miklau, ICML 2019).

Entropic mirror descent on the log-potentials θ: the gradient of the loss with respect
to the clique marginals (from belief propagation, `FitProblem.probabilities`) is a
step on θ. The step starts at 1/L (L the Lipschitz constant of the Gaussian part of
the gradient; for pure Laplace losses the largest gradient entry) and is set by a
backtracking (Armijo) line search each iteration, doubled before the search so that
it can grow again.

From θ = 0 it keeps θ in the span of the measured sets and so converges to the
maximum-entropy point of the optimal face without a separate step. It stops when the
loss changes by less than tolerance·max(loss, 1) between iterations. An iteration
costs a few belief-propagation passes, linear in the model's cells, which is why
"auto" uses it for models too large for ADMM's factorisation.
"""

from __future__ import annotations

import numpy as np

from app.pgm.estimators import FitRun
from app.pgm.model import GraphicalModel
from app.pgm.problem import dot


def estimate(run: FitRun, theta: np.ndarray, *, warm: bool = False) -> GraphicalModel:
    """Private-PGM Algorithm 1 with a backtracking (Armijo) line search on the step."""
    problem, total = run.problem, run.problem.total
    p = problem.probabilities(theta)
    value, grad = problem.loss_and_gradient(total * p)
    grad = total * grad  # gradient with respect to probabilities
    step = 1.0 / (total * total * max(problem.lipschitz_unit, 1e-12))
    if not problem.any_gaussian:
        step = 1.0 / (total * max(float(np.abs(grad).max()), 1e-12))
    for _ in range(run.max_iterations):
        step *= 2.0
        for _ in range(40):
            candidate = theta - step * grad
            p_new = problem.probabilities(candidate)
            value_new = problem.loss(total * p_new)
            if value - value_new >= 0.5 * dot(grad, p - p_new):
                break
            step *= 0.5
        else:
            candidate, p_new, value_new = theta, p, value  # no decrease found: stay
        theta, p = candidate, p_new
        value, grad = problem.loss_and_gradient(total * p)
        grad = total * grad
        run.report(value)
        if run.stalled():
            run.converged = True
            break
    return problem.model(problem.split(theta))
