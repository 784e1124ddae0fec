"""The service's answers as pandas DataFrames: one row per cell, a column per attribute.

- marginals: the attributes' cell labels (ordered categoricals, in the schema's
  order), `count`, and `standard_error` when a measurement covers the marginal;
- factored queries: the `by` and `moments` axes' labels and the value, in `count`
  for a plain count and in `value` once weights or moments make it a sum, with `low`
  and `high` (the bounds the bins' edges allow) for moments;
- SQL: the query's columns, and `<column>_low`, `<column>_high` after them for each
  SUM/AVG/VAR/STDDEV column (its bounds), and each COUNT column when WHERE cuts a bin;
- counts: one row, the filter of each attribute and `count`;
- synthetic data: the CSV read as it streams, categorical columns as categoricals.

Everything else the service said (model version, notes, error bounds) is kept in
`DataFrame.attrs`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from privq_client.transport import Json

COUNT = "count"
VALUE = "value"
STANDARD_ERROR = "standard_error"
LOW = "low"
HIGH = "high"


def free_name(name: str, taken: Iterable[str]) -> str:
    """`name`, or `name_`, `name__`, … if an attribute already has it."""
    used = set(taken)
    while name in used:
        name += "_"
    return name


def ordered_labels(labels: Sequence[str | int | None]) -> pd.Categorical[str]:
    """Labels as an ordered categorical, in the order they first appear (the schema's,
    since the service lists cells row-major): sorting and pivots keep the domain order.
    A missing value's label (None) is the categorical's missing value."""
    categories = [label for label in dict.fromkeys(labels) if label is not None]
    return pd.Categorical(list(labels), categories=categories, ordered=True)  # type: ignore[return-value]


def _label(label: Any) -> str | int | None:
    """A cell label as the service sent it: an integer attribute's value stays an int."""
    if label is None or (isinstance(label, int) and not isinstance(label, bool)):
        return label
    return str(label)


def label_columns(axes: Sequence[str], cells: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """One column per axis from row-major cell labels."""
    columns: dict[str, Any] = {}
    for position, name in enumerate(axes):
        columns[name] = ordered_labels([_label(cell[position]) for cell in cells])
    return columns


def marginal_frame(body: Json) -> pd.DataFrame:
    """`GET /marginals` as a DataFrame: attribute labels, `count`, `standard_error`."""
    axes = [str(name) for name in body["attributes"]]
    columns = label_columns(axes, body["values"])
    columns[free_name(COUNT, axes)] = pd.array(body["counts"], dtype="float64")
    standard_error = body.get("standard_error")
    if standard_error is not None:
        columns[free_name(STANDARD_ERROR, axes)] = float(standard_error)
    frame = pd.DataFrame(columns)
    frame.attrs.update({k: v for k, v in body.items() if k not in ("values", "counts")})
    return frame


def answer_frame(answer: Json, *, value_column: str, model_version: Any) -> pd.DataFrame:
    """One factored query's answer: its axes' labels and the value column."""
    axes = [str(name) for name in answer["attributes"]]
    labels = answer["labels"] if axes else [[] for _ in answer["values"]]
    columns = label_columns(axes, labels)
    columns[free_name(value_column, axes)] = pd.array(answer["values"], dtype="float64")
    bounds = answer.get("bounds")
    if bounds is not None:
        # Moments: what the bins' edges allow around each value.
        columns[free_name(LOW, axes)] = pd.array([pair[0] for pair in bounds], dtype="float64")
        columns[free_name(HIGH, axes)] = pd.array([pair[1] for pair in bounds], dtype="float64")
    frame = pd.DataFrame(columns)
    frame.attrs.update({k: v for k, v in answer.items() if k not in ("labels", "values")})
    frame.attrs["model_version"] = model_version
    return frame


def sql_frame(body: Json) -> pd.DataFrame:
    """`POST /sql` as a DataFrame: its columns, then each bounded column's bounds."""
    frame = pd.DataFrame(body["rows"], columns=body["columns"])
    estimates = body.get("estimates") or []
    bounds = body.get("bounds") or []
    for index, name in enumerate(body["columns"]):
        method = estimates[index] if index < len(estimates) else None
        if method is None and all(row[index] is None for row in bounds):
            continue  # no bounds: not a SUM/AVG/VAR/STDDEV, nor a COUNT a WHERE cut
        pairs = [row[index] for row in bounds]
        for end, suffix in enumerate(("low", "high")):
            frame[free_name(f"{name}_{suffix}", frame.columns)] = pd.array(
                [None if pair is None else pair[end] for pair in pairs], dtype="float64"
            )
    frame.attrs.update({k: v for k, v in body.items() if k not in ("rows", "columns")})
    return frame


def query_value_column(query: Mapping[str, Any]) -> str:
    """`count` for a query that counts records, `value` once it weights or sums moments."""
    return VALUE if query.get("weights") or query.get("moments") else COUNT


def count_frame(body: Json, filters: Mapping[str, str]) -> pd.DataFrame:
    """`GET /count` as one row: each filtered attribute's condition, and `count`."""
    columns: dict[str, Any] = {name: [text] for name, text in filters.items()}
    columns[free_name(COUNT, filters)] = [float(body["count"])]
    frame = pd.DataFrame(columns)
    frame.attrs.update({k: v for k, v in body.items() if k != "count"})
    return frame


def quantiles_frame(body: Json) -> pd.DataFrame:
    """`GET /quantiles` as a row per fraction: `p`, `value`, and its bin's `low`, `high`."""
    items = body["quantiles"]
    frame = pd.DataFrame(
        {
            "p": [item["p"] for item in items],
            "value": [item["value"] for item in items],
            "low": [None if item["bin"] is None else item["bin"][0] for item in items],
            "high": [None if item["bin"] is None else item["bin"][1] for item in items],
        }
    )
    frame.attrs.update({k: v for k, v in body.items() if k != "quantiles"})
    return frame


class ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (a streamed HTTP body)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        view = memoryview(buffer).cast("B")
        size = min(len(view), len(self._pending))
        view[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def synthetic_frame(chunks: Iterator[bytes], attributes: Sequence[Json]) -> pd.DataFrame:
    """Synthetic CSV → DataFrame, parsed as it arrives (the text is never held whole).

    Categorical attributes become categoricals over the schema's values (read as text
    first: a value like "NA" or "01" stays what it is); the others are parsed as numbers
    where they are numbers.
    """
    categorical = {
        str(a["name"]): [str(v) for v in a.get("values", [])]
        for a in attributes
        if a.get("type") == "categorical"
    }
    # An attribute with missing values writes them as empty cells: NaN here.
    missing = {str(a["name"]): [""] for a in attributes if a.get("missing")}
    frame = pd.read_csv(
        io.BufferedReader(ChunkReader(chunks), buffer_size=1 << 16),
        dtype={name: str for name in categorical},
        keep_default_na=False,
        na_values=missing or [],
    )
    for name, values in categorical.items():
        if name in frame.columns:
            column = pd.Categorical(frame[name], categories=values)
            if not (column.isna() & frame[name].notna()).any():
                frame[name] = column
    return frame
