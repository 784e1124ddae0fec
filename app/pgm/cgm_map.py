"""The E-step of CGM-EM: the collective-graphical-model MAP of the true clique marginals.

Given the current model p_θ on a junction tree and the released answers y = M·n + noise
(n the true clique counts, M the compiled measurement matrix), the CGM approximation of
Bernstein et al. (ICML 2017) — Stirling's formula on the multinomial of the counts —
makes log p(n | θ) ≈ −N·KL(n/N ‖ p_θ) + const. The MAP of n given y is then

    min over μ in the marginal polytope:   f(N·M·μ) + N·KL(μ ‖ p_θ)            (primal)

with f the noise's negative log-likelihood, Σ w|r| (Laplace, w = 1/b) plus Σ ½w·r²
(Gaussian, w = 1/σ²), r = N·M·μ − y. On a junction tree KL(μ ‖ p_θ) is the divergence of
the tree-factorised distributions, A*(μ) − ⟨θ, μ⟩ + A(θ) with A the log-partition function
and A* its conjugate (the negative entropy), so the problem is convex, strictly in μ.

Non-linear belief propagation (Sun, Sheldon and Kumar, 2015) solves it by a fixed point:
at the optimum, μ is the calibrated marginal of θ shifted by the noise term's gradient.
We solve the same problem through its Lagrange dual, whose optimality condition is that
fixed point and which stays smooth where the Laplace term is not:

    max over λ:   −⟨λ, y⟩ − Σ_gaussian λ²/(2w) − N·A(θ − Mᵀλ) + N·A(θ),
                  |λ_i| ≤ w_i on Laplace answers (λ free on Gaussian ones).

One belief-propagation pass gives its value and gradient N·M·μ(θ − Mᵀλ) − y − λ/w;
L-BFGS-B maximises it with the box as bounds. The primal solution is μ(θ − Mᵀλ*): always
calibrated, strictly positive and consistent, never an infeasible point. The duality gap
at any λ is the sum over answers of the Fenchel–Young gaps φ(r) + φ*(λ) − λr ≥ 0 at
r = N·M·μ(θ − Mᵀλ) − y; we stop when it is small relative to the objective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.optimize as so
import scipy.sparse as sp

# Stop when the duality gap is below this fraction of the objective (at least 1): the
# objective is in units of answers' noise, so the marginals are then within total
# variation √(gap / 2N) of the exact MAP (Pinsker on the N·KL term).
DEFAULT_GAP_TOLERANCE = 1e-7


class CompiledMeasurements(Protocol):
    """What the E-step needs: the answers' matrix and noise over a tree's clique cells."""

    @property
    def total(self) -> float: ...
    @property
    def M(self) -> sp.csr_matrix: ...
    @property
    def MT(self) -> sp.csr_matrix: ...
    @property
    def y(self) -> np.ndarray: ...
    @property
    def w(self) -> np.ndarray: ...
    @property
    def is_gaussian(self) -> np.ndarray: ...

    def log_partition_and_marginals(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """log Z of the flat potentials θ and their flat clique marginals (each sums to 1)."""
        ...


@dataclass(frozen=True)
class MapResult:
    """The MAP clique marginals, as potentials θ − Mᵀλ, with the dual certificate λ.

    `gap` bounds how far `primal` (the objective at `marginals`) is above the minimum.
    """

    theta: np.ndarray
    dual: np.ndarray
    marginals: np.ndarray
    log_partition: float
    gap: float
    primal: float
    evaluations: int


def noise_loss(problem: CompiledMeasurements, answers: np.ndarray) -> float:
    """f: the noise's negative log-likelihood (up to constants) at these expected answers."""
    r = answers - problem.y
    per_answer = np.where(problem.is_gaussian, 0.5 * r * r, np.abs(r))
    return float(np.einsum("i,i->", problem.w, per_answer))


def _fenchel_young_gap(problem: CompiledMeasurements, r: np.ndarray, lam: np.ndarray) -> float:
    w, gauss = problem.w, problem.is_gaussian
    root_w = np.sqrt(w)
    gaussian_gap = 0.5 * (root_w * r - lam / root_w) ** 2
    laplace_gap = w * np.abs(r) - lam * r
    return float(np.maximum(np.where(gauss, gaussian_gap, laplace_gap), 0.0).sum())


@dataclass
class _Best:
    """The evaluated λ with the smallest duality gap so far (L-BFGS-B's last is not always)."""

    gap: float = np.inf
    primal: float = np.inf
    lam: np.ndarray | None = None
    evaluations: int = 0


def map_marginals(
    problem: CompiledMeasurements,
    theta: np.ndarray,
    *,
    dual_start: np.ndarray | None = None,
    gap_tolerance: float = DEFAULT_GAP_TOLERANCE,
    max_evaluations: int = 1000,
    log_partition: float | None = None,
) -> MapResult:
    """Solve the CGM MAP problem around the model θ (flat potentials over the clique cells).

    `dual_start`: a previous λ (clipped into the box), e.g. the last E-step's: successive
    E-steps have close duals. `log_partition`: A(θ), if the caller has it.
    Stops when the duality gap is below gap_tolerance · max(primal, 1), or after
    `max_evaluations` belief-propagation passes (the result is then still a feasible,
    calibrated model, and its `gap` says how far from optimal it is).
    """
    total = float(problem.total)
    y, w, gauss = problem.y, problem.w, problem.is_gaussian
    upper = np.where(gauss, np.inf, w)
    lam0 = np.zeros(y.size) if dual_start is None else np.clip(dual_start, -upper, upper)
    if log_partition is None:
        log_partition, _ = problem.log_partition_and_marginals(theta)
    inverse_w = np.where(gauss, 1.0 / w, 0.0)
    best = _Best()

    def evaluate(lam: np.ndarray) -> tuple[float, np.ndarray]:
        """−(dual objective) and its gradient; records the duality gap on the way."""
        log_z, mu = problem.log_partition_and_marginals(theta - problem.MT @ lam)
        answers = total * (problem.M @ mu)
        r = answers - y
        gap = _fenchel_young_gap(problem, r, lam)
        best.evaluations += 1
        if gap < best.gap:
            # KL(μ ‖ p_θ) = ⟨−Mᵀλ, μ⟩ − A(θ − Mᵀλ) + A(θ), from the exponential form.
            kl = max(-float(lam @ (problem.M @ mu)) - log_z + log_partition, 0.0)
            best.gap, best.primal = gap, noise_loss(problem, answers) + total * kl
            best.lam = lam.copy()
        value = (
            float(lam @ y) + 0.5 * float(lam @ (inverse_w * lam)) + total * (log_z - log_partition)
        )
        return value, y + inverse_w * lam - answers

    def solved() -> bool:
        return best.gap <= gap_tolerance * max(best.primal, 1.0)

    def stop_when_solved(intermediate_result: so.OptimizeResult) -> None:
        if solved():
            raise StopIteration

    evaluate(lam0)
    if not solved() and y.size:
        so.minimize(
            evaluate,
            lam0,
            jac=True,
            method="L-BFGS-B",
            bounds=so.Bounds(-upper, upper),
            callback=stop_when_solved,
            # Stop on the duality gap only: scipy's own tests are relative to the dual's
            # value, which carries the large constant N·A and so ends too early.
            options={
                "maxfun": max_evaluations,
                "maxiter": max_evaluations,
                "maxcor": 20,
                "ftol": 0.0,
                "gtol": 0.0,
            },
        )
    lam = lam0 if best.lam is None else best.lam
    shifted = theta - problem.MT @ lam
    log_z, mu = problem.log_partition_and_marginals(shifted)
    return MapResult(shifted, lam, mu, log_z, best.gap, best.primal, best.evaluations)
