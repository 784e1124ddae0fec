"""What AIM's one-way round decides: its split, the top-up, the noise filter's width, the
coarse forms and the one-way rest, each from the round's released totals (N̂ and the noise
share s) and public sizes: post-processing, so they cost nothing and a resumed run
decides them again the same way (app.privacy.mechanisms.aim has the schedule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.pgm.domain import Domain
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.budget import round_cost
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import Attrs, Round

# The noise filter's limit is this many times `options.noise_filter`·N̂ while the one-way
# round is precise (`filter_factor`; docs/mechanisms.md has the figures).
WIDE_FILTER_FACTOR = 2.0


def measure_sigma(rho_part: float, sensitivity: int) -> float:
    """The smallest σ (in floats) whose Gaussian measurement costs at most `rho_part`."""
    sigma = sensitivity * math.sqrt(1.0 / (2.0 * rho_part))
    while round_cost(sigma, 0.0, sensitivity) > rho_part:  # float rounding
        sigma = math.nextafter(sigma, math.inf)
    return sigma


def oneway_parts(domain: Domain, oneway: Sequence[Attrs]) -> list[float]:
    """Shares of a one-way round: ∝ n_i^(2/3), which minimises Σ n_i·σ_i for its ρ."""
    parts = [domain.cells(r) ** (2.0 / 3.0) for r in oneway]
    total = math.fsum(parts)
    return [part / total for part in parts]


# The one-way top-up: when the one-way round's expected noise, averaged over its marginals
# as a share of N̂ (s = mean √(2/π)·σ_i·n_i / 2N̂), is above TOPUP_TV, a second one-way
# round (n^(2/3) split) before any selection spends what would bring s down to TOPUP_TV,
# β·((s/TOPUP_TV)² − 1)·ρ, but never so much that the two rounds exceed TOPUP_MAX·ρ. On
# Adult (ε = 1, β = 0.2) s is 0.013 and nothing changes; on 2,000 rows × 15 attributes 0.12.
TOPUP_TV = 0.05
TOPUP_MAX = 0.7


def topup_sigmas(
    domain: Domain,
    rho: float,
    init: Sequence[Round],
    options: MechanismOptions,
) -> dict[Attrs, float]:
    """{one-way marginal: σ} of the top-up round, or {} when none is due (decided from
    the one-way round's released totals and public sizes: post-processing)."""
    if options.init_share is None or options.noise_filter is None or not init:
        return {}
    share = oneway_noise_share(init)
    extra = min(
        options.init_share * ((share / TOPUP_TV) ** 2 - 1.0), TOPUP_MAX - options.init_share
    )
    if share <= TOPUP_TV or extra <= 0.0:
        return {}
    oneway = list(dict.fromkeys(r.attributes for r in init))  # (once, if in two halves)
    return {
        r: measure_sigma(extra * rho * part, options.sensitivity)
        for r, part in zip(oneway, oneway_parts(domain, oneway), strict=True)
    }


def form_groups(
    domain: Domain, rho: float, init: Sequence[Round], options: MechanismOptions
) -> int | None:
    """G of the run's coarse forms: `options.coarse_groups` where the one-way round's
    noise share asks for a top-up (rows are few for the budget; post-processing, like
    the top-up), else None. On a large table a pair the filter leaves out at first is
    measured in full once σ anneals; its form would take budget from the full pairs."""
    if options.coarse_groups is None or not topup_sigmas(domain, rho, init, options):
        return None
    return options.coarse_groups


def oneway_noise_share(init: Sequence[Round]) -> float:
    """s: the one-way round's expected noise as a share of N̂, mean √(2/π)·σ_i·n_i / 2N̂
    over its marginals (released totals and public sizes: post-processing). A marginal
    measured more than once (the round's two halves) counts at the σ of their
    inverse-variance mean, (Σ 1/σ²)^(−1/2)."""
    rows = estimated_rows(init)
    sigmas: dict[Attrs, list[float]] = {}
    cells: dict[Attrs, int] = {}
    for r in init:
        sigmas.setdefault(r.attributes, []).append(r.sigma)
        cells[r.attributes] = r.values.size
    noise = [SQRT_2_OVER_PI * combined_sigma(sigmas[a]) * cells[a] / (2.0 * rows) for a in sigmas]
    return math.fsum(noise) / len(noise)


def combined_sigma(sigmas: Sequence[float]) -> float:
    """σ of the inverse-variance mean of measurements at `sigmas`: (Σ 1/σ²)^(−1/2)."""
    if len(sigmas) == 1:
        return sigmas[0]
    return 1.0 / math.sqrt(math.fsum(s**-2 for s in sigmas))


def filter_factor(init: Sequence[Round], options: MechanismOptions) -> float | None:
    """The noise filter's factor for a run whose one-way round is `init`:
    `options.noise_filter`, times WIDE_FILTER_FACTOR while that round's noise share s is
    at most `options.wide_filter_share` (its one-way marginals are precise, so a pair
    measured at a noise near N̂ still teaches the model something the one-way rest would
    not; where s is larger, the rest is worth more). Over the next
    `options.wide_filter_ramp` of s the factor falls linearly back to `noise_filter`: s
    is computed from noisy totals, and a step would let that noise alone decide, on a
    table whose s lies near the limit, between a run that measures pairs and one that
    measures none. Post-processing, like s."""
    factor, wide = options.noise_filter, options.wide_filter_share
    if factor is None or wide is None or not init:
        return factor
    share, ramp = oneway_noise_share(init), options.wide_filter_ramp
    if share <= wide:
        return WIDE_FILTER_FACTOR * factor
    if share >= wide + ramp:
        return factor
    return factor * (1.0 + (WIDE_FILTER_FACTOR - 1.0) * (wide + ramp - share) / ramp)


def second_half_due(first: Sequence[Round], options: MechanismOptions) -> bool:
    """Whether a run measures the one-way round's second half after its first, `first`:
    unless its noise share s is at most `options.precise_oneway_share` (post-processing,
    like s; always when the round is not split)."""
    limit = options.precise_oneway_share
    return limit is None or not first or oneway_noise_share(first) > limit


def estimated_rows(rounds: Sequence[Round]) -> float:
    """N̂: the inverse-variance mean of the one-way round's noisy totals (post-processing)."""
    weights = [1.0 / (r.values.size * r.sigma**2) for r in rounds if r.kind == "measure"]
    totals = [float(r.values.sum()) for r in rounds if r.kind == "measure"]
    if not weights:
        return 1.0
    return max(float(np.dot(weights, totals) / np.sum(weights)), 1.0)
