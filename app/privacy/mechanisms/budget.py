"""Budget of a mechanism run: what a round costs, how a round's ρ is split, and the ledger.

A round measures one marginal with Gaussian noise σ and (in a "select+measure" round)
selects it with the exponential mechanism at ε, so it costs k²/(2σ²) + ε²/8, where k
is the marginal's sensitivity: the rows one privacy unit may hold (1 when a unit is a
record). The selection's ε keeps its meaning at any k: its scores' sensitivity is
multiplied by k instead (`engine.MechanismRun.select`).
`round_cost` is that cost in floats (from `app.privacy.accounting`), for the running
ledger; `exact_round_cost` is the exact rational cost of the same floats, for the
service's charge and its final check.

Costs are summed with `math.fsum` (exactly rounded), and the round that ends a run is
solved for exactly the remaining ρ, then nudged so that its floating-point cost never
exceeds it (`split_round`). `RhoLedger.spend` refuses (BudgetOverspent) a sum above
the charge by more than a relative 1e-12 (float rounding only).
"""

from __future__ import annotations

import math
from fractions import Fraction

from app.privacy.accounting import (
    BudgetOverspent,
    check_sensitivity,
    exact_rho_exponential,
    exact_rho_gaussian,
    rho_exponential,
    rho_gaussian,
)

# Relative slack allowed between the summed float costs and the charge.
LEDGER_RTOL = 1e-12


def round_cost(sigma: float, epsilon: float, sensitivity: int = 1) -> float:
    """ρ of one round: Gaussian measurement (σ, sensitivity k) plus, if ε > 0, one selection."""
    measure = rho_gaussian(sigma, check_sensitivity(sensitivity))
    return measure + (rho_exponential(epsilon) if epsilon > 0 else 0.0)


def exact_round_cost(sigma: float, epsilon: float, sensitivity: int = 1) -> Fraction:
    """The exact ρ of a round from the floats it used: k²/(2σ²) + ε²/8 (ε = 0: no selection)."""
    cost = exact_rho_gaussian(sigma, 1, sensitivity)
    if epsilon > 0:
        cost += exact_rho_exponential(epsilon)
    return cost


class RhoLedger:
    """Exactly-rounded running sum of round costs, never allowed above the charge."""

    def __init__(self, charged: float) -> None:
        if not (charged > 0 and math.isfinite(charged)):
            raise ValueError("the charged ρ must be positive and finite")
        self.charged = float(charged)
        self._costs: list[float] = []

    @property
    def used(self) -> float:
        return math.fsum(self._costs)

    @property
    def remaining(self) -> float:
        return max(self.charged - self.used, 0.0)

    def fits(self, cost: float) -> bool:
        return math.fsum([*self._costs, cost]) <= self.charged

    def spend(self, cost: float) -> None:
        self._costs.append(float(cost))
        used = self.used
        # The invariant of the mechanisms: a run never spends more than its charge.
        if used > self.charged * (1.0 + LEDGER_RTOL):
            raise BudgetOverspent(
                f"mechanism would spend {used!r} ρ but was charged {self.charged!r}"
            )


def split_round(
    rho_round: float, measure_share: float, sensitivity: int = 1
) -> tuple[float, float]:
    """(σ, ε) spending `rho_round`: share α on the Gaussian, 1 − α on the selection; σ is
    k times what a record-level round gets (k = `sensitivity`), ε is the same.

    Float rounding can make k²/(2σ²) + ε²/8 exceed `rho_round` by an ulp; σ is nudged up
    (and ε down) until it does not, so a run that ends on such a round spends at most
    its charge.
    """
    sigma = check_sensitivity(sensitivity) * math.sqrt(1.0 / (2.0 * measure_share * rho_round))
    epsilon = math.sqrt(8.0 * (1.0 - measure_share) * rho_round)
    for _ in range(64):
        if round_cost(sigma, epsilon, sensitivity) <= rho_round:
            break
        sigma = math.nextafter(sigma, math.inf)
        epsilon = math.nextafter(epsilon, 0.0)
    return sigma, epsilon
