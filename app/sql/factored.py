"""A `SqlPlan` → the factored queries that answer it, and their answers → `Totals`.

Per inclusion–exclusion term (a box with a sign), one query counts the rows of each
group: an identity factor per GROUP BY attribute (masked by the box where the box
restricts it) and an indicator factor per other attribute the box restricts
(Private-PGM appendix B, Table 2). Per aggregated attribute a, one more query has a
moments factor on a with rows Σ 1 (a has a value), Σ x, Σ x² — x the code's number:
bin midpoints, as `POST /queries` "moments" uses. Per attribute a quantile is taken of
(and not grouped by), one more query keeps a's codes (an identity factor): the counts
over a's codes per group. The signed sum of the terms' answers is the answer over the
union (regions.inclusion_exclusion).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.pgm.domain import Domain
from app.pgm.queries import FactoredQuery, QueryFactor
from app.sql.compile import SqlPlan
from app.sql.predicates import AttributeCodes
from app.sql.regions import Box
from app.sql.results import AggregateSpec, Totals

MOMENT_ROWS = 3  # Σ 1 (with a value), Σ x, Σ x²
EDGE_ROWS = 2  # Σ low, Σ high: each value at its bin's low or high end
VARIANCES = frozenset({"var_pop", "var_samp", "stddev_pop", "stddev_samp"})


@dataclass(frozen=True)
class TermQuery:
    """One factored query: a term's counts (`attribute` None), one attribute's sums, or
    (`values`) the counts over one attribute's codes."""

    term: int
    attribute: str | None
    query: FactoredQuery
    shape: tuple[int, ...]  # the answer's shape with every group axis, size 1 included
    moment_axis: int | None  # the axis of the sums (or of the codes), moved last
    # Rows along the moment axis: MOMENT_ROWS, then for a binned attribute's bounds
    # EDGE_ROWS (SUM, AVG) and one per code with a value — each bin's count (VAR, STDDEV).
    rows: int = MOMENT_ROWS
    values: bool = False


def _mask_vector(plan: SqlPlan, codes: AttributeCodes, box: Box) -> np.ndarray:
    """Per code, the share of its records a box keeps: 1 or 0, or for a bin the WHERE
    clause cuts, the share of its pieces in the box (`app.sql.pieces`)."""
    mask = dict(box).get(codes.name)
    if mask is None:
        return np.ones(codes.size)
    pieces = plan.pieces.get(codes.name)
    if pieces is not None:
        return pieces.weights(mask)
    return np.array([(mask >> c) & 1 for c in range(codes.size)], dtype=float)


def bound_rows(plan: SqlPlan, attribute: str) -> tuple[bool, bool]:
    """Which extra rows an attribute's sums need for its aggregates' bounds: Σ low and
    Σ high (SUM, AVG of a binned attribute) and each bin's count (VAR, STDDEV)."""
    codes = plan.codes[attribute]
    if codes.kind == "categorical" or not (codes.binned or plan.clipped_edges):
        return False, False
    functions = {spec.function for spec in plan.aggregates if spec.attribute == attribute}
    return bool(functions & {"sum", "avg"}), bool(functions & VARIANCES)


def _moment_rows(
    codes: AttributeCodes, edges: bool = False, histogram: bool = False, clipped: bool = False
) -> np.ndarray:
    rows = [codes.non_null, codes.points, codes.points**2]
    if edges:
        low, high = (np.zeros(codes.size) for _ in range(2))
        low[: codes.value_count], high[: codes.value_count] = codes.value_ranges
        rows += [low, high]
        if clipped:  # a record counted or not: its value, or nothing (0)
            rows += [np.minimum(low, 0.0), np.maximum(high, 0.0)]
    if histogram:
        rows.extend(np.eye(codes.size)[: codes.value_count])
    return np.stack(rows)


def _moment_rows_in(plan: SqlPlan, codes: AttributeCodes, box: Box, mask: np.ndarray) -> np.ndarray:
    """Σ 1, Σ x, Σ x² per code over the box: a bin the WHERE clause cuts contributes its
    pieces in the box, each at its own mean (`app.sql.pieces`)."""
    pieces = plan.pieces.get(codes.name)
    piece_mask = dict(box).get(codes.name)
    if pieces is None or piece_mask is None:
        rows: np.ndarray = _moment_rows(codes) * mask
        return rows
    return pieces.moment_rows(piece_mask, _moment_rows(codes))


def _term_query(
    plan: SqlPlan,
    domain: Domain,
    index: int,
    box: Box,
    attribute: str | None,
    values: bool = False,
) -> TermQuery:
    factors: list[QueryFactor] = []
    shape: list[int] = []
    moment_axis = None
    rows_count = MOMENT_ROWS
    names = list(plan.group)
    if attribute is not None and attribute not in names:
        names.append(attribute)
    names += [name for name, _ in box if name not in names]
    for name in names:
        codes = plan.codes[name]
        mask = _mask_vector(plan, codes, box)
        grouped = name in plan.group
        if grouped and name == attribute:
            # One code per group cell: its bin count is its Σ 1 (see `totals`).
            rows = _moment_rows_in(plan, codes, box, mask)
            matrix = np.zeros((codes.size * MOMENT_ROWS, codes.size))
            for code in range(codes.size):
                matrix[code * MOMENT_ROWS : (code + 1) * MOMENT_ROWS, code] = rows[:, code]
            shape += [codes.size, MOMENT_ROWS]
            moment_axis = len(shape) - 1
        elif grouped:
            matrix = np.diag(mask)
            shape.append(codes.size)
        elif name == attribute and values:
            matrix = np.diag(mask)
            shape.append(codes.size)
            moment_axis = len(shape) - 1
        elif name == attribute:
            matrix = _moment_rows(codes, *bound_rows(plan, name), plan.clipped_edges)
            if name in plan.pieces:  # a cut bin: its pieces in the box at their own mean
                matrix[:MOMENT_ROWS] = _moment_rows_in(plan, codes, box, mask)
                matrix[MOMENT_ROWS:] *= mask
            else:
                matrix = matrix * mask
            rows_count = matrix.shape[0]
            shape.append(rows_count)
            moment_axis = len(shape) - 1
        else:
            matrix = mask.reshape(1, -1)
        kind = "groups" if matrix.shape[0] > 1 else "weights"
        labels = tuple(str(row) for row in range(matrix.shape[0]))
        factors.append(QueryFactor(name, matrix, kind, labels))
    return TermQuery(
        index,
        attribute,
        FactoredQuery(domain, tuple(factors)),
        tuple(shape),
        moment_axis,
        rows_count,
        values,
    )


def build_queries(plan: SqlPlan, domain: Domain) -> tuple[TermQuery, ...]:
    """Every factored query the plan needs: per term, its counts and each attribute's sums."""
    queries = []
    for index, (_, box) in enumerate(plan.terms):
        queries.append(_term_query(plan, domain, index, box, None))
        for attribute in plan.moment_attributes:
            queries.append(_term_query(plan, domain, index, box, attribute))
        for attribute in plan.quantile_attributes:
            if attribute not in plan.group:  # grouped: each group holds one code
                queries.append(_term_query(plan, domain, index, box, attribute, values=True))
    return tuple(queries)


def group_cells(plan: SqlPlan) -> int:
    return math.prod(plan.codes[name].size for name in plan.group)


def totals(plan: SqlPlan, queries: Sequence[TermQuery], answers: Sequence[np.ndarray]) -> Totals:
    """The signed sum of the terms' answers: counts, sums, edge sums and bin counts per
    group cell."""
    cells = group_cells(plan)
    count = np.zeros(cells)
    sums = {a: np.zeros((cells, MOMENT_ROWS)) for a in plan.moment_attributes}
    edges: dict[str, np.ndarray] = {}
    histograms: dict[str, np.ndarray] = {}
    values: dict[str, np.ndarray] = {
        a: np.zeros((cells, plan.codes[a].size))
        for a in plan.quantile_attributes
        if a not in plan.group
    }
    edge_rows = EDGE_ROWS * (2 if plan.clipped_edges else 1)
    for attribute in plan.moment_attributes:  # zero when the region is empty
        with_edges, with_histogram = bound_rows(plan, attribute)
        if with_edges:
            edges[attribute] = np.zeros((cells, edge_rows))
        if with_histogram:
            histograms[attribute] = np.zeros((cells, plan.codes[attribute].value_count))
    for item, answer in zip(queries, answers, strict=True):
        coefficient = plan.terms[item.term][0]
        table = np.asarray(answer, dtype=float).reshape(item.shape)
        if item.attribute is None:
            count += coefficient * table.reshape(cells)
            continue
        if item.values:
            if item.moment_axis is not None:
                table = np.moveaxis(table, item.moment_axis, -1)
            values[item.attribute] += coefficient * table.reshape(cells, -1)
            continue
        if item.moment_axis is not None:
            table = np.moveaxis(table, item.moment_axis, -1)
        table = coefficient * table.reshape(cells, item.rows)
        sums[item.attribute] += table[:, :MOMENT_ROWS]
        if item.rows == MOMENT_ROWS:
            continue
        with_edges, with_histogram = bound_rows(plan, item.attribute)
        start = MOMENT_ROWS
        if with_edges:
            edges[item.attribute] += table[:, start : start + edge_rows]
            start += edge_rows
        if with_histogram:
            histograms[item.attribute] += table[:, start:]
    for attribute in plan.moment_attributes:
        with_edges, with_histogram = bound_rows(plan, attribute)
        if attribute in plan.group and (with_edges or with_histogram):
            counts = _grouped_histogram(plan, attribute, sums[attribute][:, 0])
            low, high = plan.codes[attribute].value_ranges
            if with_edges:
                ends = [low, high]
                if plan.clipped_edges:
                    ends += [np.minimum(low, 0.0), np.maximum(high, 0.0)]
                edges[attribute] = np.stack([counts @ end for end in ends], axis=1)
            if with_histogram:
                histograms[attribute] = counts
    for attribute in plan.quantile_attributes:
        if attribute in plan.group:  # one-hot at each group's own code, times its count
            axis = plan.group.index(attribute)
            sizes = [plan.codes[name].size for name in plan.group]
            own = np.unravel_index(np.arange(cells), sizes)[axis]
            table = np.zeros((cells, plan.codes[attribute].size))
            table[np.arange(cells), own] = count
            values[attribute] = table
    return Totals(count, sums, histograms, edges, values)


def _grouped_histogram(plan: SqlPlan, attribute: str, present: np.ndarray) -> np.ndarray:
    """Grouped by the attribute itself, each group cell holds one code: its count."""
    codes = plan.codes[attribute]
    sizes = [plan.codes[name].size for name in plan.group]
    own = np.unravel_index(np.arange(group_cells(plan)), sizes)[plan.group.index(attribute)]
    histogram = np.zeros((present.size, codes.value_count))
    valued = own < codes.value_count
    histogram[np.flatnonzero(valued), own[valued]] = present[valued]
    return histogram


def _outer(vectors: Sequence[np.ndarray]) -> np.ndarray:
    result = np.ones(1)
    for vector in vectors:
        result = np.multiply.outer(result, vector).reshape(-1)
    return result


def support(plan: SqlPlan, attribute: str | None) -> np.ndarray:
    """Per group cell: whether the WHERE region holds any cell of that group (with a
    value of `attribute`, when given). Groups without are left out, as SQL leaves out
    groups with no rows."""
    found = np.zeros(group_cells(plan), dtype=bool)
    for box in plan.region:
        masks = dict(box)
        if attribute is not None and attribute not in plan.group:
            codes = plan.codes[attribute]
            space = plan.pieces.get(attribute) or codes
            if not masks.get(attribute, space.full) & space.values_mask:
                continue
        vectors = []
        for name in plan.group:
            codes = plan.codes[name]
            vector = _mask_vector(plan, codes, box) > 0
            if name == attribute:
                vector = vector & (codes.non_null > 0)
            vectors.append(vector.astype(float))
        found |= _outer(vectors) > 0
    return found


def error_weights(plan: SqlPlan, spec: AggregateSpec) -> tuple[tuple[str, ...], np.ndarray] | None:
    """For COUNT and SUM: the marginal whose cells the answer adds up, and per group cell
    Σ w² over the cells it adds (w: 1 for counts, x for sums), so that a per-cell standard
    error σ of that marginal gives the answer's standard error σ·√(Σ w²). None for the
    other aggregates (ratios: no error is claimed)."""
    if spec.function not in ("count", "sum"):
        return None
    attribute = spec.attribute
    names = tuple(
        dict.fromkeys([*plan.group, *plan.where_attributes, *([attribute] if attribute else [])])
    )
    weights = np.zeros(group_cells(plan))
    for coefficient, box in plan.terms:
        vectors = []
        scalar = 1.0
        for name in names:
            codes = plan.codes[name]
            vector = _mask_vector(plan, codes, box)
            if name == attribute:
                vector = vector * (codes.non_null if spec.function == "count" else codes.points**2)
            if name in plan.group:
                vectors.append(vector)
            else:
                scalar *= float(vector.sum())
        weights += coefficient * scalar * _outer(vectors)
    return names, np.maximum(weights, 0.0)
