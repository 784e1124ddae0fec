"""Reading a registered source: its fingerprinted files, in order, in Arrow record batches.

Each file is opened through the source's filesystem (`pyarrow.fs.FileSystem.from_uri`),
its size compared with the fingerprint's as it is opened (`SourceChanged` when they
differ), and read as Parquet, only the columns asked for, one record batch of at most
`batch_rows` rows at a time (within one row group): memory is a batch and one row
group's compressed column chunks, whatever the rows.

Hive-style partition folders between the source's root and a file (`year=2024/`) give
the file's rows a column of that constant text value (URL-unescaped;
`__HIVE_DEFAULT_PARTITION__` is a null): a dictionary array with one value, so that it
is encoded once per file. A column in the file itself wins over a partition folder of
the same name.

Text and binary columns are read as dictionary arrays (Parquet writers
dictionary-encode them; Arrow keeps the dictionary instead of expanding every row), so
the encoders map each distinct dictionary once (`app.records.encoding`); the unit's id
column, nearly all distinct values, is read plain.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs

from app.errors import SourceChanged
from app.sources import Source, SourceFile

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class Batch:
    """One record batch of a source: the columns asked for, by name."""

    columns: dict[str, Any]
    rows: int
    first_row: int  # rows of the source before this batch, in file order
    file: SourceFile


class SourceFileUnreadable(Exception):
    """A file of the source that is not Parquet (or cannot be read); `file` names it."""

    def __init__(self, file: SourceFile) -> None:
        super().__init__(file.path)
        self.file = file


@dataclass(frozen=True)
class OpenedFile:
    """One file opened: its Parquet reader, its columns and its partition folders' values."""

    file: SourceFile
    parquet: Any  # pyarrow.parquet.ParquetFile
    names: frozenset[str]  # the file's own columns
    partitions: dict[str, str | None]

    def has(self, column: str) -> bool:
        return column in self.names or column in self.partitions

    def type_of(self, column: str) -> Any:
        if column in self.names:
            return self.parquet.schema_arrow.field(column).type
        return pa.string()


class SourceReader:
    """Reads `columns` of a source's files, in the fingerprint's order."""

    def __init__(self, source: Source, batch_rows: int, plain: Sequence[str] = ()) -> None:
        self.source = source
        self.batch_rows = batch_rows
        # Columns read as plain arrays even if text: the unit's ids, nearly all distinct,
        # whose dictionary would cost a hash table and save nothing.
        self.plain = frozenset(plain)
        try:
            self.filesystem, base = fs.FileSystem.from_uri(source.uri)
        except Exception:  # the message could name credentials or internals
            raise SourceChanged(f"the source {source.uri!r} cannot be opened") from None
        self.base = base.rstrip("/")
        self._indices: dict[int, Any] = {}

    def open(self, file: SourceFile) -> OpenedFile:
        """Open one file: its size checked against the fingerprint, its footer read.
        Raises SourceChanged (size, or gone) or SourceFileUnreadable (not Parquet)."""
        try:
            handle = self.filesystem.open_input_file(file.path)
            size = handle.size()
        except Exception:
            raise SourceChanged(
                f"the source's file {self.relative(file)!r} cannot be opened any more"
            ) from None
        if size != file.size:
            raise SourceChanged(
                f"the source's file {self.relative(file)!r} has {size} bytes, not the "
                f"{file.size} it had at registration"
            )
        try:
            metadata = pq.read_metadata(handle)
            arrow_schema = metadata.schema.to_arrow_schema()
            # Text and bytes come as dictionary arrays: mapped once per dictionary.
            dictionaries = [
                f.name for f in arrow_schema if _is_bytes(f.type) and f.name not in self.plain
            ]
            parquet = pq.ParquetFile(
                handle, metadata=metadata, pre_buffer=True, read_dictionary=dictionaries
            )
            names = arrow_schema.names
        except Exception:  # the reader's message could quote the file's bytes
            raise SourceFileUnreadable(file) from None
        return OpenedFile(file, parquet, frozenset(names), self.partitions(file))

    def relative(self, file: SourceFile) -> str:
        """The file's path below the source's root (its name, for a one-file source)."""
        if file.path.startswith(self.base + "/"):
            return file.path[len(self.base) + 1 :]
        return file.path.rsplit("/", 1)[-1]

    def partitions(self, file: SourceFile) -> dict[str, str | None]:
        """The `name=value` folders between the source's root and the file."""
        values: dict[str, str | None] = {}
        folders = self.relative(file).split("/")[:-1]
        for folder in folders:
            name, equals, value = folder.partition("=")
            if equals and name:
                text = unquote(value)
                values[unquote(name)] = None if text == HIVE_NULL else text
        return values

    def row_count(self, opened: Sequence[OpenedFile] | None = None) -> int:
        """The source's rows by the files' Parquet footers (each file opened and checked)."""
        files = opened if opened is not None else [self.open(f) for f in self.source.files]
        return sum(int(f.parquet.metadata.num_rows) for f in files)

    def batches(self, columns: Sequence[str]) -> Iterator[Batch]:
        """Every file's batches in order, each with `columns` (which every file has)."""
        first_row = 0
        for file in self.source.files:
            opened = self.open(file)
            for batch, rows in self.file_batches(opened, columns):
                yield Batch(batch, rows, first_row, file)
                first_row += rows

    def file_batches(
        self, opened: OpenedFile, columns: Sequence[str]
    ) -> Iterator[tuple[dict[str, Any], int]]:
        """One opened file's batches (columns by name, rows): its own columns read, its
        partition folders' values added."""
        own = [c for c in columns if c in opened.names]
        constant = [c for c in columns if c not in opened.names]
        missing = [c for c in constant if c not in opened.partitions]
        if missing:
            raise SourceChanged(
                f"the source's file {self.relative(opened.file)!r} has no column {missing[0]!r}"
            )
        parquet = opened.parquet
        if own:
            reader = parquet.iter_batches(batch_size=self.batch_rows, columns=own, use_threads=True)
            for record_batch in reader:
                rows = record_batch.num_rows
                out = {name: record_batch.column(name) for name in own}
                out.update({name: self._constant(opened, name, rows) for name in constant})
                yield out, rows
        else:  # only partition columns: the rows come from the footer
            remaining = int(parquet.metadata.num_rows)
            while remaining > 0:
                rows = min(remaining, self.batch_rows)
                yield {name: self._constant(opened, name, rows) for name in constant}, rows
                remaining -= rows

    def _constant(self, opened: OpenedFile, name: str, rows: int) -> Any:
        """A partition folder's value for `rows` rows: a dictionary of one value."""
        indices = self._indices.get(rows)
        if indices is None:
            zeros = pa.py_buffer(np.zeros(rows, dtype=np.int32).tobytes())
            indices = pa.Array.from_buffers(pa.int32(), rows, [None, zeros])
            self._indices = {rows: indices}  # a file's batches mostly have one length
        dictionary = pa.array([opened.partitions[name]], type=pa.string())
        return pa.DictionaryArray.from_arrays(indices, dictionary)


def _is_bytes(data_type: Any) -> bool:
    return bool(
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
    )
