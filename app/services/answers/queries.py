"""Factored queries (Private-PGM appendix B): `where` value sets or ranges, `by` value /
cdf / groups, `weights` and `moments`, checked and sized as a batch, then answered."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.pgm import queries as q
from app.pgm.bin_bounds import signed_bounds
from app.pgm.domain import Domain, DomainError
from app.pgm.elimination import InferenceTooLarge
from app.pgm.queries import FactoredQuery, QueryFactor
from app.schema import Attribute, Label, SchemaError, format_number
from app.services.answers.bin_values import bin_values, spread_means
from app.services.answers.common import (
    MAX_INFERENCE_CELLS,
    MAX_MOMENT_ORDER,
    MAX_QUERIES_PER_REQUEST,
    TooManyCells,
    WorkSize,
    attribute_of,
    cell_labels,
    invalid,
    too_large,
    untouched_note,
)
from app.services.answers.values import codes_of_labels, range_shares
from app.services.models import LoadedModel


@dataclass(frozen=True)
class ValueRange:
    """A range on original values from `ge` (included) up to `lt` (excluded) or `le`
    (included); any bound may be omitted."""

    ge: float | None = None
    lt: float | None = None
    le: float | None = None


@dataclass(frozen=True)
class Grouping:
    """Named groups of values: one answer row per group."""

    groups: Mapping[str, Sequence[object]]


@dataclass(frozen=True)
class QuerySpec:
    """One factored query as the API states it, in original labels and values."""

    where: Mapping[str, Sequence[object] | ValueRange] = field(default_factory=dict)
    by: Mapping[str, str | Grouping] = field(default_factory=dict)
    weights: Mapping[str, Sequence[float]] = field(default_factory=dict)
    moments: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedQuery:
    """A query built on the model's domain, with the axes its answer is shown over."""

    query: FactoredQuery
    axis_attributes: tuple[str, ...]
    axis_labels: tuple[tuple[Label, ...], ...]
    # Sentences for the answer (moments that skip missing values).
    notes: tuple[str, ...] = ()
    # With moments: per output axis of the query whose factor is signed (moments, and
    # weights beside them), its K value rows (`app.pgm.queries.signed_rows`).
    signed_axes: Mapping[int, int] = field(default_factory=dict)
    # With moments: how each moment attribute's values were chosen (`bin_values`).
    estimates: Mapping[str, str] = field(default_factory=dict)
    # A `where` range cuts a bin: its records are spread uniformly within it.
    approximate: bool = False
    # …and, without weights or moments, the queries of the lower and upper bounds
    # (cut bins counted not at all, and whole).
    bounds: tuple[FactoredQuery, FactoredQuery] | None = None

    @property
    def cells(self) -> int:
        return math.prod(len(labels) for labels in self.axis_labels)


def _cdf_labels(attribute: Attribute) -> list[str]:
    """Row k of a CDF counts codes 0..k: say which values that is."""
    if attribute.kind == "numeric":
        labels = [f"< {format_number(e)}" for e in attribute.edges[1:]]
        labels[-1] = f"<= {format_number(attribute.edges[-1])}"
        return labels
    return [f"<= {label}" for label in attribute.value_labels()]


def _cdf(domain: Domain, attribute: Attribute) -> QueryFactor:
    """Cumulative counts over the codes with a value: records without one (the missing
    code, last) are in no row."""
    if not attribute.missing:
        return q.prefix(domain, attribute.name, _cdf_labels(attribute))
    rows = attribute.value_size
    matrix = np.tril(np.ones((attribute.size, attribute.size)))[:rows]
    return QueryFactor(attribute.name, matrix, "prefix", tuple(_cdf_labels(attribute)))


def _moments(
    loaded: LoadedModel, domain: Domain, attribute: Attribute, order: int, path: str
) -> tuple[QueryFactor, str]:
    """Σ value^k over the records that have a value (the missing code weighs 0), with
    the sign parts of each power's interval for the bounds; and the estimate's method."""
    values = bin_values(loaded, attribute.name, parameter=path)
    factor = q.bounded_moments(
        domain,
        attribute.name,
        np.nan_to_num(values.values),
        np.nan_to_num(values.low),
        np.nan_to_num(values.high),
        order,
    )
    return factor, values.method


def _skip_note(attribute: Attribute) -> str:
    return (
        f"moments of {attribute.name} skip its missing values: a record without a value "
        f"adds nothing to any power (count those with where {attribute.name}: null)"
    )


def build_query(loaded: LoadedModel, spec: QuerySpec, *, parameter: str) -> PreparedQuery:
    """Turn one `QuerySpec` into a factored query over the model's domain."""
    schema, domain = loaded.schema, loaded.model.domain
    seen: dict[str, str] = {}

    def attribute_for(section: str, name: str) -> Attribute:
        where_ = f"{parameter}.{section}.{name}"
        attribute = attribute_of(schema, name, where_)
        if name in seen:
            raise invalid(
                where_,
                f"attribute {name!r} already appears in {seen[name]}; a query gives each "
                "attribute one factor",
            )
        seen[name] = section
        return attribute

    row_factors: list[QueryFactor] = []
    lower_factors: list[QueryFactor] = []
    upper_factors: list[QueryFactor] = []
    approximate = False
    axis_factors: list[QueryFactor] = []
    axis_attributes: list[str] = []
    axis_labels: list[tuple[Label, ...]] = []
    notes: list[str] = []
    signed: dict[str, int] = {}
    estimates: dict[str, str] = {}
    try:
        for name, condition in spec.where.items():
            attribute = attribute_for("where", name)
            path = f"{parameter}.where.{name}"
            if isinstance(condition, ValueRange):
                shares = range_shares(
                    attribute,
                    condition.ge,
                    condition.lt,
                    path,
                    condition.le,
                    spread_means(loaded, name) if attribute.kind != "categorical" else None,
                )
                approximate = approximate or shares.approximate
                row_factors.append(q.weights(domain, name, shares.weights.tolist(), f"in {name}"))
                lower_factors.append(q.indicator(domain, name, shares.lower))
                upper_factors.append(q.indicator(domain, name, shares.upper))
                continue
            codes = codes_of_labels(attribute, list(condition), path)
            row_factors.append(q.indicator(domain, name, codes))
            lower_factors.append(row_factors[-1])
            upper_factors.append(row_factors[-1])
        for name, row in spec.weights.items():
            attribute_for("weights", name)
            try:
                factor = q.weights(domain, name, row, label=f"weighted {name}")
            except DomainError as error:
                raise invalid(f"{parameter}.weights.{name}", str(error)) from None
            if spec.moments:
                # A weight may be negative: its sign parts keep the moments' bounds valid.
                matrix = q.signed_rows(factor.matrix, factor.matrix, factor.matrix)
                labels_ = tuple(f"{factor.labels[0]} {k}" for k in range(q.SIGNED_BLOCKS))
                factor = QueryFactor(name, matrix, "weights", labels_)
                signed[name] = 1
            row_factors.append(factor)
        for name, how in spec.by.items():
            attribute = attribute_for("by", name)
            path = f"{parameter}.by.{name}"
            if isinstance(how, Grouping):
                if not how.groups:
                    raise invalid(path, "groups needs at least one named group")
                members = {
                    group: codes_of_labels(attribute, list(values), f"{path}.groups.{group}")
                    for group, values in how.groups.items()
                }
                factor = q.groups(domain, name, members)
                labels: tuple[Label, ...] = factor.labels
            elif how == "value":
                factor = q.identity(domain, name)
                labels = tuple(attribute.labels())  # JSON null for the missing code
            elif how == "cdf":
                factor = _cdf(domain, attribute)
                labels = factor.labels
            else:
                raise invalid(path, 'use "value", "cdf" or {"groups": {...}}')
            axis_factors.append(factor)
            axis_attributes.append(name)
            axis_labels.append(labels)
        for name, order in spec.moments.items():
            attribute = attribute_for("moments", name)
            path = f"{parameter}.moments.{name}"
            if not 1 <= order <= MAX_MOMENT_ORDER:
                raise invalid(path, f"the moment order must be 1 to {MAX_MOMENT_ORDER}")
            try:
                factor, estimates[name] = _moments(loaded, domain, attribute, order, path)
            except SchemaError as error:
                raise invalid(path, str(error)) from None
            signed[name] = order
            axis_factors.append(factor)
            axis_attributes.append(name)
            axis_labels.append(factor.labels[:order])
            if attribute.missing:
                notes.append(_skip_note(attribute))
        query = FactoredQuery(domain, tuple(row_factors + axis_factors))
        bounds = None
        if approximate and not spec.weights and not spec.moments:
            bounds = (
                FactoredQuery(domain, tuple(lower_factors + axis_factors)),
                FactoredQuery(domain, tuple(upper_factors + axis_factors)),
            )
    except DomainError as error:  # QueryError: wrong weight count, non-finite entries, …
        raise invalid(parameter, str(error)) from None
    signed_axes = {
        axis: signed[factor.attribute]
        for axis, factor in enumerate(query.output_factors)
        if factor.attribute in signed
    }
    if approximate:
        notes.append(
            "a where range cuts a bin: its records are spread uniformly within it"
            + (
                ""
                if bounds is not None
                else "; no bounds: the moments and weights of a cut bin's part are not "
                "guaranteed by its edges"
            )
        )
        signed_axes = {}
    return PreparedQuery(
        query=query,
        axis_attributes=tuple(axis_attributes),
        axis_labels=tuple(axis_labels),
        notes=tuple(notes),
        signed_axes=signed_axes,
        estimates=estimates,
        approximate=approximate,
        bounds=bounds,
    )


@dataclass(frozen=True)
class PreparedBatch:
    """A checked batch of factored queries, and the size of the work answering it takes."""

    items: tuple[PreparedQuery, ...]
    size: WorkSize  # all answers together; the largest intermediate table of any query


def prepare_queries(
    loaded: LoadedModel, specs: Sequence[QuerySpec], *, max_cells: int
) -> PreparedBatch:
    """Build and check a batch of factored queries (every refusal names its query)."""
    if not specs:
        raise invalid("queries", "give at least one query")
    if len(specs) > MAX_QUERIES_PER_REQUEST:
        raise invalid(
            "queries", f"at most {MAX_QUERIES_PER_REQUEST} queries per request, got {len(specs)}"
        )
    prepared = [
        build_query(loaded, spec, parameter=f"queries[{index}]") for index, spec in enumerate(specs)
    ]
    cells = sum(p.cells for p in prepared)
    if cells > max_cells:
        raise TooManyCells(
            f"queries: the answers would have {cells} cells together, more than the limit "
            f"of {max_cells}; split the request",
            parameter="queries",
            cells=cells,
            max_cells=max_cells,
        )
    model = loaded.model
    largest = 0
    work = 0
    for index, item in enumerate(prepared):
        # Plans are cached per query shape, so checking each one first is cheap and
        # lets the refusal name the query.
        for query in (item.query, *(item.bounds or ())):
            try:
                plan = model.query_plan(query, max_cells=MAX_INFERENCE_CELLS)
            except InferenceTooLarge as error:
                raise too_large(error, f"queries[{index}]") from None
            largest = max(largest, plan.max_intermediate_cells)
            work += plan.work
    return PreparedBatch(tuple(prepared), WorkSize(cells, largest, work))


def answer_prepared(loaded: LoadedModel, batch: PreparedBatch) -> dict[str, Any]:
    """Answers of a prepared batch, each a table flattened row-major."""
    every = [query for p in batch.items for query in (p.query, *(p.bounds or ()))]
    results = iter(loaded.model.answer_many(every, max_cells=MAX_INFERENCE_CELLS))
    answers = []
    for item in batch.items:
        values = np.asarray(next(results), dtype=float)
        bounds: list[list[float]] | None = None
        if item.bounds is not None:  # a cut bin counted not at all and whole
            low = np.minimum(np.asarray(next(results), dtype=float).ravel(), values.ravel())
            high = np.maximum(np.asarray(next(results), dtype=float).ravel(), values.ravel())
            bounds = np.stack([low, high], axis=1).tolist()
        _, note = untouched_note(loaded, item.query.attributes)
        if item.notes:
            note = "; ".join(([note] if note else []) + list(item.notes))
        if item.signed_axes:
            values, least, greatest = signed_bounds(values, dict(item.signed_axes))
            pairs = np.stack([least.ravel(), greatest.ravel()], axis=1)
            # Powers of far edges may overflow a float: then no bound is claimed.
            bounds = pairs.tolist() if np.all(np.isfinite(pairs)) else None
        answers.append(
            {
                "attributes": list(item.axis_attributes),
                "labels": cell_labels(item.axis_labels),
                "values": values.ravel().tolist(),
                "estimates": dict(item.estimates),
                "note": note,
                "approximate": item.approximate,
                "bounds": bounds,
            }
        )
    return {"answers": answers, "model_version": loaded.version}


def queries_answer(
    loaded: LoadedModel, specs: Sequence[QuerySpec], *, max_cells: int
) -> dict[str, Any]:
    """Answers of a batch of factored queries, each a table flattened row-major."""
    return answer_prepared(loaded, prepare_queries(loaded, specs, max_cells=max_cells))
