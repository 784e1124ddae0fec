"""Counts: the model's number of records matching `where` filters (repeats intersect).

A range that cuts a bin (`age:30..37` with a bin [35, 40)) is answered with the bin's
count spread uniformly within it, `approximate: true`, and `bounds`: the count with
every cut bin left out and with every cut bin counted whole. Filters on bin edges (or
on values) are exact: `approximate: false`, and the bounds are the count itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.pgm import queries as q
from app.pgm.elimination import InferenceTooLarge
from app.pgm.queries import FactoredQuery
from app.services.answers.bin_values import spread_means
from app.services.answers.common import MAX_INFERENCE_CELLS, WorkSize, too_large, untouched_note
from app.services.answers.values import parse_where_weights
from app.services.models import LoadedModel


@dataclass(frozen=True)
class CountQuery:
    """A parsed `GET /count`: the query over the model's domain, the attributes it
    filters, and when a range cuts a bin, the queries of its lower and upper bounds."""

    query: FactoredQuery
    attributes: tuple[str, ...]
    bounds: tuple[FactoredQuery, FactoredQuery] | None = None

    @property
    def queries(self) -> tuple[FactoredQuery, ...]:
        return (self.query, *(self.bounds or ()))


def count_query(loaded: LoadedModel, where: Sequence[str]) -> CountQuery:
    """Parse the `where` filters (repeats of one attribute intersect) into one query."""
    domain = loaded.model.domain
    filters = parse_where_weights(loaded.schema, where, lambda name: spread_means(loaded, name))
    factors = [
        q.weights(domain, f.attribute, f.weights.tolist(), label=f"share of {f.attribute}")
        for f in filters
    ]
    query = FactoredQuery(domain, tuple(factors))
    attributes = tuple(f.attribute for f in filters)
    if not any(f.approximate for f in filters):
        return CountQuery(query, attributes)
    lower = [q.indicator(domain, f.attribute, f.lower) for f in filters]
    upper = [q.indicator(domain, f.attribute, f.upper) for f in filters]
    bounds = (FactoredQuery(domain, tuple(lower)), FactoredQuery(domain, tuple(upper)))
    return CountQuery(query, attributes, bounds)


def count_size(loaded: LoadedModel, count: CountQuery) -> WorkSize:
    """Check a count can be answered (QueryTooLarge) and size its work."""
    largest = work = 0
    for query in count.queries:
        try:
            plan = loaded.model.query_plan(query, max_cells=MAX_INFERENCE_CELLS)
        except InferenceTooLarge as error:
            raise too_large(error, "where") from None
        largest = max(largest, plan.max_intermediate_cells)
        work += plan.work
    return WorkSize(1, largest, work)


def count_result(loaded: LoadedModel, count: CountQuery) -> dict[str, Any]:
    """The model's answer to a parsed count, with its bounds."""
    try:
        values = loaded.model.answer_many(list(count.queries), max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "where") from None
    value = max(float(np.asarray(values[0]).sum()), 0.0)
    low = high = value
    if count.bounds is not None:
        low = min(max(float(np.asarray(values[1]).sum()), 0.0), value)
        high = max(float(np.asarray(values[2]).sum()), value)
    _, note = untouched_note(loaded, list(count.attributes))
    return {
        "count": value,
        "bounds": [low, high],
        "approximate": count.bounds is not None,
        "model_version": loaded.version,
        "note": note,
    }


def count_answer(loaded: LoadedModel, where: Sequence[str]) -> dict[str, Any]:
    """The model's count of records matching every `where` filter (repeats intersect)."""
    return count_result(loaded, count_query(loaded, where))
