"""Selection: the exponential mechanism, sampled by OpenDP.

`exponential_mechanism(scores, ε, Δ)` returns index i with probability
∝ exp(ε·score_i / (2Δ)). It is OpenDP 0.16's `make_noisy_max` with the
`ZeroConcentratedDivergence` output measure, which is report-noisy-max with Gumbel
noise; adding Gumbel(scale) noise to every score and reporting the argmax selects i
with probability ∝ exp(score_i / scale), so scale = 2Δ/ε is exactly the exponential
mechanism. OpenDP samples the Gumbel race with exact arbitrary-precision arithmetic on
the (float) scores converted exactly to rationals, and from its cryptographic RNG.

Privacy: OpenDP's map for this measurement under `linf_distance` (non-monotonic
scores) at d_in = Δ is (2Δ/scale)²/8 = ε²/8 ρ-zCDP — exactly what
`accounting.rho_exponential(ε)` charges (Cesar & Rogers 2021, bounded range). The
module checks this equality each time it builds a measurement.

Measurements are cached per scale; "contrib" is enabled on first use (`noise.opendp_prelude`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from app.privacy.accounting import BudgetOverspent, rho_exponential
from app.privacy.noise import opendp_prelude


@lru_cache(maxsize=1024)
def _gumbel_max(scale: float) -> Any:
    dp = opendp_prelude()
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    return dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=scale)


def selection_rho(epsilon: float, sensitivity: float) -> float:
    """OpenDP's own ρ for one selection at (ε, Δ): should equal ε²/8."""
    scale = 2.0 * float(sensitivity) / float(epsilon)
    return float(_gumbel_max(scale).map(float(sensitivity)))


def exponential_mechanism(scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
    """Index i chosen with probability ∝ exp(ε·scores[i] / (2Δ)); costs ε²/8 ρ.

    `scores` must be finite; `sensitivity` Δ bounds how much any one score changes
    when one privacy unit is added or removed (k rows: k times a record's bound).
    """
    values = np.asarray(scores, dtype=np.float64).ravel()
    if values.size == 0:
        raise ValueError("no candidates to select from")
    if not np.all(np.isfinite(values)):
        raise ValueError("scores must be finite")
    epsilon = float(epsilon)
    sensitivity = float(sensitivity)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be positive and finite")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError("sensitivity must be positive and finite")
    if values.size == 1:
        return 0
    measurement = _checked_measurement(epsilon, sensitivity)
    return int(measurement(values.tolist()))


@lru_cache(maxsize=1024)
def _checked_measurement(epsilon: float, sensitivity: float) -> Any:
    """The cached measurement for (ε, Δ), after checking OpenDP's map against our ε²/8."""
    measurement = _gumbel_max(2.0 * sensitivity / epsilon)
    # OpenDP rounds its map upward; it must not charge more than our accounting by more
    # than float rounding, or our ledger would under-count.
    opendp_rho = float(measurement.map(sensitivity))
    charged = rho_exponential(epsilon)
    if opendp_rho > charged * (1.0 + 1e-9):
        raise BudgetOverspent(
            f"OpenDP charges {opendp_rho} for a selection we account as {charged}"
        )
    return measurement
