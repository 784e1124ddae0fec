"""The unit cap over a source too large for memory: rows spilled by unit, then capped.

A unit keeps its `max_rows` rows of smallest `row_key` (`app.records.engine`). Which
rows those are depends on all of the unit's rows, wherever they are in the source, so
the scan cannot decide per batch. Instead every batch's rows are spilled — the
normalised id, the row key and the codes the counted marginals need — into one of
`buckets` Arrow IPC files chosen by a hash of the id, so that all of a unit's rows land
in one bucket. Then each bucket (about `BUCKET_ROWS` rows at most) is read whole, its
rows grouped by id exactly (`pyarrow.compute.dictionary_encode`), sorted by unit then
key, and the first `max_rows` of each unit counted; the engine's two threads cap two
buckets at a time. Memory is a batch while scanning and two buckets while capping,
whatever the rows or the units; the files live in a temporary folder the caller
removes.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.errors import SourceChanged
from app.ingest import FRACTION_PREFIX
from app.ingest.columns import code_dtype
from app.records.counting import Mapper, MarginalCounter
from app.records.encoding import id_hashes
from app.records.engine import UnitCap
from app.records.hashing import row_keys
from app.records.summing import FractionSummer
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
        counter: MarginalCounter | FractionSummer,
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
        # The counter's domain: the schema's attributes, and for within-bin sums each
        # binned attribute's place within its bin (`fraction:` + its name, 0..GRID).
        self.dtypes = [code_dtype(counter.domain.size_of(a)) for a in self.needed]
        self.fractions = [i for i, a in enumerate(self.needed) if a.startswith(FRACTION_PREFIX)]
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
        """Count every bucket's kept rows: as many buckets in memory at once as `mapper`
        runs tasks side by side (one without it)."""
        self.close()
        lock = threading.Lock()
        run = mapper if mapper is not None else map
        for _ in run(lambda index: self._count_bucket(index, lock), range(self.buckets)):
            pass

    def _count_bucket(self, index: int, lock: threading.Lock) -> None:
        path = os.path.join(self.directory, f"bucket-{index}.arrow")
        if not os.path.exists(path):
            return
        with pa.memory_map(path) as source:
            # Chunks stay apart: the ids of a bucket may pass 2 GiB, a string array's limit.
            table = pa.ipc.open_stream(source).read_all()
        os.remove(path)  # the mapping keeps the data readable until the table is gone
        if self.fractions:
            # Rows of a unit whose keys tie have equal codes; of those, a cap keeps the
            # smallest places within the bins first (the sort below is stable for ties),
            # as the Spark engine's window orders them: the sums do not depend on the
            # order the rows were read in.
            places = [table.column(f"c{i}").to_numpy() for i in reversed(self.fractions)]
            table = table.take(pa.array(np.lexsort(places)))
        rows = table.num_rows
        groups = group_indices(table.column("id"))
        keep = kept_rows(groups, table.column("key").to_numpy(), self.unit.max_rows)
        codes = {}
        for i, attribute in enumerate(self.needed):
            column = table.column(f"c{i}").to_numpy()
            codes[attribute] = column if keep is None else column[keep]
        kept = rows if keep is None else int(keep.size)
        del table, groups
        with lock:  # the totals are shared: one bucket adds at a time
            self.counter.add(codes, kept)
            self.kept += kept


def group_indices(ids: Any) -> np.ndarray:
    """Each row's unit as an index 0..units-1 (int64): equal ids, one index."""
    encoded = pc.dictionary_encode(ids)
    if not isinstance(encoded, pa.ChunkedArray):
        encoded = pa.chunked_array([encoded])
    # The hash kernel shares one dictionary across a chunked array's chunks: the
    # indices are the same units in every chunk.
    parts = [chunk.indices.to_numpy(zero_copy_only=False) for chunk in encoded.chunks]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(parts).astype(np.int64, copy=False)


def kept_rows(groups: np.ndarray, keys: np.ndarray, max_rows: int) -> np.ndarray | None:
    """The rows each unit keeps (its `max_rows` of smallest key, signed order), as row
    indices; None when no unit has more rows than that."""
    counts = np.bincount(groups)
    if int(counts.max()) <= max_rows:
        return None
    order = _by_unit_then_key(groups, keys, len(counts))
    starts = np.cumsum(counts) - counts
    rank = np.arange(groups.size, dtype=np.int64) - starts[groups[order]]
    kept: np.ndarray = order[rank < max_rows]
    return kept


_SIGN = np.uint64(1 << 63)


def _by_unit_then_key(groups: np.ndarray, keys: np.ndarray, units: int) -> np.ndarray:
    """The rows ordered by unit, then by key: one sort of a 64-bit number whose high bits
    are the unit and whose low bits are the key's highest, several times faster than a
    lexsort. Two rows of a unit whose keys agree in those bits are put in order by a
    lexsort instead (rare: a chance of about rows² / 2^(64 - unit bits) per bucket)."""
    unit_bits = max(1, int(units - 1).bit_length())
    key_bits = 64 - unit_bits
    ordered_keys = keys.view(np.uint64) ^ _SIGN  # signed order as unsigned order
    combined = groups.astype(np.uint64) << np.uint64(key_bits)
    combined |= ordered_keys >> np.uint64(unit_bits)
    order = np.argsort(combined)
    ranked = combined[order]
    if ranked.size > 1 and bool(np.any(ranked[1:] == ranked[:-1])):
        exact: np.ndarray = np.lexsort((keys, groups))
        return exact
    return order
