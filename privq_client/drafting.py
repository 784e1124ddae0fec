"""`draft_schema(df)`: a first public schema for a DataFrame, drafted locally.

The same rules as `privq schema draft FILE` (`app.schema.drafting`): categorical text
columns with at most `max_categories` values, round numeric bins, small non-negative
whole numbers as integer codes, `"missing": true` where values are missing. Columns it
cannot draft are left out, each with a warning; and the warning that the schema
becomes public is always given (`warnings.warn`). Review the draft before uploading.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import pandas as pd


class SchemaDraftWarning(UserWarning):
    """Something the curator should read before publishing a drafted schema."""


def draft_schema(
    frame: pd.DataFrame,
    *,
    max_categories: int = 20,
    bins: int = 10,
    exclude: Sequence[str] = (),
) -> dict[str, Any]:
    """A draft schema (full JSON form) for every column of `frame` not in `exclude`
    (leave out the privacy unit's id column). Warns (SchemaDraftWarning) that the schema
    becomes public, and names every column left out."""
    import pyarrow as pa

    from app.schema.drafting import draft_schema as draft_table

    table = pa.Table.from_pandas(text_objects(frame), preserve_index=False)
    draft = draft_table(table, max_categories=max_categories, bins=bins, exclude=exclude)
    for message in draft.warnings:
        warnings.warn(message, SchemaDraftWarning, stacklevel=2)
    return draft.schema


def text_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns of mixed types as text (missing values kept), so Arrow reads them."""
    converted = {}
    for name in frame.columns:
        column = frame[name]
        if column.dtype == object:
            converted[name] = column.map(lambda v: v if v is None or v != v else str(v))
    return frame.assign(**converted) if converted else frame
