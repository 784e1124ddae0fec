"""Exact ρ amounts: integer counts of pico-ρ units (1 unit = 1e-12 ρ).

Every ρ the service stores or sums is an integer number of units, so budget
arithmetic is exact on every backend: twenty charges of 0.05 are exactly 1.0.

- `rho_units(value, rounding=...)` — a ρ given by a client, with any number of
  digits: a limit (grant, rho_total) is rounded DOWN to the unit, a charge UP, so
  neither ever allows more privacy loss than was asked for; `"exact"` refuses
  anything finer than the unit. Zero, negatives, non-finite values and more than
  `app.limits.MAX_RHO` are refused (422).
- `rho_units_ceil(value)` — a ρ computed by the service (e.g. 1/(2σ²) from a
  client's σ), rounded UP to the next unit so a charge never under-counts the
  privacy loss.
- `rho_units_from_epsilon(epsilon, delta, max_delta=...)` — the ρ whose tight (ε, δ)
  conversion (the one GET /budget reports) does not exceed ε, rounded DOWN to the unit.
- `check_delta(delta, max_delta=...)` — a δ within 1e-300 ≤ δ ≤ the service's maximum
  (`Settings.max_delta`, given by the caller), 422 naming the field and range otherwise.
- `units_to_rho(units)` (float for JSON) and `units_to_decimal_str(units)` (exact).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation
from fractions import Fraction
from numbers import Real
from typing import Literal

from app.errors import InvalidRequest
from app.limits import DEFAULT_MAX_DELTA, MAX_RHO, MIN_DELTA, MIN_NOISE_SCALE, format_limit
from app.privacy.accounting import (
    epsilon_from_rho,
    exact_rho,
    rho_from_epsilon,
    smallest_scale_for_rho,
)

RHO_UNIT_EXPONENT = 12
UNITS_PER_RHO: int = 10**RHO_UNIT_EXPONENT
MAX_RHO_UNITS = int(MAX_RHO) * UNITS_PER_RHO

Rounding = Literal["down", "up", "exact"]


def _as_decimal(value: Decimal | float | str, field: str) -> Decimal:
    if isinstance(value, bool):
        raise InvalidRequest(f"{field} must be a number")
    try:
        # str() of a float is its shortest round-trip decimal: 0.05 stays 0.05.
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidRequest(f"{field} must be a number, got {value!r}") from None
    if not number.is_finite():
        raise InvalidRequest(f"{field} must be finite")
    return number


def _check_units(units: int, field: str, shown: Decimal | float) -> int:
    if units > MAX_RHO_UNITS:
        raise InvalidRequest(
            f"{field} must be at most {format_limit(MAX_RHO)}, got {shown}",
            field=field,
            range=f"0 < {field} ≤ {format_limit(MAX_RHO)}",
        )
    return units


def rho_units(
    value: Decimal | float | str, *, field: str = "rho", rounding: Rounding = "exact"
) -> int:
    """The units in a client-given ρ: rounded down (limits), up (charges) or exact.

    422 unless positive, finite and at most MAX_RHO; with "exact", also unless it is a
    whole number of units; with "down", also if it rounds to nothing.
    """
    number = _as_decimal(value, field)
    if number <= 0:
        raise InvalidRequest(f"{field} must be positive, got {number}", field=field)
    units = number.scaleb(RHO_UNIT_EXPONENT)
    if rounding == "down":
        whole = units.to_integral_value(rounding=ROUND_FLOOR)
        if whole == 0:
            raise InvalidRequest(
                f"{field} is smaller than the ledger's unit of 1e-12: {number}", field=field
            )
    elif rounding == "up":
        whole = units.to_integral_value(rounding=ROUND_CEILING)
    else:
        whole = units.to_integral_value()
        if units != whole:
            raise InvalidRequest(
                f"{field} has more precision than the ledger keeps (1e-12): {number}",
                field=field,
            )
    return _check_units(int(whole), field, number)


def check_delta(delta: float, *, max_delta: float, field: str = "delta") -> float:
    """`delta` if 1e-300 ≤ δ ≤ `max_delta` (the service's maximum); else 422 naming `field`.

    The caller passes the maximum in from its settings (`Settings.max_delta`).
    """
    if (
        not isinstance(delta, bool)
        and isinstance(delta, (int, float))
        and math.isfinite(delta)
        and MIN_DELTA <= delta <= max_delta
    ):
        return float(delta)
    allowed = f"{format_limit(MIN_DELTA)} ≤ delta ≤ {format_limit(max_delta)}"
    raise InvalidRequest(
        f"{field} must be a number with {allowed}: this service allows δ of at most "
        f"{format_limit(max_delta)} (PRIVQ_MAX_DELTA), since (ε, δ)-DP lets a release "
        "fail outright with probability δ",
        field=field,
        range=allowed,
    )


def rho_units_from_epsilon(
    epsilon: float,
    delta: float,
    *,
    field: str = "epsilon",
    delta_field: str = "delta",
    max_delta: float = DEFAULT_MAX_DELTA,
) -> int:
    """Units of the largest ρ whose tight (ε, δ) conversion is at most `epsilon`, rounded down.

    The conversion is the Canonne–Kamath–Steinke bound GET /budget reports; rounding
    down keeps the promise "no more than ε at δ". δ must be within `max_delta`, the
    service's maximum (`check_delta`).
    """
    if isinstance(epsilon, bool) or not math.isfinite(epsilon):
        raise InvalidRequest(f"{field} must be a finite number", field=field)
    if not epsilon > 0:
        raise InvalidRequest(f"{field} must be positive", field=field)
    delta = check_delta(delta, max_delta=max_delta, field=delta_field)
    if epsilon_from_rho(1 / UNITS_PER_RHO, delta) > epsilon:
        raise InvalidRequest(
            f"{field}={epsilon} at delta={delta} allows less than the ledger's unit of ρ (1e-12)",
            field=field,
        )
    try:
        rho = rho_from_epsilon(epsilon, delta)
    except ValueError:  # ε beyond what any ρ ≤ 10¹² reaches
        raise InvalidRequest(
            f"{field}={epsilon} at delta={delta} is more than ρ={format_limit(MAX_RHO)} gives",
            field=field,
        ) from None
    units = math.floor(Fraction(rho) * UNITS_PER_RHO)
    # The bisection's ρ satisfies the bound; the unit below it then does too — but check
    # with the same conversion, so the promise rests on what is reported, not on algebra.
    while units > 0 and epsilon_from_rho(units / UNITS_PER_RHO, delta) > epsilon:
        units -= max(1, units // 10**9)
    if units <= 0:
        raise InvalidRequest(
            f"{field}={epsilon} at delta={delta} allows less than the ledger's unit of ρ (1e-12)",
            field=field,
        )
    return _check_units(units, field, Decimal(units).scaleb(-RHO_UNIT_EXPONENT))


def rho_units_ceil(value: Fraction | Decimal | float, *, field: str = "rho") -> int:
    """Units for a ρ the service computed, rounded up (never under-charge); at least 1."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequest(f"{field} must be finite")
    if isinstance(value, float):
        exact = Fraction(Decimal(str(value)))
    elif isinstance(value, Decimal):
        exact = Fraction(_as_decimal(value, field))
    elif isinstance(value, (Fraction, int, Real)):
        exact = Fraction(value)
    else:
        raise InvalidRequest(f"{field} must be a number")
    if exact <= 0:
        raise InvalidRequest(f"{field} must be positive")
    units: int = math.ceil(exact * UNITS_PER_RHO)
    return max(1, units)


def units_to_decimal(units: int) -> Decimal:
    return Decimal(units).scaleb(-RHO_UNIT_EXPONENT)


def units_to_decimal_str(units: int) -> str:
    """The exact decimal, without exponent or trailing zeros: 50000000000 → "0.05"."""
    text = format(units_to_decimal(units), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def units_to_rho(units: int) -> float:
    """The nearest float, for JSON numbers (exact strings are given alongside)."""
    return float(units_to_decimal(units))


def noise_for_request(
    noise_kind: str,
    rho_units_total: int | None,
    scale: float | None,
    count: int,
    sensitivity: int,
    *,
    max_scale: float,
    items: str,
) -> tuple[float, int]:
    """The noise scale and the charge (ledger units) of `count` equal releases at L1/L2
    `sensitivity`, from exactly one of the charge (`rho_units_total`, split equally: the
    smallest scale within it) and the scale (σ or b, at most `max_scale`; charged its exact
    cost rounded up). 422 naming the field for anything else; `items` names what is
    released in the messages ("marginal(s)")."""
    scale_name = "sigma" if noise_kind == "gaussian" else "scale"
    if (rho_units_total is None) == (scale is None):
        raise InvalidRequest(f"give exactly one of rho or {scale_name}")
    if rho_units_total is not None:
        if not 0 < rho_units_total <= MAX_RHO_UNITS:
            raise InvalidRequest(f"rho must be positive and at most {format_limit(MAX_RHO)}")
        chosen = smallest_scale_for_rho(
            Fraction(rho_units_total, UNITS_PER_RHO), count, sensitivity
        )
        return chosen, rho_units_total
    if not (
        isinstance(scale, (int, float))
        and math.isfinite(scale)
        and MIN_NOISE_SCALE <= scale <= max_scale
    ):
        raise InvalidRequest(
            f"{scale_name} must be a number with {format_limit(MIN_NOISE_SCALE)} ≤ "
            f"{scale_name} ≤ {format_limit(max_scale)}",
            field=scale_name,
        )
    chosen = float(scale)
    units = rho_units_ceil(exact_rho(noise_kind, chosen, count, sensitivity), field=scale_name)
    if units > MAX_RHO_UNITS:
        raise InvalidRequest(
            f"{count} {items} at {scale_name}={chosen} would cost more than "
            f"rho={format_limit(MAX_RHO)}",
            field=scale_name,
        )
    return chosen, units
