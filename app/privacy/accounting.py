"""Accounting: what each mechanism costs in ρ-zCDP, and ρ ↔ (ε, δ).

The privacy model (DESIGN.md) is fixed: neighbouring datasets differ by one added or
removed privacy unit — one record, or at most k records of one person when the dataset
names a unit column and keeps at most k rows per unit — so a count marginal has L1 and
L2 sensitivity k (the `sensitivity` argument below; 1 by default); costs compose by
addition of ρ.

- Gaussian noise of std σ on a query of L2 sensitivity Δ is Δ²/(2σ²)-zCDP.
- Laplace noise of scale b on a query of L1 sensitivity Δ is (Δ/b)-DP, hence
  (Δ/b)²/2-zCDP (Bun & Steinke 2016, Prop. 1.4).
- The exponential mechanism at ε is ε²/8-zCDP (bounded-range argument,
  Cesar & Rogers 2021) when its scores' sensitivity is what it is told; with units of
  k rows the caller multiplies the scores' sensitivity by k and ε keeps its meaning.

Two arithmetics of those costs, both here and nowhere else. `rho_gaussian`,
`rho_laplace` and `rho_exponential` are floats, for the mechanisms' running ledger
(whose σ and ε are chosen against them, bit for bit, so a resumed run recomputes the
same ones). The `exact_rho_*` functions are the exact rational cost of the float σ, b
or ε actually used: what the service charges and checks (rounded up to a ledger unit
there), so a charge never under-counts a privacy loss by float rounding.
`smallest_scale_for_rho` inverts the exact cost: the smallest float scale whose exact
cost fits a share of budget.

ρ → (ε, δ): `epsilon_from_rho` is the tight conversion of Canonne, Kamath and Steinke
(2020, "The discrete Gaussian for differential privacy", Cor. 13):

    ε(δ) = inf_{α>1}  ρα + [log(1/δ) + (α−1)·log(1 − 1/α) − log α] / (α − 1).

We compute it ourselves with a grid + bounded Brent search over log(α − 1) rather than
building a dummy OpenDP measurement for each ρ: OpenDP 0.16's
`make_zCDP_to_approxDP(...).map(d_in).epsilon(δ)` implements the same bound (its value
agrees with ours to ~1e-15 relative; the test suite checks the agreement), but it only
converts the privacy map of a real measurement, whose ρ OpenDP rounds upward, so going
through it would perturb ρ itself. `epsilon_from_rho_loose` is ρ + 2√(ρ log 1/δ)
(Bun & Steinke 2016, Prop. 1.3), which is never smaller.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy.optimize import minimize_scalar

from app.errors import PrivqError

__all__ = [
    "BudgetOverspent",
    "check_sensitivity",
    "epsilon_for_rho_exponential",
    "epsilon_from_rho",
    "epsilon_from_rho_loose",
    "exact_rho",
    "exact_rho_exponential",
    "exact_rho_gaussian",
    "exact_rho_laplace",
    "rho_exponential",
    "rho_from_epsilon",
    "rho_gaussian",
    "rho_laplace",
    "scale_for_rho",
    "sigma_for_rho",
    "smallest_scale_for_rho",
]


class BudgetOverspent(PrivqError, code="budget_overspent"):
    """More ρ would be spent than was charged; the computation stopped before releasing more."""


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def check_sensitivity(sensitivity: int) -> int:
    """A count query's sensitivity: the rows one privacy unit may hold, an integer ≥ 1."""
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError(f"sensitivity must be an integer of at least 1, got {sensitivity!r}")
    return sensitivity


def rho_gaussian(sigma: float, sensitivity: float = 1.0) -> float:
    """ρ of Gaussian noise with std `sigma` on a query of L2 sensitivity `sensitivity`."""
    sigma = _positive("sigma", sigma)
    return float(sensitivity) ** 2 / (2.0 * sigma**2)


def sigma_for_rho(rho: float, marginals: int = 1, sensitivity: int = 1) -> float:
    """σ such that `marginals` Gaussian measurements of L2 sensitivity Δ cost `rho` in all."""
    rho = _positive("rho", rho)
    if marginals < 1:
        raise ValueError("marginals must be at least 1")
    return check_sensitivity(sensitivity) * math.sqrt(marginals / (2.0 * rho))


def rho_laplace(scale: float, sensitivity: int = 1) -> float:
    """ρ of Laplace noise of scale b on a query of L1 sensitivity Δ: ε = Δ/b pure DP → ε²/2."""
    scale = _positive("scale", scale)
    return (check_sensitivity(sensitivity) / scale) ** 2 / 2.0


def scale_for_rho(rho: float, marginals: int = 1, sensitivity: int = 1) -> float:
    """Laplace scale b such that `marginals` measurements of L1 sensitivity Δ cost `rho`."""
    rho = _positive("rho", rho)
    if marginals < 1:
        raise ValueError("marginals must be at least 1")
    return check_sensitivity(sensitivity) / math.sqrt(2.0 * rho / marginals)


def rho_exponential(epsilon: float) -> float:
    """ρ of one exponential-mechanism selection at `epsilon`: ε²/8."""
    epsilon = _positive("epsilon", epsilon)
    return epsilon**2 / 8.0


def epsilon_for_rho_exponential(rho: float) -> float:
    """The ε of an exponential-mechanism selection that costs exactly `rho` (inverse of ε²/8)."""
    rho = _positive("rho", rho)
    return math.sqrt(8.0 * rho)


def exact_rho_gaussian(sigma: float, marginals: int = 1, sensitivity: int = 1) -> Fraction:
    """Exact ρ of m = `marginals` Gaussian measurements of L2 sensitivity Δ at this float σ:
    m·Δ²/(2σ²), a rational (Δ is an integer, σ a float)."""
    exact_sigma = Fraction(_positive("sigma", sigma))
    delta = check_sensitivity(sensitivity)
    return Fraction(marginals * delta * delta, 2) / (exact_sigma * exact_sigma)


def exact_rho_laplace(scale: float, marginals: int = 1, sensitivity: int = 1) -> Fraction:
    """Exact ρ of m = `marginals` Laplace measurements of L1 sensitivity Δ at scale b:
    m·(Δ/b)²/2 — the same expression in the scale as the Gaussian's m·Δ²/(2σ²)."""
    return exact_rho_gaussian(_positive("scale", scale), marginals, sensitivity)


def exact_rho_exponential(epsilon: float) -> Fraction:
    """Exact ρ of one exponential-mechanism selection at this float ε: ε²/8."""
    exact_epsilon = Fraction(_positive("epsilon", epsilon))
    return exact_epsilon * exact_epsilon / 8


def exact_rho(noise: str, scale: float, marginals: int = 1, sensitivity: int = 1) -> Fraction:
    """Exact ρ of `marginals` measurements of sensitivity Δ with `noise` ("gaussian"/"laplace")."""
    if noise == "gaussian":
        return exact_rho_gaussian(scale, marginals, sensitivity)
    if noise == "laplace":
        return exact_rho_laplace(scale, marginals, sensitivity)
    raise ValueError(f"unknown noise kind {noise!r}")


def smallest_scale_for_rho(rho: Fraction, marginals: int = 1, sensitivity: int = 1) -> float:
    """The float σ (or b) nearest Δ·√(m/(2ρ)) from above whose exact cost for m = `marginals`
    measurements of sensitivity Δ is at most `rho` (float rounding can put it an ulp low)."""
    if rho <= 0:
        raise ValueError(f"rho must be positive, got {rho!r}")
    scale = check_sensitivity(sensitivity) * math.sqrt(marginals / (2 * float(rho)))
    while exact_rho_gaussian(scale, marginals, sensitivity) > rho:
        scale = math.nextafter(scale, math.inf)
    return scale


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return delta


def _cks_objective(log_x: float, rho: float, log_inv_delta: float) -> float:
    """The CKS bound at α = 1 + x, x = exp(log_x); written in x to stay exact near α = 1."""
    x = math.exp(log_x)
    alpha = 1.0 + x
    # (α−1)·log(1−1/α) = x·(log x − log(1+x));  log α = log1p(x)
    return rho * alpha + (log_inv_delta + x * (log_x - math.log1p(x)) - math.log1p(x)) / x


def epsilon_from_rho(rho: float, delta: float) -> float:
    """Tight ε such that ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath, Steinke 2020)."""
    rho = float(rho)
    if rho < 0 or not math.isfinite(rho):
        raise ValueError(f"rho must be a non-negative finite number, got {rho!r}")
    delta = _check_delta(delta)
    if rho == 0.0:
        return 0.0
    log_inv_delta = math.log(1.0 / delta)
    # The minimiser is near α* ≈ 1 + √(log(1/δ)/ρ); search log(α−1) on a wide grid first so
    # the bounded Brent step starts in the right basin whatever ρ and δ are.
    grid = np.linspace(-30.0, 40.0, 701)
    values = np.array([_cks_objective(g, rho, log_inv_delta) for g in grid])
    best = int(np.argmin(values))
    lo = grid[max(best - 1, 0)]
    hi = grid[min(best + 1, len(grid) - 1)]
    result = minimize_scalar(
        _cks_objective,
        bounds=(lo, hi),
        args=(rho, log_inv_delta),
        method="bounded",
        options={"xatol": 1e-12, "maxiter": 500},
    )
    epsilon = min(float(result.fun), float(values[best]))
    return max(epsilon, 0.0)


def epsilon_from_rho_loose(rho: float, delta: float) -> float:
    """The classical ε = ρ + 2√(ρ log 1/δ) (Bun & Steinke 2016); never below the tight one."""
    rho = float(rho)
    if rho < 0 or not math.isfinite(rho):
        raise ValueError(f"rho must be a non-negative finite number, got {rho!r}")
    delta = _check_delta(delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def rho_from_epsilon(epsilon: float, delta: float, *, rtol: float = 1e-12) -> float:
    """The largest ρ whose tight (ε, δ) conversion is at most `epsilon` (bisection on ρ)."""
    epsilon = _positive("epsilon", epsilon)
    delta = _check_delta(delta)
    lo, hi = 0.0, 1.0
    while epsilon_from_rho(hi, delta) <= epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise ValueError("epsilon too large to invert")
    # Invariant: ε(lo) ≤ epsilon < ε(hi); return lo so the conversion never exceeds the target.
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):  # adjacent floats (near zero, rtol·hi underflows): done
            break
        if epsilon_from_rho(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo
