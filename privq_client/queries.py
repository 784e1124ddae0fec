"""Questions in Python terms, turned into the service's: count filters and factored queries.

A filter on an attribute is one of
- a value or a collection of values: `"F"`, `["F", "M"]`, `{1, 2}`;
- a range on original values: `{"ge": 30, "lt": 45}` (45 excluded) or `{"ge": 30,
  "le": 120}` (120 included: the last bin [eₙ₋₁, eₙ] is closed, so `le` at its top
  edge takes it whole); either end may be left out.

`count` sends them as `where=sex:F,M` / `where=age:30..45` / `where=age:30..=120`; a
factored query takes them as they are in its `where`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Label = str | int | float | None  # None: the missing value (JSON null)
Range = Mapping[str, float | int | None]
Condition = Label | Sequence[Label] | set[Label] | frozenset[Label] | Range
Filters = Mapping[str, Condition]
RANGE_KEYS = frozenset({"ge", "lt", "le"})


def _is_range(condition: object) -> bool:
    return isinstance(condition, Mapping)


def _range(name: str, condition: Range) -> dict[str, float | None]:
    unknown = set(condition) - RANGE_KEYS
    if unknown or not condition or {"lt", "le"} <= set(condition):
        raise ValueError(
            f"the range on {name!r} takes the keys 'ge' and 'lt' (excluded) or 'le' "
            f"(included), got {sorted(condition)}"
        )
    return {key: (None if value is None else float(value)) for key, value in condition.items()}


def _values(name: str, condition: Condition) -> list[Label]:
    if condition is None or isinstance(condition, str | int | float):
        return [condition]
    values = sorted(condition, key=str) if isinstance(condition, set | frozenset) else condition
    listed = list(values)
    if not listed:
        raise ValueError(f"the filter on {name!r} names no value")
    for value in listed:
        # None is the missing value of an attribute with "missing": true (JSON null).
        if value is not None and not isinstance(value, str | int | float):
            raise TypeError(f"a value of {name!r} must be a str, int, float or None, got {value!r}")
    return listed


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def count_filters(where: Filters | None) -> dict[str, str]:
    """Each attribute's `where` text after the colon: `F,M`, `30..45` or `30..=120`."""
    texts: dict[str, str] = {}
    for name, condition in (where or {}).items():
        if _is_range(condition):
            bounds = _range(name, condition)  # type: ignore[arg-type]
            high = f"={_number(bounds['le'])}" if "le" in bounds else _number(bounds.get("lt"))
            texts[name] = f"{_number(bounds.get('ge'))}..{high}"
            continue
        labels = ["null" if value is None else str(value) for value in _values(name, condition)]
        for label in labels:
            # A bin label "[0, 18)" keeps its comma (the service reads brackets); any
            # other comma would split the value.
            if "," in label and not label.startswith("["):
                raise ValueError(
                    f"the value {label!r} of {name!r} holds a comma, which /count cannot "
                    "take; ask query(where=...) instead"
                )
        texts[name] = ",".join(labels)
    return texts


def count_params(where: Filters | None) -> list[str]:
    """The repeated `where=` parameters of `GET /count`."""
    return [f"{name}:{text}" for name, text in count_filters(where).items()]


def query_where(where: Filters | None) -> dict[str, Any]:
    """A factored query's `where`: value lists and `{"ge", "lt" or "le"}` ranges."""
    body: dict[str, Any] = {}
    for name, condition in (where or {}).items():
        if _is_range(condition):
            bounds = _range(name, condition)  # type: ignore[arg-type]
            body[name] = {key: value for key, value in bounds.items() if value is not None}
        else:
            body[name] = _values(name, condition)
    return body


def query_by(by: Mapping[str, Any] | None) -> dict[str, Any]:
    """`by` axes: "value", "cdf", or named groups (`{"groups": {...}}` or the groups alone)."""
    body: dict[str, Any] = {}
    for name, how in (by or {}).items():
        if isinstance(how, str):
            body[name] = how
        elif isinstance(how, Mapping):
            groups = how["groups"] if set(how) == {"groups"} else how
            body[name] = {"groups": {str(g): list(values) for g, values in groups.items()}}
        else:
            raise TypeError(
                f"by[{name!r}] must be 'value', 'cdf' or a mapping of groups, got {how!r}"
            )
    return body


def factored_query(
    *,
    where: Filters | None = None,
    by: Mapping[str, Any] | None = None,
    weights: Mapping[str, Sequence[float]] | None = None,
    moments: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """One factored query's JSON (Private-PGM appendix B), parts left out when empty."""
    query: dict[str, Any] = {}
    if where:
        query["where"] = query_where(where)
    if by:
        query["by"] = query_by(by)
    if weights:
        query["weights"] = {name: [float(w) for w in row] for name, row in weights.items()}
    if moments:
        query["moments"] = {name: int(order) for name, order in moments.items()}
    return query
