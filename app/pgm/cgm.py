"""CGM-EM (Bernstein et al., ICML 2017): fit the model with the true marginals latent.

The released answers y are noisy functions of the data's true clique counts n, which are
themselves a multinomial draw of N records from the model p_θ. EM treats n as latent:

- E-step: n̂ = the collective-graphical-model MAP of n given y and the current model,
  min f(N·M·μ) + N·KL(μ ‖ p_θ) over the marginal polytope (`app.pgm.cgm_map`);
- M-step: the model that best explains n̂, max_θ log p(n̂ | θ) = min KL(n̂/N ‖ p_θ). The
  model family is every distribution on the junction tree, so this is p_θ = n̂/N exactly:
  the E-step's answer μ(θ − Mᵀλ) is already in it, and the new potentials are θ − Mᵀλ.

What that iteration is, and what follows from it:

1. It is the proximal-point method on the `mle` objective f over the marginal polytope,
   with the KL divergence weighted by N as the proximity term:
   μ_{t+1} = argmin f(N·M·μ) + N·KL(μ ‖ μ_t). So f decreases monotonically (by at least
   N·KL(μ_{t+1} ‖ μ_t) per step), and the fixed points are exactly the minimisers of f —
   the `mle` fit's optimal set. (A minimiser μ* is a fixed point: KL(·‖μ*) ≥ 0 vanishes
   only at μ*; conversely at a fixed point the KL term's gradient is zero, so μ is
   stationary for f.) CGM-EM cannot find a more likely model than `mle`; where f has one
   minimiser (Gaussian noise with the measured sets' marginals identified) it converges to
   `mle`'s model.
2. With Laplace noise f is an L1 objective with flat optimal faces: with N̂ fixed, every
   cell whose noisy count exceeds the fitted one has the same marginal cost, so the mass
   that clipping negative answers to zero frees can come off any of them. Then the EM
   path decides which minimiser comes out: it selects the one the KL proximity leads to
   from the start. From the uniform model that is the face point closest to uniform,
   which trims the largest cells first (tests/pgm/test_pgm_cgm.py shows it on one table).
3. Each Laplace E-step moves a log-potential by at most (answers covering it)/b, and each
   Gaussian one contracts a cell's gap by about 2b²/(2b² + n_cell): at small N and strong
   privacy (large b) the path is long, so an early-stopped EM is a heavily smoothed
   estimate of whatever it started from, and iterations matter as much as the start.
4. Which minimiser the path selects is a matter of geometry. The KL proximity changes cells
   in proportion to their size, so on a flat L1 face EM takes the excess mass (what
   clipping negative answers freed, mostly the positive noise of near-empty cells) in
   proportion from the cells that are already large. `mle`'s ADMM moves in counts, as a
   Euclidean projection does: it takes the excess equally from every cell and zeroes the
   smallest (soft thresholding), which is nearer the truth when the excess is noise on
   near-empty cells. Measured (bench/cgm.py, 7-attribute trees and loopy graphs,
   N = 10³..10⁵, ε = 0.1..2, 10 repetitions, mean 2-way TV against the population):
   EM from the uniform model loses to `mle` in 6 of 18 settings (trees at N = 1000,
   ε = 0.1: +0.022 ± 0.010 on 0.207), EM from the variance-matched Gaussian fit in 2
   (loopy, N = 1000, ε = 0.1: +0.009 ± 0.003 on 0.263), and neither wins beyond noise
   anywhere.

So the estimator starts where the path can only stay: at `mle`'s own fit from the same
measurements (whatever solver the fit uses), a point of the optimal set, and runs the
exact CGM-EM from there, Laplace and Gaussian terms alike (`refine`, which
`app.pgm.estimation.fit` calls for `estimator="cgm-em"`). It stops after a few iterations
that polish what the solver's tolerance left: the model is `mle`'s up to that tolerance.
`app.pgm.cgm_starts` runs the same EM from the other starts, for the benchmark and tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from app.pgm.cgm_map import DEFAULT_GAP_TOLERANCE, map_marginals, noise_loss
from app.pgm.estimators import Callback, FitRun
from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem

ESTIMATOR = "cgm-em"


class LatentProblem:
    """Measurements compiled on a junction tree, as the E-step sees them.

    With `gaussian_approximation`, every Laplace answer (scale b) counts as Gaussian with
    variance 2b² (weight 1/(2b²)).
    """

    def __init__(self, problem: FitProblem, *, gaussian_approximation: bool = False) -> None:
        self.problem = problem
        self.total = float(problem.total)
        self.M: sp.csr_matrix = problem.M
        self.MT: sp.csr_matrix = problem.MT
        self.y: np.ndarray = problem.y
        self.w: np.ndarray = problem.w
        self.is_gaussian: np.ndarray = problem.is_gaussian
        if gaussian_approximation:
            self.w = np.where(problem.is_gaussian, problem.w, problem.w**2 / 2.0)
            self.is_gaussian = np.ones_like(problem.is_gaussian)

    def log_partition_and_marginals(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        beliefs, log_z = self.problem.plan.run(self.problem.split(theta))
        flat = np.concatenate([b.ravel() for b in beliefs])
        flat -= log_z
        return log_z, np.exp(flat, out=flat)

    def loss(self, marginals: np.ndarray) -> float:
        """The noise term f at N̂ times these flat clique marginals."""
        return noise_loss(self, self.total * (self.M @ marginals))


@dataclass
class EmRun:
    """One EM run: θ after each iteration is not kept, only what a caller reports."""

    theta: np.ndarray
    losses: list[float] = field(default_factory=list)  # f at the start, then per iteration
    gaps: list[float] = field(default_factory=list)  # each E-step's duality gap
    evaluations: int = 0  # belief-propagation passes in all E-steps
    converged: bool = False


def expectation_maximisation(
    latent: LatentProblem,
    theta: np.ndarray,
    *,
    max_iterations: int = 2000,
    tolerance: float = 1e-6,
    gap_tolerance: float = DEFAULT_GAP_TOLERANCE,
    callback: Callback | None = None,
) -> EmRun:
    """CGM-EM from the flat potentials θ until f decreases by less than tolerance·max(f, 1).

    f falls by at least N·KL(μ_{t+1} ‖ μ_t) per iteration (up to the E-step's duality gap),
    so a small decrease also means the marginals have stopped moving.
    """
    log_z, mu = latent.log_partition_and_marginals(theta)
    run = EmRun(theta=theta, losses=[latent.loss(mu)])
    dual: np.ndarray | None = None
    for iteration in range(1, max_iterations + 1):
        step = map_marginals(
            latent, run.theta, dual_start=dual, gap_tolerance=gap_tolerance, log_partition=log_z
        )
        run.theta, dual, log_z = step.theta, step.dual, step.log_partition
        run.gaps.append(step.gap)
        run.evaluations += step.evaluations
        loss = latent.loss(step.marginals)
        decrease = run.losses[-1] - loss
        run.losses.append(loss)
        if callback is not None:
            callback(iteration, loss)
        if abs(decrease) <= tolerance * max(loss, 1.0):
            run.converged = True
            break
    return run


def refine(run: FitRun, model: GraphicalModel) -> GraphicalModel:
    """CGM-EM on `run.problem` from `model` (normally `mle`'s fit of the same problem).

    Each EM iteration is reported to `run` (so its callback sees the progress), the run's
    `converged` becomes EM's, and its iteration cap and tolerance are EM's too.
    """
    problem = run.problem
    em = expectation_maximisation(
        LatentProblem(problem),
        problem.warm_theta(model),
        max_iterations=run.max_iterations,
        tolerance=run.tolerance,
        callback=lambda _, loss: run.report(loss),
    )
    run.converged = em.converged
    return problem.model(problem.split(em.theta))
