"""Where a value lies within its bin: the public intervals of a binned attribute's codes,
and each value's position in its bin as a fraction on a fixed public grid.

A binned attribute (numeric, or integer with bins of several integers) keeps only each
row's code. Its within-bin means are measured from the fraction of the way each value
lies between its bin's low and high ends, `(x − low) / (high − low)` ∈ [0, 1], rounded
to the nearest multiple of 1/`GRID` (halves up: deterministic): the release sums
integers, so that OpenDP's exact discrete samplers can add its noise. For an integer
bin `low..high` (both included), `high − low` is its span of integers, so the mean
`low + (high − low) · fraction` is exact for every value of the bin.

Pure numpy: the ingest stores the fractions at upload, the engines compute them for
registered sources, and the answers turn noisy fraction sums back into means.
"""

from __future__ import annotations

import numpy as np

from app.schema.attribute import Attribute

# Fractions are multiples of 1/GRID: 2¹⁶ steps, so a value's rounding moves its mean by
# at most (high − low) / 2¹⁷, far below any noise, while a bin's sum stays an int64.
GRID = 1 << 16


def is_binned(attribute: Attribute) -> bool:
    """Whether a code of the attribute holds more than one value (numeric, or integer
    with bins wider than one integer)."""
    return attribute.kind != "categorical" and attribute.is_binned


def code_intervals(attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """Each value code's (low, high) ends (float64, `value_size` entries each): a numeric
    bin's edges, an integer bin's first and last integer. ValueError for an attribute
    whose codes are not bins."""
    if not is_binned(attribute):
        raise ValueError(f"attribute {attribute.name!r} is not binned")
    lows, highs, _closed = attribute.intervals()
    return lows.copy(), highs.copy()


def quantized_fractions(attribute: Attribute, values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each row's fraction within its bin in units of 1/GRID (uint32, 0..GRID).

    `codes` are the rows' stored codes (which decide the bin), `values` their numbers
    (NaN where there is none). A value clamped into the first or last bin (`clip`) lies
    at its end (0 or GRID); the missing code, or no number, counts 0.
    """
    lows, highs = code_intervals(attribute)
    codes = np.asarray(codes, dtype=np.int64)
    x = np.asarray(values, dtype=np.float64)
    has_value = (codes >= 0) & (codes < attribute.value_size) & np.isfinite(x)
    out = np.zeros(codes.shape, dtype=np.uint32)
    if not has_value.any():
        return out
    bin_codes = codes[has_value]
    low = lows[bin_codes]
    width = highs[bin_codes] - low
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(width > 0, (x[has_value] - low) / width, 0.0)
    fraction = np.clip(fraction, 0.0, 1.0)
    out[has_value] = np.floor(fraction * GRID + 0.5).astype(np.uint32)
    return out


def fraction_sums(size: int, codes: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Per code (`size` of them, int64): the sum of its rows' quantized fractions (the
    missing code's is 0). Exact: bincount's float64 weights hold integers exactly while
    a bin's sum stays below 2⁵³, that is for fewer than 2³⁷ rows."""
    weights = np.asarray(fractions, dtype=np.float64)
    sums = np.bincount(np.asarray(codes, dtype=np.int64), weights=weights, minlength=size)
    return np.rint(sums).astype(np.int64)
