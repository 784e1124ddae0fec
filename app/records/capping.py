"""The unit cap over a source too large for memory: rows spilled by unit, then capped.

A unit keeps its `max_rows` rows of smallest `row_key` (`app.records.engine`). Which
rows those are depends on all of the unit's rows, wherever they are in the source, so
the scan cannot decide per batch. Instead every batch's rows are spilled — the
normalised id, the row key and the codes the counted marginals need — into one of
`buckets` Arrow IPC files chosen by a hash of the id, so that all of a unit's rows land
in one bucket. Then each bucket (about `BUCKET_ROWS` rows at most) is read whole, its
rows grouped by id exactly (`pyarrow.compute.dictionary_encode`), sorted by unit then
key, and the first `max_rows` of each unit counted. Memory is a batch while scanning
and a bucket while capping, whatever the rows or the units; the files live in a
temporary folder the caller removes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.errors import SourceChanged
from app.ingest.columns import code_dtype
from app.records.counting import Mapper, MarginalCounter
from app.records.encoding import id_hashes
from app.records.engine import UnitCap
from app.records.hashing import row_keys
from app.schema import DatasetSchema

# A bucket holds about this many rows at most (for a source whose ids spread evenly).
BUCKET_ROWS = 2_000_000


def bucket_count(rows: int, bucket_rows: int = BUCKET_ROWS) -> int:
    """How many buckets a source of `rows` rows is spilled into."""
    return max(1, math.ceil(rows / bucket_rows))


class CappedCounter:
    """Spills each batch's rows by unit (`add`), then counts each unit's kept rows
    (`finish`) into `counter`."""

    def __init__(
        self,
        counter: MarginalCounter,
        schema: DatasetSchema,
        unit: UnitCap,
        buckets: int,
        directory: str,
    ) -> None:
        self.counter = counter
        self.schema = schema
        self.unit = unit
        self.buckets = buckets
        self.directory = directory
        self.needed = counter.attributes
        self.dtypes = [code_dtype(schema.attribute(a).size) for a in self.needed]
        self._writers: list[Any] = [None] * buckets
        self._sinks: list[Any] = [None] * buckets
        self._id_type: Any = None
        self.kept = 0

    def add(
        self,
        ids: Any,
        codes: Mapping[str, np.ndarray],
        rows: int,
        mapper: Mapper | None = None,
    ) -> None:
        """Spill one batch: its normalised ids (no nulls) and the codes of every schema
        attribute (non-negative)."""
        if self._id_type is None:
            self._id_type = ids.type
        elif ids.type != self._id_type:
            raise SourceChanged(
                f"the privacy unit column {self.unit.column!r} changes type between the "
                "source's files"
            )
        keys = self._keys(codes, rows, mapper)
        columns = [ids, pa.array(keys)] + [
            pa.array(codes[a].astype(dtype, copy=False))
            for a, dtype in zip(self.needed, self.dtypes, strict=True)
        ]
        batch = pa.RecordBatch.from_arrays(columns, names=self._names())
        if self.buckets == 1:
            self._write(0, batch)
            return
        bucket = (id_hashes(ids) % np.uint64(self.buckets)).astype(np.intp)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.buckets + 1))
        batch = batch.take(pa.array(order))
        for index in range(self.buckets):
            start, stop = int(bounds[index]), int(bounds[index + 1])
            if stop > start:
                self._write(index, batch.slice(start, stop - start))

    def _keys(self, codes: Mapping[str, np.ndarray], rows: int, mapper: Mapper | None) -> Any:
        columns = [codes[a] for a in self.schema.names]
        if mapper is None or rows < 2:
            return row_keys(self.unit.secret, columns)
        half = rows // 2
        parts = list(
            mapper(
                lambda piece: row_keys(self.unit.secret, [c[piece] for c in columns]),
                [slice(0, half), slice(half, rows)],
            )
        )
        return np.concatenate(parts)

    def _names(self) -> list[str]:
        return ["id", "key"] + [f"c{i}" for i in range(len(self.needed))]

    def _write(self, index: int, batch: Any) -> None:
        if self._writers[index] is None:
            path = os.path.join(self.directory, f"bucket-{index}.arrow")
            self._sinks[index] = pa.OSFile(path, "wb")
            self._writers[index] = pa.ipc.new_stream(self._sinks[index], batch.schema)
        self._writers[index].write_batch(batch)

    def close(self) -> None:
        """Close the bucket files (also after a failure; the caller removes the folder)."""
        for index in range(self.buckets):
            if self._writers[index] is not None:
                self._writers[index].close()
                self._sinks[index].close()
                self._writers[index] = None

    def finish(self, mapper: Mapper | None = None) -> None:
        """Count every bucket's kept rows, one bucket in memory at a time."""
        self.close()
        for index in range(self.buckets):
            path = os.path.join(self.directory, f"bucket-{index}.arrow")
            if not os.path.exists(path):
                continue
            with pa.memory_map(path) as source:
                table = pa.ipc.open_stream(source).read_all().combine_chunks()
            self._count_bucket(table, mapper)
            del table
            os.remove(path)

    def _count_bucket(self, table: Any, mapper: Mapper | None) -> None:
        rows = table.num_rows
        if rows == 0:
            return
        groups = group_indices(table.column("id"))
        keep = kept_rows(groups, table.column("key").to_numpy(), self.unit.max_rows)
        codes = {}
        for i, attribute in enumerate(self.needed):
            column = table.column(f"c{i}").to_numpy()
            codes[attribute] = column if keep is None else column[keep]
        kept = rows if keep is None else int(keep.size)
        self.counter.add(codes, kept, mapper)
        self.kept += kept


def group_indices(ids: Any) -> np.ndarray:
    """Each row's unit as an index 0..units-1 (int64): equal ids, one index."""
    encoded = pc.dictionary_encode(ids)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def kept_rows(groups: np.ndarray, keys: np.ndarray, max_rows: int) -> np.ndarray | None:
    """The rows each unit keeps (its `max_rows` of smallest key, signed order), as row
    indices; None when no unit has more rows than that."""
    counts = np.bincount(groups)
    if int(counts.max()) <= max_rows:
        return None
    order = np.lexsort((keys, groups))  # by unit, then by key
    starts = np.cumsum(counts) - counts
    rank = np.arange(groups.size, dtype=np.int64) - starts[groups[order]]
    kept: np.ndarray = order[rank < max_rows]
    return kept
