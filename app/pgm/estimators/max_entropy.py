"""The maximum-entropy step shared by the marginal-space estimators (ADMM, dual averaging).

The loss only sees the measured sets' marginals, so it is flat along interactions the
triangulation added. Mirror descent from θ = 0 converges to the maximum-entropy point
of that optimal face; ADMM and dual averaging stop at some other point of it, and end
with a few sweeps of iterative proportional fitting that move them to the same point —
the same loss, the same distribution as Private-PGM, no invented interactions.
`FitRun.entropy_sweeps` records how many sweeps it took.
"""

from __future__ import annotations

import numpy as np

from app.pgm.belief_propagation import LOG_ZERO, IncrementalCalibration
from app.pgm.estimators import FitRun
from app.pgm.model import GraphicalModel
from app.pgm.problem import PROBABILITY_FLOOR, potentials_from_marginals


def maximum_entropy(run: FitRun, p: np.ndarray, max_sweeps: int = 100) -> GraphicalModel:
    """The maximum-entropy model with the same measured-set marginals as clique marginals p.

    The loss sees the clique marginals only through the measured sets' marginals, so it
    is flat along interactions the triangulation added (e.g. the 3-way table of a chord
    clique). ADMM and dual averaging stop at some point of that flat face; mirror descent
    from θ = 0 keeps θ in the span of the measured sets and so reaches its maximum-entropy
    point. Iterative proportional fitting from θ = 0 onto the measured sets' marginals
    (taken from p made consistent) gets that same point: same loss, no invented
    interactions (on Adult it lowers the 3-way TV error from 0.1145 to 0.1135).
    """
    problem = run.problem
    consistent = problem.probabilities(
        np.concatenate(
            [t.ravel() for t in potentials_from_marginals(problem.tree, problem.split(p))]
        )
    )
    fitted = problem.split(consistent)
    targets, log_targets = [], []
    for k, axes in problem.measured_sets:
        target = fitted[k].sum(axis=axes, keepdims=True)
        targets.append(target)
        log_targets.append(np.log(np.maximum(target, PROBABILITY_FLOOR)))
    # Sets in one clique are fitted one after the other from that clique's marginal
    # alone: multiplying exp(θ_k) by a function of the clique's own attributes multiplies
    # the clique's marginal by the same function (then renormalises it), so one marginal
    # per clique and sweep is enough, not one per measured set.
    groups: dict[int, list[tuple[tuple[int, ...], np.ndarray, np.ndarray]]] = {}
    for (k, axes), target, log_target in zip(
        problem.measured_sets, targets, log_targets, strict=True
    ):
        groups.setdefault(k, []).append((axes, target, log_target))
    theta = np.zeros(problem.n)
    thetas = problem.split(theta)
    # One clique's θ changes per step, so only the messages leaving it go stale: walking
    # the cliques depth-first recomputes about one message a step, not a whole
    # calibration (the limit, the I-projection of the uniform model, is the same in any
    # order).
    calibration = IncrementalCalibration(problem.plan, thetas)
    order = [k for k in calibration.walk() if k in groups]
    for sweep in range(1, max_sweeps + 1):
        worst = 0.0
        for k in order:
            marginal = calibration.marginal(k)
            for axes, target, log_target in groups[k]:
                current = marginal.sum(axis=axes, keepdims=True)
                worst = max(worst, float(np.abs(current - target).max()))
                step = log_target - np.log(np.maximum(current, PROBABILITY_FLOOR))
                calibration.add(k, step)
                marginal = marginal * np.exp(step)
                marginal /= marginal.sum()
        run.entropy_sweeps = sweep
        run.tick()
        if worst <= 1e-12:
            break
    return problem.model(problem.split(np.maximum(theta, LOG_ZERO)))
