"""Values in a request's own terms → codes: `where` filters, value lists and ranges.

A range that cuts a bin (`age:30..37` with a bin [35, 40)) keeps a share of the bin's
records — its count spread uniformly within it — and says so: `range_shares` gives the
weights per code and the codes kept wholly and in part (the answer's bounds)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.schema import Attribute, DatasetSchema, SchemaError
from app.services.answers.common import attribute_of, invalid
from app.sql.quantiles import CodeIntervals, code_intervals, with_means
from app.sql.spread import share_below

# The missing code in a query string's value list (`where=income:null`).
NULL_TEXT = "null"


def _split_values(attribute: Attribute, text: str) -> list[str]:
    """Comma-separated values; bin labels ("[0, 18)") keep their inner comma."""
    if not attribute.is_binned:
        return [part.strip() for part in text.split(",")]
    parts: list[str] = []
    current: list[str] = []
    inside_bin = False
    for character in text:
        if character == "[":
            inside_bin = True
        elif character in ")]":
            inside_bin = False
        if character == "," and not inside_bin:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    parts.append("".join(current).strip())
    return parts


def _parse_bound(text: str, parameter: str, attribute: Attribute) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise invalid(
            parameter, f"range bound {text!r} of {attribute.name!r} is not a number"
        ) from None
    if math.isnan(value):
        raise invalid(parameter, f"range bound of {attribute.name!r} is not a number")
    return value


def codes_in_range(
    attribute: Attribute,
    ge: float | None,
    lt: float | None,
    parameter: str,
    le: float | None = None,
) -> np.ndarray:
    if ge is None and lt is None and le is None:
        raise invalid(parameter, f"the range on {attribute.name!r} needs a lower or upper bound")
    try:
        return attribute.codes_in_range(ge, lt, le=le)
    except SchemaError as error:
        raise invalid(parameter, str(error)) from None


def codes_of_labels(attribute: Attribute, labels: Sequence[object], parameter: str) -> np.ndarray:
    if not labels:
        raise invalid(parameter, f"give at least one value of {attribute.name!r}")
    try:
        return attribute.encode_labels(labels)
    except SchemaError as error:
        raise invalid(parameter, str(error)) from None


def parse_where(
    schema: DatasetSchema, text: str, *, parameter: str = "where"
) -> tuple[str, np.ndarray]:
    """`attr:v1,v2` (a value set), `attr:lo..hi` (from lo up to hi, hi excluded) or
    `attr:lo..=hi` (hi included) → (attribute, codes).

    `null` among the values is the missing code of an attribute with `missing`."""
    name, separator, rest = text.partition(":")
    if not separator:
        raise invalid(
            parameter,
            f"expected attr:value1,value2 or attr:lo..hi, got {text[:60]!r}",
        )
    attribute = attribute_of(schema, name.strip(), parameter)
    rest = rest.strip()
    if attribute.kind != "categorical" and ".." in rest:
        low, _, high = rest.partition("..")
        ge = _parse_bound(low, parameter, attribute)
        if high.startswith("="):  # lo..=hi: hi included
            le = _parse_bound(high[1:], parameter, attribute)
            return attribute.name, codes_in_range(attribute, ge, None, parameter, le)
        lt = _parse_bound(high, parameter, attribute)
        return attribute.name, codes_in_range(attribute, ge, lt, parameter)
    values = _split_values(attribute, rest) if rest else []
    if any(not v for v in values):
        raise invalid(parameter, f"empty value in the list for {attribute.name!r}")
    return attribute.name, codes_of_labels(attribute, _nulls(attribute, values), parameter)


def _nulls(attribute: Attribute, values: list[str]) -> list[str | None]:
    """`null` in a query string is the missing code (None), unless the attribute has a
    value spelled "null" itself (then that value wins)."""
    if not attribute.missing or NULL_TEXT in (attribute.values or ()):
        return list(values)
    return [None if value == NULL_TEXT else value for value in values]


@dataclass(frozen=True)
class WhereWeights:
    """A `where` filter on one attribute as weights per code (the share of each code's
    records it keeps: a bin a range cuts is spread uniformly within it), and the codes it
    keeps wholly (`lower`) and in part or wholly (`upper`): the bounds of a cut answer."""

    attribute: str
    weights: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @property
    def approximate(self) -> bool:
        return not np.array_equal(self.lower, self.upper)


def range_shares(
    attribute: Attribute,
    ge: float | None,
    lt: float | None,
    parameter: str,
    le: float | None = None,
    means: np.ndarray | None = None,
) -> WhereWeights:
    """The half-open range [ge, lt) (or closed [ge, le]) on original values, per code:
    the share of the code's values inside it (bins spread uniformly, an integer bin over
    its integers; with measured within-bin `means`, by each bin's mean as SQL does,
    `app.sql.spread`). A bin the range holds part of is cut — the closed last bin
    `[a, b]` is cut by `lt: b`."""
    if lt is not None and le is not None:
        raise invalid(parameter, f"the range on {attribute.name!r}: give lt or le, not both")
    if le is not None:
        if ge is not None and not ge <= le:
            raise invalid(
                parameter,
                f"attribute {attribute.name!r}: empty range, ge ({ge}) must be at most le ({le})",
            )
        return _closed_range_shares(attribute, ge, float(le), parameter, means)
    if ge is None and lt is None:
        raise invalid(parameter, f"the range on {attribute.name!r} needs a lower or upper bound")
    if ge is not None and lt is not None and not ge < lt:
        raise invalid(
            parameter,
            f"attribute {attribute.name!r}: empty range, ge ({ge}) must be less than lt ({lt})",
        )
    if attribute.kind == "categorical":
        raise invalid(
            parameter,
            f"attribute {attribute.name!r} is categorical: give a set of values, not a range",
        )
    intervals = _spread_intervals(attribute, means)
    low_end = -math.inf if ge is None else float(ge)
    high_end = math.inf if lt is None else float(lt)
    weights = np.zeros(attribute.size)
    lower = np.zeros(attribute.size, dtype=bool)
    upper = np.zeros(attribute.size, dtype=bool)
    last = len(intervals) - 1
    for code in range(len(intervals)):
        low, high = float(intervals.low[code]), float(intervals.high[code])
        if intervals.integer:  # the integers low..high in [ge, lt)
            first = low if low_end == -math.inf else max(low, math.ceil(low_end))
            final = high if high_end == math.inf else min(high, math.ceil(high_end) - 1)
            inside = max(0.0, final - first + 1)
            weights[code] = _share(intervals, code, first - 0.5, first - 0.5 + inside)
            lower[code] = inside == high - low + 1
            upper[code] = inside > 0
            continue
        closed = code == last
        start = max(low, low_end)
        weights[code] = _share(intervals, code, start, max(start, min(high, high_end)))
        lower[code] = low_end <= low and (high < high_end if closed else high <= high_end)
        upper[code] = low < high_end and (low_end <= high if closed else low_end < high)
    return WhereWeights(attribute.name, weights, np.flatnonzero(lower), np.flatnonzero(upper))


def _spread_intervals(attribute: Attribute, means: np.ndarray | None) -> CodeIntervals:
    intervals = code_intervals(attribute)
    return intervals if means is None else with_means(intervals, means)


def _share(intervals: CodeIntervals, code: int, start: float, end: float) -> float:
    """The share of a code's records between `start` and `end` on its axis."""
    low, high = intervals.axis(code)
    if high <= low:
        return 1.0
    k = intervals.slope(code)
    return share_below(k, (end - low) / (high - low)) - share_below(k, (start - low) / (high - low))


def _closed_range_shares(
    attribute: Attribute,
    ge: float | None,
    le: float,
    parameter: str,
    means: np.ndarray | None = None,
) -> WhereWeights:
    """`range_shares` of [ge, le]: the values up to and including `le`."""
    if attribute.kind == "categorical":
        raise invalid(
            parameter,
            f"attribute {attribute.name!r} is categorical: give a set of values, not a range",
        )
    intervals = _spread_intervals(attribute, means)
    low_end = -math.inf if ge is None else float(ge)
    weights = np.zeros(attribute.size)
    lower = np.zeros(attribute.size, dtype=bool)
    upper = np.zeros(attribute.size, dtype=bool)
    for code in range(len(intervals)):
        low, high = float(intervals.low[code]), float(intervals.high[code])
        if intervals.integer:
            first = low if low_end == -math.inf else max(low, math.ceil(low_end))
            final = min(high, math.floor(le))
            inside = max(0.0, final - first + 1)
            weights[code] = _share(intervals, code, first - 0.5, first - 0.5 + inside)
            lower[code] = inside == high - low + 1
            upper[code] = inside > 0
            continue
        start = max(low, low_end)
        weights[code] = _share(intervals, code, start, max(start, min(high, le)))
        lower[code] = low_end <= low and high <= le
        upper[code] = low <= le and low_end < high
    return WhereWeights(attribute.name, weights, np.flatnonzero(lower), np.flatnonzero(upper))


def parse_where_weights(
    schema: DatasetSchema,
    texts: Sequence[str],
    means_of: Callable[[str], np.ndarray | None] | None = None,
) -> list[WhereWeights]:
    """Repeated `where` filters (`attr:v1,v2`, `attr:lo..hi`) per attribute, intersected
    (ranges on one attribute meet in one range), as weights over its codes; `means_of`
    gives an attribute's measured within-bin means (None: none), which spread a cut bin."""
    # Per attribute: (ge, upper end, whether the upper end is included: `lo..=hi`).
    ranges: dict[str, tuple[float | None, float | None, bool]] = {}
    sets: dict[str, np.ndarray] = {}
    order: list[str] = []
    for text in texts:
        name, separator, rest = text.partition(":")
        attribute = attribute_of(schema, name.strip(), "where") if separator else None
        if attribute is not None and attribute.kind != "categorical" and ".." in rest:
            low, _, high = rest.strip().partition("..")
            closed = high.startswith("=")
            ge = _parse_bound(low, "where", attribute)
            upper = _parse_bound(high[1:] if closed else high, "where", attribute)
            if ge is None and upper is None:
                raise invalid(
                    "where", f"the range on {attribute.name!r} needs a lower or upper bound"
                )
            old_ge, old_upper, old_closed = ranges.get(attribute.name, (None, None, False))
            if upper is None or (old_upper is not None and old_upper < upper):
                upper, closed = old_upper, old_closed
            elif old_upper is not None and old_upper == upper:
                closed = closed and old_closed
            ranges[attribute.name] = (
                ge if old_ge is None else (old_ge if ge is None else max(ge, old_ge)),
                upper,
                closed,
            )
            name = attribute.name
        else:
            name, codes = parse_where(schema, text)
            sets[name] = np.intersect1d(sets[name], codes) if name in sets else codes
        if name not in order:
            order.append(name)
    found = []
    for name in order:
        attribute = schema.attribute(name)
        if name in ranges:
            ge, upper, closed = ranges[name]
            meet = ge is None or upper is None or (ge <= upper if closed else ge < upper)
            if not meet:  # ranges that never meet
                empty = np.zeros(0, dtype=np.int64)
                shares = WhereWeights(name, np.zeros(attribute.size), empty, empty)
            else:
                means = means_of(name) if means_of is not None else None
                lt, le = (None, upper) if closed else (upper, None)
                shares = range_shares(attribute, ge, lt, "where", le, means)
        else:
            everything = np.arange(attribute.size)
            shares = WhereWeights(name, np.ones(attribute.size), everything, everything)
        if name in sets:
            keep = np.zeros(attribute.size)
            keep[sets[name]] = 1.0
            shares = WhereWeights(
                name,
                shares.weights * keep,
                np.intersect1d(shares.lower, sets[name]),
                np.intersect1d(shares.upper, sets[name]),
            )
        found.append(shares)
    return found
