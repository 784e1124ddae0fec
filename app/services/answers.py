"""Free answers: API requests in the dataset's own labels and values → model queries → JSON.

Everything here is post-processing of the dataset's latest model (`app.services.models`):
it reads no records, draws no noise and never touches the ledger. Each function takes
a `LoadedModel` and returns plain JSON-ready values (lists via `ndarray.tolist()`), so
the routers can send them without re-validating large response models.

- `marginal_answer` — counts N̂·p over some attributes, one label tuple per cell
  (row-major), with the standard error the measurements covering them imply
  (AIM §5, Theorem 1's estimator) and a hook for the error bound (AIM Thms 2/4).
- `count_answer` — one number for `where=attr:v1,v2` / `where=attr:lo..hi` filters.
- `queries_answer` — a batch of factored queries (Private-PGM appendix B): `where`
  value sets or ranges, `by` value / cdf / groups, `weights`, `moments`.
- `synthetic_csv` — records sampled from the model, as CSV in the schema's labels.

Each of marginals, counts and queries can also be checked and sized first
(`marginal_size`, `count_query` + `count_size`, `prepare_queries`: a `WorkSize`) and
computed afterwards, so the API can decide where to compute it. `visible_ready_model`
gives the version a request is answered from, loaded and calibrated; `ready_model`
says whether a version is in that state already (answering it then does no slow
first-use work).

Values are given as the schema admits them (`app.schema`): categorical values, numeric
bin labels such as "[18, 30)" or half-open ranges on bin edges, integer codes. Every
problem with a request is an `InvalidRequest` (422) naming the parameter or field.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cachetools import LRUCache
from sqlalchemy.orm import Session

from app.db import Database
from app.errors import InvalidRequest
from app.pgm import queries as q
from app.pgm.domain import DomainError
from app.pgm.elimination import InferenceTooLarge
from app.pgm.queries import FactoredQuery, QueryFactor
from app.schema import Attribute, DatasetSchema, SchemaError, format_number
from app.services import models as model_service
from app.services.bounds import marginal_bound
from app.services.models import LoadedModel

# Largest intermediate table one query's variable elimination may build (8 bytes a
# cell): keeps a single request's memory bounded whatever attributes it names.
MAX_INFERENCE_CELLS = 5_000_000
MAX_QUERIES_PER_REQUEST = 1_000
MAX_MOMENT_ORDER = 8
MAX_SYNTHETIC_ROWS = 10_000_000
SYNTHETIC_CHUNK_ROWS = 20_000
# Marginal counts are rounded to this many decimals (thousandths of a record).
COUNT_DECIMALS = 3


class TooManyCells(InvalidRequest):
    """The answer would have more cells than the server returns in one response."""

    code = "too_many_cells"


class QueryTooLarge(InvalidRequest):
    """Answering this query needs a larger intermediate table than the server allows."""

    code = "query_too_large"


def _invalid(parameter: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{parameter}: {message}", parameter=parameter)


def _too_large(error: InferenceTooLarge, parameter: str) -> QueryTooLarge:
    return QueryTooLarge(
        f"{parameter}: {error}",
        parameter=parameter,
        cells_needed=error.cells,
        max_cells=error.max_cells,
    )


def visible_model(session: Session, dataset_id: str, *, tenant_id: str | None) -> LoadedModel:
    """The dataset's latest model, if the caller may see the dataset.

    `tenant_id` None is the admin. A tenant without a grant gets NotFound exactly as
    for a missing dataset; a visible dataset without a model gets NoModel (404).
    """
    version = model_service.visible_latest_version(session, dataset_id, tenant_id=tenant_id)
    if version is None:
        raise model_service.NoModel()
    return model_service.current_model(session, dataset_id, version=version)


# Loaded models whose lazy inference state (the calibrated junction tree) has been
# built by `load_ready_model`: answering from them never does that work first.
_ready_models: weakref.WeakSet[LoadedModel] = weakref.WeakSet()
_ready_lock = threading.Lock()


def ready_model(dataset_id: str, version: int) -> LoadedModel | None:
    """This process's copy of a version, if it is loaded and calibrated already."""
    cached = model_service.process_model_cache().get(dataset_id, version)
    if cached is None:
        return None
    with _ready_lock:
        return cached if cached in _ready_models else None


def load_ready_model(database: Database, dataset_id: str, version: int) -> LoadedModel:
    """Load (or take from the cache) one version and calibrate it: the slow first use of
    a version, for a worker thread. The caller has checked the dataset is visible."""
    with database.read_only() as session:
        loaded = model_service.current_model(session, dataset_id, version=version)
    loaded.model.calibrated_tree  # noqa: B018 — belief propagation, once per version
    with _ready_lock:
        _ready_models.add(loaded)
    return loaded


def visible_ready_model(
    database: Database, dataset_id: str, *, tenant_id: str | None
) -> LoadedModel:
    """`visible_model` for a request: the visibility and latest-version check is one
    statement on a pooled connection (no session, never cached); a session is opened
    only when this process has not loaded that version yet."""
    version = model_service.visible_latest_version_on(
        database.engine, dataset_id, tenant_id=tenant_id
    )
    if version is None:
        raise model_service.NoModel()
    return ready_model(dataset_id, version) or load_ready_model(database, dataset_id, version)


# ---- shared pieces ------------------------------------------------------------------


def _attribute(schema: DatasetSchema, name: str, parameter: str) -> Attribute:
    try:
        return schema.attribute(name)
    except SchemaError as error:
        raise _invalid(parameter, f"{error}; known attributes: {', '.join(schema.names)}") from None


def _cell_labels(label_lists: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """One tuple of labels per cell of the table over these axes, row-major."""
    return list(itertools.product(*label_lists))


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


# ---- marginals ----------------------------------------------------------------------


def parse_attribute_list(
    schema: DatasetSchema, text: str | Sequence[str], *, parameter: str = "attrs"
) -> tuple[str, ...]:
    """`age,sex` (or a list of names) → validated names: known, distinct, non-empty."""
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    if not names or any(not n for n in names):
        raise _invalid(parameter, "give one or more attribute names separated by commas")
    for name in names:
        _attribute(schema, name, parameter)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise _invalid(parameter, f"attribute(s) named twice: {', '.join(repeated)}")
    return tuple(names)


@dataclass(frozen=True)
class StandardError:
    """Per-cell standard error of the combined measurements covering a marginal."""

    value: float | None  # None: no measurement covers the attributes
    covered_by: int


def standard_error(loaded: LoadedModel, attrs: Sequence[str]) -> StandardError:
    """AIM §5, Theorem 1: the inverse-variance-weighted combination of the projections.

    A measurement over s ⊇ r, projected onto r, sums n_s/n_r noisy cells into each
    cell of r, so its per-cell variance is (n_s/n_r)·σ² (Gaussian) or (n_s/n_r)·2b²
    (Laplace). The unbiased combination weighted by 1/v_i has variance 1/Σ 1/v_i.
    """
    wanted = set(attrs)
    domain = loaded.model.domain
    precision = 0.0
    covering = 0
    for measurement in loaded.measurements:
        if not wanted <= set(measurement.attributes):
            continue
        summed_cells = domain.cells([a for a in measurement.attributes if a not in wanted])
        precision += 1.0 / (summed_cells * measurement.noise_variance)
        covering += 1
    if covering == 0:
        return StandardError(value=None, covered_by=0)
    return StandardError(value=math.sqrt(1.0 / precision), covered_by=covering)


def error_bound(
    loaded: LoadedModel, attrs: Sequence[str], counts: np.ndarray
) -> dict[str, Any] | None:
    """A 95% upper bound on the L1 error of these counts, and which AIM theorem gave it.

    Theorem 2 (with its corollary for the model's answer) where Gaussian measurements
    cover the attributes; Theorem 4 for a workload marginal a mechanism never measured;
    None otherwise — no bound is claimed. See `app.services.bounds`.
    """
    return marginal_bound(loaded.bounds, loaded.model.domain, attrs, counts)


@dataclass(frozen=True)
class WorkSize:
    """How large answering a request is, in cells: what most of its time is spent on."""

    answer_cells: int  # encoded into the response
    intermediate_cells: int  # the largest table variable elimination builds


def marginal_size(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> WorkSize:
    """Check a marginal can be answered (TooManyCells, QueryTooLarge) and size its work."""
    cells = loaded.model.domain.cells(attrs)
    if cells > max_cells:
        raise TooManyCells(
            f"attrs: the marginal over {', '.join(attrs)} has {cells} cells, more than "
            f"the limit of {max_cells}; ask for fewer or smaller attributes",
            parameter="attrs",
            cells=cells,
            max_cells=max_cells,
        )
    try:
        plan = loaded.model.plan(attrs, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise _too_large(error, "attrs") from None
    return WorkSize(cells, plan.max_intermediate_cells)


def _marginal_counts(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> np.ndarray:
    marginal_size(loaded, attrs, max_cells=max_cells)
    try:
        counts = loaded.model.marginal(attrs, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise _too_large(error, "attrs") from None
    # N̂·p is non-negative: clamp the last-bit rounding of the elimination. Thousandths
    # of a record are far below any measurement's noise; fewer digits also halve the
    # response and its encoding time.
    return np.round(np.maximum(counts, 0.0).ravel(), COUNT_DECIMALS)


def _marginal_details(
    loaded: LoadedModel, attrs: Sequence[str], counts: np.ndarray
) -> dict[str, Any]:
    se = standard_error(loaded, attrs)
    untouched, note = untouched_note(loaded, attrs)
    return {
        "model_version": loaded.version,
        "measured": se.covered_by > 0,
        "covered_by": se.covered_by,
        "standard_error": se.value,
        "error_bound": error_bound(loaded, attrs, counts),
        "unmeasured_attributes": untouched,
        "note": note,
    }


def marginal_answer(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> dict[str, Any]:
    """The model's counts over `attrs` (axes in the order given) with cell labels:
    `{"attributes", "values", "counts", "model_version", "measured", "covered_by",
    "standard_error", "error_bound", "unmeasured_attributes", "note"}`."""
    counts = _marginal_counts(loaded, attrs, max_cells=max_cells)
    label_lists = [loaded.schema.attribute(a).labels() for a in attrs]
    return {
        "attributes": list(attrs),
        "values": _cell_labels(label_lists),
        "counts": counts.tolist(),
        **_marginal_details(loaded, attrs, counts),
    }


# Encoded cell labels of recent marginals, by dataset: they depend only on the
# schema, which is fixed when the dataset is uploaded, and encoding them is most of
# the cost of a marginal's response. The cache is bounded by the bytes it holds.
_LABELS_JSON_BYTES = 32 * 1024 * 1024  # all entries together
_LABELS_JSON_ENTRY_BYTES = 1024 * 1024  # larger label lists are encoded every time
_labels_json_cache: LRUCache[tuple[str, tuple[str, ...]], bytes] = LRUCache(
    maxsize=_LABELS_JSON_BYTES, getsizeof=len
)
_labels_json_lock = threading.Lock()


def _labels_json(loaded: LoadedModel, attrs: tuple[str, ...]) -> bytes:
    key = (loaded.dataset_id, attrs)
    with _labels_json_lock:
        encoded = _labels_json_cache.get(key)
    if encoded is not None:
        return encoded
    label_lists = [loaded.schema.attribute(a).labels() for a in attrs]
    encoded = _dumps(_cell_labels(label_lists))
    if len(encoded) <= _LABELS_JSON_ENTRY_BYTES:
        with _labels_json_lock:
            _labels_json_cache[key] = encoded
    return encoded


def _dumps(value: Any) -> bytes:
    # What Starlette's JSONResponse writes: compact, UTF-8, no NaN.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def marginal_json(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> bytes:
    """`marginal_answer` as JSON bytes, with the cell labels encoded once per marginal."""
    names = tuple(attrs)
    counts = _marginal_counts(loaded, names, max_cells=max_cells)
    return b"".join(
        (
            b'{"attributes":',
            _dumps(list(names)),
            b',"values":',
            _labels_json(loaded, names),
            b',"counts":',
            _dumps(counts.tolist()),
            b",",
            _dumps(_marginal_details(loaded, names, counts))[1:],
        )
    )


# ---- count --------------------------------------------------------------------------


def _split_values(attribute: Attribute, text: str) -> list[str]:
    """Comma-separated values; numeric bin labels ("[0, 18)") keep their inner comma."""
    if attribute.kind != "numeric":
        return [part.strip() for part in text.split(",")]
    parts: list[str] = []
    current: list[str] = []
    inside_bin = False
    for character in text:
        if character == "[":
            inside_bin = True
        elif character in ")]":
            inside_bin = False
        if character == "," and not inside_bin:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    parts.append("".join(current).strip())
    return parts


def _parse_bound(text: str, parameter: str, attribute: Attribute) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise _invalid(
            parameter, f"range bound {text!r} of {attribute.name!r} is not a number"
        ) from None
    if math.isnan(value):
        raise _invalid(parameter, f"range bound of {attribute.name!r} is not a number")
    return value


def _codes_in_range(
    attribute: Attribute, ge: float | None, lt: float | None, parameter: str
) -> np.ndarray:
    if ge is None and lt is None:
        raise _invalid(parameter, f"the range on {attribute.name!r} needs a lower or upper bound")
    try:
        return attribute.codes_in_range(ge, lt)
    except SchemaError as error:
        raise _invalid(parameter, str(error)) from None


def _codes_of_labels(attribute: Attribute, labels: Sequence[object], parameter: str) -> np.ndarray:
    if not labels:
        raise _invalid(parameter, f"give at least one value of {attribute.name!r}")
    try:
        return attribute.encode_labels(labels)
    except SchemaError as error:
        raise _invalid(parameter, str(error)) from None


def parse_where(
    schema: DatasetSchema, text: str, *, parameter: str = "where"
) -> tuple[str, np.ndarray]:
    """`attr:v1,v2` (a value set) or `attr:lo..hi` (half-open range) → (attribute, codes)."""
    name, separator, rest = text.partition(":")
    if not separator:
        raise _invalid(
            parameter,
            f"expected attr:value1,value2 or attr:lo..hi, got {text[:60]!r}",
        )
    attribute = _attribute(schema, name.strip(), parameter)
    rest = rest.strip()
    if attribute.kind != "categorical" and ".." in rest:
        low, _, high = rest.partition("..")
        ge = _parse_bound(low, parameter, attribute)
        lt = _parse_bound(high, parameter, attribute)
        return attribute.name, _codes_in_range(attribute, ge, lt, parameter)
    values = _split_values(attribute, rest) if rest else []
    if any(not v for v in values):
        raise _invalid(parameter, f"empty value in the list for {attribute.name!r}")
    return attribute.name, _codes_of_labels(attribute, values, parameter)


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
        raise _too_large(error, "where") from None
    return WorkSize(1, plan.max_intermediate_cells)


def count_result(loaded: LoadedModel, count: CountQuery) -> dict[str, Any]:
    """The model's answer to a parsed count."""
    try:
        value = loaded.model.answer(count.query, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise _too_large(error, "where") from None
    _, note = untouched_note(loaded, list(count.attributes))
    return {
        "count": max(float(value), 0.0),
        "model_version": loaded.version,
        "note": note,
    }


def count_answer(loaded: LoadedModel, where: Sequence[str]) -> dict[str, Any]:
    """The model's count of records matching every `where` filter (repeats intersect)."""
    return count_result(loaded, count_query(loaded, where))


# ---- factored queries ---------------------------------------------------------------


@dataclass(frozen=True)
class ValueRange:
    """A half-open range [ge, lt) on original values; either bound may be omitted."""

    ge: float | None = None
    lt: float | None = None


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
    axis_labels: tuple[tuple[str, ...], ...]

    @property
    def cells(self) -> int:
        return math.prod(len(labels) for labels in self.axis_labels)


def _cdf_labels(attribute: Attribute) -> list[str]:
    """Row k of a CDF counts codes 0..k: say which values that is."""
    if attribute.kind == "numeric":
        assert attribute.bins is not None
        labels = [f"< {format_number(e)}" for e in attribute.bins[1:]]
        labels[-1] = f"<= {format_number(attribute.bins[-1])}"
        return labels
    return [f"<= {label}" for label in attribute.labels()]


def build_query(loaded: LoadedModel, spec: QuerySpec, *, parameter: str) -> PreparedQuery:
    """Turn one `QuerySpec` into a factored query over the model's domain."""
    schema, domain = loaded.schema, loaded.model.domain
    seen: dict[str, str] = {}

    def attribute_for(section: str, name: str) -> Attribute:
        where_ = f"{parameter}.{section}.{name}"
        attribute = _attribute(schema, name, where_)
        if name in seen:
            raise _invalid(
                where_,
                f"attribute {name!r} already appears in {seen[name]}; a query gives each "
                "attribute one factor",
            )
        seen[name] = section
        return attribute

    row_factors: list[QueryFactor] = []
    axis_factors: list[QueryFactor] = []
    axis_attributes: list[str] = []
    try:
        for name, condition in spec.where.items():
            attribute = attribute_for("where", name)
            path = f"{parameter}.where.{name}"
            if isinstance(condition, ValueRange):
                codes = _codes_in_range(attribute, condition.ge, condition.lt, path)
            else:
                codes = _codes_of_labels(attribute, list(condition), path)
            row_factors.append(q.indicator(domain, name, codes))
        for name, row in spec.weights.items():
            attribute_for("weights", name)
            try:
                row_factors.append(q.weights(domain, name, row, label=f"weighted {name}"))
            except DomainError as error:
                raise _invalid(f"{parameter}.weights.{name}", str(error)) from None
        for name, how in spec.by.items():
            attribute = attribute_for("by", name)
            path = f"{parameter}.by.{name}"
            if isinstance(how, Grouping):
                if not how.groups:
                    raise _invalid(path, "groups needs at least one named group")
                members = {
                    group: _codes_of_labels(attribute, list(values), f"{path}.groups.{group}")
                    for group, values in how.groups.items()
                }
                factor = q.groups(domain, name, members)
            elif how == "value":
                factor = q.identity(domain, name, attribute.labels())
            elif how == "cdf":
                factor = q.prefix(domain, name, _cdf_labels(attribute))
            else:
                raise _invalid(path, 'use "value", "cdf" or {"groups": {...}}')
            axis_factors.append(factor)
            axis_attributes.append(name)
        for name, order in spec.moments.items():
            attribute = attribute_for("moments", name)
            path = f"{parameter}.moments.{name}"
            if not 1 <= order <= MAX_MOMENT_ORDER:
                raise _invalid(path, f"the moment order must be 1 to {MAX_MOMENT_ORDER}")
            try:
                points = attribute.midpoints()
            except SchemaError as error:
                raise _invalid(path, str(error)) from None
            axis_factors.append(q.moments(domain, name, points, order))
            axis_attributes.append(name)
        query = FactoredQuery(domain, tuple(row_factors + axis_factors))
    except DomainError as error:  # QueryError: wrong weight count, non-finite entries, …
        raise _invalid(parameter, str(error)) from None
    return PreparedQuery(
        query=query,
        axis_attributes=tuple(axis_attributes),
        axis_labels=tuple(f.labels for f in axis_factors),
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
        raise _invalid("queries", "give at least one query")
    if len(specs) > MAX_QUERIES_PER_REQUEST:
        raise _invalid(
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
    for index, item in enumerate(prepared):
        # Plans are cached per query shape, so checking each one first is cheap and
        # lets the refusal name the query.
        try:
            plan = model.query_plan(item.query, max_cells=MAX_INFERENCE_CELLS)
        except InferenceTooLarge as error:
            raise _too_large(error, f"queries[{index}]") from None
        largest = max(largest, plan.max_intermediate_cells)
    return PreparedBatch(tuple(prepared), WorkSize(cells, largest))


def answer_prepared(loaded: LoadedModel, batch: PreparedBatch) -> dict[str, Any]:
    """Answers of a prepared batch, each a table flattened row-major."""
    results = loaded.model.answer_many(
        [p.query for p in batch.items], max_cells=MAX_INFERENCE_CELLS
    )
    answers = []
    for item, result in zip(batch.items, results, strict=True):
        _, note = untouched_note(loaded, item.query.attributes)
        answers.append(
            {
                "attributes": list(item.axis_attributes),
                "labels": _cell_labels(item.axis_labels),
                "values": np.asarray(result, dtype=float).ravel().tolist(),
                "note": note,
            }
        )
    return {"answers": answers, "model_version": loaded.version}


def queries_answer(
    loaded: LoadedModel, specs: Sequence[QuerySpec], *, max_cells: int
) -> dict[str, Any]:
    """Answers of a batch of factored queries, each a table flattened row-major."""
    return answer_prepared(loaded, prepare_queries(loaded, specs, max_cells=max_cells))


# ---- synthetic records --------------------------------------------------------------


def synthetic_rows(loaded: LoadedModel, rows: int | None) -> int:
    """How many rows to sample: N̂ rounded by default, at most MAX_SYNTHETIC_ROWS."""
    count = loaded.model.default_rows() if rows is None else rows
    if count < 0:
        raise _invalid("rows", "must be zero or more")
    if count > MAX_SYNTHETIC_ROWS:
        raise _invalid(
            "rows",
            f"at most {MAX_SYNTHETIC_ROWS} rows per request"
            + (
                " (the model's estimated total is larger: ask for fewer rows)"
                if rows is None
                else ""
            ),
        )
    return count


def synthetic_csv(
    loaded: LoadedModel, rows: int, seed: int | None, *, chunk_rows: int = SYNTHETIC_CHUNK_ROWS
) -> Iterator[bytes]:
    """CSV records sampled from the model: a header of attribute names, then label cells."""
    schema = loaded.schema
    label_arrays = [np.asarray(a.labels(), dtype=object) for a in schema.attributes]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(schema.names)
    yield buffer.getvalue().encode()
    for chunk in loaded.model.sample_chunks(rows, seed, chunk_rows=chunk_rows):
        buffer.seek(0)
        buffer.truncate()
        columns = [labels[chunk[:, j]] for j, labels in enumerate(label_arrays)]
        writer.writerows(zip(*columns, strict=True))
        yield buffer.getvalue().encode()


# ---- the model itself ---------------------------------------------------------------


def model_description(loaded: LoadedModel) -> dict[str, Any]:
    """What GET /model shows: version, structure, fit figures, measurements covered."""
    measurements = []
    for m in loaded.measurements:
        scale_key = "sigma" if m.noise == "gaussian" else "scale"
        measurements.append(
            {"id": m.id, "attributes": list(m.attributes), "noise": m.noise, scale_key: m.scale}
        )
    return {
        "version": loaded.version,
        "cliques": [list(c) for c in loaded.cliques],
        "fitted_at": loaded.fitted_at.isoformat(),
        "solver": loaded.solver,
        "iterations": loaded.iterations,
        "loss": loaded.loss,
        "fit_seconds": loaded.seconds,
        "measurement_count": len(loaded.measurements),
        "measurements": measurements,
    }
