"""A stored measurement as the API shows it: its values decoded, a coarse one's groups."""

from __future__ import annotations

from app.db import MeasurementRecord
from app.ingest import unpack_column
from app.services.measurements import coarse_of


def group_ranges(record: MeasurementRecord) -> list[list[list[int]]] | None:
    """A coarse measurement's groups, per attribute [first, last] code; None otherwise."""
    try:
        coarse = coarse_of(record)
    except ValueError:
        return None  # quarantined by the next fit; its values are listed as stored
    if coarse is None:
        return None
    return [[[first, last] for first, last in runs] for runs in coarse.ranges()]


def decoded_values(record: MeasurementRecord) -> list[int]:
    values: list[int] = unpack_column(record.values).tolist()
    return values
