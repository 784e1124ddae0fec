"""The local engine counts a Parquet source exactly as the stored path counts an upload of
the same rows: every marginal, counted or summed from a superset, whatever the batch
size, threads or partitioning; only needed columns are read; dictionaries are mapped
once; a changed file is refused."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from records_lake import SCHEMA, make_table, stored_codes, write_source

from app.errors import SourceChanged
from app.records import counting
from app.records.counting import MarginalCounter
from app.records.encoding import ColumnCodes
from app.records.local import LocalEngine
from app.records.reading import SourceReader
from app.schema import parse_schema
from app.services.columns import true_marginal
from app.sources import Source, list_files

NAMES = list(SCHEMA.names)
MARGINALS = (
    [(a,) for a in NAMES]
    + list(itertools.combinations(NAMES, 2))
    + [("kids", "sex", "year"), ("age", "band", "region"), ("year", "kids")]
    + [("region", "sex"), ()]
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[Source, int, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    parts = [
        ("2023", make_table(rng, 1500)),
        ("2024", make_table(rng, 900)),
        ("2023", make_table(rng, 1100)),
    ]
    source = write_source(tmp_path_factory.mktemp("lake"), parts)
    rows, codes = stored_codes(parts)
    return source, rows, codes


def expected(codes: dict[str, np.ndarray], rows: int, marginal: tuple[str, ...]) -> np.ndarray:
    if not marginal:
        return np.array([rows], dtype=np.int64)
    return true_marginal(codes, SCHEMA.domain(), marginal)


@pytest.mark.parametrize("batch_rows,threads", [(333, 2), (100_000, 1)])
def test_counts_equal_the_stored_path(
    lake: tuple[Source, int, dict[str, np.ndarray]], batch_rows: int, threads: int
) -> None:
    source, rows, codes = lake
    engine = LocalEngine(batch_rows=batch_rows, threads=threads)
    counts = engine.count(source, SCHEMA, MARGINALS, None)
    assert set(counts) == set(MARGINALS)
    for marginal in MARGINALS:
        got = counts[marginal]
        assert got.dtype == np.int64
        assert got.shape == (SCHEMA.domain().cells(marginal),)
        np.testing.assert_array_equal(got, expected(codes, rows, marginal), err_msg=str(marginal))


def test_only_maximal_marginals_are_counted_and_the_rest_summed() -> None:
    requested = [("a",), ("b", "a"), ("a", "b"), ("c",), ("a", "b", "c"), ("d",), ()]
    assert counting.maximal(requested) == [("a", "b", "c"), ("d",)]
    domain = parse_schema({"a": 3, "b": 4, "c": 2, "d": 5}).domain()
    counter = MarginalCounter(domain, requested)
    rng = np.random.default_rng(3)
    columns = {n: rng.integers(0, domain.size_of(n), 1000) for n in domain.attributes}
    counter.add(columns, 1000)
    counter.add(columns, 1000)
    result = counter.result()
    for marginal in requested:
        direct = 2 * true_marginal(columns, domain, marginal) if marginal else [2000]
        np.testing.assert_array_equal(result[marginal], direct, err_msg=str(marginal))


def test_large_marginals_are_counted_by_sorting(
    lake: tuple[Source, int, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, rows, codes = lake
    monkeypatch.setattr(counting, "_SPARSE_CELLS", 4)
    marginal = ("age", "band", "region", "sex")
    counts = LocalEngine(batch_rows=50).count(source, SCHEMA, [marginal, ("kids",)], None)
    np.testing.assert_array_equal(counts[marginal], expected(codes, rows, marginal))
    np.testing.assert_array_equal(counts[("kids",)], expected(codes, rows, ("kids",)))


def test_partition_folders_give_a_column(lake: tuple[Source, int, dict[str, np.ndarray]]) -> None:
    source, _, _ = lake
    counts = LocalEngine().count(source, SCHEMA, [("year",)], None)
    assert counts[("year",)].tolist() == [1500 + 1100, 900]


def test_text_columns_are_mapped_once_per_dictionary(
    lake: tuple[Source, int, dict[str, np.ndarray]],
) -> None:
    source, _, codes = lake
    reader = SourceReader(source, batch_rows=100)
    encoder = ColumnCodes(SCHEMA.attribute("sex"))
    parts, batches = [], 0
    for batch in reader.batches(["sex"]):
        assert pa.types.is_dictionary(batch.columns["sex"].type)  # never expanded per row
        parts.append(encoder.encode(batch.columns["sex"]))
        batches += 1
    np.testing.assert_array_equal(np.concatenate(parts), codes["sex"])
    row_groups = sum(pq.ParquetFile(f.path).num_row_groups for f in source.files)
    assert batches > 3 * row_groups
    assert 1 <= encoder.dictionaries_encoded <= row_groups


def test_only_the_needed_columns_are_read(tmp_path: Path) -> None:
    """`income` cannot be read as a number (a list column): counting without it works."""
    rng = np.random.default_rng(1)
    table = make_table(rng, 300)
    table = table.set_column(
        table.schema.get_field_index("income"), "income", pa.array([[1.0]] * 300)
    )
    source = write_source(tmp_path, [("2024", table)])
    counts = LocalEngine().count(source, SCHEMA, [("sex", "kids"), ("year",)], None)
    assert counts[("year",)].tolist() == [0, 300]
    with pytest.raises(SourceChanged):
        LocalEngine().count(source, SCHEMA, [("income",)], None)


def test_a_file_of_another_size_is_a_changed_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    source = write_source(tmp_path, [("2023", make_table(rng, 200)), ("2024", make_table(rng, 50))])
    engine = LocalEngine()
    assert engine.count(source, SCHEMA, [("sex",)], None)[("sex",)].sum() == 250
    changed = Path(source.files[1].path)
    pq.write_table(make_table(rng, 60), changed)
    with pytest.raises(SourceChanged, match="bytes"):
        engine.count(source, SCHEMA, [("sex",)], None)
    changed.unlink()
    with pytest.raises(SourceChanged):
        engine.count(source, SCHEMA, [("sex",)], None)


def test_a_value_outside_the_schema_at_count_time_is_a_changed_source(tmp_path: Path) -> None:
    table = pa.table({"sex": ["F", "X"], "region": ["north"] * 2, "age": [1.0, 2.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    uri = (tmp_path / "t.parquet").as_uri()
    source = Source(uri, list_files(uri))
    schema = parse_schema({"attributes": [SCHEMA.attribute("sex").to_json()]})
    with pytest.raises(SourceChanged, match="'sex'"):
        LocalEngine().count(source, schema, [("sex",)], None)


def test_a_single_file_source_and_columns_in_any_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    table = make_table(rng, 400)
    table = table.select(list(reversed(table.column_names)))
    pq.write_table(table, tmp_path / "one.parquet")
    uri = (tmp_path / "one.parquet").as_uri()
    schema = parse_schema({"attributes": [SCHEMA.attribute(n).to_json() for n in SCHEMA.names[:6]]})
    counts = LocalEngine(batch_rows=64).count(
        Source(uri, list_files(uri)), schema, [("kids", "sex"), ("band",)], None
    )
    codes = {n: ColumnCodes(schema.attribute(n)).encode(table.column(n)) for n in ("kids", "sex")}
    np.testing.assert_array_equal(
        counts[("kids", "sex")], true_marginal(codes, schema.domain(), ("kids", "sex"))
    )
    assert counts[("band",)].sum() == 400
