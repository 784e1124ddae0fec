"""Counts: the model's number of records matching `where` filters (repeats intersect)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.pgm import queries as q
from app.pgm.elimination import InferenceTooLarge
from app.pgm.queries import FactoredQuery
from app.services.answers.common import MAX_INFERENCE_CELLS, WorkSize, too_large, untouched_note
from app.services.answers.values import parse_where
from app.services.models import LoadedModel


@dataclass(frozen=True)
class CountQuery:
    """A parsed `GET /count`: the query over the model's domain and the attributes it filters."""

    query: FactoredQuery
    attributes: tuple[str, ...]


def count_query(loaded: LoadedModel, where: Sequence[str]) -> CountQuery:
    """Parse the `where` filters (repeats of one attribute intersect) into one query."""
    schema, domain = loaded.schema, loaded.model.domain
    selected: dict[str, np.ndarray] = {}
    for text in where:
        name, codes = parse_where(schema, text)
        selected[name] = np.intersect1d(selected[name], codes) if name in selected else codes
    factors = [q.indicator(domain, name, codes) for name, codes in selected.items()]
    return CountQuery(FactoredQuery(domain, tuple(factors)), tuple(selected))


def count_size(loaded: LoadedModel, count: CountQuery) -> WorkSize:
    """Check a count can be answered (QueryTooLarge) and size its work."""
    try:
        plan = loaded.model.query_plan(count.query, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "where") from None
    return WorkSize(1, plan.max_intermediate_cells, plan.work)


def count_result(loaded: LoadedModel, count: CountQuery) -> dict[str, Any]:
    """The model's answer to a parsed count."""
    try:
        value = loaded.model.answer(count.query, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "where") from None
    _, note = untouched_note(loaded, list(count.attributes))
    return {
        "count": max(float(value), 0.0),
        "model_version": loaded.version,
        "note": note,
    }


def count_answer(loaded: LoadedModel, where: Sequence[str]) -> dict[str, Any]:
    """The model's count of records matching every `where` filter (repeats intersect)."""
    return count_result(loaded, count_query(loaded, where))
