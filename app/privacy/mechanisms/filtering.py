"""AIM's candidate filter and noise terms: which marginals a selection round offers, and
the noise term η_r each is scored with. Everything here is computed from public sizes,
released measurements (N̂, the model) and the round's σ and ε, before the round reads
anything: it costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from app.pgm.domain import Domain
from app.privacy.mechanisms.bounds import SQRT_2_OVER_PI
from app.privacy.mechanisms.coarse import Candidate, Coarse
from app.privacy.mechanisms.engine import MechanismRun
from app.privacy.mechanisms.fitted_noise import fitted_noise
from app.privacy.mechanisms.options import MechanismOptions


def noise_filter(
    candidates: Sequence[Candidate],
    noise: Mapping[Candidate, float],
    rows: float,
    factor: float | None,
    selection: tuple[Mapping[Candidate, float], float] | None = None,
) -> list[Candidate]:
    """Candidates whose expected error, were they measured now, is at most `factor`·N̂.

    The error is the measurement's noise term `noise[r]` (the noise the fit keeps,
    `noise_terms`) plus, given `selection` = (weights w, ε), what the exponential
    mechanism may miss by in choosing it: its quality is within 2Δ·ln|C|/ε of the best,
    which is 2Δ·ln|C|/(ε·w_r) in r's L1 error. C is every candidate (at least as many as
    the mechanism will choose from) and Δ bounds the mechanism's sensitivity, the largest
    weight of what this filter returns. Δ starts at the largest weight among the
    candidates whose noise alone is within `factor`·N̂ (never a candidate the noise
    already rules out) and steps down through their weights, leaving out what is heavier,
    until a candidate of two or more attributes passes: with a 3-way workload the triples
    weigh most, and where their noise plus their own slack keeps them out, their weight
    would keep every pair out too. A measurement whose noise is comparable to the rows
    cannot improve the model (its quality is below zero once the noise exceeds 2N), yet
    at a small ε the exponential mechanism picks it almost as often as a useful one. N̂
    comes from released measurements and the rest from public sizes, the model and the
    round's ε, so this costs nothing.
    """
    if factor is None or not candidates:
        return list(candidates)
    limit = factor * rows
    if selection is None:
        return [r for r in candidates if noise[r] <= limit]
    weights, epsilon = selection
    measurable = [r for r in candidates if noise[r] <= limit] or candidates
    reach = 2.0 * math.log(len(candidates)) / epsilon
    first_level: list[Candidate] | None = None  # what passes at the largest Δ
    for delta in sorted({weights[r] for r in measurable}, reverse=True):
        passing = [
            r
            for r in candidates
            if weights[r] <= delta and noise[r] + reach * delta / weights[r] <= limit
        ]
        if any(len(r) > 1 for r in passing):
            return passing
        if first_level is None:
            first_level = passing
    return first_level or []  # nothing multi-way at any level: the first level's


def noise_terms(
    run: MechanismRun, candidates: Sequence[Candidate], sigma: float, options: MechanismOptions
) -> dict[Candidate, float]:
    """{r: η_r}, the noise term of r's quality and of the noise filter at σ: the noise the
    fit keeps (`fitted_noise`, from the model's answers) with `options.fitted_noise`,
    else the paper's raw √(2/π)·σ·n_r. A coarse candidate's is taken over its groups, as
    if they were an attribute's values. Public sizes and released measurements only."""
    if not options.fitted_noise:
        return {r: SQRT_2_OVER_PI * sigma * run.cells_of(r) for r in candidates}
    full = [r for r in candidates if not isinstance(r, Coarse)]
    forms = [r for r in candidates if isinstance(r, Coarse)]
    fitted = fitted_noise(run.domain, {r: run.estimate(r) for r in full}, sigma)
    terms: dict[Candidate, float] = {r: term for r, term in fitted.items()}
    if forms:
        # An attribute has min(n, G) groups in every form of a run (a pair, one form):
        # one call over a domain of the groups takes every form's term.
        groups: dict[str, int] = {}
        for form in forms:
            for a, g in zip(form.attributes, form.groups, strict=True):
                if groups.setdefault(a, g) != g:
                    raise ValueError(f"coarse forms split {a} into different groups")
        grouped = Domain.from_sizes(groups)
        kept = fitted_noise(grouped, {r.attributes: run.estimate_of(r) for r in forms}, sigma)
        terms.update({r: kept[r.attributes] for r in forms})
    return terms
