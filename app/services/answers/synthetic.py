"""Synthetic records from the model, streamed as CSV in the schema's values.

Two methods (`GET /synthetic?method=`):
- "round" (default): the records' clique marginals are the model's counts up to rounding
  (`GraphicalModel.rounded_chunks`, `app.pgm.rounding`): no sampling error on top of
  the model's within a clique.
- "sample": records drawn i.i.d. from the model (`GraphicalModel.sample_chunks`).

Cells are the schema's values: a categorical value, an integer attribute's code (the
bin's single value), and for a numeric attribute a number inside its bin — uniform in
[lo, hi), written with a fixed number of decimals for the attribute (truncated, so it
never reaches hi) — never a bin label. Deterministic given `seed`: the records and the
numbers inside bins come from two generators seeded from it. Both methods stream in
chunks of SYNTHETIC_CHUNK_ROWS rows; no table of all rows is ever held.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator

import numpy as np

from app.schema import Attribute
from app.services.answers.common import MAX_SYNTHETIC_ROWS, SYNTHETIC_CHUNK_ROWS, invalid
from app.services.models import LoadedModel

METHODS = ("round", "sample")
DEFAULT_METHOD = "round"
# Numbers inside a bin keep this many significant digits of the narrowest bin's width.
WIDTH_DIGITS = 4

Column = Callable[[np.ndarray, np.random.Generator], list[str]]


def synthetic_rows(loaded: LoadedModel, rows: int | None) -> int:
    """How many rows to make: N̂ rounded by default, at most MAX_SYNTHETIC_ROWS."""
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


def _labels(attribute: Attribute) -> Column:
    labels = np.asarray(attribute.labels(), dtype=object)
    return lambda codes, _: labels[codes].tolist()


def _numbers_in_bins(attribute: Attribute) -> Column:
    """Uniform values inside each code's bin, truncated to the attribute's decimals."""
    edges = np.asarray(attribute.bins, dtype=np.float64)
    low, width = edges[:-1], np.diff(edges)
    decimals = max(0, WIDTH_DIGITS - 1 - math.floor(math.log10(float(width.min()))))
    decimals = min(decimals, 15)
    scale = 10.0**decimals
    template = f"%.{decimals}f"

    def column(codes: np.ndarray, rng: np.random.Generator) -> list[str]:
        exact = low[codes] + rng.random(codes.size) * width[codes]
        values = np.floor(exact * scale) / scale
        texts: list[str] = np.char.mod(template, values).tolist()
        # An edge with more decimals than the template can truncate below its bin.
        for i in np.flatnonzero(values < low[codes]):
            texts[i] = repr(float(low[codes[i]]))
        return texts

    return column


def _column(attribute: Attribute) -> Column:
    return _numbers_in_bins(attribute) if attribute.kind == "numeric" else _labels(attribute)


def synthetic_csv(
    loaded: LoadedModel,
    rows: int,
    seed: int | None,
    *,
    method: str = DEFAULT_METHOD,
    chunk_rows: int = SYNTHETIC_CHUNK_ROWS,
) -> Iterator[bytes]:
    """CSV records from the model: a header of attribute names, then one record per line.

    Checks its arguments at once (before a response starts); the bytes come lazily.
    """
    if method not in METHODS:
        raise invalid("method", f"must be one of {', '.join(METHODS)}")
    return _stream(loaded, rows, seed, method, chunk_rows)


def _stream(
    loaded: LoadedModel, rows: int, seed: int | None, method: str, chunk_rows: int
) -> Iterator[bytes]:
    schema = loaded.schema
    columns = [_column(a) for a in schema.attributes]
    seeds = np.random.SeedSequence(seed).spawn(2)
    record_seed = int(seeds[0].generate_state(1, np.uint64)[0])
    in_bins = np.random.default_rng(seeds[1])
    make = loaded.model.rounded_chunks if method == "round" else loaded.model.sample_chunks
    chunks = make(rows, record_seed, chunk_rows=chunk_rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(schema.names)
    yield buffer.getvalue().encode()
    for chunk in chunks:
        buffer.seek(0)
        buffer.truncate()
        cells = [column(chunk[:, j], in_bins) for j, column in enumerate(columns)]
        writer.writerows(zip(*cells, strict=True))
        yield buffer.getvalue().encode()
