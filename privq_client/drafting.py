"""`draft_schema(df)`: a first public schema for a DataFrame, drafted locally.

The same rules as `privq schema draft FILE` (`app.schema.drafting`): categorical text
columns with at most `max_categories` values, whole numbers as integer attributes,
round numeric bins (at round quantiles for skewed columns), `"missing": true` where
values are missing, and with `private_bins=RHO` numeric edges from a differentially
private quantile mechanism. Constant and id-like columns, and those it cannot draft,
are left out, each with a note: `warnings.warn` gives every note (the warning that the
schema becomes public first), and the returned schema carries them as `.notes` and
`.left_out` (column → why). Review the draft before uploading.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import pandas as pd


class SchemaDraftWarning(UserWarning):
    """Something the curator should read before publishing a drafted schema."""


class DraftedSchema(dict[str, Any]):
    """A drafted schema: the JSON object itself (send it as it is), with the draft's
    notes beside it."""

    notes: list[str]
    left_out: dict[str, str]


def draft_schema(
    frame: pd.DataFrame,
    *,
    max_categories: int = 20,
    bins: int = 10,
    exclude: Sequence[str] = (),
    private_bins: float | None = None,
    unit: str | None = None,
    max_rows: int = 1,
) -> DraftedSchema:
    """A draft schema (full JSON form) for every column of `frame` not in `exclude`
    (leave out the privacy unit's id column, or name it as `unit`). Warns
    (SchemaDraftWarning) that the schema becomes public, and names every column left
    out and why (also in the result's `.notes` and `.left_out`). `private_bins=RHO`:
    numeric edges from a private quantile mechanism spending RHO (zCDP), recorded in
    the schema; `unit` and `max_rows` as at upload."""
    import pyarrow as pa

    from app.schema.drafting import draft_schema as draft_table

    table = pa.Table.from_pandas(text_objects(frame), preserve_index=False)
    draft = draft_table(
        table,
        max_categories=max_categories,
        bins=bins,
        exclude=exclude,
        private_bins=private_bins,
        unit=unit,
        max_rows=max_rows,
    )
    for message in draft.warnings:
        warnings.warn(message, SchemaDraftWarning, stacklevel=2)
    result = DraftedSchema(draft.schema)
    result.notes = list(draft.warnings)
    result.left_out = dict(draft.left_out)
    return result


def text_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns of mixed types as text (missing values kept), so Arrow reads them."""
    converted = {}
    for name in frame.columns:
        column = frame[name]
        if column.dtype == object:
            converted[name] = column.map(lambda v: v if v is None or v != v else str(v))
    return frame.assign(**converted) if converted else frame
