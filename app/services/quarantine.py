"""Quarantine: a measurement a model fit cannot use is set aside, so it never poisons the model.

Extreme noise scales are refused at the door (`app.limits`), but a stored measurement
may still be unusable — written before those limits, or numerically hostile in a way
no check foresaw. The fit (`app.services.fits.fit_now`) therefore:

1. refuses, before fitting, every active measurement that cannot be fitted exactly
   (`unfittable_reason`: a noise scale outside what a fit can weigh, counts beyond
   2⁵³, values that do not match the schema);
2. fits the rest (`checked_fit`: an arithmetic error, a refusal from the estimator or a
   non-finite result is a `FitFailed`);
3. if that fails, looks for the first new measurement — one the last good version
   did not include — that makes it fail (`find_culprit`: bisection over the new ones,
   the last good version's measurements being known to fit), quarantines it and fits
   again without it.

A quarantined measurement keeps its row, its ledger charge (its noise was released)
and its place in GET /measurements, with `status: "quarantined"` and the reason; no
later fit includes it. The job it belongs to fails with `MeasurementQuarantined`,
naming it. Meanwhile the last good model version keeps answering.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select, update

from app.db import Database, MeasurementRecord
from app.errors import PrivqError
from app.ingest import unpack_column
from app.limits import MAX_EXACT_COUNT, MAX_NOISE_SCALE, MIN_FITTABLE_SCALE, format_limit
from app.pgm.domain import Domain
from app.pgm.estimation import FitRecord, fit
from app.pgm.junction_tree import ModelTooLarge
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.services.measurements import coarse_of

logger = logging.getLogger("privq.fits")

ACTIVE, QUARANTINED = "active", "quarantined"
REASON_LENGTH = 500


class MeasurementQuarantined(PrivqError, status=409, code="measurement_quarantined"):
    """A measurement of this job could not be used in a model fit and is quarantined."""


class FitFailed(Exception):
    """The estimator failed on these measurements (the cause is chained)."""


def unfittable_reason(record: MeasurementRecord, domain: Domain) -> str | None:
    """Why a stored measurement cannot be fitted exactly, or None if it can."""
    scale = float(record.scale)
    if not (np.isfinite(scale) and MIN_FITTABLE_SCALE <= scale <= MAX_NOISE_SCALE):
        return (
            f"its noise scale {scale:g} is outside what a fit can weigh "
            f"({format_limit(MIN_FITTABLE_SCALE)} to {format_limit(MAX_NOISE_SCALE)})"
        )
    attributes = tuple(record.attributes)
    if any(a not in domain for a in attributes) or len(set(attributes)) != len(attributes):
        return "its attributes are not the dataset's"
    try:
        coarse = coarse_of(record)
    except ValueError:
        return "its groups of values are unreadable"
    if coarse is not None and coarse.sizes != domain.shape(attributes):
        return "its groups of values are not of the dataset's attributes"
    values = unpack_column(record.values)
    if values.size != (domain.cells(attributes) if coarse is None else coarse.cells):
        return "its number of counts does not match its marginal"
    if values.size and int(np.abs(values).max()) > MAX_EXACT_COUNT:
        return f"its counts exceed 2^53 in magnitude ({format_limit(MAX_EXACT_COUNT)})"
    return None


def quarantine(database: Database, reasons: dict[int, str]) -> None:
    """Set these measurements aside (id → reason), in one short transaction."""
    if not reasons:
        return
    with database.unit_of_work() as session:
        for record_id, reason in reasons.items():
            session.execute(
                update(MeasurementRecord)
                .where(MeasurementRecord.id == record_id)
                .values(status=QUARANTINED, quarantine_reason=reason[:REASON_LENGTH])
            )
    for record_id in reasons:
        logger.warning("measurement quarantined", extra={"measurement_id": record_id})


def checked_fit(
    domain: Domain, measurements: Sequence[Measurement], **options: Any
) -> tuple[GraphicalModel, FitRecord]:
    """`fit`, with every numerical failure (raised, or a non-finite result) as FitFailed.

    A model over the size cap is not a numerical failure: ModelTooLarge passes through.
    """
    try:
        model, record = fit(domain, measurements, **options)
    except ModelTooLarge:
        raise
    except (ArithmeticError, ValueError) as error:
        raise FitFailed(type(error).__name__) from error
    finite = np.isfinite(model.total) and all(
        np.all(np.isfinite(potential)) for potential in model.log_potentials.values()
    )
    if not finite:
        raise FitFailed("the fitted model is not finite")
    return model, record


def find_culprit(
    fails: Callable[[list[int]], bool], base: Sequence[int], new: Sequence[int]
) -> int | None:
    """The first of `new` whose addition to `base` makes the fit fail, by bisection.

    `fails(ids)` fits those measurements and says whether that failed; `base + new` is
    known to fail. None when `base` alone fails too: the fault is not a new measurement's.
    """
    if not new or fails(list(base)):
        return None
    low, high = 0, len(new)  # base + new[:low] fits; base + new[:high] fails
    while high - low > 1:
        middle = (low + high) // 2
        if fails([*base, *new[:middle]]):
            high = middle
        else:
            low = middle
    return new[high - 1]


def check_job(database: Database, job_id: str) -> None:
    """MeasurementQuarantined if a measurement of the job is quarantined (naming the first)."""
    with database.read_only() as session:
        record = session.scalars(
            select(MeasurementRecord)
            .where(MeasurementRecord.job_id == job_id, MeasurementRecord.status == QUARANTINED)
            .order_by(MeasurementRecord.position)
            .limit(1)
        ).one_or_none()
        if record is None:
            return
        raise MeasurementQuarantined(
            f"measurement {record.number} ({', '.join(record.attributes)}) could not be used in a "
            f"model fit: {record.quarantine_reason}. It is quarantined: it stays listed and "
            "charged (its noise was released), no fit includes it, and the last good model "
            "version keeps answering",
            measurement_id=record.number,  # its id in the API: its number in the dataset
        )
