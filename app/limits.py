"""Limits: the documented range of every number and text a client may give, and why.

Plain constants and checks with no dependencies, shared by the API's validated types
(`app.api.types`), the services (which check again for callers other than the API)
and the fit (which refuses stored measurements outside them).

ρ: ledger amounts are BigInteger counts of 10⁻¹² ρ. `MAX_RHO` (one grant, one
rho_total, one request, and the grants of one dataset together) keeps every amount and
every sum of a dataset's amounts within a signed 64-bit integer (10⁶ ρ is 10¹⁸ units;
2⁶³ − 1 ≈ 9.2·10¹⁸), on PostgreSQL and in SQLite's integer SUM alike.

Noise scales (σ of the Gaussian, b of the Laplace): noisy counts are stored as int64 and
fitted as float64, where integers are exact up to 2⁵³ ≈ 9·10¹⁵. A table holds at most
~2⁴⁰ records (a terabyte of CSV), and a discrete Gaussian or Laplace draw beyond 4,000
times its scale has probability below e⁻⁴⁰⁰⁰; so with `MAX_NOISE_SCALE` = 10¹² every
noisy count is an exact float with room to spare, and σ² ≤ 10²⁴ and 1/(2σ²) ≥ 5·10⁻²⁵
are normal floats. `MIN_NOISE_SCALE` = 10⁻³ costs 5·10⁵ ρ per marginal: below it, one
marginal would cost more than a grant can hold, and 1/(2σ²) heads for overflow.
"""

from __future__ import annotations

import math
import re

MAX_RHO = 1_000_000.0
# ε accepted in place of ρ (converted at the given δ; the ρ must still be ≤ MAX_RHO).
MAX_EPSILON = 1_000_000.0
# δ of (ε, δ): below 1e-300 it is subnormal (log(1/δ), and so ε, overflows). Above
# the service's maximum (`PRIVQ_MAX_DELTA`, default DEFAULT_MAX_DELTA) it is refused:
# an (ε, δ) guarantee allows a total failure with probability δ — releasing a record
# outright — so δ must be far below 1/n; 1e-3 is already generous.
MIN_DELTA = 1e-300
DEFAULT_MAX_DELTA = 1e-3
MIN_NOISE_SCALE = 1e-3
MAX_NOISE_SCALE = 1e12
# A scale derived from ρ may be a little below MIN_NOISE_SCALE (ρ = 10⁶ on one marginal
# gives σ ≈ 7·10⁻⁴); a fit weighs any scale from here up (1/σ² ≤ 10¹²).
MIN_FITTABLE_SCALE = 1e-6
# Noisy counts beyond this magnitude are not exact float64 integers: such a stored
# measurement (e.g. from before these limits) cannot be fitted and is quarantined.
MAX_EXACT_COUNT = 2**53
# Query weights: |w| · (a count ≤ 2⁵³) · (cells ≤ 10⁷) stays far below float overflow.
MAX_QUERY_WEIGHT = 1e12
# Original values on a numeric attribute's scale (range ends, numeric labels).
MAX_COORDINATE = 1e15
# Counts in answers (a marginal's cells, SQL's COUNT) are rounded to this many decimals:
# thousandths of a record, far below any measurement's noise.
COUNT_DECIMALS = 3
# A JSON document sent as a form field (a schema, a privacy unit), in characters.
MAX_JSON_FIELD_CHARS = 1 << 20
# Request bodies: JSON nesting deeper than this is refused before it is parsed.
MAX_JSON_DEPTH = 32
MAX_NAME_LENGTH = 200
MAX_ID_LENGTH = 64
MAX_IDEMPOTENCY_KEY_LENGTH = 200


def format_limit(value: float) -> str:
    """A limit as people write it: 1000000 → "1e6", 0.001 → "1e-3", 200 → "200"."""
    if value == int(value) and abs(value) < 1e5:
        return str(int(value))
    exponent = math.floor(math.log10(abs(value)))
    mantissa = value / 10**exponent
    if math.isclose(mantissa, round(mantissa)):
        mantissa_text = str(round(mantissa))
        return f"1e{exponent}" if mantissa_text == "1" else f"{mantissa_text}e{exponent}"
    return repr(value)


# Unicode category Cc is exactly U+0000–U+001F and U+007F–U+009F; Cs is U+D800–U+DFFF.
_CONTROL_OR_SURROGATE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def control_character(text: str) -> str | None:
    """The first control character (Unicode Cc) or lone surrogate (Cs) in `text`, if any.

    Such characters are refused in every name, id, header and label: PostgreSQL cannot
    store NUL, surrogates cannot be encoded, and the others only serve to hide things in
    logs and listings.
    """
    found = _CONTROL_OR_SURROGATE.search(text)
    return None if found is None else found.group()


# JSON's own whitespace between tokens (RFC 8259): tab, line feed, carriage return, space.
_CONTROL_OUTSIDE_JSON_WHITESPACE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def json_control_character(text: str) -> str | None:
    """`control_character` for JSON text: its whitespace (tab, line feed, carriage
    return) separates tokens, so a pretty-printed document passes. JSON itself refuses
    those characters raw inside a string, so no name or value gets one this way (an
    escaped one, "\\n", is refused where names and values are checked)."""
    found = _CONTROL_OUTSIDE_JSON_WHITESPACE.search(text)
    return None if found is None else found.group()


def describe_character(character: str) -> str:
    return f"U+{ord(character):04X}"
