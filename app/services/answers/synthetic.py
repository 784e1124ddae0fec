"""Synthetic records: rows sampled from the model, streamed as CSV in the schema's labels."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np

from app.services.answers.common import MAX_SYNTHETIC_ROWS, SYNTHETIC_CHUNK_ROWS, invalid
from app.services.models import LoadedModel


def synthetic_rows(loaded: LoadedModel, rows: int | None) -> int:
    """How many rows to sample: N̂ rounded by default, at most MAX_SYNTHETIC_ROWS."""
    count = loaded.model.default_rows() if rows is None else rows
    if count < 0:
        raise invalid("rows", "must be zero or more")
    if count > MAX_SYNTHETIC_ROWS:
        raise invalid(
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
