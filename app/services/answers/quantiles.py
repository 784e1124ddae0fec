"""Quantiles of one attribute from the model's one-way marginal (free: post-processing).

`GET /quantiles?attr=a&p=0.5,0.9`: each p-quantile and MIN and MAX, with the interval
of the bin (or integers) it lies in — `app.sql.quantiles` places them, as SQL's MEDIAN,
PERCENTILE_CONT, MIN and MAX do. Records without a value of the attribute are left out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.pgm.elimination import InferenceTooLarge
from app.schema import SchemaError
from app.services.answers.bin_values import bin_values
from app.services.answers.common import (
    MAX_INFERENCE_CELLS,
    WorkSize,
    attribute_of,
    invalid,
    too_large,
    untouched_note,
)
from app.services.models import LoadedModel
from app.sql.quantiles import (
    MIN_MAX_COUNT,
    CodeIntervals,
    Quantile,
    code_intervals,
    extreme,
    with_means,
)
from app.sql.quantiles import quantile as quantile_of

DEFAULT_FRACTIONS = (0.25, 0.5, 0.75)
MAX_FRACTIONS = 101


def parse_fractions(text: str | None) -> list[float]:
    """`p=0.5,0.9`: fractions from 0 to 1 (the quartiles when omitted)."""
    if text is None or not text.strip():
        return list(DEFAULT_FRACTIONS)
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > MAX_FRACTIONS:
        raise invalid("p", f"at most {MAX_FRACTIONS} fractions, got {len(parts)}")
    fractions = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise invalid("p", f"{part[:40]!r} is not a number (give fractions 0 to 1)") from None
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise invalid("p", f"{part[:40]} is outside [0, 1]: give fractions from 0 to 1")
        fractions.append(value)
    return fractions


def _number(value: float, integer: bool) -> float | int:
    return round(value) if integer else value


def _shown(found: Quantile | None, intervals: CodeIntervals) -> dict[str, Any] | None:
    if found is None:
        return None
    integer = intervals.integer
    return {
        "value": _number(found.value, integer),
        "bin": [_number(found.low, integer), _number(found.high, integer)],
    }


def quantiles_size(loaded: LoadedModel, attr: str) -> WorkSize:
    """Check the attribute (422 unknown or categorical) and size the marginal's work."""
    attribute = attribute_of(loaded.schema, attr, "attr")
    if attribute.kind == "categorical":
        raise invalid(
            "attr",
            f"{attribute.name!r} is categorical: its values have no order to take quantiles "
            "in (quantiles need a numeric or integer attribute)",
        )
    try:
        plan = loaded.model.plan([attribute.name], max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "attr") from None
    return WorkSize(attribute.size, plan.max_intermediate_cells, plan.work)


def quantiles_answer(loaded: LoadedModel, attr: str, fractions: list[float]) -> dict[str, Any]:
    """Each p-quantile, MIN and MAX of `attr` with the bin each lies in."""
    quantiles_size(loaded, attr)
    attribute = loaded.schema.attribute(attr)
    try:
        intervals = code_intervals(attribute)
    except SchemaError as error:
        raise invalid("attr", str(error)) from None
    representative = bin_values(loaded, attribute.name, parameter="attr")
    if representative.method == "within-bin means":  # spread within a bin by its mean
        intervals = with_means(intervals, representative.values[: len(intervals)])
    try:
        counts = loaded.model.marginal([attribute.name], max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "attr") from None
    values = np.maximum(np.asarray(counts, dtype=float).ravel(), 0.0)[: len(intervals)]
    answers = []
    for p in fractions:
        found = _shown(quantile_of(values, intervals, p), intervals)
        answers.append({"p": p, **(found or {"value": None, "bin": None})})
    _, note = untouched_note(loaded, [attribute.name])
    return {
        "attribute": attribute.name,
        "quantiles": answers,
        "min": _shown(extreme(values, intervals, highest=False), intervals),
        "max": _shown(extreme(values, intervals, highest=True), intervals),
        "count": float(values.sum()),
        "min_max_count": MIN_MAX_COUNT,
        "model_version": loaded.version,
        "note": note,
    }
