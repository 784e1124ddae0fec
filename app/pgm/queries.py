"""Factored linear queries Q = Q₁ ⊗ … ⊗ Q_d and their answers by variable elimination.

Private-PGM (McKenna, Sheldon, Miklau, ICML 2019), appendix B, Algorithm 3: a query
whose matrix is a Kronecker product of one small matrix per attribute is answered
without the full joint: each Q_i (rows × size_i) joins the model as one more factor
over (a new row axis, attribute i), and variable elimination sums every attribute
out. Attributes a query does not mention are summed out (their Q_i is a row of ones).

A `QueryFactor` is one Q_i with a label per row; the builders make each kind of
Private-PGM's Table 2: `identity` (keep each value), `ones` (sum out), `indicator`
(a value set: evidence), `prefix` (CDF rows), `groups` (R_f: one row per group),
`weights` (any row vector), `moments` (rows value¹ … value^K; `bounded_moments` adds
the sign parts of each power's interval, `signed_rows`). A `FactoredQuery`
gathers factors over distinct attributes of one domain, checked when built.

The answer of a query has one axis per factor with more than one row, in the order
the query lists its factors, and holds counts (N̂ · Q p).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from app.pgm.bin_bounds import power_range
from app.pgm.calibrated_tree import CalibratedTree, TreePlan
from app.pgm.domain import Domain, DomainError
from app.pgm.elimination import Variable

KINDS = ("identity", "ones", "indicator", "prefix", "groups", "weights", "moments")

# Stacked batches of same-shaped queries are split so one einsum table stays below this.
_BATCH_CELLS = 1 << 22


class QueryError(DomainError):
    """A factored query that does not fit the domain (unknown attribute, wrong sizes)."""


def _frozen(matrix: np.ndarray) -> np.ndarray:
    array = np.array(matrix, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class QueryFactor:
    """One Q_i: a (rows × size) matrix over one attribute's codes, a label per row."""

    attribute: str
    matrix: np.ndarray
    kind: str
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "matrix", _frozen(self.matrix))
        object.__setattr__(self, "labels", tuple(str(label) for label in self.labels))
        if self.kind not in KINDS:
            raise QueryError(f"unknown query factor kind {self.kind!r}")
        if self.matrix.ndim != 2 or self.matrix.shape[0] < 1 or self.matrix.shape[1] < 1:
            raise QueryError(f"the factor on {self.attribute!r} must be a non-empty 2-D matrix")
        if not np.all(np.isfinite(self.matrix)):
            raise QueryError(f"the factor on {self.attribute!r} has non-finite entries")
        if len(self.labels) != self.matrix.shape[0]:
            raise QueryError(f"the factor on {self.attribute!r} needs one label per row")

    @property
    def rows(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def size(self) -> int:
        return int(self.matrix.shape[1])

    @cached_property
    def sums_out(self) -> bool:
        """A single row of ones: the attribute is summed out and contributes nothing."""
        return self.rows == 1 and bool(np.all(self.matrix == 1.0))

    @cached_property
    def keeps_values(self) -> bool:
        """The identity: the attribute's own axis is the answer's axis."""
        return self.rows == self.size and bool(np.array_equal(self.matrix, np.eye(self.size)))


def _size(domain: Domain, attribute: str) -> int:
    if attribute not in domain:
        raise QueryError(f"unknown attribute {attribute!r}")
    return domain.size_of(attribute)


def _codes(domain: Domain, attribute: str, codes: Iterable[int]) -> list[int]:
    size = _size(domain, attribute)
    checked = []
    for code in codes:
        if int(code) != code or not 0 <= code < size:
            raise QueryError(f"code {code!r} is outside attribute {attribute!r} (0..{size - 1})")
        checked.append(int(code))
    return checked


def identity(domain: Domain, attribute: str, labels: Sequence[str] | None = None) -> QueryFactor:
    """Keep every value: one row per code."""
    size = _size(domain, attribute)
    names = tuple(labels) if labels is not None else tuple(str(c) for c in range(size))
    return QueryFactor(attribute, np.eye(size), "identity", names)


def ones(domain: Domain, attribute: str) -> QueryFactor:
    """Sum the attribute out (the same as not mentioning it)."""
    return QueryFactor(attribute, np.ones((1, _size(domain, attribute))), "ones", ("all",))


def indicator(
    domain: Domain, attribute: str, codes: Iterable[int], label: str | None = None
) -> QueryFactor:
    """Evidence: one row that is 1 on the given codes and 0 elsewhere."""
    chosen = _codes(domain, attribute, codes)
    row = np.zeros((1, _size(domain, attribute)))
    row[0, chosen] = 1.0
    name = (
        label if label is not None else "in{" + ",".join(str(c) for c in sorted(set(chosen))) + "}"
    )
    return QueryFactor(attribute, row, "indicator", (name,))


def prefix(domain: Domain, attribute: str, labels: Sequence[str] | None = None) -> QueryFactor:
    """Cumulative counts: row k is 1 on codes 0..k."""
    size = _size(domain, attribute)
    names = tuple(labels) if labels is not None else tuple(f"<={c}" for c in range(size))
    return QueryFactor(attribute, np.tril(np.ones((size, size))), "prefix", names)


def groups(
    domain: Domain,
    attribute: str,
    members: Mapping[str, Iterable[int]] | Sequence[Iterable[int]],
) -> QueryFactor:
    """R_f: one row per group, 1 on the group's codes (named groups or a list of code lists)."""
    items = (
        list(members.items())
        if isinstance(members, Mapping)
        else [(str(k), codes) for k, codes in enumerate(members)]
    )
    if not items:
        raise QueryError(f"a grouping of {attribute!r} needs at least one group")
    matrix = np.zeros((len(items), _size(domain, attribute)))
    for row, (_, codes) in enumerate(items):
        matrix[row, _codes(domain, attribute, codes)] = 1.0
    return QueryFactor(attribute, matrix, "groups", tuple(name for name, _ in items))


def weights(
    domain: Domain, attribute: str, values: Sequence[float], label: str = "weighted"
) -> QueryFactor:
    """Any row vector over the attribute's codes."""
    row = np.asarray(values, dtype=float).reshape(1, -1)
    if row.shape[1] != _size(domain, attribute):
        raise QueryError(
            f"weights for {attribute!r} need {_size(domain, attribute)} entries, got {row.shape[1]}"
        )
    return QueryFactor(attribute, row, "weights", (label,))


def moments(domain: Domain, attribute: str, values: Sequence[float], order: int) -> QueryFactor:
    """E_K: rows value^1 … value^K, given the numeric value of each code (e.g. bin midpoints)."""
    points = np.asarray(values, dtype=float)
    if points.shape != (_size(domain, attribute),):
        raise QueryError(f"moments of {attribute!r} need one value per code")
    if int(order) != order or order < 1:
        raise QueryError("the moment order must be a positive integer")
    matrix = np.stack([points**k for k in range(1, int(order) + 1)])
    return QueryFactor(
        attribute, matrix, "moments", tuple(f"^{k}" for k in range(1, int(order) + 1))
    )


# A signed factor's rows come in five blocks of K: the values, then the sign parts of
# each row's interval (see `signed_rows`).
SIGNED_BLOCKS = 5


def signed_rows(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Rows (K × size) stacked with the sign parts of the intervals [low, high] their
    entries may range over: values; low⁺, high⁺ (y⁺ = max(y, 0) lies between them);
    high⁻, low⁻ (y⁻ = max(−y, 0) lies between them) — 5K rows.

    A product of such factors expands into terms ± Π y_i^± of non-negative parts, each
    bounded by the products of its parts' ends, so a query of signed factors answers
    its own guaranteed bounds in one elimination (`app.pgm.bin_bounds.signed_bounds`).
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    low = np.atleast_2d(np.asarray(low, dtype=float))
    high = np.atleast_2d(np.asarray(high, dtype=float))
    if not values.shape == low.shape == high.shape:
        raise QueryError("values and their interval ends need the same shape")
    if np.any(low > high):
        raise QueryError("an interval's low end is above its high end")
    return np.concatenate(
        [
            values,
            np.maximum(low, 0.0),
            np.maximum(high, 0.0),
            np.maximum(-high, 0.0),
            np.maximum(-low, 0.0),
        ]
    )


def bounded_moments(
    domain: Domain,
    attribute: str,
    values: Sequence[float],
    low: Sequence[float],
    high: Sequence[float],
    order: int,
) -> QueryFactor:
    """E_K with bounds: rows value^1 … value^K, then the sign parts of the least and
    greatest x^k each code allows (its values lie in [low, high]; `signed_rows`)."""
    factor = moments(domain, attribute, values, order)
    low_arr = np.asarray(low, dtype=float)
    high_arr = np.asarray(high, dtype=float)
    if low_arr.shape != (factor.size,) or high_arr.shape != (factor.size,):
        raise QueryError(f"moment bounds of {attribute!r} need one interval per code")
    ends = [power_range(low_arr, high_arr, k) for k in range(1, factor.rows + 1)]
    matrix = signed_rows(
        factor.matrix, np.stack([e[0] for e in ends]), np.stack([e[1] for e in ends])
    )
    parts = ("lo+", "hi+", "lo-", "hi-")
    labels = factor.labels + tuple(f"{label} {part}" for part in parts for label in factor.labels)
    return QueryFactor(attribute, matrix, "moments", labels)


@dataclass(frozen=True, eq=False)
class FactoredQuery:
    """Q₁ ⊗ … ⊗ Q_k over distinct attributes of `domain`; the rest are summed out."""

    domain: Domain
    factors: tuple[QueryFactor, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        seen: set[str] = set()
        for factor in self.factors:
            if not isinstance(factor, QueryFactor):
                raise QueryError("a factored query is made of QueryFactor values")
            size = _size(self.domain, factor.attribute)
            if factor.size != size:
                raise QueryError(
                    f"the factor on {factor.attribute!r} has {factor.size} columns; "
                    f"the attribute has {size} values"
                )
            if factor.attribute in seen:
                raise QueryError(f"attribute {factor.attribute!r} has two factors")
            seen.add(factor.attribute)

    @classmethod
    def of(cls, domain: Domain, *factors: QueryFactor) -> FactoredQuery:
        return cls(domain, tuple(factors))

    @property
    def attributes(self) -> tuple[str, ...]:
        return tuple(f.attribute for f in self.factors)

    @property
    def output_factors(self) -> tuple[QueryFactor, ...]:
        """The factors with more than one row: one answer axis each, in query order."""
        return tuple(f for f in self.factors if f.rows > 1)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(f.rows for f in self.output_factors)

    @property
    def labels(self) -> tuple[tuple[str, ...], ...]:
        return tuple(f.labels for f in self.output_factors)

    @cached_property
    def _layout(
        self,
    ) -> tuple[
        tuple[str, ...],
        tuple[tuple[Variable, ...], ...],
        tuple[np.ndarray, ...],
        tuple[Variable, ...],
    ]:
        """(attributes touched, extra factor scopes, their tables, variables kept)."""
        touched: list[str] = []
        scopes: list[tuple[Variable, ...]] = []
        tables: list[np.ndarray] = []
        keep: list[Variable] = []
        for position, factor in enumerate(self.factors):
            if factor.sums_out:
                continue
            touched.append(factor.attribute)
            if factor.keeps_values:
                keep.append(factor.attribute)
            elif factor.rows == 1:
                scopes.append((factor.attribute,))
                tables.append(factor.matrix[0])
            else:
                row_axis = ("#row", position)
                scopes.append((row_axis, factor.attribute))
                tables.append(factor.matrix)
                keep.append(row_axis)
        return tuple(touched), tuple(scopes), tuple(tables), tuple(keep)

    @property
    def signature(self) -> tuple[object, ...]:
        """Queries with equal signatures share one elimination plan."""
        touched, scopes, tables, keep = self._layout
        return (touched, scopes, tuple(t.shape for t in tables), keep)


def _check_domain(tree: CalibratedTree, query: FactoredQuery) -> None:
    for factor in query.factors:
        if (
            factor.attribute not in tree.domain
            or tree.domain.size_of(factor.attribute) != factor.size
        ):
            raise QueryError(f"the query's attribute {factor.attribute!r} does not match the model")


def plan_query(
    tree: CalibratedTree, query: FactoredQuery, *, max_cells: int | None = None
) -> TreePlan:
    """The (cached) elimination plan of a query: see `max_intermediate_cells`."""
    _check_domain(tree, query)
    touched, scopes, _, keep = query._layout
    return tree.plan(touched, scopes, keep, extra_sizes=_row_sizes(query), max_cells=max_cells)


def answer_query(
    tree: CalibratedTree, query: FactoredQuery, total: float = 1.0, *, max_cells: int | None = None
) -> np.ndarray:
    """total · Q p for one query (axes: the query's factors with more than one row)."""
    _check_domain(tree, query)
    touched, scopes, tables, keep = query._layout
    return tree.contract(
        touched, list(zip(scopes, tables, strict=True)), keep, max_cells=max_cells, scale=total
    )


def answer_queries(
    tree: CalibratedTree,
    queries: Sequence[FactoredQuery],
    total: float = 1.0,
    *,
    max_cells: int | None = None,
) -> list[np.ndarray]:
    """Answers of many queries; same-shaped queries are stacked into one elimination.

    Queries with one signature differ only in their matrices, so they are answered
    together: every query table gets a shared batch axis, which the elimination
    keeps, and each einsum serves the whole group.
    """
    answers: list[np.ndarray | None] = [None] * len(queries)
    groups_by_signature: dict[tuple[object, ...], list[int]] = {}
    for index, query in enumerate(queries):
        _check_domain(tree, query)
        groups_by_signature.setdefault(query.signature, []).append(index)
    for members in groups_by_signature.values():
        first = queries[members[0]]
        touched, scopes, _, keep = first._layout
        single = tree.plan(
            touched, scopes, keep, extra_sizes=_row_sizes(first), max_cells=max_cells
        )
        if len(members) == 1 or not scopes:
            # Lone queries, and plain marginals (identical answers), need one run each.
            shared = None if scopes else tree.run(single, scale=total)
            for index in members:
                answers[index] = (
                    shared.copy()
                    if shared is not None
                    else answer_query(tree, queries[index], total, max_cells=max_cells)
                )
            continue
        chunk = max(1, _BATCH_CELLS // max(single.max_intermediate_cells, 1))
        batch_axis: Variable = ("#batch",)
        batch_scopes = tuple((batch_axis, *scope) for scope in scopes)
        for start in range(0, len(members), chunk):
            part = members[start : start + chunk]
            stacked = [
                np.stack([queries[i]._layout[2][k] for i in part]) for k in range(len(scopes))
            ]
            sizes = {**_row_sizes(first), batch_axis: len(part)}
            plan = tree.plan(touched, batch_scopes, (batch_axis, *keep), extra_sizes=sizes)
            result = tree.run(plan, stacked, scale=total)
            for offset, index in enumerate(part):
                answers[index] = result[offset]
    complete = [a for a in answers if a is not None]
    if len(complete) != len(answers):
        raise QueryError("a query of the batch was left unanswered")
    return complete


def _row_sizes(query: FactoredQuery) -> dict[Variable, int]:
    _, scopes, tables, _ = query._layout
    return {
        scope[0]: table.shape[0]
        for scope, table in zip(scopes, tables, strict=True)
        if len(scope) == 2
    }
