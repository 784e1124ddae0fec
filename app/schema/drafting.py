"""A schema to start from: a first draft of the public schema, read off a table.

`draft_schema(table)` looks at each column of an Arrow table (the curator's own file,
read on the curator's machine; nothing is sent anywhere) and proposes an attribute:

- text with at most `max_categories` distinct values (stripped): categorical, the
  values sorted; more values, and the column is left out with a note (an id, free
  text, or a code to group first);
- whole numbers (or text that is all whole numbers): an ``integer`` attribute. Those
  spanning at most `MAX_INTEGER_CODES` integers (months, hours, days of a month) get
  one code per value, ``min`` to ``max``; wider ones get about `bins` bins of a round
  integer ``width`` (1, 2, 5, 10, 20, 25, 50, …) starting at a multiple of it;
- other numbers: ``numeric`` with about `bins` equal bins whose edges are round
  numbers (1, 2, 2.5 or 5 × 10^k apart) over the range widened to multiples of that
  step;
- a skewed column (equal bins would put more than `SKEW_SHARE` of its values in one
  bin): ``numeric`` with round edges at its 1/bins, 2/bins, … quantiles instead
  (whole-number edges for whole numbers), so the bins follow the data's spread;
- ``"missing": true`` where a column has nulls, empty cells or a usual spelling of
  "no value" (`MISSING_SPELLINGS`), with those spellings as ``missing_values``.

Left out, each with a note naming the column and why (never one of its values):
a constant column (one value in every row and none missing: it tells nothing), a
column without values, one of another type, and a column that looks like an id: nearly
every value its own (distinct values at least `ID_DISTINCT_SHARE` of the present
ones), and many values — at least `ID_MIN_TEXTS` for text (which would otherwise
become categories that list the ids), at least `ID_MIN_NUMBERS` for whole numbers
(fewer could be ages or counts in a small table; they are binned). Its values in the
public schema would publish ids, and an attribute with one row per value measures
nothing useful; the privacy unit's id column is named at upload, never drafted.
Fractional numbers are never id-like: a measurement with all values distinct (a
weight) is binned as usual. Uploads read only the schema's columns, so the file
uploads as it is.

With `private_bins=RHO` the ranges and edges of the columns drafted from numbers are
released by a differentially private quantile mechanism instead
(`app.schema.private_edges`), and the schema records what that spent as
``"private_bins": {"rho": RHO, "attributes": [...]}``.

Every draft comes with the warning that the schema becomes public: a rare category or
an exact extreme in it can single someone out, so the curator reviews it (merging rare
values, widening ranges) before uploading. This module needs pyarrow and numpy only
(OpenDP for private bins), so the client (`privq_client.draft_schema`) uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.schema.edges import (
    integer_bins,
    largest_share,
    nice_step,
    quantile_edges,
    round_edges,
    round_up,
)
from app.schema.private_edges import MAX_INTEGER_CODES, PrivateEdges

__all__ = [
    "DEFAULT_BINS",
    "DEFAULT_MAX_CATEGORIES",
    "MAX_INTEGER_CODES",
    "PUBLIC_WARNING",
    "Draft",
    "draft_schema",
    "nice_step",
    "round_edges",
    "round_up",
]

DEFAULT_MAX_CATEGORIES = 20
DEFAULT_BINS = 10
# Id-like columns (left out): at least this share of the present values distinct, and at
# least this many distinct values (text, whole numbers).
ID_DISTINCT_SHARE = 0.95
ID_MIN_TEXTS = 10
ID_MIN_NUMBERS = 100
# Skewed: equal bins would put more than this share of the values in one bin.
SKEW_SHARE = 0.5
# Cells that usually mean "no value" in exported tables (after stripping).
MISSING_SPELLINGS: tuple[str, ...] = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None")
PUBLIC_WARNING = (
    "this schema becomes PUBLIC: every tenant sees it. A rare category or an exact "
    "extreme (a bin edge at someone's income) can single a person out. Review it before "
    "uploading: merge rare values, widen ranges to round numbers you would publish."
)


@dataclass
class Draft:
    """The drafted schema (the full JSON form), the warnings to show the curator (the
    public-schema warning first, then a note per column left out) and, by column, why
    each left-out column was left out."""

    schema: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)


@dataclass
class _Numbers:
    """A column drafted from numbers, once every column has been read (private bins
    split their ρ over these)."""

    name: str
    values: np.ndarray
    whole: bool
    has_nulls: bool
    spellings: list[str]


def draft_schema(
    table: Any,
    *,
    max_categories: int = DEFAULT_MAX_CATEGORIES,
    bins: int = DEFAULT_BINS,
    exclude: Sequence[str] = (),
    private_bins: float | None = None,
    unit: str | None = None,
    max_rows: int = 1,
) -> Draft:
    """A draft schema for every column of the Arrow `table` not in `exclude`.

    `private_bins`: the ρ (zCDP) to spend on private ranges and edges for the columns
    drafted from numbers. `unit`: the privacy unit's id column (left out, like
    `exclude`); with private bins, each unit keeps its first `max_rows` rows and the
    mechanism protects a unit of that many rows (name the same unit and k at upload).
    """
    if max_categories < 1:
        raise ValueError("max_categories must be at least 1")
    if bins < 1:
        raise ValueError("bins must be at least 1")
    if max_rows < 1:
        raise ValueError("max_rows must be at least 1")
    if max_rows != 1 and unit is None:
        raise ValueError("max_rows needs the privacy unit's column (unit)")
    if private_bins is not None and not (0 < private_bins < float("inf")):
        raise ValueError("private_bins must be a positive number")
    if unit is not None:
        if unit not in table.column_names:
            raise ValueError(f"the privacy unit's column {unit!r} is not in the file")
        if private_bins is not None:
            table = _first_rows_per_unit(table, unit, max_rows)
        exclude = (*exclude, unit)
    attributes: list[dict[str, Any] | _Numbers] = []
    draft = Draft({}, [PUBLIC_WARNING])
    for name in table.column_names:
        if name in exclude:
            continue
        attribute, note = _draft_column(str(name), table.column(name), max_categories)
        if attribute is not None:
            attributes.append(attribute)
        if note is not None:
            draft.warnings.append(f"column {name!r} left out: {note}")
            draft.left_out[str(name)] = note
    private = None
    if private_bins is not None:
        columns = sum(isinstance(a, _Numbers) for a in attributes)
        private = PrivateEdges(private_bins, columns, bins, unit_rows=max_rows if unit else 1)
    drafted = [a if isinstance(a, dict) else _numbers(a, bins, private) for a in attributes]
    if not drafted:
        draft.warnings.append("no column could be drafted: the schema is empty")
    draft.schema = {"attributes": drafted}
    if private is not None and private.attributes:
        draft.schema["private_bins"] = private.record()
    return draft


def _first_rows_per_unit(table: Any, unit: str, max_rows: int) -> Any:
    """The table with each unit's rows after its first `max_rows` dropped."""
    ids = table.column(unit).combine_chunks()
    indices = pc.cast(ids.dictionary_encode().indices.fill_null(-1), pa.int64())
    codes = _numpy(indices, np.int64)
    order = np.argsort(codes, kind="stable")
    ranks = np.empty(len(codes), dtype=np.int64)
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(codes)]))
    ranks[order] = np.arange(len(codes)) - group_start
    keep = np.packbits(ranks < max_rows, bitorder="little")
    return table.filter(pa.Array.from_buffers(pa.bool_(), len(codes), [None, pa.py_buffer(keep)]))


def _numpy(array: Any, dtype: Any) -> np.ndarray:
    """A null-free Arrow array of fixed-width numbers as numpy, read from its buffer
    (Arrow's own conversions import pandas, which the service never loads)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ValueError("nulls cannot be read as numbers")
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset)


def _draft_column(
    name: str, column: Any, max_categories: int
) -> tuple[dict[str, Any] | _Numbers | None, str | None]:
    """The column's attribute (or its numbers, drafted once all are read), or None and
    the note saying why it is left out."""
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
            note = _constant(present, has_nulls or bool(spellings)) or _id_like(
                present, min_values=ID_MIN_TEXTS
            )
            if note is not None:
                return None, note
            attribute, note = _categorical(name, present, max_categories)
            return _with_missing(attribute, has_nulls, spellings), note
        present = numbers
    elif not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        if pa.types.is_decimal(array.type):
            present = pc.cast(present, pa.float64())
        else:
            return None, f"its type ({array.type}) is not text or numbers"
    present = pc.cast(present, pa.float64())
    present = pc.filter(present, pc.is_finite(present))
    if len(present) == 0:
        return None, "it has no values"
    note = _constant(present, has_nulls or bool(spellings))
    whole = _whole_numbers(present)
    if note is None and whole:
        note = _id_like(present, min_values=ID_MIN_NUMBERS)
    if note is not None:
        return None, note
    values = _numpy(present, np.float64)
    return _Numbers(name, values, whole, has_nulls, spellings), None


def _numbers(column: _Numbers, bins: int, private: PrivateEdges | None) -> dict[str, Any]:
    if private is not None:
        attribute = private.attribute(column.name, column.values, whole=column.whole)
    else:
        attribute = _public_numbers(column.name, column.values, bins, whole=column.whole)
    return _mark_missing(attribute, column.has_nulls, column.spellings)


def _public_numbers(name: str, values: np.ndarray, bins: int, *, whole: bool) -> dict[str, Any]:
    """Integer codes, integer bins, equal round bins, or round quantile edges (module
    docstring)."""
    low, high = float(values.min()), float(values.max())
    if whole:
        if high - low + 1 <= MAX_INTEGER_CODES:
            return {
                "name": name,
                "type": "integer",
                "min": int(low),
                "max": int(high),
                "clip": False,
            }
        start, stop, width = integer_bins(int(low), int(high), bins)
        equal = list(range(start, stop + 2, width))
        if largest_share(values, equal) <= SKEW_SHARE or bins < 3:
            return {
                "name": name,
                "type": "integer",
                "min": start,
                "max": stop,
                "width": width,
                "clip": False,
            }
    else:
        edges = round_edges(low, high, bins)
        if largest_share(values, edges) <= SKEW_SHARE or bins < 3:
            return {"name": name, "type": "numeric", "bins": edges, "clip": False}
    cuts = np.quantile(values, [i / bins for i in range(1, bins)])
    edges = quantile_edges(low, high, cuts, whole=whole)
    return {"name": name, "type": "numeric", "bins": edges, "clip": False}


def _whole_numbers(numbers: Any) -> bool:
    return bool(pc.all(pc.equal(pc.floor(numbers), numbers)).as_py())


def _constant(present: Any, has_missing: bool) -> str | None:
    """The note for a column with one value in every row (and none missing), else None."""
    if has_missing or len(present) == 0 or len(present.unique()) > 1:
        return None
    return (
        f"it has the same value in all {len(present)} rows (a constant tells nothing about "
        "anyone; add it by hand if the schema must name it)"
    )


def _id_like(present: Any, *, min_values: int) -> str | None:
    """The note for a column that looks like an id (module docstring), else None. It
    names how many values, never one of them."""
    distinct = len(present.unique())
    if distinct < min_values or distinct < ID_DISTINCT_SHARE * len(present):
        return None
    return (
        f"it looks like an id ({distinct} distinct values in "
        f"{len(present)} rows), and its values would become public. If it identifies a "
        "person, name it as the privacy unit at upload; if it is not an id, write its "
        "attribute by hand (grouped or binned)"
    )


def _with_missing(
    attribute: dict[str, Any] | None, has_nulls: bool, spellings: list[str]
) -> dict[str, Any] | None:
    return None if attribute is None else _mark_missing(attribute, has_nulls, spellings)


def _mark_missing(
    attribute: dict[str, Any], has_nulls: bool, spellings: list[str]
) -> dict[str, Any]:
    if not (has_nulls or spellings):
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
            f"more than {max_categories} distinct text values "
            "(an id, free text or a detailed code: group it into fewer values, or raise "
            "--max-categories)"
        )
    if len(values) == 0:
        return None, "it has no values"
    return {"name": name, "type": "categorical", "values": sorted(values.to_pylist())}, None
