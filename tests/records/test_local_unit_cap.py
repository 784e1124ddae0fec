"""The unit cap on a source: each unit keeps its `max_rows` rows of smallest row key,
the same rows whatever the batch size, the file order or how many buckets the rows
were spilled into, equal to a direct reference over the whole table."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from records_lake import SCHEMA, UNIT, make_table, stored_codes, unit_groups, write_source

from app.errors import SourceChanged
from app.records.capping import kept_rows
from app.records.engine import UnitCap
from app.records.hashing import row_keys
from app.records.local import LocalEngine
from app.schema import parse_schema
from app.services.columns import true_marginal
from app.sources import Source, list_files

NAMES = list(SCHEMA.names)
MARGINALS = [(a,) for a in NAMES] + list(itertools.combinations(NAMES, 2)) + [()]
CAP = UnitCap(UNIT, 2, secret=-0x1F2E3D4C5B6A7988)


def parts_of(seed: int) -> list[tuple[str, pa.Table]]:
    rng = np.random.default_rng(seed)
    # 60 units over 2,000 rows: about 33 rows each, so the cap drops most rows.
    return [
        ("2023", make_table(rng, 800, units=60)),
        ("2024", make_table(rng, 700, units=60)),
        ("2023", make_table(rng, 500, units=60)),
    ]


def reference(parts: list[tuple[str, pa.Table]], cap: UnitCap) -> dict[tuple[str, ...], np.ndarray]:
    """The rule applied directly: keys of every row, one lexsort over the whole table."""
    rows, codes = stored_codes(parts)
    keys = row_keys(cap.secret, [codes[name] for name in NAMES])
    groups = unit_groups(parts)
    order = np.lexsort((keys, groups))
    counts = np.bincount(groups)
    starts = np.cumsum(counts) - counts
    rank = np.arange(rows) - starts[groups[order]]
    kept = order[rank < cap.max_rows]
    kept_codes = {name: column[kept] for name, column in codes.items()}
    return {
        m: true_marginal(kept_codes, SCHEMA.domain(), m) if m else np.array([kept.size])
        for m in MARGINALS
    }


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Source, dict]:
    parts = parts_of(11)
    source = write_source(tmp_path_factory.mktemp("capped"), parts)
    return source, reference(parts, CAP)


@pytest.mark.parametrize("batch_rows,bucket_rows", [(97, 300), (100_000, 2_000_000), (512, 1)])
def test_capped_counts_equal_the_direct_reference(
    capped: tuple[Source, dict], batch_rows: int, bucket_rows: int, tmp_path: Path
) -> None:
    source, expected = capped
    engine = LocalEngine(
        batch_rows=batch_rows, bucket_rows=bucket_rows, spill_directory=str(tmp_path)
    )
    counts = engine.count(source, SCHEMA, MARGINALS, CAP)
    for marginal in MARGINALS:
        np.testing.assert_array_equal(counts[marginal], expected[marginal], err_msg=str(marginal))
    assert list(tmp_path.iterdir()) == []  # the spilled buckets are removed


def test_each_unit_keeps_at_most_max_rows(capped: tuple[Source, dict]) -> None:
    source, _ = capped
    per_unit = np.bincount(unit_groups(parts_of(11)))
    for max_rows in (1, 2, 40):
        cap = UnitCap(UNIT, max_rows, CAP.secret)
        kept = LocalEngine(bucket_rows=700).count(source, SCHEMA, [()], cap)[()]
        assert kept.tolist() == [int(np.minimum(per_unit, max_rows).sum())]
    assert int(per_unit.max()) > 2  # the cap drops rows in this source


def test_the_same_rows_whatever_the_files(tmp_path: Path) -> None:
    """The same rows in other files, in another order: the same counts."""
    parts = parts_of(11)
    by_year: dict[str, list[pa.Table]] = {}
    for year, table in parts:
        by_year.setdefault(year, []).append(table)
    rng = np.random.default_rng(0)
    shuffled: list[tuple[str, pa.Table]] = []
    for year, tables in by_year.items():
        whole = pa.concat_tables(tables, promote_options="permissive").combine_chunks()
        whole = whole.take(pa.array(rng.permutation(whole.num_rows)))
        half = whole.num_rows // 3
        shuffled += [(year, whole.slice(0, half)), (year, whole.slice(half))]
    first = LocalEngine(batch_rows=128).count(
        write_source(tmp_path / "a", parts), SCHEMA, MARGINALS, CAP
    )
    second = LocalEngine(batch_rows=1000, bucket_rows=250).count(
        write_source(tmp_path / "b", shuffled, row_group_size=333), SCHEMA, MARGINALS, CAP
    )
    for marginal in MARGINALS:
        np.testing.assert_array_equal(first[marginal], second[marginal], err_msg=str(marginal))
    other_secret = LocalEngine().count(
        write_source(tmp_path / "a", parts), SCHEMA, [("sex", "age")], UnitCap(UNIT, 2, 99)
    )
    assert not np.array_equal(other_secret[("sex", "age")], first[("sex", "age")])


def one_attribute_source(tmp_path: Path, tables: list[pa.Table]) -> Source:
    for index, table in enumerate(tables):
        pq.write_table(table, tmp_path / f"part-{index}.parquet")
    uri = tmp_path.as_uri() + "/"
    return Source(uri, list_files(uri))


SMALL = parse_schema({"attributes": [{"name": "x", "type": "integer", "size": 3}]})


def test_ids_are_normalised_as_the_engines_agree(tmp_path: Path) -> None:
    """-0.0 is 0.0; integer ids of any width are one unit; text is trimmed of ID_TRIM."""
    (tmp_path / "f").mkdir()
    floats = one_attribute_source(
        tmp_path / "f", [pa.table({"x": [0, 1, 2, 0], "id": pa.array([0.0, -0.0, 0.0, 1.5])})]
    )
    kept = LocalEngine().count(floats, SMALL, [()], UnitCap("id", 1, 5))[()]
    assert kept.tolist() == [2]
    (tmp_path / "i").mkdir()
    ints = one_attribute_source(
        tmp_path / "i",
        [
            pa.table({"x": [0, 1], "id": pa.array([7, 8], pa.int32())}),
            pa.table({"x": [2, 2], "id": pa.array([7, 8], pa.int64())}),
        ],
    )
    assert LocalEngine().count(ints, SMALL, [()], UnitCap("id", 1, 5))[()].tolist() == [2]
    (tmp_path / "t").mkdir()
    texts = one_attribute_source(
        tmp_path / "t", [pa.table({"x": [0, 1, 2, 1], "id": ["a", " a\t", "\x0ba\n", "b"]})]
    )
    assert LocalEngine().count(texts, SMALL, [()], UnitCap("id", 1, 5))[()].tolist() == [2]


def test_a_row_without_an_id_at_count_time_is_a_changed_source(tmp_path: Path) -> None:
    source = one_attribute_source(tmp_path, [pa.table({"x": [0, 1], "id": ["a", "  "]})])
    with pytest.raises(SourceChanged, match="id"):
        LocalEngine().count(source, SMALL, [("x",)], UnitCap("id", 1, 5))


def test_keys_that_agree_in_their_high_bits_are_ordered_exactly() -> None:
    """The one-sort ordering falls back to a lexsort when a unit's keys tie in the bits
    it sorts by; the kept rows are the rule's either way."""
    rng = np.random.default_rng(4)
    groups = rng.integers(0, 5, 400)
    high = rng.integers(-3, 3, 400).astype(np.int64) << np.int64(40)
    # Keys that differ only in their lowest 3 bits (below what the one sort compares).
    for keys in (high + rng.integers(0, 8, 400), rng.integers(-(2**62), 2**62, 400)):
        order = np.lexsort((keys, groups))
        counts = np.bincount(groups)
        rank = np.arange(400) - (np.cumsum(counts) - counts)[groups[order]]
        expected = np.sort(order[rank < 3])
        kept = kept_rows(groups, keys, 3)
        assert kept is not None
        np.testing.assert_array_equal(np.sort(kept), expected)
    assert kept_rows(np.arange(10), np.zeros(10, np.int64), 1) is None
