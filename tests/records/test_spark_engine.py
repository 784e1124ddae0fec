"""The Spark engine against the stored path: the same codes and counts from the same
Parquet files, the unit's cap, and the registration scan's refusals.

Every Spark test lives in this one module, so that one local Spark Connect session
(started once, ~25 s) serves them all (pytest-xdist runs a module in one process).
They are skipped only where `java` is not on PATH. `PRIVQ_TEST_SPARK_REMOTE=sc://…`
points them at a running Spark Connect server instead (quicker while developing).
"""

from __future__ import annotations

import datetime
import decimal
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.errors import SourceChanged
from app.ingest import IngestError, PrivacyUnit, encode_parquet
from app.records.engine import UnitCap
from app.records.spark import (
    SparkEngine,
    SparkNotInstalled,
    base_path,
    largest_marginals,
    spark_path,
)
from app.records.spark_sql import WHITESPACE, grouping_id, string_literal
from app.schema import Attribute, DatasetSchema
from app.services.columns import true_marginal
from app.sources import Source, SourceFile, list_files

requires_java = pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if shutil.which("java") is None:
        pytest.skip("Spark needs java")
    # PySpark warns that it does not fully support pandas 3 (which it does not use here),
    # and that static settings given to a local session are only applied at its start.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pyspark.sql import SparkSession

        remote = os.environ.get("PRIVQ_TEST_SPARK_REMOTE")
        if remote:
            yield SparkSession.builder.remote(remote).getOrCreate()
            return
        folder = tmp_path_factory.mktemp("spark")
        session = (
            SparkSession.builder.remote("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.warehouse.dir", str(folder / "warehouse"))
            .config("spark.local.dir", str(folder / "local"))
            # Small data, many short queries on a shared 2-core host: the JVM's quick
            # compiler only, and no whole-stage code generation (Spark compiles less for
            # each query; the results are the same). PRIVQ_TEST_SPARK_REMOTE runs these
            # tests against a server with Spark's defaults.
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
            .config("spark.sql.codegen.wholeStage", "false")
            .getOrCreate()
        )
    yield session
    session.stop()


class CountingSession:
    """A session that counts the queries it runs (`sql`), passing everything through."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.queries = 0

    def sql(self, *args: Any, **kwargs: Any) -> Any:
        self.queries += 1
        return self._session.sql(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


@pytest.fixture(scope="module")
def engine(spark: Any) -> SparkEngine:
    return SparkEngine(spark)


def source(uri_path: Path) -> Source:
    uri = uri_path.as_uri() + ("/" if uri_path.is_dir() else "")
    return Source(uri=uri, files=list_files(uri))


def stored_counts(
    path: Path, schema: DatasetSchema, marginals: list[tuple[str, ...]], unit: str | None = None
) -> dict[tuple[str, ...], np.ndarray]:
    """What the stored path counts: the file uploaded (encode_parquet), then bincounts."""
    privacy_unit = PrivacyUnit(unit, 1000) if unit is not None else None
    with path.open("rb") as stream:
        rows, codes = encode_parquet(stream, schema, unit=privacy_unit)
    domain = schema.domain()
    return {
        m: true_marginal(codes, domain, m) if m else np.array([rows], dtype=np.int64)
        for m in marginals
    }


# -- a table with every kind of column an upload reads ------------------------------------

ROWS = 2000

SCHEMA = DatasetSchema(
    (
        Attribute.categorical("text", ["a", "b", "c"], missing=True, missing_values=["", "N/A"]),
        Attribute.categorical("dictionary", ["x", "y"], missing=True),
        Attribute.categorical("from_int", ["1", "2", "3"], missing=True, missing_values=["-1"]),
        Attribute.categorical("from_double", ["-0", "0", "1", "2.5"], missing=True),
        Attribute.categorical("from_bool", ["false", "true"]),
        Attribute.categorical("from_decimal", ["1.50", "2.00"]),
        Attribute.categorical("from_float32", ["0.1", "1"], missing=True),
        Attribute.categorical("from_date", ["2024-01-31", "2024-02-29"]),
        Attribute.numeric("age", [0, 18, 65, 100], clip=True, missing=True),
        Attribute.numeric("score", [0, 2.5, 5, 7.5, 10], missing=True, missing_values=["NA"]),
        Attribute.numeric("price", [0, 0.1, 0.3, 1.1, 100]),
        Attribute.numeric("large", [0, 0.1, 1.1, 12345.6789, 1e8]),
        Attribute.integer("kids", 5, clip=True),
        Attribute.integer("whole", 4, missing=True),
        Attribute.integer("spelled", 6, missing=True, missing_values=["NA"]),
        # Integer attributes with min, max and a bin width (the last bin closed at max).
        Attribute.integer("day", min=1, max=31, missing=True),
        Attribute.integer("hhmm", min=0, max=2359, width=100),
        Attribute.integer("year", min=-50, max=49, width=7, clip=True),
        Attribute.integer("minutes", min=-5, max=1000, width=60, missing=True),
    )
)


def mixed_table(rng: np.random.Generator, rows: int = ROWS) -> pa.Table:
    def pick(values: list[Any]) -> list[Any]:
        return [values[i] for i in rng.integers(0, len(values), rows)]

    age = rng.uniform(-10, 110, rows)
    age[:6] = [0.0, 18.0, 65.0, 100.0, -0.0, np.inf]
    age[rng.random(rows) < 0.05] = np.nan
    cents = rng.integers(0, 10_000, rows)
    cents[:4] = [10, 30, 110, 10_000]  # on the edges 0.1, 0.3, 1.1 and 100
    # Unscaled integers up to 10^20, most beyond 2^53: Arrow's other way to a double.
    whole, fraction = rng.integers(0, 10**8, rows), rng.integers(0, 10**12, rows)
    large = [
        decimal.Decimal(int(w) * 10**12 + int(f)).scaleb(-12)
        for w, f in zip(whole, fraction, strict=True)
    ]
    large[:3] = [decimal.Decimal("0.1"), decimal.Decimal("1.1"), decimal.Decimal("12345.6789")]
    return pa.table(
        {
            "text": pick(["a", " b", "c\t", "\u3000a", "", "N/A", " N/A ", None]),
            "dictionary": pa.array(pick(["x", "y", " y", None])).dictionary_encode(),
            "from_int": pa.array(pick([1, 2, 3, -1, None]), pa.int32()),
            "from_double": pick([-0.0, 0.0, 1.0, 2.5, float("nan"), None]),
            "from_bool": pick([True, False]),
            "from_decimal": pa.array(
                pick([decimal.Decimal("1.50"), decimal.Decimal("2.00")]), pa.decimal128(5, 2)
            ),
            "from_float32": pa.array(pick([0.1, 1.0, float("nan")]), pa.float32()),
            "from_date": pa.array(
                pick([datetime.date(2024, 1, 31), datetime.date(2024, 2, 29)]), pa.date32()
            ),
            "age": age,
            "score": pick([" 1.5 ", "2.5", "1e1", "7_5e-1", "10", "NA", None, "9.99"]),
            "price": pa.array(
                [decimal.Decimal(int(c)).scaleb(-2) for c in cents], pa.decimal128(14, 7)
            ),
            "large": pa.array(large, pa.decimal128(20, 12)),
            "kids": rng.integers(-3, 9, rows),
            "whole": pick([0.0, 1.0, 3.0, float("nan"), None]),
            "spelled": pick(["3", "3.0", " 4 ", "1e0", "NA", None, "0"]),
            "day": pick([1.0, 31.0, 15.0, 2.0, float("nan"), None]),
            "hhmm": pick(["0", "959", "1000", "2359", " 1230 ", "2300", "99"]),
            "year": rng.integers(-100, 100, rows),
            "minutes": pa.array(pick([-5, 54, 55, 60, 1000, 999, 940, 0, None]), pa.int16()),
            "person": pick([f" p{i} " for i in range(300)]),
        }
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mixed") / "mixed.parquet"
    pq.write_table(mixed_table(np.random.default_rng(7)), path)
    return path


MARGINALS = [
    *[(name,) for name in SCHEMA.names],
    ("text", "age"),
    ("age", "text"),
    ("kids", "score", "dictionary"),
    ("score", "kids"),
    ("price", "large", "from_double"),
    ("day", "hhmm", "year", "minutes"),
    (),
]


@requires_java
def test_counts_equal_the_stored_path_in_one_query(spark: Any, mixed: Path) -> None:
    counting = CountingSession(spark)
    got = SparkEngine(counting).count(source(mixed), SCHEMA, MARGINALS, None)
    expected = stored_counts(mixed, SCHEMA, MARGINALS, unit="person")
    assert counting.queries == 1
    for marginal in MARGINALS:
        assert got[marginal].dtype == np.int64
        assert got[marginal].shape == (int(np.prod(SCHEMA.domain().shape(marginal))),)
        np.testing.assert_array_equal(got[marginal], expected[marginal], err_msg=str(marginal))
    # The data reach the codes that matter here: missing codes; -0.0 and 0.0 apart.
    assert got[("text",)][-1] > 0 and got[("age",)][-1] > 0 and got[("whole",)][-1] > 0
    # Integer bins: min -5, width 60: -5..54 is code 0, 55 opens code 1, 1000 the last.
    minutes = mixed_table(np.random.default_rng(7)).column("minutes").to_pylist()
    by_hand = np.bincount(
        [17 if m is None else (m + 5) // 60 for m in minutes], minlength=18
    )  # 17 codes of width 60 from -5 (the last, [955, 1000], closed), then the missing code
    assert SCHEMA.attribute("minutes").labels()[-2:] == ["[955, 1000]", None]
    np.testing.assert_array_equal(got[("minutes",)], by_hand)
    assert got[("year",)][0] > 0 and got[("year",)][-1] > 0  # clipped into the end bins
    assert got[("from_double",)][0] > 0 and got[("from_double",)][1] > 0  # -0 and 0 apart
    assert got[()][0] == ROWS


@requires_java
def test_validation_of_a_good_source_counts_its_rows(engine: SparkEngine, mixed: Path) -> None:
    validation = engine.validate(source(mixed), SCHEMA, UnitCap("person", 2, 5))
    assert validation.rows == ROWS


# -- hive partitions ---------------------------------------------------------------------


@requires_java
def test_partition_folders_are_columns_read_as_text(engine: SparkEngine, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    lake = tmp_path / "lake"
    whole = []
    for region in ("north", "south", "__HIVE_DEFAULT_PARTITION__"):
        for bucket in ("0", "3", "03"):
            folder = lake / f"region={region}" / f"bucket={bucket}"
            folder.mkdir(parents=True)
            part = pa.table({"colour": rng.choice(["red", "blue"], 50)})
            pq.write_table(part, folder / "part-0.parquet")
            value = None if region.startswith("__") else region
            whole.append(
                part.append_column("region", pa.array([value] * 50, pa.string())).append_column(
                    "bucket", pa.array([bucket] * 50)
                )
            )
    (lake / "_SUCCESS").write_text("")
    schema = DatasetSchema(
        (
            Attribute.categorical("colour", ["red", "blue"]),
            Attribute.categorical("region", ["north", "south"], missing=True),
            Attribute.integer("bucket", 4),
        )
    )
    marginals = [("region", "bucket", "colour"), ("bucket",)]
    got = engine.count(source(lake), schema, marginals, None)
    flat = tmp_path / "flat.parquet"
    pq.write_table(pa.concat_tables(whole), flat)
    expected = stored_counts(flat, schema, marginals)
    for marginal in marginals:
        np.testing.assert_array_equal(got[marginal], expected[marginal])
    assert got[("bucket",)].tolist() == [150, 0, 0, 300]  # "03" is the integer 3


# -- the unit's cap ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """Two files of rows of units with 1 to 9 rows each (ids spread over both files)."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 10, 200)
    ids = np.repeat(np.arange(sizes.size), sizes)
    rng.shuffle(ids)
    folder = tmp_path_factory.mktemp("units")
    half = ids.size // 2
    for name, part in (("a.parquet", ids[:half]), ("b.parquet", ids[half:])):
        table = pa.table(
            {
                "colour": rng.choice(["red", "blue", "green"], part.size),
                "age": rng.uniform(0, 100, part.size),
                "person": part.astype(np.int64),
            }
        )
        pq.write_table(table, folder / name)
    return folder, sizes


UNIT_SCHEMA = DatasetSchema(
    (
        Attribute.categorical("colour", ["red", "blue", "green"]),
        Attribute.numeric("age", [0, 50, 100]),
    )
)


@requires_java
def test_the_cap_keeps_at_most_k_rows_a_unit_whatever_the_partitioning(
    spark: Any, engine: SparkEngine, units: tuple[Path, np.ndarray]
) -> None:
    folder, sizes = units
    cap = UnitCap("person", 3, secret=-(2**63))
    marginals = [("colour", "age"), ("age",), ()]
    first = engine.count(source(folder), UNIT_SCHEMA, marginals, cap)
    assert first[()][0] == int(np.minimum(sizes, 3).sum()) < int(sizes.sum())
    assert first[("age",)].sum() == first[()][0]
    reversed_files = source(folder)
    reversed_files = Source(reversed_files.uri, reversed_files.files[::-1])
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    try:
        again = engine.count(reversed_files, UNIT_SCHEMA, marginals, cap)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    for marginal in marginals:
        np.testing.assert_array_equal(again[marginal], first[marginal])
    # Another secret keeps other rows (the same number of them).
    other = engine.count(source(folder), UNIT_SCHEMA, marginals, UnitCap("person", 3, 12345))
    assert other[()][0] == first[()][0]
    assert not np.array_equal(other[("colour", "age")], first[("colour", "age")])


@requires_java
def test_ids_are_one_unit_after_trimming_and_signed_zeros(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table(
            {
                "colour": ["red"] * 7,
                "text_id": [" a", "a\t", "a\x0b", "a", "b", "b", "\u3000a"],
                "float_id": [-0.0, 0.0, 0.0, 1.5, 1.5, 2.0, 2.0],
            }
        ),
        path,
    )
    schema = DatasetSchema((Attribute.categorical("colour", ["red"]),))
    by_text = engine.count(source(path), schema, [()], UnitCap("text_id", 1, 1))
    by_float = engine.count(source(path), schema, [()], UnitCap("float_id", 1, 1))
    # "\u3000a" keeps its ideographic space (ID_TRIM is ASCII whitespace only).
    assert by_text[()].tolist() == [3]
    assert by_float[()].tolist() == [3]


# -- the registration scan's refusals ----------------------------------------------------


def refusal(
    engine: SparkEngine, path: Path, schema: DatasetSchema, unit: UnitCap | None = None
) -> IngestError:
    with pytest.raises(IngestError) as caught:
        engine.validate(source(path), schema, unit)
    return caught.value


@requires_java
def test_values_outside_the_schema_are_refused_with_count_and_examples(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "bad.parquet"
    colours = ["red"] * 20 + ["purple"] * 7 + ["  mauve "]
    pq.write_table(
        pa.table({"colour": colours, "age": [10.0] * 27 + [150.0], "kids": [1.5] + [1.0] * 27}),
        path,
    )
    schema = DatasetSchema(
        (
            Attribute.categorical("colour", ["red", "blue"]),
            Attribute.numeric("age", [0, 100]),
            Attribute.integer("kids", 3),
        )
    )
    error = refusal(engine, path, schema)
    assert error.code == "value_out_of_schema" and error.status == 422
    assert error.details["column"] == "colour"
    assert error.details["rows"] == 8
    assert error.details["columns"] == {"colour": 8, "age": 1, "kids": 1}
    assert 1 <= len(error.details["examples"]) <= 5
    assert set(error.details["examples"]) <= {"'purple'", "'  mauve '"}
    assert "is not one of the schema's 2 values" in error.message
    assert "'age' (1 rows)" in error.message


@requires_java
def test_nulls_where_the_attribute_has_no_missing_code_are_refused(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"age": [1.0, None, float("nan"), 2.0]}), path)
    error = refusal(engine, path, DatasetSchema((Attribute.numeric("age", [0, 10]),)))
    assert error.code == "value_out_of_schema"
    assert error.details["rows"] == 2
    assert error.details["examples"].count(None) == 1  # the null; the NaN is shown as such
    assert 'with "missing": true' in error.message


@requires_java
def test_rows_without_a_unit_id_are_refused_without_quoting_ids(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"age": [1.0, 2.0, 3.0, 4.0], "person": ["p1", " ", None, "p4"]}), path)
    error = refusal(
        engine, path, DatasetSchema((Attribute.numeric("age", [0, 10]),)), UnitCap("person", 1, 9)
    )
    assert error.code == "missing_unit_id"
    assert error.details == {"column": "person", "rows": 2}
    assert "p1" not in error.message and "p4" not in error.message


@requires_java
def test_missing_columns_unreadable_types_and_files_that_are_not_parquet(
    engine: SparkEngine, tmp_path: Path
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"age": [1.0], "when": pa.array([0], pa.timestamp("us")), "tags": [["a"]]}),
        path,
    )
    height = DatasetSchema((Attribute.numeric("height", [0, 1]),))
    missing = refusal(engine, path, height)
    assert missing.code == "bad_header" and missing.details["missing"] == ["height"]
    with pytest.raises(SourceChanged):  # a count meets what registration would refuse
        engine.count(source(path), height, [("height",)], None)
    # Names match as an upload matches them: exactly ("AGE" is not "age").
    other_case = refusal(engine, path, DatasetSchema((Attribute.numeric("AGE", [0, 2]),)))
    assert other_case.code == "bad_header" and other_case.details["missing"] == ["AGE"]
    timestamp = refusal(engine, path, DatasetSchema((Attribute.numeric("when", [0, 1]),)))
    assert timestamp.code == "bad_parquet" and timestamp.details["column"] == "when"
    nested_id = refusal(
        engine, path, DatasetSchema((Attribute.numeric("age", [0, 2]),)), UnitCap("tags", 1, 1)
    )
    assert nested_id.code == "bad_privacy_unit"
    not_parquet = tmp_path / "notes.parquet"
    not_parquet.write_text("this is not Parquet\n")
    error = refusal(engine, not_parquet, DatasetSchema((Attribute.numeric("age", [0, 1]),)))
    assert error.code == "bad_parquet"
    assert "not Parquet" not in error.message  # Spark's own message is not passed on


# -- pieces that need no Spark -----------------------------------------------------------


@requires_java
def test_string_literals_and_whitespace_survive_spark(spark: Any) -> None:
    texts = ["a'b", 'q"q', "back\\slash", "😀{source}", "\u2028é", "%s", "a\nb"]
    query = "SELECT " + ", ".join(f"{string_literal(t)} AS t{i}" for i, t in enumerate(texts))
    padded = string_literal(WHITESPACE + "x y" + WHITESPACE)
    query += f", trim(BOTH {string_literal(WHITESPACE)} FROM {padded}) AS trimmed"
    row = spark.sql(query).collect()[0]
    assert [row[f"t{i}"] for i in range(len(texts))] == texts
    assert row["trimmed"] == "x y"


def test_whitespace_is_what_arrow_trims_and_python_strips() -> None:
    import pyarrow.compute as pc

    characters = [chr(c) for c in range(0x3100)]
    trimmed = pc.utf8_trim_whitespace(pa.array(["x" + c for c in characters])).to_pylist()
    by_arrow = {c for c, t in zip(characters, trimmed, strict=True) if t == "x"}
    assert by_arrow == set(WHITESPACE) == {c for c in characters if c.isspace()}


def test_largest_marginals_are_those_no_other_contains() -> None:
    marginals = [("a",), ("b", "a"), ("a", "b"), ("c",), (), ("c", "d"), ("d",)]
    assert largest_marginals(marginals) == [("b", "a"), ("c", "d")]
    assert largest_marginals([()]) == [()]


def test_grouping_ids_are_sparks_bits() -> None:
    # GROUP BY c0, c2, c5: the first column is the highest bit, set where it is absent.
    assert grouping_id([0, 2, 5], [0, 2, 5]) == 0
    assert grouping_id([0, 2, 5], [2]) == 0b101
    assert grouping_id([0, 2, 5], []) == 0b111


def test_paths_name_the_files_and_the_root_as_spark_does() -> None:
    folder = Source(
        "file:///srv/lake/visits/", (SourceFile("/srv/lake/visits/y=1/p.parquet", 1, ""),)
    )
    assert base_path(folder) == "file:///srv/lake/visits/"
    one = Source("file:///srv/lake/one.parquet", (SourceFile("/srv/lake/one.parquet", 1, ""),))
    assert base_path(one) == "file:///srv/lake/"
    s3 = Source("s3://bucket/visits", (SourceFile("bucket/visits/p.parquet", 1, ""),))
    assert base_path(s3) == "s3a://bucket/visits/"
    assert spark_path(s3.uri, "bucket/visits/p.parquet") == "s3a://bucket/visits/p.parquet"


def test_without_pyspark_the_engine_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(SparkNotInstalled) as caught:
        SparkEngine("sc://127.0.0.1:15002")
    assert "privq[spark]" in caught.value.message


# -- the two engines and the stored path -------------------------------------------------


@requires_java
def test_the_local_and_spark_engines_count_as_the_stored_path(
    engine: SparkEngine, tmp_path: Path
) -> None:
    from records_lake import SCHEMA as LAKE_SCHEMA
    from records_lake import UNIT, make_table, stored_codes, write_source

    from app.records.local import LocalEngine

    rng = np.random.default_rng(5)
    parts = [("2023", make_table(rng, 900, units=80)), ("2024", make_table(rng, 600, units=80))]
    lake = write_source(tmp_path / "lake", parts)
    rows, codes = stored_codes(parts)
    names = list(LAKE_SCHEMA.names)
    marginals = [(a,) for a in names] + [(a, b) for a in names[:3] for b in names[3:]] + [()]
    local = LocalEngine(batch_rows=256)
    by_local = local.count(lake, LAKE_SCHEMA, marginals, None)
    by_spark = engine.count(lake, LAKE_SCHEMA, marginals, None)
    for m in marginals:
        stored = true_marginal(codes, LAKE_SCHEMA.domain(), m) if m else np.array([rows])
        np.testing.assert_array_equal(by_spark[m], stored, err_msg=str(m))
        np.testing.assert_array_equal(by_local[m], stored, err_msg=str(m))
    cap = UnitCap(UNIT, 2, secret=0x1F2E3D4C5B6A7988)
    capped_local = local.count(lake, LAKE_SCHEMA, marginals, cap)
    capped_spark = engine.count(lake, LAKE_SCHEMA, marginals, cap)
    assert capped_spark[()][0] == 2 * 80 < rows  # every unit has more than 2 rows
    for m in marginals:
        np.testing.assert_array_equal(capped_spark[m], capped_local[m], err_msg=str(m))


@requires_java
def test_both_engines_agree_on_every_column_type_under_a_cap(
    engine: SparkEngine, mixed: Path
) -> None:
    from app.records.local import LocalEngine

    local = LocalEngine(batch_rows=300)
    mixed_source = source(mixed)
    # Unit ids " p1 " and "p1" are one unit in both engines; most units have ~7 rows.
    cap = UnitCap("person", 3, secret=987654321)
    assert local.validate(mixed_source, SCHEMA, cap).rows == ROWS
    np.testing.assert_equal(
        local.count(mixed_source, SCHEMA, MARGINALS, None),
        stored_counts(mixed, SCHEMA, MARGINALS, unit="person"),
    )
    by_local = local.count(mixed_source, SCHEMA, MARGINALS, cap)
    by_spark = engine.count(mixed_source, SCHEMA, MARGINALS, cap)
    assert by_spark[()][0] < ROWS
    for m in MARGINALS:
        np.testing.assert_array_equal(by_spark[m], by_local[m], err_msg=str(m))


def test_the_number_pattern_accepts_what_python_float_parses() -> None:
    import re

    from app.records.spark_sql import PYTHON_FLOAT

    texts = ["1", "-1", "+1.5", "1.", ".5", "1e5", "1E-5", "1.e5", "1_000", "1_000.5_5e1_0"]
    texts += ["inf", "-Infinity", "nAn", "+inf", "1__0", "_1", "1_", "1._5", "1_.5", ".e5", "e5"]
    texts += ["1e", "1d", "0x10", "1,5", "", ".", "+", "--1", "1e5.5", "infinit", "nan1", "1 2"]
    for text in texts:
        try:
            float(text)
            parses = True
        except ValueError:
            parses = False
        assert (re.match(PYTHON_FLOAT, text) is not None) == parses, text


class _FailingSession:
    """A Spark session whose every read fails as an unreachable server's would."""

    def __init__(self) -> None:
        self.conf = self
        self.read = self

    def set(self, key: str, value: str) -> None:
        pass

    def option(self, key: str, value: str) -> _FailingSession:
        return self

    def parquet(self, *paths: str) -> Any:
        from pyspark.errors import PySparkException

        raise PySparkException(message="connection refused, value 'secret-value'")


def test_a_failed_query_is_typed_and_the_next_access_reconnects() -> None:
    from app.records.spark import SparkFailed

    made: list[_FailingSession] = []

    class Builder:
        def remote(self, url: str) -> Builder:
            return self

        def create(self) -> _FailingSession:
            made.append(_FailingSession())
            return made[-1]

    engine = SparkEngine("sc://127.0.0.1:15002")
    engine._builder = Builder()
    one = Source("file:///srv/a.parquet", (SourceFile("/srv/a.parquet", 1, ""),))
    schema = DatasetSchema((Attribute.numeric("age", [0, 1]),))
    for attempt in (1, 2):
        with pytest.raises(SparkFailed) as caught:
            engine.count(one, schema, [("age",)], None)
        assert caught.value.status == 503
        assert "secret-value" not in caught.value.message
        assert len(made) == attempt  # each access after a failure connects afresh


# -- within-bin sums -----------------------------------------------------------------------

BINNED = ["age", "score", "price", "large"]


@requires_java
def test_both_engines_sum_places_within_bins_as_the_stored_path(
    spark: Any, engine: SparkEngine, mixed: Path
) -> None:
    from app.ingest import encode_upload
    from app.records.local import LocalEngine
    from app.schema.within_bins import fraction_sums

    with mixed.open("rb") as stream:
        stored = encode_upload(
            stream,
            SCHEMA,
            unit=PrivacyUnit("person", 1000),
            content_type="application/vnd.apache.parquet",
        )
    mixed_source = source(mixed)
    local = LocalEngine(batch_rows=300)
    counting = CountingSession(spark)
    by_spark = SparkEngine(counting).fraction_sums(mixed_source, SCHEMA, BINNED, None)
    assert counting.queries == 1  # every attribute in one query
    by_local = local.fraction_sums(mixed_source, SCHEMA, BINNED, None)
    for name in BINNED:
        size = SCHEMA.attribute(name).size
        codes = stored.columns[name]
        counts = np.bincount(codes.astype(np.intp), minlength=size)
        sums = fraction_sums(size, codes, stored.fractions[name])
        for got in (by_spark[name], by_local[name]):
            np.testing.assert_array_equal(got[0], counts, err_msg=name)
            np.testing.assert_array_equal(got[1], sums, err_msg=name)
    cap = UnitCap("person", 3, secret=987654321)
    capped_spark = engine.fraction_sums(mixed_source, SCHEMA, BINNED, cap)
    capped_local = local.fraction_sums(mixed_source, SCHEMA, BINNED, cap)
    for name in BINNED:
        assert capped_spark[name][0].sum() < ROWS
        np.testing.assert_array_equal(capped_spark[name][0], capped_local[name][0], err_msg=name)
        np.testing.assert_array_equal(capped_spark[name][1], capped_local[name][1], err_msg=name)
