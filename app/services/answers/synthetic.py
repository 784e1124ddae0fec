"""Synthetic records from the model, streamed as CSV in the schema's values.

Two methods (`GET /synthetic?method=`):
- "round" (default): the records' clique marginals are the model's counts up to rounding
  (`GraphicalModel.rounded_chunks`, `app.pgm.rounding`): no sampling error on top of
  the model's within a clique.
- "sample": records drawn i.i.d. from the model (`GraphicalModel.sample_chunks`).

Cells are the schema's values: a categorical value; an integer attribute's value (with
a bin width > 1, one of its bin's integers, uniform among them); and for a numeric
attribute a number inside its bin — uniform in [lo, hi), written with a fixed number of
decimals for the attribute (truncated, so it never reaches hi) — never a bin label or a
midpoint. A missing code (an attribute with `missing`) is
an empty cell. Deterministic given `seed`: the records and the
numbers inside bins come from two generators seeded from it. Both methods stream in
chunks of SYNTHETIC_CHUNK_ROWS rows; no table of all rows is ever held.

Memory is the model plus one chunk of codes, whatever the number of rows: the text is
made and sent in pieces of at most PIECE_ROWS rows, each written into a fresh StringIO
(which keeps ASCII text at one byte a character; one reused after getvalue() keeps four),
and no chunk is held while the next is made. The numbers inside bins are drawn per chunk,
column by column, before the chunk is cut into pieces, so the bytes do not depend on
PIECE_ROWS.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from app.schema import Attribute
from app.services.answers.common import MAX_SYNTHETIC_ROWS, SYNTHETIC_CHUNK_ROWS, invalid
from app.services.models import LoadedModel

METHODS = ("round", "sample")
DEFAULT_METHOD = "round"
# Numbers inside a bin keep this many significant digits of the narrowest bin's width.
WIDTH_DIGITS = 4
# Rows of CSV text made at once (one part of the response).
PIECE_ROWS = 2048


@dataclass(frozen=True)
class Column:
    """How one attribute's codes are written: `draw` once per chunk (the numbers inside
    bins, or None), then `texts` per piece, on that piece's codes and drawn numbers."""

    draw: Callable[[np.ndarray, np.random.Generator], np.ndarray | None]
    texts: Callable[[np.ndarray, np.ndarray | None], list[str]]


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
    # The missing code's label is None, which csv writes as an empty cell.
    labels = np.asarray(attribute.labels(), dtype=object)
    return Column(lambda codes, _: None, lambda codes, _: labels[codes].tolist())


def _numbers_in_bins(attribute: Attribute) -> Column:
    """Uniform values inside each code's bin, truncated to the attribute's decimals."""
    edges = np.asarray(attribute.bins, dtype=np.float64)
    low, width = edges[:-1], np.diff(edges)
    decimals = max(0, WIDTH_DIGITS - 1 - math.floor(math.log10(float(width.min()))))
    decimals = min(decimals, 15)
    scale = 10.0**decimals
    template = f"%.{decimals}f"

    bins = len(low)  # the missing code, if any, is `bins`: no number, an empty cell

    def draw(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        in_bin = np.minimum(codes, bins - 1)
        exact = low[in_bin] + rng.random(codes.size) * width[in_bin]
        values: np.ndarray = np.floor(exact * scale) / scale
        return values

    def texts(codes: np.ndarray, values: np.ndarray | None) -> list[str]:
        texts: list[str] = np.char.mod(template, values).tolist()
        in_bin = np.minimum(codes, bins - 1)
        # An edge with more decimals than the template can truncate below its bin.
        for i in np.flatnonzero(np.asarray(values) < low[in_bin]):
            texts[i] = repr(float(low[in_bin[i]]))
        for i in np.flatnonzero(codes >= bins):
            texts[i] = ""
        return texts

    return Column(draw, texts)


def _integers_in_bins(attribute: Attribute) -> Column:
    """An integer attribute with bins wider than one value: each code's integers drawn
    uniformly (the last bin, closed at max, may hold fewer)."""
    edges = attribute.integer_edges()  # code c holds the integers edges[c]..edges[c+1]-1
    first, count = edges[:-1], np.diff(edges)
    bins = len(first)  # the missing code, if any, is `bins`: an empty cell

    def draw(codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        in_bin = np.minimum(codes, bins - 1)
        # floor(u * n) for u in [0, 1) is uniform on 0..n-1.
        offsets = np.floor(rng.random(codes.size) * count[in_bin]).astype(np.int64)
        values: np.ndarray = first[in_bin] + np.minimum(offsets, count[in_bin] - 1)
        return values

    def texts(codes: np.ndarray, values: np.ndarray | None) -> list[str]:
        texts: list[str] = [str(v) for v in np.asarray(values).tolist()]
        for i in np.flatnonzero(codes >= bins):
            texts[i] = ""
        return texts

    return Column(draw, texts)


def _column(attribute: Attribute) -> Column:
    if attribute.kind == "numeric":
        return _numbers_in_bins(attribute)
    if attribute.kind == "integer" and attribute.is_binned:
        return _integers_in_bins(attribute)
    return _labels(attribute)


def _csv_text(rows: Iterable[Iterable[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().encode()


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
    yield _csv_text([schema.names])
    for chunk in chunks:
        drawn = [column.draw(chunk[:, j], in_bins) for j, column in enumerate(columns)]
        for start in range(0, len(chunk), PIECE_ROWS):
            piece = slice(start, start + PIECE_ROWS)
            cells = [
                column.texts(chunk[piece, j], None if numbers is None else numbers[piece])
                for j, (column, numbers) in enumerate(zip(columns, drawn, strict=True))
            ]
            yield _csv_text(zip(*cells, strict=True))
        # Not held while the next chunk is made.
        del chunk, drawn
