"""The noise a measured marginal leaves in the model once it is fitted: AIM's noise term.

AIM scores a candidate r by how far the model is from the data on it, less the noise a
measurement at σ would add: q_r = w_r(‖M_r(D) − M_r(p̂)‖₁ − noise_r). The paper takes
noise_r = √(2/π)·σ·n_r, the expected L1 norm of the raw Gaussian noise. The fit does
not keep that noise. It reconciles the measurement with the one-way marginals, which AIM
measures first and far more precisely, and with the fact that counts are not negative.
On small tables those two remove most of it: on 344 rows a pair of 27 cells measured at
σ = 15 has raw noise 325, yet the fitted model's error on it is 125–220 (docs/mechanisms.md,
"The noise term").

`fitted_noise` is the expected L1 error of the model's answer on r after the fit, under
two approximations that keep it cheap and free of records:

- the one-way marginals and the total are known, so only the noise's part orthogonal to
  them stays: per cell a Gaussian of variance κ_r·σ², κ_r = 1 − (1 + Σ_i (n_i − 1)) / n_r
  (the diagonal of the projection that removes the grand mean and every main effect of
  r's attributes; 1 − 1/n_r for a one-way marginal);
- the fit's projection onto non-negative counts is that onto the simplex of the model's
  total, y ↦ max(y − τ, 0), with τ the shift at which the expected total is kept.

Both are taken around the model's own answer M_r(p̂) (released measurements only), so the
term is post-processing: it costs nothing, and the exponential mechanism's sensitivity is
unchanged (the term does not depend on the records).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from scipy.special import ndtr

from app.pgm.domain import Domain

Attrs = tuple[str, ...]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_NEWTON_STEPS = 50
_TOLERANCE = 1e-6  # of the expected total's excess over the model's, in σ units per cell
_UNCLIPPED = 8.0  # cells this many noise scales above zero are never clipped (Φ(−8) ≈ 6e-16)


def _pdf(x: np.ndarray) -> np.ndarray:
    density: np.ndarray = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return density


def _shift(m: np.ndarray, starts: np.ndarray, sizes: np.ndarray, which: np.ndarray) -> np.ndarray:
    """τ/s of the candidates `which` (their cells m[starts[k] : starts[k] + sizes[k]])."""
    own = sizes[which]
    cells = m[np.concatenate([np.arange(starts[k], starts[k] + sizes[k]) for k in which])]
    first = np.concatenate(([0], np.cumsum(own)[:-1]))
    totals = np.add.reduceat(cells, first)
    t = np.zeros(which.size)
    for _ in range(_NEWTON_STEPS):
        x = cells - np.repeat(t, own)
        cdf = ndtr(x)
        excess = np.add.reduceat(x * cdf + _pdf(x), first) - totals
        if float(np.max(excess / own)) <= _TOLERANCE:
            break
        t = t + excess / np.maximum(np.add.reduceat(cdf, first), 1e-12)
    return t


def kept_share(domain: Domain, attrs: Attrs) -> float:
    """κ_r: the share of a cell's noise variance that the one-way marginals do not fix."""
    cells = domain.cells(attrs)
    if len(attrs) == 1:
        return 1.0 - 1.0 / cells
    fixed = 1 + sum(domain.cells((a,)) - 1 for a in attrs)
    return max(1.0 - fixed / cells, 0.0)


def fitted_noise(
    domain: Domain, estimates: Mapping[Attrs, np.ndarray], sigma: float
) -> dict[Attrs, float]:
    """{r: expected L1 error the model keeps on r after r is measured at σ}, for each
    candidate r with the model's answer `estimates[r]` (counts, any shape)."""
    names = list(estimates)
    if not names:
        return {}
    scales = np.array([sigma * math.sqrt(kept_share(domain, r)) for r in names])
    sizes = np.array([np.asarray(estimates[r]).size for r in names])
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    live = scales > 0.0
    safe = np.where(live, scales, 1.0)
    # m: every cell's model count in units of its candidate's noise scale s_r
    m = np.concatenate(
        [np.maximum(np.asarray(estimates[r], dtype=float).ravel(), 0.0) for r in names]
    ) / np.repeat(safe, sizes)
    # τ/s per candidate: the root of G(t) = Σ_c E[max(m_c + Z − t, 0)] − Σ_c m_c. Where
    # every cell holds at least _UNCLIPPED noise scales, G(0) < 10⁻¹⁴ a cell and τ = 0;
    # elsewhere Newton's steps from 0 rise to the root (G is convex and decreasing).
    t = np.zeros(len(names))
    clipped = np.flatnonzero(np.minimum.reduceat(m, starts) < _UNCLIPPED)
    if clipped.size:
        t[clipped] = _shift(m, starts, sizes, clipped)
    # E|max(y − τ, 0) − μ| per cell, y ~ N(μ, s²), in units of s (a = t − m):
    #   2φ(t) − φ(a) + t(2Φ(t) − 1 − Φ(a)) + m·Φ(a)
    tc = np.repeat(t, sizes)
    a = tc - m
    cdf_a = ndtr(a)
    per_cell = 2.0 * _pdf(tc) - _pdf(a) + tc * (2.0 * ndtr(tc) - 1.0 - cdf_a) + m * cdf_a
    noise = np.where(live, np.add.reduceat(per_cell, starts) * scales, 0.0)
    return {r: float(v) for r, v in zip(names, noise, strict=True)}
