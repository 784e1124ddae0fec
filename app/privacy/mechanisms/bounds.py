"""Error bounds of AIM §5: 95% upper bounds on the L1 error of a model's marginal.

**Theorem 2 (measured marginals).** For r in the downward closure of the Gaussian
measurements, the inverse-variance weighted combination of every measurement s ⊇ r
projected onto r,

    ȳ_r = Σ_i c_i·P_r(ỹ_i) / Σ_i c_i,   c_i = n_r / (n_{s_i}·σ_i²),

is unbiased with independent per-cell noise of variance σ̄² = 1/Σ_i c_i (the projection
of s onto r sums n_s/n_r cells). The L1 norm of a Gaussian vector is √n_r-Lipschitz in
L2, so by Gaussian concentration, with probability ≥ 1 − exp(−λ²/2),

    ‖M_r(D) − ȳ_r‖₁ ≤ √(2/π)·σ̄·n_r + λ·σ̄·√n_r,

and for the model's answer (the corollary) add ‖M_r(p̂) − ȳ_r‖₁ (triangle inequality;
the model is post-processing, so this costs nothing).

**Theorem 4 (workload marginals never measured).** In the last round t in which r was
a candidate, the exponential mechanism (ε_t, sensitivity Δ_t, |C_t| candidates) chose
r_t. With probability ≥ 1 − e^{−λ₂} the chosen quality is within (2Δ_t/ε_t)(ln|C_t| + λ₂)
of the best, so for every candidate r, with q_r = w_r(‖M_r(D) − M_r(p̂_{t−1})‖₁ − η_r),

    q_r ≤ q_{r_t} + (2Δ_t/ε_t)(ln|C_t| + λ₂),

and q_{r_t} is bounded with the round's own noisy answer ỹ_t (Theorem 2 with λ₁):
q_{r_t} ≤ w_{r_t}(‖ỹ_t − M_{r_t}(p̂_{t−1})‖₁ + √(2/π)σ_t·n_{r_t} − η_{r_t} + λ₁σ_t√n_{r_t}).
Hence

    ‖M_r(D) − M_r(p̂_{t−1})‖₁ ≤ η_r + [q_{r_t} bound + (2Δ_t/ε_t)(ln|C_t| + λ₂)] / w_r,

with the failure probability split equally between the two events (λ₁ = √(2 ln(2/γ)),
λ₂ = ln(2/γ), γ = 1 − confidence). The bound is about the model p̂_{t−1} of that
round; for a later model add ‖M_r(p̂_{t−1}) − M_r(p̂)‖₁. η_r, the candidate's noise term,
is any number fixed before the records are read: AIM's fitted noise
(`app.privacy.mechanisms.fitted_noise`, from the model and σ), the paper's √(2/π)·σ_t·n_r,
or 0 for MWEM (whose quality has no noise term); weights are 1 in MWEM.

Approximation we make knowingly: the noise is the *discrete* Gaussian. For the σ
the mechanisms use (σ ≳ 1) its variance and mean absolute value are within a tiny
relative amount of the continuous Gaussian's, and it is σ²-sub-Gaussian (Canonne,
Kamath, Steinke 2020), so the bounds are applied unchanged (tests check coverage).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from app.pgm.domain import Domain
from app.pgm.measurement import Measurement
from app.privacy.mechanisms.rounds import Attrs, Round

Theorem = Literal["theorem 2", "theorem 4"]

# E|Z| for a standard normal Z: the expected absolute noise of a Gaussian cell, per σ.
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class ErrorBound:
    """An upper bound on ‖M_r(D) − answer‖₁ that holds with probability ≥ `confidence`."""

    bound: float
    theorem: Theorem
    confidence: float


@dataclass(frozen=True)
class UnmeasuredBound:
    """Theorem 4 bound of a never-measured workload marginal, relative to a reference model.

    `bound` bounds the L1 error of the *reference* model's answer (the mechanism's
    final model); `theorem4_bound` moves it to any later model by the triangle inequality.
    """

    attributes: Attrs
    bound: float
    round_index: int
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "attributes": list(self.attributes),
            "bound": self.bound,
            "round_index": self.round_index,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UnmeasuredBound:
        return cls(
            tuple(data["attributes"]),
            float(data["bound"]),
            int(data["round_index"]),
            float(data["confidence"]),
        )


def _lambda_gaussian(failure: float) -> float:
    """λ with exp(−λ²/2) = failure."""
    return math.sqrt(2.0 * math.log(1.0 / failure))


def _project(domain: Domain, m: Measurement, attrs: Attrs) -> np.ndarray:
    """The measurement's values summed onto `attrs`, flattened in the order of `attrs`."""
    table = m.values.reshape(domain.shape(m.attributes))
    keep = [m.attributes.index(a) for a in attrs]
    drop = tuple(i for i in range(len(m.attributes)) if i not in keep)
    summed = table.sum(axis=drop) if drop else table
    remaining = [i for i in range(len(m.attributes)) if i in keep]
    order = [remaining.index(m.attributes.index(a)) for a in attrs]
    return np.transpose(summed, order).ravel()


def combined_estimate(
    domain: Domain, attrs: Sequence[str], measurements: Iterable[Measurement]
) -> tuple[np.ndarray, float] | None:
    """(ȳ_r, σ̄) of Theorem 1 from the Gaussian identity measurements covering `attrs`."""
    attrs = tuple(attrs)
    wanted = set(attrs)
    n_r = domain.cells(attrs)
    numerator = np.zeros(n_r)
    precision = 0.0
    for m in measurements:
        if m.noise != "gaussian" or m.query is not None or not wanted <= set(m.attributes):
            continue
        c = n_r / (domain.cells(m.attributes) * m.noise_variance)
        numerator += c * _project(domain, m, attrs)
        precision += c
    if precision == 0.0:
        return None
    return numerator / precision, math.sqrt(1.0 / precision)


def theorem2_bound(
    domain: Domain,
    attrs: Sequence[str],
    measurements: Iterable[Measurement],
    model_answer: np.ndarray | None = None,
    confidence: float = 0.95,
) -> ErrorBound | None:
    """Theorem 2 (and its corollary when `model_answer` is given); None if nothing covers r."""
    attrs = tuple(attrs)
    found = combined_estimate(domain, attrs, measurements)
    if found is None:
        return None
    estimate, sigma_bar = found
    n_r = domain.cells(attrs)
    lam = _lambda_gaussian(1.0 - confidence)
    bound = SQRT_2_OVER_PI * sigma_bar * n_r + lam * sigma_bar * math.sqrt(n_r)
    if model_answer is not None:
        answer = np.asarray(model_answer, dtype=float).ravel()
        bound += float(np.abs(answer - estimate).sum())
    return ErrorBound(float(bound), "theorem 2", confidence)


def theorem4_round_bound(
    domain: Domain,
    round_: Round,
    attrs: Attrs,
    weight: float,
    noise: float | None = None,
    confidence: float = 0.95,
) -> float:
    """Theorem 4: the bound on ‖M_r(D) − M_r(p̂_{t−1})‖₁ for candidate r of `round_`,
    whose noise term in that round's quality was `noise` (None: b·σ·n_r)."""
    s = round_.selection
    if s is None or round_.epsilon <= 0:
        raise ValueError("Theorem 4 needs a round with a selection step")
    failure = (1.0 - confidence) / 2.0
    lam_noise = _lambda_gaussian(failure)
    lam_selection = math.log(1.0 / failure)
    sigma = round_.sigma
    n_chosen = round_.values.size
    chosen_noise = s.chosen_noise
    if chosen_noise is None or noise is None:
        if s.bias is None:
            raise ValueError("the round's noise terms were per candidate: give r's")
        chosen_noise = s.bias * sigma * n_chosen if chosen_noise is None else chosen_noise
        noise = s.bias * sigma * domain.cells(attrs) if noise is None else noise
    chosen_quality = s.chosen_weight * (
        s.error_before
        + SQRT_2_OVER_PI * sigma * n_chosen
        - chosen_noise
        + lam_noise * sigma * math.sqrt(n_chosen)
    )
    selection_slack = (
        2.0 * s.sensitivity / round_.epsilon * (math.log(s.candidates) + lam_selection)
    )
    return noise + (chosen_quality + selection_slack) / weight


def theorem4_bound(
    unmeasured: UnmeasuredBound,
    model_answer: np.ndarray | None = None,
    reference_answer: np.ndarray | None = None,
) -> ErrorBound:
    """Theorem 4 bound for a model's answer: the reference bound + ‖reference − answer‖₁."""
    bound = unmeasured.bound
    if model_answer is not None and reference_answer is not None:
        bound += float(
            np.abs(
                np.asarray(model_answer, dtype=float).ravel()
                - np.asarray(reference_answer, dtype=float).ravel()
            ).sum()
        )
    elif (model_answer is None) != (reference_answer is None):
        raise ValueError("give both the model's and the reference model's answer, or neither")
    return ErrorBound(float(bound), "theorem 4", unmeasured.confidence)


def error_bound(
    domain: Domain,
    attrs: Sequence[str],
    model_answer: np.ndarray,
    measurements: Iterable[Measurement],
    unmeasured_bounds: Mapping[Attrs, UnmeasuredBound] | None = None,
    reference_answer: np.ndarray | None = None,
    confidence: float = 0.95,
) -> ErrorBound | None:
    """The bound the marginals endpoint reports for `attrs`, and which theorem gave it.

    Theorem 2 when Gaussian measurements cover `attrs`; otherwise Theorem 4 when the
    mechanism left a bound for it (`reference_answer` is the answer of the model that
    bound refers to, over the attributes in domain order; None if `model_answer` comes
    from that same model); else None. `model_answer` is over `attrs` in the order given.
    """
    attrs = tuple(attrs)
    measured = theorem2_bound(domain, attrs, measurements, model_answer, confidence)
    if measured is not None:
        return measured
    if unmeasured_bounds:
        key = domain.canonical(attrs)
        found = unmeasured_bounds.get(key)
        if found is not None:
            if reference_answer is None:
                return theorem4_bound(found)
            answer = np.asarray(model_answer, dtype=float)
            if tuple(attrs) != key:
                # answers are given in the order of `attrs`; the bound is order-free but the
                # two arrays must be compared cell by cell in the same order
                answer = np.transpose(
                    answer.reshape(domain.shape(attrs)), [tuple(attrs).index(a) for a in key]
                )
            return theorem4_bound(found, answer, reference_answer)
    return None
