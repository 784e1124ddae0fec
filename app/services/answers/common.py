"""What every kind of free answer shares: limits, refusals, labels, notes and work sizes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.errors import InvalidRequest, InvariantViolated
from app.pgm.elimination import InferenceTooLarge
from app.schema import Attribute, DatasetSchema, Label, SchemaError
from app.services.models import LoadedModel

# Largest intermediate table one query's variable elimination may build (8 bytes a
# cell): keeps a single request's memory bounded whatever attributes it names.
MAX_INFERENCE_CELLS = 5_000_000
MAX_QUERIES_PER_REQUEST = 1_000
MAX_MOMENT_ORDER = 8
MAX_SYNTHETIC_ROWS = 10_000_000
SYNTHETIC_CHUNK_ROWS = 20_000


class TooManyCells(InvalidRequest, code="too_many_cells"):
    """The answer would have more cells than the server returns in one response."""


class QueryTooLarge(InvalidRequest, code="query_too_large"):
    """Answering this query needs a larger intermediate table than the server allows."""


def invalid(parameter: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{parameter}: {message}", parameter=parameter)


def too_large(error: InferenceTooLarge, parameter: str) -> QueryTooLarge:
    return QueryTooLarge(
        f"{parameter}: {error}",
        parameter=parameter,
        cells_needed=error.cells,
        max_cells=error.max_cells,
    )


def attribute_of(schema: DatasetSchema, name: str, parameter: str) -> Attribute:
    try:
        return schema.attribute(name)
    except SchemaError as error:
        raise invalid(parameter, f"{error}; known attributes: {', '.join(schema.names)}") from None


def cell_labels(label_lists: Sequence[Sequence[Label]]) -> list[tuple[Label, ...]]:
    """One tuple of labels per cell of the table over these axes, row-major."""
    return list(itertools.product(*label_lists))


def unmeasured_attributes(loaded: LoadedModel, attrs: Iterable[str]) -> list[str]:
    """Which of `attrs` (each once, in order) no measurement touched: the model spreads
    them uniformly (its maximum-entropy estimate). `untouched_note`'s list."""
    return untouched_note(loaded, list(dict.fromkeys(attrs)))[0]


def untouched_note(loaded: LoadedModel, attrs: Sequence[str]) -> tuple[list[str], str | None]:
    """Which of `attrs` no measurement touched, and the sentence that says so."""
    measured = loaded.measured_attributes
    untouched = [a for a in attrs if a not in measured]
    if not untouched:
        return untouched, None
    names = ", ".join(untouched)
    if len(untouched) == len(attrs):
        note = f"no measurement touched {names}; this is the model's maximum-entropy estimate"
    else:
        note = (
            f"no measurement touched {names}; along it the answer is the model's "
            "maximum-entropy estimate"
        )
    return untouched, note


@dataclass(frozen=True)
class WorkSize:
    """How large answering a request is, in cells: what most of its time is spent on."""

    answer_cells: int  # encoded into the response
    intermediate_cells: int  # the largest table variable elimination builds
    # Σ over the elimination's steps of the cells each spans, times its slices: what
    # the time grows with (~0.2 ns a cell at the median on the bench's model).
    work_cells: int


def dumps(value: Any) -> bytes:
    # What Starlette's JSONResponse writes: compact, UTF-8, no NaN.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


class NonFiniteAnswer(InvariantViolated, code="non_finite_answer"):
    """The model produced a non-finite number: a bug, never sent as NaN or Infinity."""


def numbers_json(values: np.ndarray) -> bytes:
    """A flat float array as a JSON list, by orjson's numpy path (an order of magnitude
    faster than the standard library's encoder on a marginal's counts). orjson would
    write a non-finite float as null, so those are refused first."""
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if not np.isfinite(flat).all():
        raise NonFiniteAnswer("the model's answer holds a non-finite number")
    return orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY)


def labels_json(label_lists: Sequence[Sequence[Label]]) -> bytes:
    """`cell_labels` as JSON: the bytes `orjson.dumps(cell_labels(label_lists))` writes.

    Each label is encoded once, and the cells sharing a first-axis label are one
    `bytes.join` over the encoded rest (the separator carries that label), so the
    Python-level work is one step per cell of the other axes, not one per cell.
    """
    encoded = [[orjson.dumps(label) for label in labels] for labels in label_lists]
    if not encoded:
        return b"[[]]"
    if not all(encoded):
        return b"[]"
    first, *others = encoded
    if not others:
        return b"[" + b",".join(b"[" + label + b"]" for label in first) + b"]"
    rest = [b",".join(labels) for labels in itertools.product(*others)]
    rows = [b"[" + label + b"," + (b"],[" + label + b",").join(rest) + b"]" for label in first]
    return b"[" + b",".join(rows) + b"]"
