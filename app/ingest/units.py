"""The privacy unit at upload: which rows belong to one person, and at most k of each.

The curator names an id column (`PrivacyUnit.column`) and a bound k (`max_rows`). While
a file is encoded its ids are gathered as Arrow arrays (`UnitIds`), never as Python
objects that could end up in a message; once every row is read, `keep_at_most` chooses,
for each unit with more than k rows, k of them uniformly at random: every row gets an
independent 64-bit key from the operating system's cryptographic generator
(`os.urandom`), and a unit keeps its rows with the k smallest keys — a uniformly random
k-subset, whatever the file's order. The ids are then dropped; only the column's name
and k are stored. No message ever quotes an id, only the column's name and row numbers.
Ids are compared in their canonical spelling (`app.ingest.unit_ids`: trimmed, Unicode
NFC, one form per number), so one person written two ways is still one unit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.ingest.errors import IngestError
from app.ingest.unit_ids import canonical_ids
from app.schema import DatasetSchema, SchemaError
from app.schema.rules import check_name

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError:  # pragma: no cover - pyarrow is a declared dependency
    pa = None

# A unit may keep at most this many rows: every cost grows with k², so far beyond this
# no measurement is worth its ρ.
MAX_UNIT_ROWS = 1_000


@dataclass(frozen=True)
class PrivacyUnit:
    """Rows sharing a value of `column` are one unit; at most `max_rows` of them are kept."""

    column: str
    max_rows: int


def parse_privacy_unit(obj: object, schema: DatasetSchema) -> PrivacyUnit:
    """The `privacy_unit` form field (JSON text or parsed) checked against the schema.

    Raises `IngestError("bad_privacy_unit")` (422) naming what is wrong.
    """
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            obj = json.loads(obj)
        except ValueError:  # not JSON, not UTF-8, or a number of over 4300 digits
            raise _bad(
                'privacy_unit must be JSON: {"column": "person_id", "max_rows": 3}'
            ) from None
    if not isinstance(obj, Mapping):
        raise _bad('privacy_unit must be a JSON object: {"column": "person_id", "max_rows": 3}')
    unknown = sorted(str(key) for key in obj if key not in ("column", "max_rows"))
    if unknown:
        raise _bad(
            f"privacy_unit has unknown key(s) {', '.join(map(repr, unknown))} "
            "(allowed: column, max_rows)"
        )
    column = obj.get("column")
    if column is None:
        raise _bad("privacy_unit needs column: the name of the id column")
    try:
        check_name(column)
    except SchemaError as error:
        raise _bad(f"privacy_unit.column: {error}") from None
    if column in schema.names:
        raise _bad(
            f"privacy_unit.column {column!r} is a schema attribute; the id column must not "
            "be one (its values are never stored)"
        )
    max_rows = obj.get("max_rows", 1)
    if not isinstance(max_rows, int) or isinstance(max_rows, bool):
        raise _bad("privacy_unit.max_rows must be a positive integer")
    if not 1 <= max_rows <= MAX_UNIT_ROWS:
        raise _bad(f"privacy_unit.max_rows must be 1 to {MAX_UNIT_ROWS}, got {max_rows}")
    return PrivacyUnit(column=column, max_rows=max_rows)


def _bad(message: str) -> IngestError:
    return IngestError("bad_privacy_unit", message)


def null_ids(column: str, positions: list[int], *, unit: str = "line") -> IngestError:
    """The refusal of ids that are empty or null, on these lines of a CSV (or rows of a
    Parquet file, `unit="row"`), 1-based, at most a few."""
    shown = ", ".join(map(str, positions))
    return IngestError(
        "missing_unit_id",
        f"the privacy unit column {column!r} has no id on {unit}(s) {shown}; every row "
        "must name its unit",
        {"column": column, f"{unit}s": positions},
    )


class UnitIds:
    """The id column of the rows read so far, as Arrow arrays (one per batch)."""

    def __init__(self) -> None:
        self._parts: list[Any] = []
        self.rows = 0

    def add(self, ids: Any) -> None:
        """Append one batch of ids (an Arrow array without nulls), each in its canonical
        spelling (`app.ingest.unit_ids`: trimmed, NFC, one form per number)."""
        self._parts.append(canonical_ids(ids))
        self.rows += len(ids)

    def add_texts(self, cells: tuple[str, ...]) -> None:
        """Append one batch of ids read as text (the CSV's exact path)."""
        self.add(binary_array(cells))

    def groups(self) -> np.ndarray:
        """The unit of each row as an index 0..units-1 (int64), in row order."""
        if not self._parts:
            return np.zeros(0, dtype=np.int64)
        encoded = pc.dictionary_encode(pa.chunked_array(self._parts))
        self._parts = []
        # The hash kernel shares one dictionary across chunks: indices are global.
        parts = [chunk.indices.to_numpy(zero_copy_only=False) for chunk in encoded.chunks]
        return np.concatenate(parts).astype(np.int64, copy=False)


def binary_array(cells: tuple[str, ...]) -> Any:
    """Cells as an Arrow binary array, built from buffers (undecodable bytes kept)."""
    encoded = [cell.encode("utf-8", "surrogateescape") for cell in cells]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(cell) for cell in encoded], out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.large_binary(), len(encoded), buffers)


def keep_at_most(groups: np.ndarray, max_rows: int) -> np.ndarray | None:
    """Rows to keep (a boolean mask) so that no unit keeps more than `max_rows`, or None
    when no unit has more (nothing is dropped). Each unit's kept rows are a uniformly
    random subset, chosen with keys from `os.urandom`."""
    if groups.size == 0:
        return None
    counts = np.bincount(groups)
    if int(counts.max()) <= max_rows:
        return None
    keys = np.frombuffer(os.urandom(8 * groups.size), dtype=np.uint64)
    order = np.lexsort((keys, groups))  # by unit, then by key
    starts = np.cumsum(counts) - counts
    rank = np.arange(groups.size, dtype=np.int64) - starts[groups[order]]
    keep = np.empty(groups.size, dtype=np.bool_)
    keep[order] = rank < max_rows
    return keep
