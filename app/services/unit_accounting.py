"""The privacy unit of a dataset as the accounting sees it: every cost's sensitivity.

A dataset names its privacy unit at upload (API v1.2: `privacy_unit: {"column",
"max_rows": k}`); upload keeps at most k rows of each unit and never stores the
column's values, only its name (`Dataset.unit_column`) and k (`Dataset.unit_max_rows`).
Neighbouring datasets then differ by one unit, so every count marginal has L1 and L2
sensitivity k, and each cost — a measurement's, a mechanism round's, a dry run's — is
priced at k (`app.privacy.accounting`, whose functions take k as `sensitivity`).
Without a unit column a unit is one row: k = 1, every cost as before.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset
from app.errors import InvariantViolated


class BadUnitSensitivity(InvariantViolated, code="bad_unit_sensitivity"):
    """The dataset's rows per privacy unit is not a positive integer: nothing is priced."""


def sensitivity(dataset: Dataset) -> int:
    """k: the rows one privacy unit of the dataset may hold (1 when a unit is a row)."""
    return _checked(dataset.unit_max_rows)


def sensitivity_of(session: Session, dataset_id: str) -> int:
    """k of the dataset `dataset_id` (read on its own, for the worker)."""
    found = session.scalar(select(Dataset.unit_max_rows).where(Dataset.id == dataset_id))
    return _checked(found)


def described(dataset: Dataset) -> dict[str, Any] | None:
    """What `GET /v1/datasets/{id}` shows: `{"column", "max_rows"}`, or None when a unit
    is one row (no unit column and k = 1)."""
    return _described(dataset.unit_column, dataset.unit_max_rows)


def described_of(session: Session, dataset_id: str) -> dict[str, Any] | None:
    """`described` of the dataset `dataset_id`, reading only its two unit columns."""
    found = session.execute(
        select(Dataset.unit_column, Dataset.unit_max_rows).where(Dataset.id == dataset_id)
    ).one_or_none()
    return None if found is None else _described(found.unit_column, found.unit_max_rows)


def _described(column: str | None, max_rows: object) -> dict[str, Any] | None:
    k = _checked(max_rows)
    if column is None and k == 1:
        return None
    return {"column": column, "max_rows": k}


def _checked(value: object) -> int:
    # NULL cannot be stored (NOT NULL, default 1); anything else below 1 would under-price.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadUnitSensitivity()
    return value
