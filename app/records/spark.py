"""The Spark engine: a registered source counted by one Spark SQL job through Spark Connect.

`SparkEngine(remote)` talks to a Spark Connect server (`sc://host:15002`, or an existing
session in tests). An access is one query: the source's fingerprinted files read (with
the URI's folder as `basePath`, so hive partition folders give columns, as text), the
needed columns encoded to codes by SQL expressions (`app.records.spark_sql`), the unit's
cap by a window over the row key, and every requested marginal's largest sets counted by
one aggregation with GROUPING SETS; only the counts come back, and smaller marginals are
summed from them here. Plain Spark SQL only: no Python runs on the cluster.

pyspark is an optional dependency (the `spark` extra), imported only when the engine is
built: the service runs without it unless PRIVQ_RECORD_ENGINE=spark.

Errors: at registration, a source that cannot be read as the schema asks (not Parquet,
a column missing or of a type the attribute cannot read, a value outside the schema) is
an `app.ingest.IngestError`, as an upload's would be; at a count, where registration
has read it, that is `SourceChanged`. Anything else Spark reports is `SparkFailed`,
whose message never carries Spark's (which could quote a value), only its error class.
"""

from __future__ import annotations

import logging
import math
import posixpath
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np

from app.errors import InvariantViolated, ServiceUnavailable, SourceChanged
from app.ingest import IngestError
from app.ingest.columns import ColumnEncoder
from app.ingest.errors import quote_cell
from app.records.engine import Marginal, UnitCap, Validation
from app.records.spark_sql import (
    Cap,
    Encoding,
    UnreadableColumn,
    code_stages,
    count_query,
    examples_query,
    grouping_id,
    identifier,
    sum_query,
    unit_id_expression,
    validation_query,
)
from app.schema import DatasetSchema
from app.sources import Source

logger = logging.getLogger("privq.records")

EXAMPLES = 5
# Spark's error classes that say the files are not Parquet a reader can read.
_UNREADABLE_CLASSES = (
    "FAILED_READ_FILE",
    "PATH_NOT_FOUND",
    "CANNOT_READ",
    "UNABLE_TO_INFER_SCHEMA",
    "PARQUET",
)
# The engine's session reads as an upload and the local engine do: partition folders'
# values as text (Spark would infer "2024" an int), column names case-sensitively (Spark
# would match a schema's "Age" with a file's "age").
_SESSION_CONF = {
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.caseSensitive": "true",
}


class SparkNotInstalled(ServiceUnavailable, code="spark_not_installed"):
    """PRIVQ_RECORD_ENGINE=spark needs the Spark Connect client on the workers: install
    privq's spark extra (pip install 'privq[spark]', which brings pyspark[connect])."""


class SparkFailed(ServiceUnavailable, code="spark_failed"):
    """The Spark engine's query failed (the Spark Connect server could not be reached, or
    it refused or failed the query); nothing was counted."""


def _require_pyspark() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkNotInstalled() from None
    return SparkSession


class SparkEngine:
    """Counts registered sources through Spark Connect; see the module's docstring.

    `remote` is a Spark Connect URL (`sc://host:15002`: the session is made at the
    first access and kept) or an existing `SparkSession` (the tests' local one).
    """

    name = "spark"

    def __init__(self, remote: str | Any) -> None:
        self._builder = _require_pyspark().builder
        self._remote = remote if isinstance(remote, str) else None
        self._session: Any = None if isinstance(remote, str) else remote
        self._configured = False
        self._lock = threading.Lock()

    def session(self) -> Any:
        """The Spark session, connected (and configured) once."""
        with self._lock:
            with _spark_errors(reading=False):
                if self._session is None:
                    # A session of the engine's own (not the process's shared default), so
                    # that its settings and its lifetime are the engine's.
                    self._session = self._builder.remote(self._remote).create()
                if not self._configured:
                    for key, value in _SESSION_CONF.items():
                        self._session.conf.set(key, value)
                    self._configured = True
            return self._session

    @contextmanager
    def _reconnecting(self) -> Iterator[None]:
        """A failed query drops a session the engine made, so that the next access
        connects afresh (a restarted Spark Connect server forgets its sessions)."""
        try:
            yield
        except SparkFailed:
            if self._remote is not None:
                with self._lock:
                    self._session, self._configured = None, False
            raise

    # -- registration ------------------------------------------------------------------

    def validate(self, source: Source, schema: DatasetSchema, unit: UnitCap | None) -> Validation:
        with self._reconnecting():
            return self._validate(source, schema, unit)

    def _validate(self, source: Source, schema: DatasetSchema, unit: UnitCap | None) -> Validation:
        everything = tuple(range(len(schema.attributes)))
        session = self.session()
        frame, encoding = self._encoding(session, source, schema, everything, unit)
        with _spark_errors(reading=True):
            found = session.sql(validation_query(encoding), source=frame).collect()[0]
        rows = int(found["rows"])
        if rows == 0:
            raise IngestError("empty_file", "the source's Parquet files have no rows")
        bad = {
            a.name: int(found[f"bad{i}"])
            for i, a in enumerate(schema.attributes)
            if int(found[f"bad{i}"])
        }
        if bad:
            index = schema.names.index(next(iter(bad)))
            column = identifier(schema.attributes[index].name)
            query = examples_query(encoding, index, column, EXAMPLES)
            with _spark_errors(reading=True):
                shown = [row["v"] for row in session.sql(query, source=frame).collect()]
            floating = frame_types(frame)[schema.attributes[index].name] in ("float", "double")
            raise _out_of_schema(schema, index, bad, shown, floating)
        if unit is not None and int(found["no_id"]):
            raise IngestError(
                "missing_unit_id",
                f"the privacy unit column {unit.column!r} has no id on {int(found['no_id'])} "
                "row(s) of the source (a null, an empty text or a NaN); every row must name "
                "its unit",
                {"column": unit.column, "rows": int(found["no_id"])},
            )
        return Validation(rows=rows)

    # -- counting --------------------------------------------------------------------------

    def count(
        self,
        source: Source,
        schema: DatasetSchema,
        marginals: Sequence[Marginal],
        unit: UnitCap | None,
    ) -> dict[Marginal, np.ndarray]:
        with self._reconnecting():
            return self._count(source, schema, marginals, unit)

    def _count(
        self,
        source: Source,
        schema: DatasetSchema,
        marginals: Sequence[Marginal],
        unit: UnitCap | None,
    ) -> dict[Marginal, np.ndarray]:
        requested = [tuple(m) for m in marginals]
        if not requested:
            return {}
        positions = {name: i for i, name in enumerate(schema.names)}
        for marginal in requested:
            unknown = [a for a in marginal if a not in positions]
            if unknown or len(set(marginal)) != len(marginal):
                raise InvariantViolated(f"a marginal over {marginal!r} does not fit the schema")
        largest = largest_marginals(requested)
        sets = [tuple(positions[a] for a in m) for m in largest]
        if unit is not None:  # the row key needs every attribute's code
            needed = tuple(range(len(schema.attributes)))
        else:
            needed = tuple(sorted({i for s in sets for i in s}))
        session = self.session()
        try:
            frame, encoding = self._encoding(session, source, schema, needed, unit)
        except IngestError as error:  # registration read it; now it does not
            raise SourceChanged(
                f"the dataset's source no longer reads as it did at registration: {error.message}"
            ) from None
        cap = None
        if unit is not None:
            cap = Cap(unit.secret, unit.max_rows, tuple(range(len(schema.attributes))))
        query = count_query(encoding, sets, cap)
        try:
            with _spark_errors(reading=True):
                table = session.sql(query, source=frame).toArrow()
        except IngestError:
            raise SourceChanged(
                "the dataset's source no longer reads as Parquet as it did at registration"
            ) from None
        counted = _arrays(table, schema, largest, sets)
        return {m: _sum_to(m, counted) for m in requested}

    def fraction_sums(
        self,
        source: Source,
        schema: DatasetSchema,
        attributes: Sequence[str],
        unit: UnitCap | None,
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per binned attribute: each code's rows and sum of places within the bin, by one
        query (`spark_sql.sum_query`: the places computed beside the codes, the same cap,
        one grouping set per attribute); only the sums come back."""
        with self._reconnecting():
            return self._fraction_sums(source, schema, list(dict.fromkeys(attributes)), unit)

    def _fraction_sums(
        self, source: Source, schema: DatasetSchema, attributes: list[str], unit: UnitCap | None
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        positions = {name: i for i, name in enumerate(schema.names)}
        if not attributes or any(a not in positions for a in attributes):
            raise InvariantViolated(f"within-bin sums of {attributes!r} do not fit the schema")
        indices = tuple(sorted(positions[a] for a in attributes))
        every = tuple(range(len(schema.attributes)))
        session = self.session()
        try:
            frame, encoding = self._encoding(
                session, source, schema, every if unit is not None else indices, unit
            )
        except IngestError as error:
            raise SourceChanged(
                f"the dataset's source no longer reads as it did at registration: {error.message}"
            ) from None
        placed = Encoding(encoding.stages, encoding.unit, indices, tuple(schema.attributes))
        cap = None if unit is None else Cap(unit.secret, unit.max_rows, every)
        try:
            with _spark_errors(reading=True):
                table = session.sql(sum_query(placed, cap), source=frame).toArrow()
        except IngestError:
            raise SourceChanged(
                "the dataset's source no longer reads as Parquet as it did at registration"
            ) from None
        groups = table.column("g").to_numpy()
        out = {}
        for name in attributes:
            i, size = positions[name], schema.attribute(name).size
            rows = groups == grouping_id(indices, (i,))
            codes = table.column(f"c{i}").to_numpy(zero_copy_only=False)[rows].astype(np.int64)
            if codes.size and (codes.min() < 0 or codes.max() >= size):
                raise InvariantViolated(f"the source has a value outside the schema in {name!r}")
            counts = np.zeros(size, dtype=np.int64)
            sums = np.zeros(size, dtype=np.int64)
            np.add.at(counts, codes, table.column("n").to_numpy()[rows].astype(np.int64))
            np.add.at(sums, codes, table.column(f"s{i}").to_numpy()[rows].astype(np.int64))
            out[name] = (counts, sums)
        return out

    # -- reading ---------------------------------------------------------------------------

    def _encoding(
        self,
        session: Any,
        source: Source,
        schema: DatasetSchema,
        needed: Sequence[int],
        unit: UnitCap | None,
    ) -> tuple[Any, Encoding]:
        """The source's rows as a DataFrame and the encoding of the `needed` attributes
        (and the unit's id), from the column types Spark reads."""
        if not source.files:
            raise IngestError("empty_file", "the source has no Parquet files")
        paths = [spark_path(source.uri, f.path) for f in source.files]
        with _spark_errors(reading=True):
            frame = session.read.option("basePath", base_path(source)).parquet(*paths)
            types = frame_types(frame)
        wanted = [schema.attributes[i].name for i in needed]
        if unit is not None:
            wanted.append(unit.column)
        missing = [name for name in wanted if name not in types]
        if missing:
            raise IngestError(
                "bad_header",
                f"the source has no column(s) {', '.join(map(repr, missing))}",
                {"missing": missing},
            )
        stages = {}
        for i in needed:
            attribute = schema.attributes[i]
            column_type = types[attribute.name]
            try:
                stages[i] = code_stages(attribute, column_type, i, identifier(attribute.name))
            except UnreadableColumn:
                raise IngestError(
                    "bad_parquet",
                    f"column {attribute.name!r} has type {column_type}, which the "
                    f"{attribute.kind} attribute cannot read",
                    {"column": attribute.name},
                ) from None
        unit_sql = None
        if unit is not None:
            try:
                unit_sql = unit_id_expression(types[unit.column], identifier(unit.column))
            except UnreadableColumn:
                raise IngestError(
                    "bad_privacy_unit",
                    f"the privacy unit column {unit.column!r} has type {types[unit.column]}; "
                    "an id must be a single value (text, an integer, …), not a list, struct "
                    "or map",
                    {"column": unit.column},
                ) from None
        return frame, Encoding(stages, unit_sql)


def frame_types(frame: Any) -> dict[str, str]:
    """The columns of a DataFrame and their Spark types (`simpleString`), by name."""
    return {f.name: f.dataType.simpleString() for f in frame.schema.fields}


# -- paths ---------------------------------------------------------------------------------


def spark_path(uri: str, path: str) -> str:
    """A file of the source (a path as pyarrow's filesystem names it) as Spark names it:
    `file:///…` for local files, `s3a://bucket/key` (Hadoop's S3 connector) for `s3://`."""
    scheme = urlsplit(uri).scheme or "file"
    if scheme == "file":
        return "file://" + path
    if scheme == "s3":
        scheme = "s3a"
    return f"{scheme}://{path.lstrip('/')}"


def base_path(source: Source) -> str:
    """The source's root folder as Spark names it: the URI's folder, or for a source
    that is one file, that file's folder. Partition folders are below it."""
    parts = urlsplit(source.uri)
    root = (
        unquote(parts.path) if parts.scheme in ("", "file") else parts.netloc + unquote(parts.path)
    )
    root = root.rstrip("/")
    files = source.files
    if len(files) == 1 and files[0].path.rstrip("/").lstrip("/") == root.lstrip("/"):
        root = posixpath.dirname(files[0].path)
    return spark_path(source.uri, root).rstrip("/") + "/"


# -- errors --------------------------------------------------------------------------------


@contextmanager
def _spark_errors(*, reading: bool) -> Iterator[None]:
    """Spark's errors as privq's: with `reading`, a file Spark cannot read as Parquet is
    `bad_parquet`; anything else is `SparkFailed`. Spark's messages are dropped (they
    could quote a value); its error class is logged."""
    try:
        yield
    except IngestError:
        raise
    except Exception as error:
        from pyspark.errors import PySparkException

        if not isinstance(error, PySparkException):
            raise
        error_class = str(error.getCondition() or type(error).__name__)
        logger.warning("the Spark engine's query failed: %s", error_class)
        if reading and error_class.startswith(_UNREADABLE_CLASSES):
            raise IngestError(
                "bad_parquet", "the source's files could not be read as Parquet"
            ) from None
        raise SparkFailed(
            f"the Spark engine's query failed ({error_class}); nothing was counted"
        ) from None


def _out_of_schema(
    schema: DatasetSchema,
    index: int,
    bad: dict[str, int],
    shown: list[str | None],
    floating: bool,
) -> IngestError:
    """The refusal of the first column (in schema order) with values outside the schema,
    naming how many rows and up to `EXAMPLES` of its values (the curator's eyes only);
    in a `floating` column, NaN is a null, as in an upload."""
    attribute = schema.attributes[index]
    encoder = ColumnEncoder(attribute)
    reasons = []
    for value in shown:
        if value is None:
            reasons.append('a null (with "missing": true the attribute takes missing values)')
        elif floating and value == "NaN":
            reasons.append('NaN (with "missing": true it is a missing value)')
        else:
            reasons.append(encoder.explain(value))
    others = [f"{name!r} ({rows} rows)" for name, rows in bad.items() if name != attribute.name]
    also = f"; other columns with values outside the schema: {', '.join(others)}" if others else ""
    return IngestError(
        "value_out_of_schema",
        f"column {attribute.name!r} has values outside the schema on {bad[attribute.name]} "
        f"row(s) of the source; {'; '.join(reasons)}{also}",
        {
            "column": attribute.name,
            "rows": bad[attribute.name],
            "examples": [None if v is None else quote_cell(v) for v in shown],
            "columns": bad,
        },
    )


# -- marginals -----------------------------------------------------------------------------


def largest_marginals(marginals: Sequence[Marginal]) -> list[Marginal]:
    """The requested marginals that no other contains (as sets of attributes), each once,
    in the order first requested; every requested marginal is a sum of one of them."""
    sets = [frozenset(m) for m in marginals]
    largest: list[Marginal] = []
    seen: set[frozenset[str]] = set()
    for marginal, attrs in zip(marginals, sets, strict=True):
        if attrs in seen or any(attrs < other for other in sets):
            continue
        seen.add(attrs)
        largest.append(tuple(marginal))
    return largest


def _arrays(
    table: Any, schema: DatasetSchema, largest: list[Marginal], sets: list[tuple[int, ...]]
) -> dict[Marginal, np.ndarray]:
    """The counted grouping sets as arrays shaped as their marginals (row-major)."""
    grouped = sorted({i for s in sets for i in s})
    ids = table.column("g").to_numpy()
    counts = table.column("n").to_numpy().astype(np.int64)
    domain = schema.domain()
    out = {}
    for marginal, positions in zip(largest, sets, strict=True):
        rows = ids == grouping_id(grouped, positions)
        shape = domain.shape(marginal)
        array = np.zeros(math.prod(shape), dtype=np.int64)
        codes = []
        for name, i in zip(marginal, positions, strict=True):
            column = table.column(f"c{i}").to_numpy(zero_copy_only=False)[rows]
            code = column.astype(np.int64)
            if code.size and (code.min() < 0 or code.max() >= domain.size_of(name)):
                raise InvariantViolated(
                    f"the source has a value outside the schema in column {name!r}, "
                    "which its registration scan accepted"
                )
            codes.append(code)
        flat = np.ravel_multi_index(codes, shape) if codes else np.zeros(int(rows.sum()), np.intp)
        np.add.at(array, flat, counts[rows])
        out[marginal] = array.reshape(shape)
    return out


def _sum_to(marginal: Marginal, counted: dict[Marginal, np.ndarray]) -> np.ndarray:
    """A requested marginal's counts (int64, flattened row-major in its order), summed
    from the first counted marginal that contains it."""
    for over, array in counted.items():
        if set(marginal) <= set(over):
            drop = tuple(j for j, name in enumerate(over) if name not in marginal)
            kept = [name for name in over if name in marginal]
            summed = array.sum(axis=drop) if drop else array
            order = [kept.index(name) for name in marginal]
            return np.ascontiguousarray(np.transpose(summed, order)).reshape(-1).astype(np.int64)
    raise InvariantViolated(f"no counted marginal contains {marginal!r}")
