"""A schema to start from: a first draft of the public schema, read off a table.

`draft_schema(table)` looks at each column of an Arrow table (the curator's own file,
read on the curator's machine; nothing is sent anywhere) and proposes an attribute:

- text with at most `max_categories` distinct values (stripped): categorical, the
  values sorted; more values, and the column is
  left out with a warning (an id, free text, or a code to group first);
- numbers (or text that is all numbers): non-negative whole numbers below
  `max_categories` are an ``integer`` attribute whose size is the largest value plus
  one, rounded up to a round number; other numbers are ``numeric`` with about `bins`
  equal bins whose edges are round numbers (1, 2, 2.5 or 5 × 10^k apart) over the
  range widened to multiples of that step;
- ``"missing": true`` where a column has nulls, empty cells or a usual spelling of
  "no value" (`MISSING_SPELLINGS`), with those spellings as ``missing_values``.

A column that looks like an id is left out, with a warning that says so: nearly every
value its own (distinct values at least `ID_DISTINCT_SHARE` of the present ones), and
many values — at least `ID_MIN_TEXTS` for text (which would otherwise become categories
that list the ids), at least `ID_MIN_NUMBERS` for whole numbers (fewer could be ages or
counts in a small table; they are binned). Its values in the public schema would
publish ids, and an attribute with one row per value measures nothing useful; the
privacy unit's id column is named at upload, never drafted. Fractional numbers are never
id-like: a measurement with all values distinct (a weight) is binned as usual.

Every draft comes with the warning that the schema becomes public: a rare category or
an exact extreme in it can single someone out, so the curator reviews it (merging rare
values, widening ranges) before uploading. This module needs pyarrow only, so the
client (`privq_client.draft_schema`) uses it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_MAX_CATEGORIES = 20
DEFAULT_BINS = 10
# Id-like columns (left out): at least this share of the present values distinct, and at
# least this many distinct values (text, whole numbers).
ID_DISTINCT_SHARE = 0.95
ID_MIN_TEXTS = 10
ID_MIN_NUMBERS = 100
# Cells that usually mean "no value" in exported tables (after stripping).
MISSING_SPELLINGS: tuple[str, ...] = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")
PUBLIC_WARNING = (
    "this schema becomes PUBLIC: every tenant sees it. A rare category or an exact "
    "extreme (a bin edge at someone's income) can single a person out. Review it before "
    "uploading: merge rare values, widen ranges to round numbers you would publish."
)


@dataclass
class Draft:
    """The drafted schema (the full JSON form) and the warnings to show the curator."""

    schema: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def draft_schema(
    table: Any,
    *,
    max_categories: int = DEFAULT_MAX_CATEGORIES,
    bins: int = DEFAULT_BINS,
    exclude: Sequence[str] = (),
) -> Draft:
    """A draft schema for every column of the Arrow `table` not in `exclude`."""
    if max_categories < 1:
        raise ValueError("max_categories must be at least 1")
    if bins < 1:
        raise ValueError("bins must be at least 1")
    attributes: list[dict[str, Any]] = []
    warnings = [PUBLIC_WARNING]
    for name in table.column_names:
        if name in exclude:
            continue
        attribute, warning = _draft_column(str(name), table.column(name), max_categories, bins)
        if attribute is not None:
            attributes.append(attribute)
        if warning is not None:
            warnings.append(warning)
    if not attributes:
        warnings.append("no column could be drafted: the schema is empty")
    return Draft({"attributes": attributes}, warnings)


def _draft_column(
    name: str, column: Any, max_categories: int, bins: int
) -> tuple[dict[str, Any] | None, str | None]:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.string())
    nulls = array.is_null(nan_is_null=pa.types.is_floating(array.type))
    has_nulls = nulls.true_count > 0
    present = pc.filter(array, pc.invert(nulls))
    spellings: list[str] = []
    if _is_text(array.type):
        present = pc.utf8_trim_whitespace(present)
        spellings = _missing_spellings(present)
        if spellings:
            missing = pc.is_in(present, value_set=_texts(spellings))
            present = pc.filter(present, pc.invert(missing))
        numbers = _as_numbers(present)
        if numbers is None:
            id_warning = _id_like(name, present, min_values=ID_MIN_TEXTS)
            if id_warning is not None:
                return None, id_warning
            attribute, warning = _categorical(name, present, max_categories)
            return _with_missing(attribute, has_nulls, spellings), warning
        present = numbers
    elif not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        if pa.types.is_decimal(array.type):
            present = pc.cast(present, pa.float64())
        else:
            return None, f"column {name!r} ({array.type}) left out: not text or numbers"
    if len(present) == 0:
        return None, f"column {name!r} left out: it has no values"
    if _whole_numbers(present):
        id_warning = _id_like(name, present, min_values=ID_MIN_NUMBERS)
        if id_warning is not None:
            return None, id_warning
    attribute = _numbers(name, present, max_categories, bins)
    return _with_missing(attribute, has_nulls, spellings), None


def _whole_numbers(numbers: Any) -> bool:
    if pa.types.is_integer(numbers.type):
        return True
    as_float = pc.cast(numbers, pa.float64())
    return bool(pc.all(pc.equal(pc.floor(as_float), as_float)).as_py())


def _id_like(name: str, present: Any, *, min_values: int) -> str | None:
    """The warning for a column that looks like an id (module docstring), else None. It
    names how many values, never one of them."""
    distinct = len(present.unique())
    if distinct < min_values or distinct < ID_DISTINCT_SHARE * len(present):
        return None
    return (
        f"column {name!r} left out: it looks like an id ({distinct} distinct values in "
        f"{len(present)} rows), and its values would become public. If it identifies a "
        "person, name it as the privacy unit at upload; if it is not an id, write its "
        "attribute by hand (grouped or binned)"
    )


def _with_missing(
    attribute: dict[str, Any] | None, has_nulls: bool, spellings: list[str]
) -> dict[str, Any] | None:
    if attribute is None or not (has_nulls or spellings):
        return attribute
    attribute["missing"] = True
    texts = sorted(set(spellings) | {""})
    if texts != [""]:
        attribute["missing_values"] = texts
    return attribute


def _texts(values: Sequence[str]) -> Any:
    """An Arrow string array built from buffers (`pa.array` would import pandas)."""
    encoded = [value.encode("utf-8") for value in values]
    offsets = [0]
    for value in encoded:
        offsets.append(offsets[-1] + len(value))
    buffers = [None, pa.py_buffer(b"".join(o.to_bytes(4, "little") for o in offsets))]
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [*buffers, pa.py_buffer(b"".join(encoded))]
    )


def _is_text(data_type: Any) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _missing_spellings(text: Any) -> list[str]:
    found = pc.is_in(text, value_set=_texts(MISSING_SPELLINGS))
    if not found.true_count:
        return []
    return sorted(set(pc.filter(text, found).unique().to_pylist()))


def _as_numbers(text: Any) -> Any | None:
    """The text as float64 numbers if every cell is one (and there is one), else None."""
    if len(text) == 0:
        return None
    try:
        return pc.cast(text, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _categorical(
    name: str, text: Any, max_categories: int
) -> tuple[dict[str, Any] | None, str | None]:
    values = text.unique()
    if len(values) > max_categories:
        return None, (
            f"column {name!r} left out: more than {max_categories} distinct text values "
            "(an id, free text or a detailed code: group it into fewer values, or raise "
            "--max-categories)"
        )
    if len(values) == 0:
        return None, f"column {name!r} left out: it has no values"
    return {"name": name, "type": "categorical", "values": sorted(values.to_pylist())}, None


def _numbers(name: str, numbers: Any, max_categories: int, bins: int) -> dict[str, Any]:
    as_float = pc.cast(numbers, pa.float64())
    finite = pc.filter(as_float, pc.is_finite(as_float))
    bounds = pc.min_max(finite)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None or high is None:
        low, high = 0.0, 0.0
    whole = bool(pc.all(pc.equal(pc.floor(finite), finite)).as_py() or len(finite) == 0)
    if whole and low >= 0 and high < max_categories:
        size = round_up(int(high) + 1)
        return {"name": name, "type": "integer", "size": size, "clip": False}
    edges = round_edges(float(low), float(high), bins, whole=whole)
    return {"name": name, "type": "numeric", "bins": edges, "clip": False}


def round_up(n: int) -> int:
    """The smallest round number (1, 2, 2.5 or 5 × 10^k, at least an integer) >= n."""
    if n <= 1:
        return 1
    for step in _steps(n):
        if step >= n and float(step).is_integer():
            return int(step)
    return n  # pragma: no cover - _steps reaches beyond n


def _steps(limit: float) -> list[float]:
    """Round numbers 1, 2, 2.5, 5 × 10^k from below `limit`/10 up to beyond `limit`."""
    exponent = math.floor(math.log10(limit)) - 1
    out = []
    for power in range(exponent, exponent + 3):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            out.append(mantissa * 10.0**power)
    return out


def nice_step(span: float) -> float:
    """A round step (1, 2, 2.5 or 5 × 10^k) at least `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    for step in _steps(span):
        if step >= span * (1 - 1e-12):
            return step
    return 10.0 ** math.ceil(math.log10(span))  # pragma: no cover


def round_edges(low: float, high: float, bins: int, *, whole: bool = False) -> list[float | int]:
    """About `bins` equal bins with round edges covering [low, high], widened to
    multiples of the step (whole numbers get a step of at least 1)."""
    step = nice_step((high - low) / bins if high > low else max(abs(low), 1.0) / bins)
    if whole:
        step = max(step, 1.0)
    first = math.floor(low / step) * step
    last = math.ceil(high / step) * step
    if last <= first:
        last = first + step
    count = max(1, round((last - first) / step))
    edges = [_tidy(first + i * step) for i in range(count + 1)]
    return edges


def _tidy(x: float) -> float | int:
    """An edge without float dust: 0.30000000000000004 is 0.3, 20.0 is 20."""
    rounded = round(x, 10)
    return int(rounded) if float(rounded).is_integer() else rounded
