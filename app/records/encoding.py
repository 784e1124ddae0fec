"""Encoding a source's columns to codes, exactly as an upload of the same file would.

Every value goes through the upload's own encoder (`app.ingest.parquet.ParquetColumn`),
so codes are the same by construction. A dictionary-encoded array (text columns, and
partition folders' values) is not expanded: its dictionary's values are encoded, once
for each distinct dictionary (a batch whose dictionary equals the previous batch's
reuses its codes), and the rows take their code by their index, nulls the null's code.

The unit's ids (`unit_ids`) are normalised as the engines agree (`app.records.engine`):
text trimmed of `ID_TRIM`, floating ids as float64 with -0.0 the same as 0.0, integers
as int64, anything else as it is; a null, a NaN or an empty text or byte string is no id.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.ingest.parquet import ParquetColumn
from app.records.engine import ID_TRIM
from app.records.hashing import mix, text_hashes
from app.schema import Attribute

_NO_BYTES = np.zeros(0, dtype=np.uint8)


class ColumnCodes:
    """One attribute's encoder over a scan: Arrow arrays in, signed integer codes out
    (-1 marks a value outside the schema, as the upload's encoder marks it)."""

    def __init__(self, attribute: Attribute) -> None:
        self.attribute = attribute
        self.column = ParquetColumn(attribute)
        self.null_code = attribute.value_size if attribute.missing else -1
        # Codes taken from a dictionary are small signed integers (-1 marks a value
        # outside the schema): an eighth of the memory traffic of int64 for most schemas.
        self.small = np.dtype(np.int16) if attribute.size < 2**15 else np.dtype(np.int32)
        self._dictionary: Any = None
        self._dictionary_codes = np.zeros(0, dtype=self.small)
        self.dictionaries_encoded = 0  # how many distinct dictionaries were mapped

    def encode(self, array: Any) -> np.ndarray:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if not pa.types.is_dictionary(array.type):
            return self.column.encode(array)
        codes = self._codes_of(array.dictionary)
        if len(codes) == 2 and not array.null_count:  # one value (a partition folder's)
            return np.full(len(array), codes[0], dtype=self.small)
        indices = array.indices
        if indices.null_count:
            # The extra last entry of the dictionary's codes is the null's code.
            indices = pc.fill_null(indices, len(array.dictionary))
        positions = indices.to_numpy(zero_copy_only=False)
        taken: np.ndarray = codes.take(positions)
        return taken

    def _codes_of(self, dictionary: Any) -> np.ndarray:
        """The codes of a dictionary's values, then the null's code."""
        previous = self._dictionary
        if previous is not None and (previous is dictionary or previous.equals(dictionary)):
            return self._dictionary_codes
        values = self.column.encode(dictionary) if len(dictionary) else np.zeros(0, np.int64)
        self._dictionary = dictionary
        self._dictionary_codes = np.append(values, self.null_code).astype(self.small)
        self.dictionaries_encoded += 1
        return self._dictionary_codes

    def numbers(self, array: Any) -> np.ndarray:
        """A numeric or integer column's values as float64 (NaN where none), as an upload
        reads them for the places within the bins (`app.ingest.fractions`)."""
        return self.column.numbers(array)

    def explain(self, array: Any, row: int) -> str:
        """Why the value on `row` of the array is outside the schema, as an upload says."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        return self.column.explain(array.slice(row, 1), 0)


def plain(array: Any) -> Any:
    """A dictionary-encoded or chunked array as one plain array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def is_text(data_type: Any) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def is_bytes(data_type: Any) -> bool:
    return bool(pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type))


def is_nested(data_type: Any) -> bool:
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    return bool(pa.types.is_nested(data_type) or pa.types.is_union(data_type))


def unit_ids(array: Any) -> tuple[Any, np.ndarray]:
    """(the normalised ids, where a row has no id: a bool array)."""
    ids = plain(array)
    data_type = ids.type
    absent = ids.is_null(nan_is_null=pa.types.is_floating(data_type))
    if is_text(data_type):
        # One type whatever the file's (a batch's text is far below string's 2 GiB).
        ids = pc.utf8_trim(ids, characters=ID_TRIM).cast(pa.string())
    elif is_bytes(data_type):
        ids = ids.cast(pa.binary())
    elif pa.types.is_floating(data_type):
        ids = pc.add(pc.cast(ids, pa.float64()), pa.scalar(0.0))  # -0.0 + 0.0 is +0.0
    elif pa.types.is_integer(data_type):
        ids = pc.cast(ids, pa.int64())
    if is_text(ids.type) or is_bytes(ids.type):
        absent = pc.or_(absent, pc.fill_null(pc.equal(pc.binary_length(ids), 0), False))
    return ids, absent.to_numpy(zero_copy_only=False)


def id_hashes(ids: Any) -> np.ndarray:
    """A uint64 hash of each normalised id (no nulls), the same at every scan."""
    data_type = ids.type
    if is_text(data_type) or is_bytes(data_type):
        _, offsets, data = ids.buffers()
        width = (
            np.int64
            if pa.types.is_large_string(data_type) or pa.types.is_large_binary(data_type)
            else np.int32
        )
        offset_values = np.frombuffer(offsets, dtype=width)
        offset_values = offset_values[ids.offset : ids.offset + len(ids) + 1]
        data_bytes = np.frombuffer(data, dtype=np.uint8) if data is not None else _NO_BYTES
        return text_hashes(offset_values, data_bytes)
    if pa.types.is_int64(data_type) or pa.types.is_float64(data_type):
        values = ids.to_numpy(zero_copy_only=False)
        return mix(values.view(np.uint64))
    # Dates, times, decimals, booleans: hashed by their text (grouped by their value).
    return id_hashes(pc.cast(ids, pa.string()))
