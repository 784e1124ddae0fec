"""Representative values: the number each code of an attribute stands for in a moment,
SUM, AVG, VAR or STDDEV answer, how it was chosen, and the interval the code holds.

Every such answer takes its numbers from `bin_values`:

- an integer attribute of width 1 (one integer per code): "exact" — the code's value;
- a binned attribute (numeric, or integer with width > 1): "within-bin means" when a
  measurement of them covers the attribute (`measured_means`), else "midpoint" — the
  middle of each bin. A measured mean is kept inside its bin, so every estimate lies
  within the bounds the bins' edges give (`app.pgm.bin_bounds`).

A numeric bin is [eᵢ, eᵢ₊₁) (the last [eₙ₋₁, eₙ]); its interval for bounds is the
closed [eᵢ, eᵢ₊₁], which contains it. An integer bin holds the integers low … high.
"""

from __future__ import annotations

import numpy as np

from app.pgm.bin_bounds import BinValues
from app.schema import Attribute, SchemaError
from app.services.answers.common import attribute_of, invalid
from app.services.models import LoadedModel
from app.services.within_bin_means import MIN_COUNT, means_from

__all__ = [
    "BinValues",
    "attribute_bin_values",
    "bin_values",
    "code_intervals",
    "is_binned",
    "measured_means",
    "spread_means",
]


def is_binned(attribute: Attribute) -> bool:
    """Whether a code of the attribute holds more than one value."""
    return attribute.kind != "categorical" and attribute.is_binned


def code_intervals(attribute: Attribute) -> tuple[np.ndarray, np.ndarray]:
    """Per code with a value, the least and greatest value it holds (`value_size` each)."""
    if attribute.kind == "categorical":
        raise SchemaError(
            f"attribute {attribute.name!r} is categorical and has no numeric value (moments "
            "and sums need a numeric or integer attribute)"
        )
    lows, highs, _closed = attribute.intervals()
    return lows.copy(), highs.copy()


def attribute_bin_values(attribute: Attribute, means: np.ndarray | None = None) -> BinValues:
    """The representative values of one attribute's codes: exact, measured within-bin
    means (one per code with a value; NaN where a bin has none), or midpoints."""
    low, high = code_intervals(attribute)
    if is_binned(attribute):
        values = (low + high) / 2.0
        method = "midpoint"
        if means is not None:
            measured = np.asarray(means, dtype=np.float64)
            if measured.shape != values.shape:
                raise ValueError(
                    f"within-bin means of {attribute.name!r} need {values.size} entries, "
                    f"got {measured.size}"
                )
            usable = np.isfinite(measured)
            values = np.where(usable, np.clip(measured, low, high), values)
            method = "within-bin means"
    else:
        values = low.copy()
        high = low.copy()
        method = "exact"
    if attribute.missing:
        values, low, high = (np.append(array, np.nan) for array in (values, low, high))
    return BinValues(values=values, method=method, low=low, high=high)


def measured_means(loaded: LoadedModel, attribute: Attribute) -> np.ndarray | None:
    """The measured within-bin means of a binned attribute for this model version (one
    per code with a value), or None when none are measured: from the releases the
    version covers and the model's own count of each bin
    (`app.services.within_bin_means.means_from`; NaN — the midpoint — where a bin's
    count is below one row)."""
    released = loaded.within_bins.get(attribute.name)
    if released is None:
        return None
    low, high = code_intervals(attribute)
    counts = np.asarray(loaded.model.marginal((attribute.name,)), dtype=np.float64)
    counts = counts[: attribute.value_size]
    means = means_from(low, high, released.sums, counts)
    return np.where(counts >= MIN_COUNT, means, np.nan)


def spread_means(loaded: LoadedModel, name: str) -> np.ndarray | None:
    """The measured within-bin means of a binned attribute (one per code with a value),
    which spread a bin's records within it (`app.sql.spread`); None without them."""
    attribute = loaded.schema.attribute(name)
    if not is_binned(attribute):
        return None
    found = bin_values(loaded, name)
    if found.method != "within-bin means":
        return None
    return found.values[: attribute.value_size]


def bin_values(loaded: LoadedModel, name: str, *, parameter: str = "attribute") -> BinValues:
    """The representative values of attribute `name` of a loaded model's dataset
    (an unknown or categorical attribute is a 422 naming `parameter`)."""
    attribute = attribute_of(loaded.schema, name, parameter)
    means = measured_means(loaded, attribute) if is_binned(attribute) else None
    try:
        return attribute_bin_values(attribute, means)
    except SchemaError as error:
        raise invalid(parameter, str(error)) from None
